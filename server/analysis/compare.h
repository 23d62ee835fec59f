// The ablation comparison behind `ablate compare`: does
// each level of a factor differ from a baseline level, seed by seed?
//
// The unit is the seed. Within each cell of the `by` axes, the trials of one (factor level, seed)
// are first averaged over the axes that are neither the factor, nor in `by`, nor the seed (the
// nuisance axes); then each level is paired with the baseline by seed, and the paired differences
// are tested (ablate/stats.h: t interval, t p-value, exact sign-flip p-value). Levels whose seeds
// do not match the baseline's at all are compared unpaired (Welch). The p-values of every
// comparison of one call are Holm-adjusted together.
//
// Diverged and failed trials are never dropped silently: a (level, seed) with a diverged trial
// counts as a diverged seed of that level, one with a failed trial as a failed seed, and neither
// enters a pair; each comparison says how many seeds of either side were left out of its pairs.
// Trials still pending (no metric yet) leave their seed incomplete and are counted as missing.
// Pure function of its input; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ablate/axis_value.h"
#include "ablate/stats.h"
#include "ablate/status.h"

namespace ablate::analysis {

enum class Outcome { kOk, kDiverged, kFailed, kMissing };

// One trial: its axis values (dotted keys as the sweep names them, e.g. "attention.kind"), its
// seed, how it ended and (kOk) its metric's value.
struct TrialValue {
  std::map<std::string, std::string> axes;
  std::string seed;
  Outcome outcome = Outcome::kMissing;
  double value = 0;
};

struct CompareSpec {
  std::string factor;             // the axis whose levels are compared
  std::string baseline;           // "" = the first level (numbers in numeric order)
  std::vector<std::string> by;    // the cells, each compared on its own
  double level = 0.95;            // of the intervals
};

// Per level of the factor within one cell.
struct LevelCount {
  int seeds = 0;     // seeds with at least one trial
  int complete = 0;  // seeds whose every trial has a value
  int diverged = 0;  // seeds with a diverged trial
  int failed = 0;    // seeds with a failed trial (and none diverged)
  int missing = 0;   // seeds with a trial still pending
};

struct ComparisonRow {
  std::vector<std::string> cell;  // the values of `by`, in its order
  std::string value, baseline;    // the factor's level and the baseline level
  stats::Comparison test;         // delta = mean(value) - mean(baseline) over the pairs
  double mean = 0, baseline_mean = 0;  // over the pairs (Welch: over each side's complete seeds)
  double p_adjusted = 1;          // Holm over every row of the call (by test.p_value)
  LevelCount level_count, baseline_count;
  int left_out = 0;  // seeds of either side not in a pair
  bool paired = true;
};

struct CompareResult {
  std::vector<std::string> levels;   // the factor's levels, sorted
  std::string baseline;
  std::vector<ComparisonRow> rows;   // by cell, then level
};

// Errors: InvalidArgument when the factor is not an axis of any trial, is in `by` or is "seed",
// when a `by` axis is unknown, or when the baseline is not a level of the factor (the messages
// name the known axes / levels).
StatusOr<CompareResult> Compare(const std::vector<TrialValue>& trials, const CompareSpec& spec);

// Levels and cells sort by ablate::AxisValueLess (ablate/axis_value.h), as the results table does.
using ::ablate::AxisValueLess;

}  // namespace ablate::analysis
