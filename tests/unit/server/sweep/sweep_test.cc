#include "sweep/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

namespace ablate::server {
namespace {

// The example of docs/design.md, "Sweep spec", verbatim.
constexpr const char* kDesignSpec = R"(name: qknorm-vs-tokens-per-step
base:
  seed: 0
  data:      {corpus: brown, val_fraction: 0.05}        # brown | nlp | path to text | glob of llm.c .bin shards
  model:     {seq_len: 256, layers: 4, d_model: 256, heads: 4, mlp: gelu, tie_embeddings: true}
  attention: {kind: sagebwd, qk_norm: true, smooth_k: true, smooth_q: false}   # kind: fpa | sagebwd
  optimizer: {kind: spectral, family: rms, p: 0.5, lr: 1.0e-2, lr_vector: 3.0e-4, newton_iters: 15, state_bits: 32}
  train:     {steps: 500, tokens_per_step: 16384, micro_batch: 16, warmup: 50, schedule: cosine,
              grad_clip: 1.0, eval_every: 50, diagnostics_every: 50, checkpoint_every: 100}
  device: auto                                            # auto | cpu | cuda
grid:                                                     # cartesian product
  attention.kind: [fpa, sagebwd]
  attention.qk_norm: [true, false]
  train.tokens_per_step: [16384, 65536]
  optimizer.p: [0, 0.25, 0.5, 1]
zip: {}                                                   # axes that vary together
exclude: [{attention.kind: fpa, attention.smooth_k: false}]   # drop meaningless points
seeds: [0, 1]
order: random                                             # or grid; random is seeded and reproducible
resources: {gpus: 1}
max_attempts: 3
)";

// A small valid CPU base that the tests below extend.
constexpr const char* kBase = R"(name: t
base:
  model: {seq_len: 64, layers: 2, d_model: 64, heads: 4}
  train: {steps: 10, tokens_per_step: 1024, micro_batch: 16, warmup: 2}
  device: cpu
resources: {gpus: 0}
)";

StatusOr<ExpandedSweep> Expand(const std::string& yaml, const ExpandOptions& options = {}) {
  return ExpandSweep(yaml, "s.yaml", options);
}

ExpandedSweep MustExpand(const std::string& yaml, const ExpandOptions& options = {}) {
  auto r = Expand(yaml, options);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : ExpandedSweep{};
}

