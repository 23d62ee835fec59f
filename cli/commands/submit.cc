#include "commands/submit.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ablate/files.h"
#include "ablate/utf8.h"

namespace ablate::cli {
namespace {

// The spec's text, checked for what the coordinator could not report with a position: a path
// that is no file, text that is not UTF-8 (protobuf refuses to send it: "INTERNAL" before).
StatusOr<std::string> ReadSpec(const std::string& path) {
  std::ostringstream text;
  const std::string name = path == "-" ? "<stdin>" : path;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    if (const std::string why = NotATextFile(path); !why.empty()) {
      return InvalidArgument("cannot read sweep spec " + path + ": " + why);
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      // A spec that cannot be read is a bad argument (exit 2), not a missing sweep (exit 3).
      return InvalidArgument("cannot read sweep spec " + path + ": " + std::strerror(errno));
    }
    text << in.rdbuf();
  }
  std::string spec = text.str();
  if (const size_t at = InvalidUtf8At(spec); at != std::string::npos) {
    const size_t nl = at == 0 ? std::string::npos : spec.rfind('\n', at - 1);
    const size_t col = at - (nl == std::string::npos ? 0 : nl + 1) + 1;
    const long line = 1 + std::count(spec.begin(), spec.begin() + long(at), '\n');
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", unsigned(static_cast<unsigned char>(spec[at])));
    return InvalidArgument(name + ":" + std::to_string(line) + ":" + std::to_string(col) +
                           ": the spec is not valid UTF-8 (byte " + byte + "); save it as UTF-8");
  }
  return spec;
}

void PrintDryRun(const v1::SubmitResponse& resp, const SubmitOptions& options, const Io& io) {
  Table t;
  t.AddColumn("#", "index");
  for (const std::string& axis : resp.axes()) t.AddColumn(axis);
  t.AddColumn("config_hash");
  t.AddColumn("plan");
  t.AddColumn("config", "config", Column::Show::kMachineOnly);
  int index = 0;
  for (const v1::TrialSummary& trial : resp.trials()) {
    std::vector<Cell> row{Cell::Int(++index)};
    for (const std::string& axis : resp.axes()) {
      auto it = trial.axes().find(axis);
      row.push_back(it == trial.axes().end() ? Cell() : Cell::Text(it->second));
    }
    row.push_back(Cell::Text(trial.config_hash()));
    row.push_back(Cell::Text(trial.plan()));
    row.push_back(trial.config_json().empty() ? Cell() : Cell::Json(trial.config_json()));
    t.AddRow(std::move(row));
  }
  *io.out << Render(t, options.format);
  // The count is part of the result for a person; for a program it would break the JSON or CSV.
  std::ostream& summary = options.format == Format::kTable ? *io.out : *io.err;
  summary << resp.total_trials() << " trial" << (resp.total_trials() == 1 ? "" : "s")
          << " in sweep " << resp.sweep_name() << ": " << resp.new_trials() << " new, "
          << resp.existing_trials() << " existing, " << resp.changed_trials() << " changed";
  if (resp.removed_trials() > 0) summary << ", " << resp.removed_trials() << " no longer in the spec";
  summary << " (dry run: nothing submitted)\n";
  if (resp.changes_size() > 0) {
    summary << "a submit would be refused: the spec changes the stored sweep's definition:\n";
    for (const auto& c : resp.changes()) summary << "  " << c << "\n";
    summary << "(--new-version stores it as a new sweep)\n";
  }
}

}  // namespace

Status Submit(Client& client, const SubmitOptions& options, const std::string& spec, const Io& io) {
  v1::SubmitRequest req;
  req.set_spec_yaml(spec);
  req.set_spec_file(options.spec_path == "-" ? "<stdin>" : options.spec_path);
  req.set_dry_run(options.dry_run);
  req.set_force(options.force);
  req.set_new_version(options.new_version);
  if (options.priority) {
    req.set_priority(*options.priority);
    req.set_has_priority(true);
  }
  v1::SubmitResponse resp;
  Status st = client.Call(&v1::ControlService::StubInterface::Submit, req, &resp);
  if (st.code() == StatusCode::kInvalidArgument) {
    // The server's message is already "file:line:col: key: what is wrong (did you mean ...)":
    // print it untouched so editors and people read it as a compiler error; the empty message
    // tells app.cc it has been reported.
    *io.err << st.message() << (st.message().empty() || st.message().back() == '\n' ? "" : "\n");
    return Status(StatusCode::kInvalidArgument, "");
  }
  if (st.code() == StatusCode::kFailedPrecondition) {
    // A changed definition: refused like a bad spec (exit 2), the list of changes as sent.
    *io.err << "ablate: " << st.message() << "\n";
    return Status(StatusCode::kInvalidArgument, "");
  }
  ABLATE_RETURN_IF_ERROR(st);
  for (const std::string& w : resp.warnings()) *io.err << "warning: " << w << "\n";

  if (options.dry_run) {
    PrintDryRun(resp, options, io);
    return Status::Ok();
  }
  if (options.format == Format::kTable) {
    *io.out << "sweep " << resp.sweep_name() << " (id " << resp.sweep_id()
            << "): " << resp.total_trials() << " trial" << (resp.total_trials() == 1 ? "" : "s")
            << ", " << resp.new_trials() << " new\n";
    return Status::Ok();
  }
  Table t;
  t.AddColumn("sweep_id");
  t.AddColumn("sweep_name");
  t.AddColumn("total_trials");
  t.AddColumn("new_trials");
  t.AddRow({Cell::Int(resp.sweep_id()), Cell::Text(resp.sweep_name()),
            Cell::Int(resp.total_trials()), Cell::Int(resp.new_trials())});
  if (options.format == Format::kJson) {
    // One sweep: a JSON object rather than an array of one.
    auto rows = nlohmann::ordered_json::parse(RenderJson(t));
    *io.out << rows[0].dump(2) << "\n";
  } else {
    *io.out << RenderCsv(t);
  }
  return Status::Ok();
}

void AddSubmitCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<SubmitOptions>();
  auto format = std::make_shared<std::string>("table");
  CLI::App* sub =
      app.add_subcommand("submit", "Submit a sweep spec (YAML), or expand it with --dry-run");
  sub->add_option("spec", opts->spec_path, "Sweep spec file (YAML); - reads standard input")
      ->required();
  sub->add_flag("--dry-run", opts->dry_run,
                "Print the expanded trials and their count; submit nothing");
  sub->add_option("--priority", opts->priority,
                  "Priority (higher runs first); overrides the spec's");
  sub->add_flag("--force", opts->force, "Allow a grid larger than the coordinator's limit");
  sub->add_flag("--new-version", opts->new_version,
                "Store the spec as a new sweep NAME.vN when a sweep NAME exists (needed when the "
                "spec changes its definition)");
  AddFormatOption(sub, format.get());
  sub->callback([opts, format, selected] {
    *selected = [opts, format](CommandEnv& env) -> Status {
      opts->format = *ParseFormat(*format);
      // The spec first: a bad path is a usage error even where no token or coordinator is.
      ABLATE_ASSIGN_OR_RETURN(std::string spec, ReadSpec(opts->spec_path));
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return Submit(*client, *opts, spec, env.io);
    };
  });
}

}  // namespace ablate::cli
