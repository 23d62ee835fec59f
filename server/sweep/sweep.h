// Sweep specs: parsing, validation and expansion into trials (docs/design.md, "Sweep spec").
//
//   name: qknorm-vs-tokens-per-step          # required (rule below)
//   base: { ...a trial config... }            # the trial-config schema (worker/trainer/config)
//   grid: {attention.kind: [fpa, sagebwd], optimizer.p: [0, 0.5]}    # cartesian product
//   zip:  {optimizer.lr: [0.01, 0.02], optimizer.p: [0, 0.5]}        # axes that vary together
//   exclude: [{attention.kind: fpa, attention.smooth_k: false}]      # drop matching points
//   seeds: [0, 1]                   # a seed axis (overrides base.seed); default: no seed axis
//   order: random                   # random (the default; seeded by the sweep name) | grid
//   resources: {gpus: 1}            # per trial; gpus: 0 (or base.device: cpu) means a CPU trial;
//                                   # gpus: 0.25 (any 1/k) lets k trials share one GPU
//   max_attempts: 3                 # 1..100
//   priority: 0                     # higher runs first
//   early_stop: {rule: asha, metric: val_loss, grace_steps: 100, reduction: 3}   # optional
//
// Keys.
// - name: required; 1..100 characters from [A-Za-z0-9._-], starting with a letter or digit, and not
//   all digits (the CLI accepts a sweep name or a numeric id wherever it names a sweep).
// - base: a trial config (nested or dotted keys), applied on top of the defaults. `base.gpus` is an
//   error: resources.gpus sets it. When base has no `name`, each trial's config.name is the sweep
//   name (a label; it is not part of the config hash).
// - grid / zip: a mapping from a dotted trial-config key to a non-empty list of scalars; nested
//   mappings are flattened (`grid: {attention: {kind: [fpa, sagebwd]}}` = `attention.kind`). Every
//   value is checked against the key's type and range when the spec is read. An axis appears once
//   (not in both grid and zip), lists no value twice, and is not `seed` (use `seeds`), `name` or
//   `gpus`. All zip lists have the same length; row i of zip sets every zip axis to its i-th value.
// - seeds: a non-empty list of distinct non-negative integers; it is an axis named "seed" that sets
//   config.seed. Without it there is no seed axis and every trial uses base.seed.
// - exclude: a list of mappings; each key is an axis or any trial-config key (including `seed`),
//   each value a scalar or a list of scalars (matches any of them). A point is dropped when, for
//   every key of an entry, the point's value for that key is (one of) the given value(s): its axis
//   value when the key is an axis, otherwise the base config's value. Exclusion happens BEFORE
//   validation, so an entry can remove combinations that would be invalid. An entry that can match
//   no point is not an error (it is reported in ExpandedSweep::warnings).
// - resources: {gpus: N (default 1; 0 when base.device is cpu), cpu_slots: M}. gpus >= 1: a GPU
//   trial, config.gpus = N, cpu_slots 0 (cpu_slots may not be given). gpus 0: a CPU trial taking
//   cpu_slots (default 1) worker slots; config.gpus = 1 (one rank). A point with device: cuda and
//   gpus 0, or device: cpu with gpus >= 1 (it would hold GPUs it never uses; a device axis with
//   cpu among its values needs resources: {gpus: 0}), is an error; device: auto with gpus 0
//   resolves to device: cpu. gpus may also be a share 1/k of one GPU (k = 2..64, written 0.5,
//   0.25, 0.125 or as the string "1/3"): k trials share one GPU (config.gpus = 1, gpu_share = k);
//   any other fraction, and any number above 1 that is not whole, is an error.
// - early_stop: stop hopeless configurations early (EarlyStopRule below; docs/design.md, "Early
//   stopping"). Keys: rule (asha | median, required), metric (default val_loss), mode (min | max,
//   default min), grace_steps (the first rung; default base.train.eval_every), reduction (asha,
//   > 1, default 3), interval (median: steps between checks, default grace_steps), min_configs
//   (median: other configurations needed at a check, default 3), per_trial (judge each trial
//   alone instead of each configuration's seeds together; default false), factors (the study's
//   axes: configurations are compared only with those of equal factor values). A sweep with more
//   than one axis besides seed must name its factors (factors: [] compares across every axis):
//   stopping an arm for being worse than another arm is not an ablation result.
//
// Expansion: the points of `grid` (cartesian product, axes in spec order, the last axis varying
// fastest) times the rows of `zip` (zip inner to grid), repeated for each seed (the seed loop is
// the OUTERMOST, as Ray Tune repeats a grid per sample: in grid order, every point runs with the
// first seed before any runs with the second). An empty grid and zip make one point (the base
// alone). Each point not excluded is applied on top of `base` with the trial-config field table
// (then, as ablate-train does, p_end = p when p_schedule is constant), and validated; duplicate
// resolved configs (the same config hash) are kept once (the first, in grid order). `order: random`
// then shuffles with SeededPermutation(n, name), so the order is reproducible on every machine.
// With early_stop, a configuration's seeds stay adjacent (the seed loop is innermost and
// `order: random` shuffles configurations, not trials), so they run, and are judged, together.
//
// Axis values are canonical text read back from the typed field: numbers in shortest round-trip
// form (0.50 -> "0.5", 1e-2 -> "0.01", 16384), bools true/false, strings as written.
//
// Errors (InvalidArgument) name file:line:column (1-based), the key path, what was expected, and
// suggest the nearest known key: "sweep.yaml:7:3: grid.atention.kind: unknown trial-config key (did
// you mean 'attention.kind'?)", "sweep.yaml:9:12: grid.optimizer.p[2]: expected a number in [-1,
// 1], got 2", "sweep.yaml:1:1: gird: unknown sweep key (did you mean 'grid'?)". A point that fails
// validation is reported with its axis values, at the offending axis value when the failing key is
// an axis of the point (key path grid.<key>[i] / zip.<key>[i] / seeds[i]), else at the base value
// (base.<key>), else at the `base` mapping (a default value); the message also counts how many
// other points fail. A sweep that expands to no trial (every point excluded, or an axis with an
// empty list), or to more than ExpandOptions::max_trials without `force`, is an error that says how
// many trials it would make. Independent of `force`, at most kMaxSweepTrials trials are expanded.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ablate/status.h"
#include "ablate/trial_config.h"