std::string ErrorOf(const std::string& yaml, const ExpandOptions& options = {}) {
  auto r = Expand(yaml, options);
  EXPECT_FALSE(r.ok()) << "expected an error for:\n" << yaml;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

std::string Axis(const ExpandedTrial& t, const std::string& key) {
  for (const auto& [k, v] : t.axes) {
    if (k == key) return v;
  }
  return "<none>";
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// ---- The docs/design.md example ----------------------------------------------------------------------

TEST(SweepDesignExample, ExpandsTo64TrialsAndTheExcludeMatchesNothing) {
  // 2 x 2 x 2 x 4 = 32 grid points x 2 seeds. The exclude entry asks for smooth_k = false, but
  // smooth_k is not an axis and base sets it to true: no point matches, nothing is dropped.
  ExpandedSweep s = MustExpand(kDesignSpec);
  EXPECT_EQ(s.name, "qknorm-vs-tokens-per-step");
  EXPECT_EQ(s.trials.size(), 64u);
  EXPECT_EQ(Join(s.axes),
            "attention.kind,attention.qk_norm,train.tokens_per_step,optimizer.p,seed");
  EXPECT_EQ(s.gpus, 1);
  EXPECT_EQ(s.cpu_slots, 0);
  EXPECT_EQ(s.max_attempts, 3);
  EXPECT_EQ(s.priority, 0);
  EXPECT_EQ(s.spec_yaml, kDesignSpec);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_EQ(s.warnings[0],
            "s.yaml:17:11: exclude[0] matches no point: attention.smooth_k is never 'false': its "
            "base value is true and it is not an axis");
  std::set<std::string> hashes;
  std::set<std::string> points;
  for (size_t i = 0; i < s.trials.size(); ++i) {
    const ExpandedTrial& t = s.trials[i];
    EXPECT_EQ(t.order_key, static_cast<int64_t>(i));
    hashes.insert(t.config_hash);
    ASSERT_EQ(t.axes.size(), 5u);
    std::string p;
    for (const auto& [k, v] : t.axes) p += k + "=" + v + " ";
    points.insert(p);
    EXPECT_EQ(t.config_hash, config::ConfigHash(t.config));
    EXPECT_EQ(t.config_json, config::ToJson(t.config).dump());
    EXPECT_EQ(t.config.gpus, 1);
    EXPECT_EQ(t.config.device, "auto");
    EXPECT_EQ(t.config.name, "qknorm-vs-tokens-per-step");
    EXPECT_EQ(std::to_string(t.config.seed), Axis(t, "seed"));
    EXPECT_EQ(t.config.attention.kind, Axis(t, "attention.kind"));
    EXPECT_EQ(t.config.optimizer.p_end, t.config.optimizer.p);  // constant schedule
  }
  EXPECT_EQ(hashes.size(), 64u);
  EXPECT_EQ(points.size(), 64u);
  std::set<std::string> ps;
  for (const auto& t : s.trials) ps.insert(Axis(t, "optimizer.p"));
  EXPECT_EQ(ps, (std::set<std::string>{"0", "0.25", "0.5", "1"}));
}

TEST(SweepDesignExample, WithSmoothKAsAnAxisTheExcludeDrops32) {
  std::string spec = kDesignSpec;
  size_t at = spec.find("  optimizer.p: [0, 0.25, 0.5, 1]\n");
  spec.insert(at, "  attention.smooth_k: [true, false]\n");
  ExpandedSweep s = MustExpand(spec);
  // 64 points x 2 seeds = 128; fpa with smooth_k false: qk_norm 2 x tps 2 x p 4 x seeds 2 = 32.
  EXPECT_EQ(s.trials.size(), 96u);
  EXPECT_TRUE(s.warnings.empty());
  for (const auto& t : s.trials) {
    EXPECT_FALSE(t.config.attention.kind == "fpa" && !t.config.attention.smooth_k);
  }
}

// ---- Order --------------------------------------------------------------------------------------

TEST(SweepOrder, GridOrderIsSeedOutermostAndLastAxisFastest) {
  ExpandedSweep s = MustExpand(std::string(kBase) + R"(grid:
  attention.kind: [fpa, sagebwd]
  optimizer.p: [0, 1]
seeds: [7, 3]
order: grid
)");
  ASSERT_EQ(s.trials.size(), 8u);
  std::vector<std::string> got;
  for (const auto& t : s.trials) {
    got.push_back(Axis(t, "seed") + "/" + Axis(t, "attention.kind") + "/" + Axis(t, "optimizer.p"));
  }
  EXPECT_EQ(Join(got),
            "7/fpa/0,7/fpa/1,7/sagebwd/0,7/sagebwd/1,3/fpa/0,3/fpa/1,3/sagebwd/0,3/sagebwd/1");
  EXPECT_EQ(s.trials[5].config.seed, 3u);
}

std::string Grid(const std::string& name, const std::string& order) {
  return "name: " + name + R"(
base:
  model: {seq_len: 64, layers: 2, d_model: 64, heads: 4}
  train: {steps: 10, tokens_per_step: 1024, micro_batch: 16, warmup: 2}
  device: cpu
resources: {gpus: 0}
grid:
  optimizer.p: [-1, -0.5, 0, 0.5, 1]
  optimizer.lr: [0.001, 0.01, 0.1]
seeds: [0, 1]
order: )" +
         order + "\n";
}

TEST(SweepOrder, RandomIsAReproduciblePermutationOfGridOrder) {
  ExpandedSweep grid = MustExpand(Grid("perm", "grid"));
  ExpandedSweep a = MustExpand(Grid("perm", "random"));
  ExpandedSweep b = MustExpand(Grid("perm", "random"));
  ExpandedSweep other = MustExpand(Grid("perm2", "random"));
  ASSERT_EQ(grid.trials.size(), 30u);
  ASSERT_EQ(a.trials.size(), 30u);
  std::vector<std::string> g, x, y, z;
  for (size_t i = 0; i < 30; ++i) {
    g.push_back(grid.trials[i].config_hash);
    x.push_back(a.trials[i].config_hash);
    y.push_back(b.trials[i].config_hash);
    z.push_back(other.trials[i].config_hash);
    EXPECT_EQ(a.trials[i].order_key, static_cast<int64_t>(i));
  }
  EXPECT_EQ(x, y);  // reproducible
  EXPECT_NE(x, g);  // shuffled
  // The name seeds the shuffle (the name is not in the hash, so the sets are equal).
  EXPECT_NE(x, z);
  // The shuffle is exactly SeededPermutation applied to grid order.
  std::vector<size_t> perm = SeededPermutation(30, "perm");
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(x[i], g[perm[i]]);
  std::sort(g.begin(), g.end());
  std::sort(x.begin(), x.end());
  EXPECT_EQ(x, g);  // a permutation
}

TEST(SweepOrder, DefaultIsRandom) {
  std::string spec = Grid("perm", "random");
  spec.erase(spec.find("order: random"));
  ExpandedSweep s = MustExpand(spec);
  ExpandedSweep r = MustExpand(Grid("perm", "random"));
  ASSERT_EQ(s.trials.size(), r.trials.size());
  for (size_t i = 0; i < s.trials.size(); ++i) {
    EXPECT_EQ(s.trials[i].config_hash, r.trials[i].config_hash);
  }
}

TEST(SeededPermutation, IsFixedAcrossMachines) {
  // Golden values: a change here reorders every existing `order: random` sweep.
  std::vector<size_t> p = SeededPermutation(10, "qknorm-vs-tokens-per-step");
  std::vector<size_t> expect = {3, 8, 4, 2, 1, 0, 7, 9, 5, 6};
  EXPECT_EQ(p, expect);
  EXPECT_TRUE(SeededPermutation(0, "x").empty());
  EXPECT_EQ(SeededPermutation(1, "x"), std::vector<size_t>{0});
  std::vector<size_t> big = SeededPermutation(1000, "big");
  std::vector<size_t> sorted = big;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
  // Roughly uniform: no element of a 1000-permutation stays put more than a handful of times.
  size_t fixed = 0;
  for (size_t i = 0; i < big.size(); ++i) fixed += big[i] == i;
  EXPECT_LT(fixed, 10u);
}

// ---- Zip, exclude, seeds, dedupe ----------------------------------------------------------------

TEST(SweepZip, RowsVaryTogetherInsideTheGrid) {
  ExpandedSweep s = MustExpand(std::string(kBase) + R"(grid: {attention.kind: [fpa, sagebwd]}
zip:
  optimizer.lr: [0.01, 0.02, 0.04]
  optimizer.p: [0, 0.5, 1]
order: grid
)");
  ASSERT_EQ(s.trials.size(), 6u);
  EXPECT_EQ(Join(s.axes), "attention.kind,optimizer.lr,optimizer.p");
  std::vector<std::string> got;
  for (const auto& t : s.trials) {
    got.push_back(Axis(t, "attention.kind") + "/" + Axis(t, "optimizer.lr") + "/" +
                  Axis(t, "optimizer.p"));
  }
  EXPECT_EQ(Join(got),
            "fpa/0.01/0,fpa/0.02/0.5,fpa/0.04/1,sagebwd/0.01/0,sagebwd/0.02/0.5,sagebwd/0.04/1");
  EXPECT_DOUBLE_EQ(s.trials[4].config.optimizer.lr, 0.02);
  EXPECT_DOUBLE_EQ(s.trials[4].config.optimizer.p, 0.5);
}

TEST(SweepZip, OnlyZipWithoutGrid) {
  ExpandedSweep s =
      MustExpand(std::string(kBase) + R"(zip: {optimizer.lr: [0.01, 0.02], optimizer.p: [0, 0.5]}
)");
  EXPECT_EQ(s.trials.size(), 2u);
}

TEST(SweepExclude, ListsSeedsNestedKeysAndNonAxisKeys) {
  ExpandedSweep s = MustExpand(std::string(kBase) + R"(grid:
  attention.kind: [fpa, sagebwd]
  optimizer.p: [0, 0.5, 1]
seeds: [0, 1]
exclude:
  - {attention.kind: fpa, optimizer.p: [0, 1]}   # list: matches any
  - {seed: 1, attention: {kind: sagebwd}}        # seed; a nested key
  - {model.layers: 2, optimizer.p: 0.50}         # a non-axis key (base value 2); 0.50 = 0.5
order: grid
)");
  // 12 points; entry 0 drops fpa/0 and fpa/1 (x2 seeds = 4); entry 1 drops sagebwd seed 1 (3);
  // entry 2 drops p = 0.5 for every remaining point: fpa/0.5 x2 seeds, sagebwd/0.5 seed 0 (3).
  std::vector<std::string> got;
  for (const auto& t : s.trials) {
    got.push_back(Axis(t, "seed") + "/" + Axis(t, "attention.kind") + "/" + Axis(t, "optimizer.p"));
  }
  EXPECT_EQ(Join(got), "0/sagebwd/0,0/sagebwd/1");
  EXPECT_TRUE(s.warnings.empty());
}

TEST(SweepExclude, ExcludingEverythingIsAnError) {
  EXPECT_EQ(ErrorOf(std::string(kBase) + R"(grid: {attention.kind: [fpa, sagebwd]}
exclude: [{model.layers: 2}]
)"),
            "s.yaml:1:1: exclude: the sweep expands to no trial: every one of its 2 points is "
            "excluded");
}

TEST(SweepExclude, ExcludeRemovesPointsThatWouldBeInvalid) {
  // tokens_per_step 1000 is not a multiple of 16 x 64; excluding it first makes the sweep valid.
  ExpandedSweep s = MustExpand(std::string(kBase) + R"(grid:
  train.tokens_per_step: [1000, 1024]
exclude: [{train.tokens_per_step: 1000}]
)");
  ASSERT_EQ(s.trials.size(), 1u);
  EXPECT_EQ(s.trials[0].config.train.tokens_per_step, 1024);
}

TEST(SweepSeeds, SeedAxisAndDefault) {
  ExpandedSweep with = MustExpand(std::string(kBase) + "seeds: [5, 6, 7]\norder: grid\n");
  ASSERT_EQ(with.trials.size(), 3u);
  EXPECT_EQ(Join(with.axes), "seed");
  EXPECT_EQ(with.trials[2].config.seed, 7u);
  EXPECT_EQ(Axis(with.trials[2], "seed"), "7");

  std::string spec = kBase;
  spec.insert(spec.find("  device: cpu"), "  seed: 42\n");
  ExpandedSweep without = MustExpand(spec);
  ASSERT_EQ(without.trials.size(), 1u);
  EXPECT_TRUE(without.axes.empty());
  EXPECT_TRUE(without.trials[0].axes.empty());
  EXPECT_EQ(without.trials[0].config.seed, 42u);

  // seeds overrides base.seed.
  ExpandedSweep both = MustExpand(spec + "seeds: [1]\n");
  EXPECT_EQ(both.trials[0].config.seed, 1u);
}

TEST(SweepDedupe, IdenticalResolvedConfigsAreKeptOnce) {
  // With a constant p schedule p_end is set to p (as ablate-train does), so a p_end axis makes
  // identical configs; train.threads is not part of the hash at all.
  ExpandedSweep s = MustExpand(std::string(kBase) + R"(grid:
  optimizer.p_end: [0, 1]
  train.threads: [1, 2]
  attention.kind: [fpa, sagebwd]
order: grid
)");
  ASSERT_EQ(s.trials.size(), 2u);
  EXPECT_EQ(Axis(s.trials[0], "optimizer.p_end"), "0");
  EXPECT_EQ(Axis(s.trials[0], "train.threads"), "1");
  EXPECT_EQ(Axis(s.trials[1], "attention.kind"), "sagebwd");
  EXPECT_EQ(s.trials[0].order_key, 0);
  EXPECT_EQ(s.trials[1].order_key, 1);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_EQ(s.warnings[0],
            "6 points dropped as duplicates of another point's config (e.g. optimizer.p_end=0, "
            "train.threads=2, attention.kind=fpa resolves to the same config as "
            "optimizer.p_end=0, train.threads=1, attention.kind=fpa)");
}

// ---- Values, resources, settings ----------------------------------------------------------------

TEST(SweepValues, CanonicalText) {
  ExpandedSweep s = MustExpand(std::string(kBase) + R"(grid:
  optimizer.p: [0.50, 1e-2, 1.0e-1, -0.0, 1.]
  attention.qk_norm: [yes, off]
  train.steps: [0x10, 20]   # YAML 1.1 integers, as the trial config reads them
  attention:
    kind: ["fpa"]
order: grid
)");
  std::set<std::string> p, qk, steps;
  for (const auto& t : s.trials) {
    p.insert(Axis(t, "optimizer.p"));
    qk.insert(Axis(t, "attention.qk_norm"));
    steps.insert(Axis(t, "train.steps"));
    EXPECT_EQ(Axis(t, "attention.kind"), "fpa");  // nested form = dotted key
  }
  EXPECT_EQ(p, (std::set<std::string>{"0.5", "0.01", "0.1", "0", "1"}));
  EXPECT_EQ(qk, (std::set<std::string>{"true", "false"}));
  EXPECT_EQ(steps, (std::set<std::string>{"16", "20"}));
  EXPECT_EQ(s.trials.size(), 20u);
}

TEST(SweepResources, CpuAndGpuTrials) {
  ExpandedSweep cpu = MustExpand(std::string(kBase));
  EXPECT_EQ(cpu.gpus, 0);
  EXPECT_EQ(cpu.cpu_slots, 1);
  EXPECT_EQ(cpu.trials[0].config.gpus, 1);
  EXPECT_EQ(cpu.trials[0].config.name, "t");  // base has no name: the sweep's

  // device auto with gpus 0 resolves to cpu; cpu_slots may be raised.
  std::string spec = kBase;
  spec.replace(spec.find("device: cpu"), 11, "device: auto\n  name: label");
  spec.replace(spec.find("{gpus: 0}"), 9, "{gpus: 0, cpu_slots: 2}");
  ExpandedSweep aut = MustExpand(spec);
  EXPECT_EQ(aut.cpu_slots, 2);
  EXPECT_EQ(aut.trials[0].config.device, "cpu");
  EXPECT_EQ(aut.trials[0].config.name, "label");

  // GPU trials: config.gpus = resources.gpus, part of tokens_per_step divisibility.
  ExpandedSweep gpu = MustExpand(R"(name: g
base: {device: cuda, model: {seq_len: 64}, train: {micro_batch: 16, tokens_per_step: 2048}}
resources: {gpus: 2}
)");
  EXPECT_EQ(gpu.gpus, 2);
  EXPECT_EQ(gpu.cpu_slots, 0);
  EXPECT_EQ(gpu.trials[0].config.gpus, 2);
  EXPECT_EQ(gpu.trials[0].config.accumulation_steps(), 1);

  // Default resources: one GPU.
  ExpandedSweep def = MustExpand("name: d\n");
  EXPECT_EQ(def.gpus, 1);
  EXPECT_EQ(def.trials.size(), 1u);

  // device: cpu without resources.gpus is a CPU trial (no GPU held, one CPU slot, or as given);
  // an explicit resources.gpus >= 1 with it stays an error (SweepErrors).
  ExpandedSweep on_cpu = MustExpand("name: c\nbase: {device: cpu}\n");
  EXPECT_EQ(on_cpu.gpus, 0);
  EXPECT_EQ(on_cpu.cpu_slots, 1);
  EXPECT_EQ(on_cpu.trials[0].config.device, "cpu");
  EXPECT_EQ(on_cpu.trials[0].config.gpus, 1);  // one rank
  ExpandedSweep slots = MustExpand("name: c\nbase: {device: cpu}\nresources: {cpu_slots: 3}\n");
  EXPECT_EQ(slots.gpus, 0);
  EXPECT_EQ(slots.cpu_slots, 3);
}

TEST(SweepSettings, MaxAttemptsAndPriority) {
  ExpandedSweep s = MustExpand(std::string(kBase) + "max_attempts: 5\npriority: -3\n");
  EXPECT_EQ(s.max_attempts, 5);
  EXPECT_EQ(s.priority, -3);
}

TEST(SweepEmpty, EmptyGridIsTheBaseAlone) {
  ExpandedSweep s = MustExpand(std::string(kBase) + "grid: {}\nzip: {}\nexclude: []\n");
  ASSERT_EQ(s.trials.size(), 1u);
  EXPECT_TRUE(s.axes.empty());
  EXPECT_EQ(s.trials[0].config.model.d_model, 64);
}

// ---- Size limits --------------------------------------------------------------------------------

std::string IntList(int from, int n) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(from + i);
  return out + "]";
}

