// ablate cancel SWEEP|TRIAL
//
// A bare integer or trial:ID cancels one trial; a name or sweep:ID cancels every queued and running
// trial of a sweep. Running attempts are stopped by their workers. Prints how many were canceled.
#pragma once

#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct CancelOptions {
  std::string target;
};

Status CancelTarget(Client& client, const CancelOptions& options, const Io& io);
void AddCancelCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
