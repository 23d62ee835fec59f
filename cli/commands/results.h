// ablate results SWEEP [--metric final_val_loss] [--by AXIS ...] [--format table|json|csv]
//
// The ablation table: one row per combination of the --by axes (default: every axis but seed),
// the metric's mean ± sample std over the group's trials (seeds) and how many trials had a value.
// The text table marks the best row with '*' (lowest for loss-like metrics, highest otherwise);
// JSON and CSV give mean, std, n, trials, min, max and best as separate fields.
#pragma once

#include <string>
#include <vector>

#include "commands/command.h"

namespace ablate::cli {

struct ResultsOptions {
  std::string sweep;  // NAME or sweep:ID
  std::string metric = "final_val_loss";
  std::vector<std::string> by;
  Format format = Format::kTable;
};

Status ShowResults(Client& client, const ResultsOptions& options, const Io& io);
void AddResultsCommand(CLI::App& app, Action* selected);

// The row the server marked best (separated by its interval: server/analysis/results.h), or -1.
int BestRow(const v1::ResultsResponse& resp);
// "3.2145 ± 0.0123 (3)": the mean and its standard error ("-" below 2 values), with "(n/trials)"
// when some trials of the group have no value and "-" when none has; the mean's magnitude picks
// the decimals (4 below 100), the se uses the same.
std::string FormatMeanSe(const v1::ResultsRow& row);
// "[3.2132, 3.2158]": the 95% t interval of the mean; "-" without one.
std::string FormatInterval(const v1::ResultsRow& row);
Table ResultsTable(const v1::ResultsResponse& resp);

}  // namespace ablate::cli
