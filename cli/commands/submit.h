// ablate submit SPEC.yaml [--dry-run] [--new-version] [--priority N] [--force]
//                         [--format table|json|csv]
//
// Sends the spec's text and file name to the coordinator, which validates and expands it. Prints
// "sweep NAME (id N): X trials, Y new"; with --dry-run, the expanded trials (axis values, config
// hash, and plan: new, existing, or changed) and their count, and nothing is stored. "-" reads the
// spec from standard input.
// Resubmitting under a stored sweep's name adds only the missing trials (new seeds or axis
// values). A spec that changes the sweep's definition (its base, an axis, a removed point:
// server/sweep/identity.h) is refused with exit 2 and the list of changed keys, and nothing is
// stored; --new-version stores it as a new sweep NAME.v2 (NAME.v3, ...) instead.
// A spec the server rejects (INVALID_ARGUMENT, "sweep.yaml:12:5: ...") is printed as is; the
// server's warnings (an exclude entry that matches nothing) go to stderr as "warning: ...".
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
  bool new_version = false;
  Format format = Format::kTable;
};

// `spec`: the text of options.spec_path, already read (so a bad path fails before any connection).
Status Submit(Client& client, const SubmitOptions& options, const std::string& spec, const Io& io);
void AddSubmitCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
