#include "commands/export.h"

#include <CLI/CLI.hpp>
#include <memory>

#include "ablate/files.h"

namespace ablate::cli {

Status ExportSweep(Client& client, const ExportOptions& options, const Io& io) {
  if (options.format != "csv" && options.format != "jsonl") {
    return InvalidArgument("--format " + options.format + ": expected csv or jsonl");
  }
  ABLATE_ASSIGN_OR_RETURN(std::string sweep, ParseSweepRef(options.sweep));
  v1::ExportRequest req;
  req.set_sweep(sweep);
  req.set_format(options.format);
  for (const auto& m : options.metrics) req.add_metrics(m);
  auto context = client.NewContext(/*unary=*/false);
  auto reader = client.stub().Export(context.get(), req);
  std::string body;
  v1::ExportChunk chunk;
  while (reader->Read(&chunk)) {
    if (options.output.empty()) {
      *io.out << chunk.data();
    } else {
      body += chunk.data();
    }
  }
  ABLATE_RETURN_IF_ERROR(client.FromGrpc(reader->Finish()));
  if (!options.output.empty()) {
    ABLATE_RETURN_IF_ERROR(WriteFileAtomic(options.output, body));
  }
  return Status::Ok();
}

void AddExportCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<ExportOptions>();
  CLI::App* sub = app.add_subcommand(
      "export", "Write a sweep's trials (one row each) or metric points as CSV or JSON lines");
  sub->add_option("sweep", opts->sweep, "Sweep name or sweep:ID")->required();
  sub->add_option("--format", opts->format, "csv (default) or jsonl")
      ->check(CLI::IsMember({"csv", "jsonl"}));
  sub->add_option("--metrics", opts->metrics,
                  "The long table of these metrics' points (trial_id, step, tokens, name, value)")
      ->delimiter(',');
  sub->add_option("-o,--output", opts->output, "Write to this file instead of standard output");
  sub->callback([opts, selected] {
    *selected = [opts](CommandEnv& env) -> Status {
      ABLATE_RETURN_IF_ERROR(ParseSweepRef(opts->sweep).status());
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return ExportSweep(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
