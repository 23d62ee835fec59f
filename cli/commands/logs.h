// ablate logs TRIAL [--attempt N] [--format table|json|csv]
//
// The trainer's log tail of each attempt of a trial (TRIAL: an id or trial:ID), each under a header
// line with the attempt number, worker and state.
#pragma once

#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct LogsOptions {
  std::string trial;
  int attempt = 0;  // 0: every attempt
  Format format = Format::kTable;
};

Status ShowLogs(Client& client, const LogsOptions& options, const Io& io);
void AddLogsCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
