// Early stopping: the judgments of one sweep's early_stop rule (sweep/sweep.h EarlyStopRule;
// docs/design.md, "Early stopping"), taken by the coordinator from the metrics it has stored.
//
// The unit judged is a configuration: the sweep's trials with equal axis values except the seed
// (with per_trial, each trial alone). A configuration's value at a rung is the mean over its
// seeds of each seed's first stored value of the metric at a step at or after the rung's step.
// It is judged at a rung once every seed has such a value or has ended without one (queued seeds
// are waited for, so the judgment covers the whole seed set); seeds that ended without a value
// are left out of the mean, and a configuration with no value at all is not judged again.
// Configurations are compared only within their group: equal values of the rule's factors.
//
// The rules, for a configuration c with value v at rung i of group g (lower is better with mode
// min; the comparisons flip with max):
//   asha:   c's value is appended to the rung's record of g (every configuration judged there so
//           far, in the order judged); with n values recorded, the threshold is the k-th best,
//           k = ceil(n / reduction), and c stops when v is worse than it. So at each rung the top
//           1/reduction (rounded up) of the configurations recorded so far go on; the first
//           configuration at a rung always does (asynchronous successive halving, as in Li et al.,
//           "A System for Massively Parallel Hyperparameter Tuning", 2020, in its stopping form).
//   median: with at least min_configs other configurations recorded at the check, the threshold
//           is their median and c stops when v is worse than it; with fewer, c goes on (the
//           threshold is recorded as NaN). Then v is appended to the record.
// A NaN value (the metric itself is NaN) is worse than any number.
//
// Every judgment is returned as a StopDecisionRecord (continue or stop) for the caller to store;
// a stopped configuration is never judged again, and Restore() rebuilds the state from the stored
// judgments after a restart, so no judgment is lost or taken twice. Replay() recomputes stored
// judgments from their recorded values and the stored metrics (the audit of a sweep's decisions).
//
// Thread safety: none (the scheduler calls it under its lock).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"
#include "sweep/sweep.h"

namespace ablate::server {

class EarlyStopper {
 public:
  EarlyStopper(int64_t sweep_id, EarlyStopRule rule);

  const EarlyStopRule& rule() const { return rule_; }

  // A trial of the sweep. `ended`: it will report no more metrics (succeeded, failed, diverged,
  // canceled, stopped). `exempt`: resumed by retry --stopped, left alone from then on (its whole
  // configuration is).
  void AddTrial(int64_t trial_id, const std::vector<std::pair<std::string, std::string>>& axes,
                bool ended, bool exempt);
  bool HasTrial(int64_t trial_id) const { return trials_.count(trial_id) != 0; }
  void SetExempt(int64_t trial_id);

  // A stored judgment, in the order they were taken (recovery).
  void Restore(const StopDecisionRecord& d);

  // A stored point of a trial's metric (any name: other metrics are ignored). Returns the
  // judgments it completes, in order, with decided_at unset.
  std::vector<StopDecisionRecord> OnPoint(int64_t trial_id, int64_t step, const std::string& name,
                                          double value);
  // The trial reports no more metrics: its configuration may be judged without it.
  std::vector<StopDecisionRecord> OnTrialEnded(int64_t trial_id);

  // Whether the trial's configuration was stopped (the trials of a stopped configuration that are
  // still queued must not start).
  bool Stopped(int64_t trial_id) const;

  // The configuration and group keys of axis values ("optimizer.lr=0.01, train.steps=200").
  std::string ConfigKey(const std::vector<std::pair<std::string, std::string>>& axes,
                        int64_t trial_id) const;
  std::string GroupKey(const std::vector<std::pair<std::string, std::string>>& axes) const;

 private:
  struct Trial {
    std::string config;
    bool ended = false;
    std::map<int, double> at_rung;  // rung index -> the first value at or after its step
    int64_t last_step = -1;
  };
  struct Config {
    std::string group;
    std::vector<int64_t> trials;  // in the order added
    size_t next_rung = 0;
    bool stopped = false;
    bool done = false;  // no value at a rung: never judged again
    bool exempt = false;
  };
  // Judges `config` at as many rungs as its seeds allow.
  void Judge(const std::string& config, std::vector<StopDecisionRecord>* out);
  StopDecisionRecord Decide(const std::string& config, Config& c, size_t rung, double value,
                            std::vector<double> seed_values);

  int64_t sweep_id_;
  EarlyStopRule rule_;
  std::vector<int64_t> rungs_;
  std::map<int64_t, Trial> trials_;
  std::map<std::string, Config> configs_;
  // (group, rung) -> (config, value) in the order recorded.
  std::map<std::pair<std::string, size_t>, std::vector<std::pair<std::string, double>>> records_;
};

// Recomputes every stored judgment of a sweep in order: its value from `series` (trial id -> the
// trial's stored points of the rule's metric, by step) and its outcome and threshold from the rule
// and the judgments before it. Returns one line per mismatch ("decision 7 (optimizer.lr=0.1 at
// rung 1): stored stop, replayed continue"); empty when every judgment replays equal.
std::vector<std::string> ReplayDecisions(
    const EarlyStopRule& rule, const std::vector<StopDecisionRecord>& decisions,
    const std::map<int64_t, std::vector<std::pair<int64_t, double>>>& series);

}  // namespace ablate::server