TEST(SweepLimits, OverTheLimitNeedsForce) {
  std::string spec = std::string(kBase) + "grid: {train.steps: " + IntList(10, 4) +
                     ", optimizer.p: [0, 1]}\nseeds: [0, 1]\n";
  ExpandOptions small;
  small.max_trials = 10;
  EXPECT_EQ(ErrorOf(spec, small),
            "s.yaml:1:1: grid: the sweep expands to 16 trials (16 points, 0 excluded), more than "
            "the limit of 10; check the grid, or submit with force (ablate submit --force)");
  small.force = true;
  EXPECT_EQ(MustExpand(spec, small).trials.size(), 16u);
  // Exclusion counts before the limit.
  small.force = false;
  EXPECT_EQ(MustExpand(spec + "exclude: [{seed: 1}]\n", small).trials.size(), 8u);
}

TEST(SweepLimits, HugeGridsFailFastEvenWithForce) {
  ExpandOptions force;
  force.force = true;
  auto start = std::chrono::steady_clock::now();
  // 400 x 300 = 120000 > kMaxSweepTrials.
  std::string big = std::string(kBase) + "grid: {train.steps: " + IntList(10, 400) +
                    ", train.eval_every: " + IntList(1, 300) + "}\n";
  EXPECT_EQ(ErrorOf(big, force),
            "s.yaml:1:1: grid: the sweep expands to 120000 trials (120000 points, 0 excluded), "
            "more than the hard limit of 100000 even with force");
  // 1e10 points: refused before enumerating.
  std::string huge =
      std::string(kBase) + "grid: {train.steps: " + IntList(10, 100) +
      ", train.eval_every: " + IntList(1, 100) + ", train.checkpoint_every: " + IntList(1, 100) +
      ", train.diagnostics_every: " + IntList(1, 100) + ", train.warmup: " + IntList(0, 10) + "}\n";
  EXPECT_EQ(ErrorOf(huge, force),
            "s.yaml:1:1: grid: the sweep has more than 10000000 points (grid x zip x seeds); at "
            "most 100000 trials are allowed");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Long lists are checked for duplicates (and zip rows for repeats) by hashing: the pairwise
// checks took 46 s of coordinator CPU for a 100,000-row zip (17 s for 120,000 seeds) before the
// count was even looked at, and the CLI timed out meanwhile.
TEST(SweepLimits, LongListsAreCheckedInLinearTime) {
  auto start = std::chrono::steady_clock::now();
  std::string zip = std::string(kBase) + "zip: {train.steps: " + IntList(10, 100001) +
                    ", train.eval_every: " + IntList(1, 100001) + "}\n";
  EXPECT_EQ(ErrorOf(zip),
            "s.yaml:1:1: grid: the sweep expands to 100001 trials (100001 points, 0 excluded), "
            "more than the hard limit of 100000 even with force");
  std::string seeds = std::string(kBase) + "seeds: " + IntList(0, 120000) + "\n";
  EXPECT_EQ(ErrorOf(seeds),
            "s.yaml:1:1: grid: the sweep expands to 120000 trials (120000 points, 0 excluded), "
            "more than the hard limit of 100000 even with force");
  // A duplicate far down a long list is still found, and named with its first place.
  std::string list = IntList(0, 50000);
  list.back() = ',';
  std::string dup = std::string(kBase) + "seeds: " + list + " 7]\n";
  EXPECT_NE(ErrorOf(dup).find("seeds[50000]: duplicate value 7 (already at seeds[7])"),
            std::string::npos)
      << ErrorOf(dup);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// ---- Errors: every kind, with file:line:column and key path -------------------------------------

TEST(SweepErrors, AKeyGivenTwiceInBaseOrASecondDocument) {
  EXPECT_EQ(ErrorOf("name: x\nbase: {device: cpu, device: cuda}\n"),
            "s.yaml:2:21: base.device: key given twice (first at s.yaml:2:8)");
  EXPECT_EQ(ErrorOf("name: x\nbase: {device: cpu}\n---\nname: y\n"),
            "s.yaml:4:1: spec: a second YAML document (after '---'); a file holds one");
  EXPECT_EQ(ErrorOf("name: x\nresources: {[a]: 1}\n"),
            "s.yaml:2:13: resources: a key must be a plain name");  // was "resources.: unknown"
}

TEST(SweepErrors, MisspelledTopLevelKey) {
  EXPECT_EQ(ErrorOf("name: x\ngird: {optimizer.p: [0]}\n"),
            "s.yaml:2:1: gird: unknown sweep key (did you mean 'grid'?); sweep keys are 'name', "
            "'base', 'grid', 'zip', 'exclude', 'seeds', 'order', 'resources', 'max_attempts', "
            "'priority' and 'early_stop'");
  EXPECT_EQ(ErrorOf("name: x\nseed: 3\n"),
            "s.yaml:2:1: seed: unknown sweep key (did you mean 'seeds'?); trial-config keys go "
            "under base: (base.seed); sweep keys are 'name', 'base', 'grid', 'zip', 'exclude', "
            "'seeds', 'order', 'resources', 'max_attempts', 'priority' and 'early_stop'");
  EXPECT_EQ(ErrorOf("name: x\nmodel: {layers: 2}\n").substr(0, 83),
            "s.yaml:2:1: model: unknown sweep key; trial-config keys go under base: (base.model)");
  EXPECT_EQ(ErrorOf("name: x\ngrid: {}\ngrid: {}\n"),
            "s.yaml:3:1: grid: key given twice (first at s.yaml:2:1)");
}

TEST(SweepErrors, GridKeys) {
  const std::string head = std::string(kBase) + "grid:\n";  // kBase is 6 lines; grid is line 7
  EXPECT_EQ(ErrorOf(head + "  atention.kind: [fpa]\n"),
            "s.yaml:8:3: grid.atention.kind: unknown trial-config key (did you mean "
            "'attention.kind'?)");
  EXPECT_EQ(ErrorOf(head + "  p: [0]\n"),
            "s.yaml:8:3: grid.p: unknown trial-config key (did you mean 'optimizer.p'?)");
  EXPECT_EQ(ErrorOf(head + "  kind: [fpa]\n"),
            "s.yaml:8:3: grid.kind: unknown trial-config key (did you mean 'attention.kind' or "
            "'optimizer.kind'?)");
  EXPECT_EQ(ErrorOf(head + "  attention: {knd: [fpa]}\n"),
            "s.yaml:8:15: grid.attention.knd: unknown trial-config key (did you mean "
            "'attention.kind'?)");
  EXPECT_EQ(ErrorOf(head + "  attention: [fpa]\n"),
            "s.yaml:8:3: grid.attention: expected a mapping of attention.* axes, or a dotted key "
            "such as 'name', got a list");
  EXPECT_EQ(ErrorOf(head + "  seed: [0, 1]\n"),
            "s.yaml:8:3: grid.seed: the seed axis is the top-level list seeds: [0, 1, ...]");
  EXPECT_EQ(ErrorOf(head + "  gpus: [1, 2]\n"),
            "s.yaml:8:3: grid.gpus: GPUs per trial are set once per sweep, with resources: "
            "{gpus: N}");
  EXPECT_EQ(ErrorOf(head + "  name: [a, b]\n"),
            "s.yaml:8:3: grid.name: name is a label, not an axis");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "grid: [optimizer.p]\n"),
            "s.yaml:7:7: grid: expected a mapping of axis -> list of values (e.g. grid: "
            "{attention.kind: [fpa, sagebwd]}), got a list");
}

