#include "app.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <sstream>

#include "commands/annotate.h"
#include "commands/archive.h"
#include "commands/cancel.h"
#include "commands/command.h"
#include "commands/export.h"
#include "commands/logs.h"
#include "commands/query.h"
#include "commands/compare.h"
#include "commands/results.h"
#include "commands/retry.h"
#include "commands/status.h"
#include "commands/submit.h"
#include "commands/watch.h"
#include "commands/workers.h"
#include "exit_codes.h"

namespace ablate::cli {
namespace {

constexpr const char* kFooter = R"(Environment:
  ABLATE_COORDINATOR   coordinator address when --coordinator is not given
  ABLATE_TOKEN_FILE    token file when --token-file is not given
  ABLATE_DATA_DIR      the coordinator's data directory (ablated --data-dir): its address is read
                       from <dir>/ablated.addr and its token from <dir>/token when neither the
                       flags nor the two variables above give them (defaults: 127.0.0.1:7070,
                       ~/.ablate/token)
  ABLATE_TLS_CA        CA certificate for TLS when --tls-ca is not given
Exit codes:
  0 ok   1 other error   2 usage error, invalid argument or spec   3 not found
  4 coordinator unavailable   5 unauthenticated or permission denied
  7 watch: the sweep finished with failed or canceled trials)";

void PrintError(const Status& st, const Io& io) {
  if (st.message().empty()) return;  // already reported by the command (submit's spec errors)
  *io.err << "ablate: " << st.message() << "\n";
}

}  // namespace

int RunCli(const std::vector<std::string>& args, const Io& io, const EnvLookup& env) {
  CLI::App app("ablate: submit, follow and analyse ablation sweeps on an ablated coordinator",
               "ablate");
  app.footer(kFooter);
  app.require_subcommand(1);
  // Global flags also work after the subcommand ("ablate status --coordinator h:1").
  app.fallthrough();
  app.set_version_flag("--version", "ablate 0.1.0");

  GlobalFlags flags;
  // The last of a repeated global flag wins, so an alias with defaults can be overridden.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--coordinator", flags.coordinator,
                 "Coordinator address HOST:PORT (else $ABLATE_COORDINATOR, "
                 "$ABLATE_DATA_DIR/ablated.addr, 127.0.0.1:7070)");
  app.add_option(
      "--token-file", flags.token_file,
      "Bearer token file (else $ABLATE_TOKEN_FILE, $ABLATE_DATA_DIR/token, ~/.ablate/token)");
  app.add_option("--timeout", flags.timeout_s, "Seconds to wait for each call")->default_str("30");
  app.add_option("--tls-ca", flags.tls_ca_file, "Use TLS, trusting this CA certificate (PEM)");

  Action selected;
  AddSubmitCommand(app, &selected);
  AddStatusCommand(app, &selected);
  AddWatchCommand(app, &selected);
  AddResultsCommand(app, &selected);
  AddCompareCommand(app, &selected);
  AddExportCommand(app, &selected);
  AddQueryCommand(app, &selected);
  AddCancelCommand(app, &selected);
  AddRetryCommand(app, &selected);
  AddWorkersCommand(app, &selected);
  AddLogsCommand(app, &selected);
  AddAnnotateCommand(app, &selected);
  AddArchiveCommand(app, &selected);

  try {
    // CLI11 consumes a vector from the back.
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out, err;
    const int code = app.exit(e, out, err);
    *io.out << out.str();
    *io.err << err.str();
    // --help and --version succeed; everything else is a usage error.
    return code == static_cast<int>(CLI::ExitCodes::Success) ? kExitOk : kExitUsage;
  }
  if (!selected) {
    *io.err << "ablate: no command given; see ablate --help\n";
    return kExitUsage;
  }

  StatusOr<ClientOptions> options = ResolveClientOptions(flags, env);
  if (!options.ok()) {
    PrintError(options.status(), io);
    return ExitCodeFor(options.status().code());
  }
  std::unique_ptr<Client> client;
  CommandEnv command_env;
  command_env.io = io;
  command_env.client = [&]() -> StatusOr<Client*> {
    if (!client) {
      ABLATE_ASSIGN_OR_RETURN(client, Client::Connect(*options));
    }
    return client.get();
  };
  Status st = selected(command_env);
  if (!st.ok()) {
    PrintError(st, io);
    return ExitCodeFor(st.code());
  }
  return command_env.exit_code;
}

}  // namespace ablate::cli
