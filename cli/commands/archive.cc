#include "commands/archive.h"

#include <CLI/CLI.hpp>
#include <memory>

namespace ablate::cli {

Status ArchiveSweep(Client& client, const ArchiveOptions& options, const Io& io) {
  ABLATE_ASSIGN_OR_RETURN(std::string sweep, ParseSweepRef(options.sweep));
  v1::ArchiveRequest req;
  req.set_sweep(sweep);
  req.set_archived(!options.restore);
  v1::ArchiveResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::Archive, req, &resp));
  *io.out << "sweep " << options.sweep << " (id " << resp.sweep_id() << "): "
          << (options.restore ? "restored to the listings" : "archived (kept; hidden from listings)")
          << "\n";
  return Status::Ok();
}

void AddArchiveCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<ArchiveOptions>();
  CLI::App* sub = app.add_subcommand(
      "archive", "Hide a sweep from listings (its data stays), or show it again with --restore");
  sub->add_option("sweep", opts->sweep, "Sweep name or sweep:ID")->required();
  sub->add_flag("--restore", opts->restore, "Show the sweep in listings again");
  sub->callback([opts, selected] {
    *selected = [opts](CommandEnv& env) -> Status {
      ABLATE_RETURN_IF_ERROR(ParseSweepRef(opts->sweep).status());
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return ArchiveSweep(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