TEST(SweepErrors, AxisValues) {
  const std::string head = std::string(kBase) + "grid:\n";
  EXPECT_EQ(ErrorOf(head + "  optimizer.p: [0, 0.5, 2]\n"),
            "s.yaml:8:25: grid.optimizer.p[2]: expected a number in [-1, 1], got 2");
  EXPECT_EQ(ErrorOf(head + "  optimizer.p:\n    - 0\n    - abc\n"),
            "s.yaml:10:7: grid.optimizer.p[1]: expected a number, got 'abc'");
  EXPECT_EQ(ErrorOf(head + "  attention.kind: [fpa, sagebwdd]\n"),
            "s.yaml:8:25: grid.attention.kind[1]: expected one of fpa | sagebwd, got 'sagebwdd' "
            "(did you mean 'sagebwd'?)");
  EXPECT_EQ(ErrorOf(head + "  attention.kind: fpa\n"),
            "s.yaml:8:19: grid.attention.kind: expected a list of values ([fpa] for a single "
            "value), got 'fpa'");
  EXPECT_EQ(ErrorOf(head + "  optimizer.p: []\n"),
            "s.yaml:8:16: grid.optimizer.p: an axis needs at least one value; an empty list makes "
            "no trial");
  EXPECT_EQ(ErrorOf(head + "  optimizer.p: [0.5, 0, 0.50]\n"),
            "s.yaml:8:25: grid.optimizer.p[2]: duplicate value 0.5 (already at "
            "grid.optimizer.p[0])");
  EXPECT_EQ(ErrorOf(head + "  optimizer.p: [0]\nzip:\n  optimizer.p: [1]\n"),
            "s.yaml:10:3: zip.optimizer.p: this axis is already given as grid.optimizer.p at "
            "s.yaml:8:16; an axis appears once");
}

