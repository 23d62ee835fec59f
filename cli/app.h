// The `ablate` command line: global flags, the subcommands (commands/), and the mapping of every
// outcome to an exit code (exit_codes.h).
//
// Global flags (accepted before or after the subcommand; when repeated, the last wins):
//   --coordinator HOST:PORT  else $ABLATE_COORDINATOR, $ABLATE_DATA_DIR/ablated.addr (the
//                            address ablated wrote in its data dir), 127.0.0.1:7070
//   --token-file F           else $ABLATE_TOKEN_FILE, $ABLATE_DATA_DIR/token, ~/.ablate/token
//   --timeout SECONDS        deadline of each unary call (default 30)
//   --tls-ca F               TLS, trusting this CA certificate (else $ABLATE_TLS_CA; else none)
//
// Thread safety: RunCli may run on several threads at once with different Io values.
#pragma once

#include <string>
#include <vector>

#include "client.h"
#include "io.h"

namespace ablate::cli {

// Runs one command line (`args` without the program name) and returns the exit code. Results go
// to io.out, errors to io.err as "ablate: <message>"; the client is opened (Client::Connect) only
// once the command line is valid.
int RunCli(const std::vector<std::string>& args, const Io& io, const EnvLookup& env);

}  // namespace ablate::cli