namespace ablate::server {

// The hard cap on a sweep's trials, with or without force (memory and submit latency).
inline constexpr int64_t kMaxSweepTrials = 100000;

struct ExpandOptions {
  int max_trials = 10000;  // above this (after exclude), an error unless force
  bool force = false;
};

struct ExpandedTrial {
  config::TrialConfig config;
  std::string config_hash;  // config::ConfigHash(config)
  std::string config_json;  // config::ToJson(config).dump()
  // The point's axis values as canonical text, in the sweep's axis order; "seed" included when the
  // spec has a seeds list. Numbers as the YAML scalar normalised (0.50 -> "0.5"), bools true/false.
  std::vector<std::pair<std::string, std::string>> axes;
  int64_t order_key = 0;  // position in the sweep's order (0, 1, ...)
};

// A sweep's early-stopping rule (the spec's early_stop key), as the coordinator applies it
// (scheduler/early_stop.h). Stored with the sweep as JSON (ToJson / EarlyStopRuleFromJson).
struct EarlyStopRule {
  std::string rule;                 // asha | median
  std::string metric = "val_loss";
  bool minimize = true;             // mode: min
  int64_t grace_steps = 0;          // asha: the first rung; median: the first check
  double reduction = 3;             // asha: keep the top 1/reduction at each rung
  int64_t interval = 0;             // median: steps between checks
  int min_configs = 3;              // median: other configurations recorded at a check, at least
  bool per_trial = false;           // judge trials alone (every seed its own configuration)
  std::vector<std::string> factors; // never compared across
  int64_t max_steps = 0;            // base train.steps: no rung at or past it

  // The rungs' steps: asha grace * reduction^i (rounded), median grace + i * interval; below
  // max_steps.
  std::vector<int64_t> RungSteps() const;
  std::string ToJson() const;
};
StatusOr<EarlyStopRule> EarlyStopRuleFromJson(const std::string& json);

struct ExpandedSweep {
  std::string name;
  std::string spec_yaml;
  int priority = 0;
  int max_attempts = 3;
  int gpus = 0;       // per trial (resources.gpus; 0 for CPU trials; 1 with a share)
  int cpu_slots = 0;  // per trial (resources.cpu_slots, default 1, for CPU trials; else 0)
  int gpu_share = 1;  // k: each trial takes 1/k of one GPU (resources.gpus: 1/k); 1: whole GPUs
  bool has_early_stop = false;
  EarlyStopRule early_stop;
  std::vector<std::string> axes;      // grid axes, then zip axes, then "seed" (if seeds given)
  std::vector<ExpandedTrial> trials;  // in run order
  // Things that are legal but probably not meant, for `ablate submit` to print: an exclude entry
  // that can match no point, points dropped as duplicates of another point's config.
  std::vector<std::string> warnings;
};

StatusOr<ExpandedSweep> ExpandSweep(const std::string& yaml_text, const std::string& file,
                                    const ExpandOptions& options = {});

// The `order: random` permutation of 0..n-1: a Fisher–Yates shuffle (i from n-1 down to 1, swap i
// with j = floor(r * (i + 1) / 2^64)) driven by SplitMix64 whose state starts at the FNV-1a 64 hash
// of `name`. Fixed integer arithmetic: the same on every machine and compiler.
std::vector<size_t> SeededPermutation(size_t n, const std::string& name);

}  // namespace ablate::server