TEST(SweepErrors, Zip) {
  EXPECT_EQ(ErrorOf(std::string(kBase) +
                    "zip:\n  optimizer.lr: [0.01, 0.02]\n  optimizer.p: [0, 0.5, 1]\n"),
            "s.yaml:9:16: zip.optimizer.p: has 3 values but zip.optimizer.lr has 2; every zip "
            "list must have the same length (row i takes the i-th value of each)");
  // Values may repeat down a zip list, but not whole rows.
  EXPECT_EQ(MustExpand(std::string(kBase) +
                       "zip: {optimizer.lr: [0.01, 0.01, 0.02], optimizer.p: [0, 1, 1]}\n")
                .trials.size(),
            3u);
  EXPECT_EQ(ErrorOf(std::string(kBase) +
                    "zip: {optimizer.lr: [0.01, 0.02, 0.010], optimizer.p: [0, 1, 0.0]}\n"),
            "s.yaml:7:34: zip: row 2 (zip.optimizer.lr[2], ...) repeats row 0; each zip row must "
            "differ in some axis");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "zip:\n  optimizer.lr: [0.01, -1]\n"),
            "s.yaml:8:24: zip.optimizer.lr[1]: expected a number in [0, 100], got -1");
}

TEST(SweepErrors, Seeds) {
  EXPECT_EQ(ErrorOf(std::string(kBase) + "seeds: [0, -1]\n"),
            "s.yaml:7:12: seeds[1]: expected an integer in [0, 9223372036854775807], got -1");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "seeds: [0, 1, 0]\n"),
            "s.yaml:7:15: seeds[2]: duplicate value 0 (already at seeds[0])");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "seeds: []\n"),
            "s.yaml:7:8: seeds: an empty list makes no trial; leave seeds out to use base.seed");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "seeds: 3\n"),
            "s.yaml:7:8: seeds: expected a list of values ([3] for a single value), got '3'");
}

