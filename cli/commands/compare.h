// ablate compare SWEEP --factor KEY [--baseline VALUE] [--metric M] [--by KEY ...]
//                [--best-over AXIS [--select-seeds S,...]] [--format table|json|csv]
//
// Each level of the factor against the baseline level, seed by seed (the coordinator's
// server/analysis/compare.h): within each cell of the --by axes the other axes are averaged within
// a seed, the levels are paired by seed, and each comparison has its n, the mean paired difference
// with a 95% t interval (from 3 pairs), the t p-value, an exact sign-flip p-value and the Holm-
// adjusted p-value over every comparison the command prints. Diverged, failed and pending seeds
// are counted per level and left out of the pairs, never silently. JSON and CSV give per
// comparison value, baseline, n, mean, baseline_mean, delta, ci_low, ci_high (null without an
// interval), p_value, p_permutation, p_adjusted, diverged, failed, missing, left_out, builds and
// test. --best-over compares each level at its own best value of a nuisance axis (best_value,
// baseline_best_value), chosen on --select-seeds and tested on the others, or on all seeds (then
// optimistic, and the output says so).
#pragma once

#include <string>
#include <vector>

#include "commands/command.h"

namespace ablate::cli {

struct CompareOptions {
  std::string sweep;  // NAME or sweep:ID
  std::string factor;
  std::string baseline;
  std::string metric = "final_val_loss";
  std::vector<std::string> by;
  std::string best_over;
  std::vector<std::string> select_seeds;
  Format format = Format::kTable;
};

Status ShowCompare(Client& client, const CompareOptions& options, const Io& io);
void AddCompareCommand(CLI::App& app, Action* selected);
Table CompareTable(const v1::CompareResponse& resp);

}  // namespace ablate::cli
