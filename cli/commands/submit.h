// ablate submit SPEC.yaml [--dry-run] [--priority N] [--force] [--format table|json|csv]
//
// Sends the spec's text and file name to the coordinator, which validates and expands it. Prints
// "sweep NAME (id N): X trials, Y new"; with --dry-run, the expanded trials (axis values and config
// hash) and their count, and nothing is stored. "-" reads the spec from standard input.
// A spec the server rejects (INVALID_ARGUMENT, "sweep.yaml:12:5: ...") is printed as is.
#pragma once

#include <optional>
#include <string>

#include "commands/command.h"

namespace ablate::cli {

struct SubmitOptions {
  std::string spec_path;
  bool dry_run = false;
  std::optional<int> priority;
  bool force = false;  // lift the server's grid-size limit
  Format format = Format::kTable;
};

Status Submit(Client& client, const SubmitOptions& options, const Io& io);
void AddSubmitCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
