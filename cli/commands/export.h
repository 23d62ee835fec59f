// ablate export SWEEP [--format csv|jsonl] [--metrics NAME...] [--output FILE]
//
// The sweep's data for analysis elsewhere (server/analysis/export.h has the columns): one row per
// trial (id, state, attempt, seed, build, tags, note, every axis under its dotted key, the latest
// value of every metric under the trainer's own name), or with --metrics the long table of those
// metrics' points (trial_id, step, tokens, name, value). CSV by default. --output writes a file
// (atomically: a partial export never replaces an earlier one).
#pragma once

#include <string>
#include <vector>

#include "commands/command.h"

namespace ablate::cli {

struct ExportOptions {
  std::string sweep;
  std::string format = "csv";
  std::vector<std::string> metrics;
  std::string output;  // "" = standard output
};

Status ExportSweep(Client& client, const ExportOptions& options, const Io& io);
void AddExportCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
