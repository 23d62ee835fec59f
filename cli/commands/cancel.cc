#include "commands/cancel.h"

#include <CLI/CLI.hpp>
#include <memory>

namespace ablate::cli {

Status CancelTarget(Client& client, const CancelOptions& options, const Io& io) {
  ABLATE_ASSIGN_OR_RETURN(Target target, ParseTarget(options.target));
  v1::CancelRequest req;
  req.set_is_trial(target.is_trial);
  req.set_target(target.is_trial ? std::to_string(target.trial_id) : target.sweep);
  v1::CancelResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Cancel, req, &resp));
  const std::string what =
      target.is_trial ? "trial " + std::to_string(target.trial_id) : "sweep " + options.target;
  if (resp.canceled() == 0) {
    *io.out << what << ": nothing to cancel (no queued or running trial)\n";
  } else {
    *io.out << what << ": canceled " << resp.canceled() << " trial"
            << (resp.canceled() == 1 ? "" : "s") << "\n";
  }
  return Status::Ok();
}

void AddCancelCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<CancelOptions>();
  CLI::App* sub = app.add_subcommand(
      "cancel", "Cancel a trial (ID or trial:ID) or every unfinished trial of a sweep");
  sub->add_option("target", opts->target, "Trial id, trial:ID, sweep name or sweep:ID")->required();
  sub->callback([opts, selected] {
    *selected = [opts](CommandEnv& env) -> Status {
      ABLATE_RETURN_IF_ERROR(ParseTarget(opts->target).status());  // before any connection
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return CancelTarget(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
