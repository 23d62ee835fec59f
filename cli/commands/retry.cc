#include "commands/retry.h"

#include <CLI/CLI.hpp>
#include <memory>

namespace ablate::cli {

Status RetrySweep(Client& client, const RetryOptions& options, const Io& io) {
  ABLATE_ASSIGN_OR_RETURN(std::string sweep, ParseSweepRef(options.sweep));
  v1::RetryRequest req;
  req.set_sweep(sweep);
  req.set_failed_only(options.failed_only);
  req.set_stopped(options.stopped);
  v1::RetryResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Retry, req, &resp));
  *io.out << "sweep " << options.sweep << ": requeued " << resp.requeued() << " "
          << (options.stopped       ? "stopped "
              : options.failed_only ? "failed "
                                    : "failed or canceled ")
          << "trial"
          << (resp.requeued() == 1 ? "" : "s") << "\n";
  return Status::Ok();
}

void AddRetryCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<RetryOptions>();
  CLI::App* sub = app.add_subcommand("retry", "Requeue a sweep's failed and canceled trials");
  sub->add_option("sweep", opts->sweep, "Sweep name or sweep:ID")->required();
  auto* failed = sub->add_flag("--failed", opts->failed_only, "Only failed trials (not canceled ones)");
  sub->add_flag("--stopped", opts->stopped,
                "The trials early stopping stopped instead: resume them from their checkpoints "
                "and run them to the end")
      ->excludes(failed);
  sub->callback([opts, selected] {
    *selected = [opts](CommandEnv& env) -> Status {
      ABLATE_RETURN_IF_ERROR(ParseSweepRef(opts->sweep).status());  // before any connection
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return RetrySweep(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
