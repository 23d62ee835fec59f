// ablate archive SWEEP [--restore]
//
// Hides a finished (or abandoned) sweep from `ablate status` and the dashboard's list; its trials,
// metrics and spec stay in SQLite, every command still takes its name, and `ablate status
// --archived` lists it. --restore shows it again.
#pragma once

#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct ArchiveOptions {
  std::string sweep;
  bool restore = false;
};

Status ArchiveSweep(Client& client, const ArchiveOptions& options, const Io& io);
void AddArchiveCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