TEST(SweepErrors, Exclude) {
  const std::string head = std::string(kBase) + "grid: {attention.kind: [fpa, sagebwd]}\n";
  EXPECT_EQ(ErrorOf(head + "exclude:\n  - {attention.kind: fap}\n"),
            "s.yaml:9:22: exclude[0].attention.kind: expected one of fpa | sagebwd, got 'fap' "
            "(did you mean 'fpa'?)");
  EXPECT_EQ(ErrorOf(head + "exclude:\n  - {attention.kind: fpa}\n  - {attention.knd: fpa}\n"),
            "s.yaml:10:6: exclude[1].attention.knd: neither an axis nor a trial-config key (did "
            "you mean 'attention.kind'?)");
  EXPECT_EQ(ErrorOf(head + "exclude: [{seed: [1, x]}]\n"),
            "s.yaml:8:22: exclude[0].seed[1]: expected an integer, got 'x'");
  EXPECT_EQ(ErrorOf(head + "exclude: [{}]\n"),
            "s.yaml:8:11: exclude[0]: an empty entry would drop every point");
  EXPECT_EQ(ErrorOf(head + "exclude: {attention.kind: fpa}\n"),
            "s.yaml:8:10: exclude: expected a list of mappings (e.g. [{attention.kind: fpa, "
            "attention.smooth_k: false}]), got a mapping");
  EXPECT_EQ(ErrorOf(head + "exclude: [{attention.kind: fpa, attention.kind: sagebwd}]\n"),
            "s.yaml:8:33: exclude[0].attention.kind: key given twice in one exclude entry");
}

TEST(SweepErrors, Base) {
  EXPECT_EQ(ErrorOf("name: x\nbase:\n  model: {seq_len: 64, hedas: 4}\n"),
            "s.yaml:3:24: base.model.hedas: unknown key (did you mean 'heads'?); known keys here: "
            "seq_len, layers, d_model, heads, mlp, tie_embeddings, init_std");
  EXPECT_EQ(ErrorOf("name: x\nbase:\n  train: {steps: -5}\n"),
            "s.yaml:3:18: base.train.steps: expected an integer in [1, 2147483647], got -5");
  EXPECT_EQ(ErrorOf("name: x\nbase: [1]\n"),
            "s.yaml:2:7: base: expected a mapping of trial-config keys, got a list");
  EXPECT_EQ(ErrorOf("name: x\nbase: {gpus: 2}\n"),
            "s.yaml:2:14: base.gpus: set GPUs per trial with resources: {gpus: N} (0 for CPU "
            "trials), not in base");
}

