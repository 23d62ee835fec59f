#include "commands/logs.h"

#include <CLI/CLI.hpp>
#include <memory>

namespace ablate::cli {

Status ShowLogs(Client& client, const LogsOptions& options, const Io& io) {
  ABLATE_ASSIGN_OR_RETURN(int64_t trial_id, ParseTrialRef(options.trial));
  if (options.attempt < 0)
    return InvalidArgument("--attempt: must be 0 (every attempt) or positive");
  v1::LogsRequest req;
  req.set_trial_id(trial_id);
  req.set_attempt(options.attempt);
  v1::LogsResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Logs, req, &resp));

  if (options.format != Format::kTable) {
    Table t;
    t.AddColumn("trial_id");
    t.AddColumn("attempt");
    t.AddColumn("worker", "worker_id");
    t.AddColumn("state");
    t.AddColumn("log_tail");
    for (const auto& e : resp.entries()) {
      t.AddRow({Cell::Int(trial_id), Cell::Int(e.attempt()), Cell::Text(e.worker_id()),
                Cell::Text(e.state()), Cell::Text(e.log_tail())});
    }
    *io.out << Render(t, options.format);
    return Status::Ok();
  }
  if (resp.entries().empty()) {
    *io.err << "trial " << trial_id << " has no attempts"
            << (options.attempt > 0 ? " numbered " + std::to_string(options.attempt) : "")
            << " yet\n";
    return Status::Ok();
  }
  bool first = true;
  for (const auto& e : resp.entries()) {
    if (!first) *io.out << "\n";
    first = false;
    *io.out << "=== trial " << trial_id << " · attempt " << e.attempt() << " · worker "
            << (e.worker_id().empty() ? "-" : e.worker_id()) << " · " << e.state() << " ===\n";
    if (e.log_tail().empty()) {
      *io.out << "(no log output)\n";
    } else {
      *io.out << e.log_tail() << (e.log_tail().back() == '\n' ? "" : "\n");
    }
  }
  return Status::Ok();
}

void AddLogsCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<LogsOptions>();
  auto format = std::make_shared<std::string>("table");
  CLI::App* sub = app.add_subcommand("logs", "The trainer's log tail of each attempt of a trial");
  sub->add_option("trial", opts->trial, "Trial id or trial:ID")->required();
  sub->add_option("--attempt", opts->attempt, "Only this attempt (default: every attempt)");
  AddFormatOption(sub, format.get());
  sub->callback([opts, format, selected] {
    *selected = [opts, format](CommandEnv& env) -> Status {
      opts->format = *ParseFormat(*format);
      // References first: a bad one is a usage error even where no token or coordinator is.
      ABLATE_RETURN_IF_ERROR(ParseTrialRef(opts->trial).status());
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return ShowLogs(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
