// Exit codes of the `ablate` CLI and the one place where errors become exit codes.
//
//   0  ok
//   1  any other error (an internal error on the coordinator, I/O, ...)
//   2  usage error, or an invalid argument or sweep spec (also the server's INVALID_ARGUMENT)
//   3  not found (no such sweep, trial or worker)
//   4  coordinator unavailable: nothing answers at the address (ablated may not be running
//      there), or it did not answer within --timeout
//   5  unauthenticated or permission denied (the message names the token file used)
//   7  `ablate watch`: the sweep finished, but some trials failed or were canceled
//
// gRPC status codes are converted to ablate::Status once, by Client::FromGrpc (client.h), and a
// Status to an exit code here.
// Thread safety: pure functions.
#pragma once

#include "ablate/status.h"

namespace ablate::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,
  kExitUsage = 2,
  kExitNotFound = 3,
  kExitUnavailable = 4,
  kExitAuth = 5,
  kExitWatchFailures = 7,
};

// The exit code for an error of `code` (kExitOk for StatusCode::kOk).
ExitCode ExitCodeFor(StatusCode code);

}  // namespace ablate::cli
