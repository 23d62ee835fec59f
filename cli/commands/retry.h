// ablate retry SWEEP [--failed | --stopped]
//
// Requeues a sweep's failed and canceled trials (--failed: failed ones only; --stopped: the
// trials early stopping stopped, resumed from their checkpoints and run to the end, early
// stopping leaving them alone from then on) with a fresh attempt budget. Prints how many were
// requeued.
#pragma once

#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct RetryOptions {
  std::string sweep;
  bool failed_only = false;
  bool stopped = false;
};

Status RetrySweep(Client& client, const RetryOptions& options, const Io& io);
void AddRetryCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
