// ablate annotate TRIAL [--tag T]... [--untag T]... [--note TEXT]
//
// Tags (1..64 characters of letters, digits and . _ : / -) and a free-text note on a trial, shown
// by `ablate status trial:N`, the export, the API and the dashboard. Prints the trial's tags and
// note after the change (with no option: as they are).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "commands/command.h"

namespace ablate::cli {

struct AnnotateOptions {
  std::string trial;
  std::vector<std::string> tags, untags;
  std::optional<std::string> note;
};

Status AnnotateTrial(Client& client, const AnnotateOptions& options, const Io& io);
void AddAnnotateCommand(CLI::App& app, Action* selected);

}  // namespace ablate::cli
