// DiffSweep: what a resubmitted spec would add, keep or change against the stored sweep.
#include "sweep/identity.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ablate::server {
namespace {

constexpr const char* kSpec = R"(name: t
base:
  model: {seq_len: 64, layers: 2, d_model: 64, heads: 4}
  train: {steps: 10, tokens_per_step: 1024, micro_batch: 16, warmup: 2}
  device: cpu
grid:
  optimizer.p: [0, 0.5]
seeds: [0, 1]
resources: {gpus: 0}
)";

ExpandedSweep MustExpand(const std::string& yaml) {
  auto r = ExpandSweep(yaml, "t.yaml");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : ExpandedSweep{};
}

// The stored side as the store holds it after submitting `yaml`.
std::vector<StoredTrial> Stored(const ExpandedSweep& s) {
  std::vector<StoredTrial> out;
  for (const auto& t : s.trials) out.push_back({t.axes, t.config_hash, t.config_json});
  return out;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(DiffSweep, TheSameSpecIsAllExisting) {
  const ExpandedSweep a = MustExpand(kSpec);
  const SweepDiff d = DiffSweep(a.axes, Stored(a), a);
  EXPECT_TRUE(d.changes.empty());
  EXPECT_EQ(d.existing, 4);
  EXPECT_EQ(d.new_trials + d.changed + d.removed, 0);
  ASSERT_EQ(d.plan.size(), 4u);
  for (TrialPlan p : d.plan) EXPECT_EQ(p, TrialPlan::kExisting);
}

TEST(DiffSweep, AddedSeedsAndValuesAreNewAndNothingElse) {
  const ExpandedSweep a = MustExpand(kSpec);
  const ExpandedSweep b = MustExpand(
      Replace(Replace(kSpec, "seeds: [0, 1]", "seeds: [0, 1, 2]"), "[0, 0.5]", "[0, 0.5, 1]"));
  const SweepDiff d = DiffSweep(a.axes, Stored(a), b);
  EXPECT_TRUE(d.changes.empty()) << d.changes.front();
  EXPECT_EQ(d.existing, 4);
  EXPECT_EQ(d.new_trials, 9 - 4);
  ASSERT_EQ(d.plan.size(), b.trials.size());
  for (size_t i = 0; i < b.trials.size(); ++i) {
    bool old = false;
    for (const auto& t : a.trials) old = old || t.config_hash == b.trials[i].config_hash;
    EXPECT_EQ(d.plan[i], old ? TrialPlan::kExisting : TrialPlan::kNew) << i;
  }
}

TEST(DiffSweep, AChangedBaseIsListedKeyByKeyWithOldAndNewValues) {
  const ExpandedSweep a = MustExpand(kSpec);
  const ExpandedSweep b = MustExpand(Replace(kSpec, "steps: 10", "steps: 20"));
  const SweepDiff d = DiffSweep(a.axes, Stored(a), b);
  EXPECT_EQ(d.changed, 4);
  EXPECT_EQ(d.existing + d.new_trials, 0);
  ASSERT_EQ(d.changes.size(), 1u);
  EXPECT_EQ(d.changes[0], "train.steps: 10 -> 20 (4 trials)");
  for (TrialPlan p : d.plan) EXPECT_EQ(p, TrialPlan::kChanged);
}

TEST(DiffSweep, AnAddedOrRemovedAxisIsAChange) {
  const ExpandedSweep a = MustExpand(kSpec);
  const ExpandedSweep b =
      MustExpand(Replace(kSpec, "  optimizer.p: [0, 0.5]\n", "  optimizer.p: [0, 0.5]\n  optimizer.lr: [0.01]\n"));
  const SweepDiff added = DiffSweep(a.axes, Stored(a), b);
  ASSERT_FALSE(added.changes.empty());
  EXPECT_EQ(added.changes[0], "axis added: optimizer.lr");
  const SweepDiff removed = DiffSweep(b.axes, Stored(b), a);
  ASSERT_FALSE(removed.changes.empty());
  EXPECT_EQ(removed.changes[0], "axis removed: optimizer.lr");
}

TEST(DiffSweep, ADroppedPointIsAChangeNamedByAnExample) {
  const ExpandedSweep a = MustExpand(kSpec);
  const ExpandedSweep b = MustExpand(Replace(kSpec, "seeds: [0, 1]", "seeds: [0]"));
  const SweepDiff d = DiffSweep(a.axes, Stored(a), b);
  EXPECT_EQ(d.removed, 2);
  EXPECT_EQ(d.existing, 2);
  ASSERT_EQ(d.changes.size(), 1u);
  EXPECT_NE(d.changes[0].find("2 trials of the sweep not in the new spec"), std::string::npos)
      << d.changes[0];
  EXPECT_NE(d.changes[0].find("seed=1"), std::string::npos) << d.changes[0];
}

TEST(DiffSweep, PriorityAndMaxAttemptsMayChange) {
  const ExpandedSweep a = MustExpand(kSpec);
  const ExpandedSweep b = MustExpand(std::string(kSpec) + "priority: 5\nmax_attempts: 7\n");
  const SweepDiff d = DiffSweep(a.axes, Stored(a), b);
  EXPECT_TRUE(d.changes.empty());
  EXPECT_EQ(d.existing, 4);
}

TEST(NextVersionName, TakesTheFirstFreeNumberFromTwo) {
  EXPECT_EQ(NextVersionName("s", {}), "s.v2");
  EXPECT_EQ(NextVersionName("s", {"s", "s.v2", "s.v4"}), "s.v3");
}

}  // namespace
}  // namespace ablate::server
