#include "exit_codes.h"

namespace ablate::cli {

ExitCode ExitCodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return kExitUsage;
    case StatusCode::kNotFound:
      return kExitNotFound;
    // A deadline on a unary call means the coordinator did not answer in --timeout seconds: for the
    // user that is the same situation as no coordinator at all.
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return kExitAuth;
    default:
      return kExitError;
  }
}

}  // namespace ablate::cli
