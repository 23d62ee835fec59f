// Sweep specs: parsing, validation and expansion into trials (DESIGN.md, "Sweep spec").
//
//   name: qknorm-vs-tokens-per-step          # required; [A-Za-z0-9._-]{1,100}
//   base: { ...a trial config... }            # the trial-config schema (worker/trainer/config)
//   grid: {attention.kind: [fpa, sagebwd], optimizer.p: [0, 0.5]}    # cartesian product
//   zip:  {optimizer.lr: [0.01, 0.02], optimizer.p: [0, 0.5]}        # axes that vary together
//   exclude: [{attention.kind: fpa, attention.smooth_k: false}]      # drop matching points
//   seeds: [0, 1]                             # a seed axis (overrides base.seed); default [base.seed]
//   order: random                             # random (seeded by the sweep name) | grid
//   resources: {gpus: 1}                      # per trial; gpus: 0 means a CPU trial (cpu_slots: 1)
//   max_attempts: 3
//   priority: 0
//
// Expansion: the points of `grid` (cartesian product, axes in spec order, the last axis varying
// fastest) times the rows of `zip` (all zip lists must have the same length) times `seeds`; each
// point applied on top of `base` with the trial-config field table, then validated; points that
// match any `exclude` entry (every key of the entry equals the point's resolved value) are dropped;
// duplicate resolved configs (the same config hash) are kept once. `order: random` shuffles with a
// generator seeded by the sweep name, so the order is reproducible.
//
// Errors (InvalidArgument) name file:line:column, the key path, what was expected, and suggest the
// nearest known key: "sweep.yaml:7:3: grid.atention.kind: unknown key (did you mean
// 'attention.kind'?)", "sweep.yaml:9:12: grid.optimizer.p[2]: expected a number in [-1, 1], got 2".
// A grid that expands to no trial, or to more than ExpandOptions::max_trials without `force`, is an
// error that says how many trials it would make.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/status.h"
#include "trainer/config/trial_config.h"

namespace ablate::server {

struct ExpandOptions {
  int max_trials = 10000;  // above this, an error unless force
  bool force = false;
};

struct ExpandedTrial {
  trainer::TrialConfig config;
  std::string config_hash;  // trainer::ConfigHash(config)
  std::string config_json;  // trainer::ToJson(config).dump()
  // The point's axis values as canonical text, in the sweep's axis order; "seed" included when the
  // spec has a seeds list. Numbers as the YAML scalar normalised (0.50 -> "0.5"), bools true/false.
  std::vector<std::pair<std::string, std::string>> axes;
  int64_t order_key = 0;  // position in the sweep's order (0, 1, ...)
};

struct ExpandedSweep {
  std::string name;
  std::string spec_yaml;
  int priority = 0;
  int max_attempts = 3;
  int gpus = 0;       // per trial
  int cpu_slots = 0;  // per trial (1 for CPU trials)
  std::vector<std::string> axes;  // grid axes, then zip axes, then "seed" (if seeds given)
  std::vector<ExpandedTrial> trials;  // in run order
};

StatusOr<ExpandedSweep> ExpandSweep(const std::string& yaml_text, const std::string& file,
                                    const ExpandOptions& options = {});

}  // namespace ablate::server