TEST(SweepErrors, PointValidationNamesThePointAndTheAxisValue) {
  // 16 x 64 = 1024 divides 1024 and 4096 but not 1536.
  EXPECT_EQ(ErrorOf(std::string(kBase) + R"(grid:
  attention.kind: [fpa, sagebwd]
  train.tokens_per_step: [1024, 1536, 4096]
seeds: [0, 1]
order: grid
)"),
            "s.yaml:9:33: grid.train.tokens_per_step[1]: tokens_per_step (1536) must be divisible "
            "by micro_batch x seq_len x gpus = 16 x 64 x 1 = 1024 (point: attention.kind=fpa, "
            "train.tokens_per_step=1536, seed=0); 3 more of the 12 points fail validation");
  // The failing key is in base: located there, with the point that exposed it.
  EXPECT_EQ(ErrorOf(std::string(kBase) + "grid: {model.d_model: [64, 60]}\n"),
            "s.yaml:3:55: base.model.heads: the head dimension d_model/heads = 15 must be even "
            "(RoPE rotates pairs) (point: model.d_model=60)");
  // The failing key is a default: located at the base mapping.
  EXPECT_EQ(ErrorOf("name: x\nbase:\n  model: {d_model: 66}\n"),
            "s.yaml:3:3: model.heads: heads (4) must divide d_model (66)");
  // Seeds axis values locate too (no Validate rule involves seed; device rules do).
  EXPECT_EQ(ErrorOf(std::string(kBase) + "grid: {device: [cpu, cuda]}\n"),
            "s.yaml:7:22: grid.device[1]: device cuda needs GPUs, but resources.gpus is 0 (CPU "
            "trials); set resources: {gpus: 1} or device: cpu (point: device=cuda)");
  EXPECT_EQ(ErrorOf("name: x\nbase: {device: cpu}\nresources: {gpus: 1}\n"),
            "s.yaml:2:16: base.device: device cpu with resources.gpus 1 would hold GPUs it never "
            "uses; CPU trials take resources: {gpus: 0}");
}

TEST(SweepErrors, Names) {
  EXPECT_EQ(ErrorOf("base: {}\n"),
            "s.yaml:1:1: name: missing; every sweep needs a name (e.g. name: "
            "qknorm-vs-tokens-per-step)");
  const std::string rule =
      "1-100 characters from A-Z a-z 0-9 . _ -, starting with a letter or digit, not all digits";
  EXPECT_EQ(ErrorOf("name: my sweep\n"),
            "s.yaml:1:7: name: 'my sweep' has the character ' ' at position 3; " + rule);
  EXPECT_EQ(ErrorOf("name: a/b\n"),
            "s.yaml:1:7: name: 'a/b' has the character '/' at position 2; " + rule);
  EXPECT_EQ(ErrorOf("name: -x\n"),
            "s.yaml:1:7: name: '-x' must start with a letter or digit; " + rule);
  EXPECT_EQ(ErrorOf("name: 123\n"),
            "s.yaml:1:7: name: '123' is all digits, which reads as a sweep id; add a letter");
  EXPECT_EQ(ErrorOf("name: " + std::string(101, 'a') + "\n"),
            "s.yaml:1:7: name: too long (101 characters); " + rule);
  EXPECT_EQ(ErrorOf("name: [a]\n"),
            "s.yaml:1:7: name: expected a sweep name (" + rule + "), got a list");
  // The edges that are allowed.
  EXPECT_TRUE(Expand("name: " + std::string(100, 'a') + "\n").ok());
  EXPECT_TRUE(Expand("name: 1e-3_v2.run-A\n").ok());
  EXPECT_TRUE(Expand("name: 7b\n").ok());
}

TEST(SweepErrors, SettingsAndResources) {
  EXPECT_EQ(ErrorOf(std::string(kBase) + "order: randon\n"),
            "s.yaml:7:8: order: expected random or grid, got 'randon' (did you mean 'random'?)");
  EXPECT_EQ(ErrorOf("name: x\nresources: {gpu: 1}\n"),
            "s.yaml:2:13: resources.gpu: unknown resource (did you mean 'gpus'?); known: gpus, "
            "cpu_slots");
  EXPECT_EQ(ErrorOf("name: x\nresources: {gpus: -1}\n"),
            "s.yaml:2:19: resources.gpus: expected a whole number of GPUs (0 to 1024) or a share "
            "1/k of one GPU (0.5, 0.25, 0.125, \"1/3\", ...; k from 2 to 64), got -1");
  EXPECT_EQ(ErrorOf("name: x\nresources: {gpus: 1, cpu_slots: 2}\n"),
            "s.yaml:2:33: resources.cpu_slots: only CPU trials (gpus: 0) take CPU slots; this "
            "sweep asks for 1 GPU(s) per trial");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "max_attempts: 0\n"),
            "s.yaml:7:15: max_attempts: expected an integer in [1, 100], got 0");
  EXPECT_EQ(ErrorOf(std::string(kBase) + "priority: high\n"),
            "s.yaml:7:11: priority: expected an integer, got 'high'");
}

TEST(SweepErrors, YamlAndShape) {
  EXPECT_EQ(ErrorOf("name: x\ngrid: {a: [1, 2}\n").substr(0, 31),
            "s.yaml:2:16: spec: invalid YAML");
  EXPECT_EQ(ErrorOf(""),
            "s.yaml:1:1: spec: the sweep spec is empty; expected a mapping with name, "
            "base, grid, ...");
  EXPECT_EQ(ErrorOf("- a\n- b\n"),
            "s.yaml:1:1: spec: expected a mapping with name, base, grid, ... at the top level, got "
            "a list");
}


// ---- GPU shares and early stopping ---------------------------------------------------------------

TEST(SweepResources, AShareOfOneGpuIsOneOverK) {
  for (const auto& [text, k] : std::vector<std::pair<std::string, int>>{
           {"0.5", 2}, {"0.25", 4}, {"0.125", 8}, {"0.333", 3}, {"\"1/3\"", 3}, {"\"1/64\"", 64}}) {
    ExpandedSweep s = MustExpand("name: s\nresources: {gpus: " + text + "}\n");
    EXPECT_EQ(s.gpus, 1) << text;
    EXPECT_EQ(s.gpu_share, k) << text;
    EXPECT_EQ(s.trials[0].config.gpus, 1) << text;  // one rank on its share
  }
  EXPECT_EQ(MustExpand("name: s\nresources: {gpus: 2}\n").gpu_share, 1);
  // The share is how a trial runs, not what it computes: the same trials as a whole GPU.
  EXPECT_EQ(MustExpand("name: s\nresources: {gpus: 0.25}\n").trials[0].config_hash,
            MustExpand("name: s\nresources: {gpus: 1}\n").trials[0].config_hash);
  const std::string above = ErrorOf("name: s\nresources: {gpus: 1.5}\n");
  EXPECT_NE(above.find("resources.gpus: a fraction above 1 (1.5) is not allowed"),
            std::string::npos)
      << above;
  for (const char* bad : {"0.3", "0.01", "\"2/3\"", "\"1/1\"", "-0.5", "many"}) {
    const std::string e = ErrorOf(std::string("name: s\nresources: {gpus: ") + bad + "}\n");
    EXPECT_NE(e.find("resources.gpus: expected a whole number of GPUs"), std::string::npos)
        << bad << ": " << e;
  }
}

