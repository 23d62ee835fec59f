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
// Best over a nuisance axis (`best_over`, e.g. optimizer.lr): each level (the baseline too) is
// compared at its own best value of that axis, chosen within each cell by the mean of the per-seed
// values over the selection seeds (`select_seeds`; all seeds when empty) that every value of the
// level has (so the values are judged on the same seeds; canceled trials leave their seed out); a
// value where a selection seed diverged, or one of those common seeds failed or is pending, is not
// chosen. The comparison then uses the other
// seeds when selection seeds were given (an honest test), else the same seeds (optimistic: the
// choice was made on the seeds it is tested on; CompareResult::optimistic says so).
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

// kStopped: ended early by the sweep's early_stop rule (its last value is not a final one).
// kCanceled: canceled by the user or a deadline before it finished: not a result of the
// configuration, so the trial is left out as if never run (its seed is absent, not failed).
enum class Outcome { kOk, kDiverged, kFailed, kMissing, kStopped, kCanceled };

// One trial: its axis values (dotted keys as the sweep names them, e.g. "attention.kind"), its
// seed, how it ended and (kOk) its metric's value.
struct TrialValue {
  std::map<std::string, std::string> axes;
  std::string seed;
  Outcome outcome = Outcome::kMissing;
  double value = 0;
  std::vector<std::string> builds;  // distinct builds of its attempts ("version|commit|numerics")
};

struct CompareSpec {
  std::string factor;             // the axis whose levels are compared
  std::string baseline;           // "" = the first level (numbers in numeric order)
  std::vector<std::string> by;    // the cells, each compared on its own
  double level = 0.95;            // of the intervals
  std::string best_over;                  // "" or a nuisance axis to take at its best per level
  std::vector<std::string> select_seeds;  // seeds that choose the best; the rest test it
  bool lower_is_better = true;            // how best_over's "best" is judged
};

// Per level of the factor within one cell.
struct LevelCount {
  int seeds = 0;     // seeds with at least one trial
  int complete = 0;  // seeds whose every trial has a value
  int diverged = 0;  // seeds with a diverged trial
  int failed = 0;    // seeds with a failed trial (and none diverged)
  int missing = 0;   // seeds with a trial still pending
  int stopped = 0;   // seeds with a trial stopped early (and none diverged or failed)
  int builds = 0;    // distinct builds over the trials of its complete seeds (> 1: mixed)
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
  // With best_over: the value of that axis chosen for the level and for the baseline ("" when
  // none qualified: then the row has no test).
  std::string best_value, baseline_best_value;
};

struct CompareResult {
  std::vector<std::string> levels;   // the factor's levels, sorted
  std::string baseline;
  std::vector<ComparisonRow> rows;   // by cell, then level
  bool optimistic = false;           // best_over chosen and tested on the same seeds
  std::vector<std::string> test_seeds;  // with select_seeds: the seeds the comparison used
};

// Errors: InvalidArgument when the factor is not an axis of any trial, is in `by` or is "seed",
// when a `by` axis is unknown, when the baseline is not a level of the factor, when best_over is
// not a nuisance axis, or when select_seeds names a seed no trial has or leaves no seed to test
// (the messages name the known axes / levels / seeds).
StatusOr<CompareResult> Compare(const std::vector<TrialValue>& trials, const CompareSpec& spec);

// Levels and cells sort by ablate::AxisValueLess (ablate/axis_value.h), as the results table does.
using ::ablate::AxisValueLess;

}  // namespace ablate::analysis
