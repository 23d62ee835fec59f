// Where a client of the coordinator (the ablate CLI, ablate-worker) finds it and its token: one
// rule for both programs.
//
// Address:    --coordinator, else $ABLATE_COORDINATOR, else the address ablated wrote to
//             $ABLATE_DATA_DIR/ablated.addr when it started, else 127.0.0.1:7070.
// Token file: --token-file, else $ABLATE_TOKEN_FILE, else $ABLATE_DATA_DIR/token, else
//             ~/.ablate/token (the coordinator's default data directory).
// An empty environment variable counts as unset (the shell idiom `VAR= ablate ...`); an empty
// flag is a mistake and is reported. So `ABLATE_DATA_DIR=<ablated's --data-dir>` alone is enough
// on the coordinator's host.
//
// Thread safety: pure functions (ResolveEndpoint reads ablated.addr through the file system).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "ablate/status.h"

namespace ablate {

// Looks up an environment variable (std::getenv in the programs, a map in tests).
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup ProcessEnv();

inline constexpr const char* kDefaultCoordinator = "127.0.0.1:7070";
// The file in ablated's data directory that holds its gRPC address (HOST:PORT and a newline).
inline constexpr const char* kAddrFileName = "ablated.addr";

// The flags as given on the command line (unset: not given).
struct EndpointFlags {
  std::optional<std::string> coordinator;
  std::optional<std::string> token_file;
};

struct Endpoint {
  std::string coordinator;  // HOST:PORT (or any gRPC target with a scheme, e.g. unix:/path)
  // "--coordinator", "$ABLATE_COORDINATOR", "$ABLATE_DATA_DIR/ablated.addr" or "default"
  std::string coordinator_source;
  std::string token_file;
  std::string token_source;  // "--token-file", "$ABLATE_TOKEN_FILE", "$ABLATE_DATA_DIR", "default"
};

// Applies the precedence rules above. A wildcard host in ablated.addr (0.0.0.0, [::], none) is
// dialled on the loopback address of its family. Errors: InvalidArgument for an empty flag or an
// address that is not HOST:PORT (naming where it came from); Unavailable when $ABLATE_DATA_DIR
// decides the address but <dir>/ablated.addr is missing or empty (no coordinator has started with
// that data directory), naming the file.
StatusOr<Endpoint> ResolveEndpoint(const EndpointFlags& flags, const EnvLookup& env);

// OK for HOST:PORT with a port in 1..65535, and for anything with a scheme ("unix:", "dns:///",
// "ipv4:"), which gRPC takes as is; InvalidArgument "<source>: ..." otherwise (a bare host name
// would silently dial port 443).
Status CheckCoordinatorAddress(const std::string& address, const std::string& source);

// The token file for messages: "F", "F (from $ABLATE_TOKEN_FILE)", "F (the default location)".
std::string DescribeTokenFile(const Endpoint& endpoint);

}  // namespace ablate
