// ablate retry SWEEP [--failed]
//
// Requeues a sweep's failed and canceled trials (--failed: failed ones only) with a fresh attempt
// budget. Prints how many were requeued.
#pragma once

#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct RetryOptions {
  std::string sweep;
  bool failed_only = false;
};

Status RetrySweep(Client& client, const RetryOptions& options, const Io& io);
void AddRetryCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