constexpr const char* kLrSweep = R"(name: lr
base: {device: cpu, train: {steps: 200, eval_every: 20}}
grid: {optimizer.lr: [0.001, 0.01, 0.1]}
seeds: [0, 1]
order: grid
)";

TEST(SweepEarlyStop, ReadsTheRuleWithItsDefaults) {
  ExpandedSweep s = MustExpand(std::string(kLrSweep) + "early_stop: {rule: asha}\n");
  ASSERT_TRUE(s.has_early_stop);
  EXPECT_EQ(s.early_stop.rule, "asha");
  EXPECT_EQ(s.early_stop.metric, "val_loss");
  EXPECT_TRUE(s.early_stop.minimize);
  EXPECT_EQ(s.early_stop.grace_steps, 20);  // base.train.eval_every
  EXPECT_EQ(s.early_stop.reduction, 3);
  EXPECT_EQ(s.early_stop.max_steps, 200);
  EXPECT_EQ(s.early_stop.RungSteps(), (std::vector<int64_t>{20, 60, 180}));
  auto back = EarlyStopRuleFromJson(s.early_stop.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->RungSteps(), s.early_stop.RungSteps());
  ExpandedSweep m = MustExpand(std::string(kLrSweep) +
                               "early_stop: {rule: median, metric: loss, mode: min, grace_steps: 50, "
                               "interval: 25, min_configs: 2}\n");
  EXPECT_EQ(m.early_stop.RungSteps(), (std::vector<int64_t>{50, 75, 100, 125, 150, 175}));
  EXPECT_EQ(m.early_stop.min_configs, 2);
}

TEST(SweepEarlyStop, KeepsAConfigurationsSeedsTogether) {
  // Without early_stop the seed loop is outermost; with it, each configuration's seeds are
  // adjacent (so they run, and are judged, together), in grid order or shuffled by configuration.
  auto seeds_adjacent = [](const ExpandedSweep& s) {
    for (size_t i = 0; i + 1 < s.trials.size(); i += 2) {
      auto lr = [&](size_t j) { return s.trials[j].axes[0].second; };
      if (lr(i) != lr(i + 1)) return false;
    }
    return true;
  };
  EXPECT_FALSE(seeds_adjacent(MustExpand(kLrSweep)));
  ExpandedSweep grid = MustExpand(std::string(kLrSweep) + "early_stop: {rule: asha}\n");
  EXPECT_TRUE(seeds_adjacent(grid));
  EXPECT_EQ(grid.trials[0].axes[0].second, "0.001");
  EXPECT_EQ(grid.trials[1].axes[1].second, "1");
  std::string random = kLrSweep;
  random.replace(random.find("order: grid"), 11, "order: random");
  EXPECT_TRUE(seeds_adjacent(MustExpand(random + "early_stop: {rule: asha}\n")));
}

TEST(SweepEarlyStop, ErrorsNameTheKey) {
  auto err = [](const std::string& rule) { return ErrorOf(std::string(kLrSweep) + rule); };
  EXPECT_NE(err("early_stop: {metric: val_loss}\n").find("early_stop.rule: missing"),
            std::string::npos);
  EXPECT_NE(err("early_stop: {rule: hyperband}\n").find("early_stop.rule: expected"),
            std::string::npos);
  EXPECT_NE(err("early_stop: {rule: asha, reduciton: 3}\n")
                .find("unknown early_stop key (did you mean 'reduction'?)"),
            std::string::npos)
      << err("early_stop: {rule: asha, reduciton: 3}\n");
  EXPECT_NE(err("early_stop: {rule: asha, reduction: 1}\n").find("expected a number above 1"),
            std::string::npos);
  EXPECT_NE(err("early_stop: {rule: asha, grace_steps: 200}\n")
                .find("early_stop.grace_steps: 200 is not below base.train.steps (200)"),
            std::string::npos);
  EXPECT_NE(err("early_stop: {rule: asha, interval: 10}\n").find("is a key of rule median"),
            std::string::npos);
  EXPECT_NE(err("early_stop: {rule: asha, factors: [optimizer.lrr]}\n")
                .find("'optimizer.lrr' is not an axis of this sweep (did you mean "
                      "'optimizer.lr'?)"),
            std::string::npos);
  // Two axes besides seed: the study's factors must be named.
  const std::string two = "name: two\nbase: {device: cpu, train: {steps: 100}}\n"
                          "grid: {optimizer.lr: [0.01, 0.1], attention.kind: [fpa, sagebwd]}\n";
  const std::string missing = ErrorOf(two + "early_stop: {rule: asha}\n");
  EXPECT_NE(missing.find("early_stop.factors: missing: this sweep has the axes 'optimizer.lr' "
                         "and 'attention.kind'"),
            std::string::npos)
      << missing;
  ExpandedSweep ok = MustExpand(two + "early_stop: {rule: asha, factors: [attention.kind]}\n");
  EXPECT_EQ(ok.early_stop.factors, (std::vector<std::string>{"attention.kind"}));
  // Every axis a factor: legal, but nothing can be stopped, and the submit says so.
  ExpandedSweep none = MustExpand(
      two + "early_stop: {rule: asha, factors: [attention.kind, optimizer.lr]}\n");
  bool warned = false;
  for (const auto& w : none.warnings) warned |= w.find("early_stop can stop nothing") != std::string::npos;
  EXPECT_TRUE(warned);
}

}  // namespace
}  // namespace ablate::server
