// The early-stopping rules on their own (scheduler/early_stop.h): the definitions of ASHA and the
// median rule, judgment by configuration, groups of equal factor values, restore and replay.
#include "scheduler/early_stop.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ablate::server {
namespace {

using Axes = std::vector<std::pair<std::string, std::string>>;

EarlyStopRule Asha(double reduction = 3, int64_t grace = 10, int64_t max_steps = 1000) {
  EarlyStopRule r;
  r.rule = "asha";
  r.metric = "val_loss";
  r.grace_steps = grace;
  r.reduction = reduction;
  r.max_steps = max_steps;
  return r;
}

Axes Lr(const std::string& lr, int seed = -1) {
  Axes a = {{"optimizer.lr", lr}};
  if (seed >= 0) a.push_back({"seed", std::to_string(seed)});
  return a;
}

TEST(EarlyStopRule, RungsFollowTheRule) {
  EXPECT_EQ(Asha(3, 10, 1000).RungSteps(), (std::vector<int64_t>{10, 30, 90, 270, 810}));
  EXPECT_EQ(Asha(2, 100, 500).RungSteps(), (std::vector<int64_t>{100, 200, 400}));
  EarlyStopRule m = Asha();
  m.rule = "median";
  m.grace_steps = 50;
  m.interval = 100;
  m.max_steps = 300;
  EXPECT_EQ(m.RungSteps(), (std::vector<int64_t>{50, 150, 250}));
  auto back = EarlyStopRuleFromJson(Asha(3, 10, 1000).ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->RungSteps(), Asha(3, 10, 1000).RungSteps());
  EXPECT_FALSE(EarlyStopRuleFromJson("{\"rule\":\"hyperband\"}").ok());
}

TEST(EarlyStopper, AshaKeepsTheTopOneOverReductionOfEachRung) {
  // Nine configurations, one seed each, reaching rung 0 (step 10) in this order with these
  // losses. With reduction 3 the k-th best of the n recorded so far is the threshold,
  // k = ceil(n / 3), and a configuration worse than it stops.
  EarlyStopper s(1, Asha(3));
  const std::vector<double> loss = {5.0, 4.0, 6.0, 3.0, 4.5, 7.0, 2.0, 3.5, 8.0};
  for (size_t i = 0; i < loss.size(); ++i) s.AddTrial(int64_t(i + 1), Lr(std::to_string(i)), false, false);
  std::vector<std::string> got;
  std::vector<double> thresholds;
  for (size_t i = 0; i < loss.size(); ++i) {
    auto d = s.OnPoint(int64_t(i + 1), 10, "val_loss", loss[i]);
    ASSERT_EQ(d.size(), 1u) << i;
    EXPECT_EQ(d[0].rung, 0);
    EXPECT_EQ(d[0].step, 10);
    EXPECT_EQ(d[0].compared.size(), i + 1);  // everything recorded at the rung, itself included
    got.push_back(d[0].decision);
    thresholds.push_back(d[0].threshold);
  }
  // n=1 k=1: 5 (itself) go; n=2 k=1: best 4, 4 goes; n=3 k=1: 6 > 4 stops; n=4 k=2: sorted
  // 3,4,5,6 -> 4, 3 goes; n=5 k=2: 3,4,4.5,.. -> 4, 4.5 stops; n=6 k=2: 7 stops; n=7 k=3:
  // 2,3,4 -> 4, 2 goes; n=8 k=3: 2,3,3.5 -> 3.5, 3.5 goes (ties go on); n=9 k=3: 8 stops.
  EXPECT_EQ(got, (std::vector<std::string>{"continue", "continue", "stop", "continue", "stop",
                                           "stop", "continue", "continue", "stop"}));
  EXPECT_EQ(thresholds, (std::vector<double>{5, 4, 4, 4, 4, 4, 4, 3.5, 3.5}));
  EXPECT_TRUE(s.Stopped(3));
  EXPECT_FALSE(s.Stopped(4));
  // A stopped configuration is never judged again; one that went on is judged at rung 1.
  EXPECT_TRUE(s.OnPoint(3, 30, "val_loss", 0.1).empty());
  auto next = s.OnPoint(4, 30, "val_loss", 2.5);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].rung, 1);
  EXPECT_EQ(next[0].step, 30);
  // Other metrics and steps before the rung change nothing.
  EXPECT_TRUE(s.OnPoint(7, 29, "val_loss", 9.0).empty());
  EXPECT_TRUE(s.OnPoint(7, 40, "loss", 9.0).empty());
}

TEST(EarlyStopper, ModeMaxFlipsTheComparisons) {
  EarlyStopRule r = Asha(2);
  r.metric = "accuracy";
  r.minimize = false;
  EarlyStopper s(1, r);
  s.AddTrial(1, Lr("a"), false, false);
  s.AddTrial(2, Lr("b"), false, false);
  EXPECT_EQ(s.OnPoint(1, 10, "accuracy", 0.5)[0].decision, "continue");
  EXPECT_EQ(s.OnPoint(2, 10, "accuracy", 0.4)[0].decision, "stop");  // lower accuracy: worse
}

TEST(EarlyStopper, JudgesAConfigurationOnTheMeanOfAllItsSeeds) {
  EarlyStopper s(1, Asha(2));
  // Configuration a: seeds 0, 1 (trials 1, 2); configuration b: seeds 0, 1 (trials 3, 4).
  s.AddTrial(1, Lr("a", 0), false, false);
  s.AddTrial(2, Lr("a", 1), false, false);
  s.AddTrial(3, Lr("b", 0), false, false);
  s.AddTrial(4, Lr("b", 1), false, false);
  EXPECT_TRUE(s.OnPoint(1, 12, "val_loss", 3.0).empty());  // seed 1 of a has not reported
  auto a = s.OnPoint(2, 10, "val_loss", 5.0);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].config, "optimizer.lr=a");
  EXPECT_DOUBLE_EQ(a[0].value, 4.0);  // the mean of 3 and 5
  EXPECT_EQ(a[0].seed_values, (std::vector<double>{3.0, 5.0}));
  EXPECT_EQ(a[0].trial_ids, (std::vector<int64_t>{1, 2}));
  // A seed that ended before the rung is left out; the judgment waits for the one still running.
  EXPECT_TRUE(s.OnTrialEnded(3).empty());
  auto b = s.OnPoint(4, 10, "val_loss", 4.5);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_DOUBLE_EQ(b[0].value, 4.5);
  EXPECT_EQ(b[0].decision, "stop");  // k = ceil(2/2) = 1: 4.5 is worse than a's 4.0
  EXPECT_TRUE(s.Stopped(3));         // the whole seed set
  EXPECT_TRUE(s.Stopped(4));
}

TEST(EarlyStopper, PerTrialModeJudgesEachSeedAlone) {
  EarlyStopRule r = Asha(2);
  r.per_trial = true;
  EarlyStopper s(1, r);
  s.AddTrial(1, Lr("a", 0), false, false);
  s.AddTrial(2, Lr("a", 1), false, false);
  EXPECT_EQ(s.OnPoint(1, 10, "val_loss", 3.0).size(), 1u);
  auto d = s.OnPoint(2, 10, "val_loss", 5.0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].decision, "stop");
  EXPECT_EQ(d[0].trial_ids, (std::vector<int64_t>{2}));
}

TEST(EarlyStopper, NeverComparesAcrossTheFactors) {
  EarlyStopRule r = Asha(2);
  r.factors = {"attention.kind"};
  EarlyStopper s(1, r);
  auto axes = [](const std::string& kind, const std::string& lr) {
    return Axes{{"attention.kind", kind}, {"optimizer.lr", lr}};
  };
  s.AddTrial(1, axes("fpa", "0.01"), false, false);
  s.AddTrial(2, axes("sagebwd", "0.01"), false, false);
  s.AddTrial(3, axes("sagebwd", "0.1"), false, false);
  EXPECT_EQ(s.OnPoint(1, 10, "val_loss", 1.0)[0].decision, "continue");
  // sagebwd is far worse than fpa, but it is the first of its group: it goes on.
  auto d = s.OnPoint(2, 10, "val_loss", 9.0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].group, "attention.kind=sagebwd");
  EXPECT_EQ(d[0].decision, "continue");
  EXPECT_EQ(d[0].compared.size(), 1u);
  // Within sagebwd, the worse learning rate stops.
  EXPECT_EQ(s.OnPoint(3, 10, "val_loss", 9.5)[0].decision, "stop");
}

TEST(EarlyStopper, MedianRuleNeedsMinConfigsAndStopsBelowTheMedian) {
  EarlyStopRule r;
  r.rule = "median";
  r.metric = "val_loss";
  r.grace_steps = 10;
  r.interval = 10;
  r.min_configs = 2;
  r.max_steps = 100;
  EarlyStopper s(1, r);
  for (int i = 1; i <= 4; ++i) s.AddTrial(i, Lr(std::to_string(i)), false, false);
  auto d1 = s.OnPoint(1, 10, "val_loss", 3.0);
  EXPECT_EQ(d1[0].decision, "continue");
  EXPECT_TRUE(std::isnan(d1[0].threshold));  // too few others to judge
  EXPECT_EQ(s.OnPoint(2, 10, "val_loss", 5.0)[0].decision, "continue");
  auto d3 = s.OnPoint(3, 10, "val_loss", 4.5);  // others 3, 5: median 4
  EXPECT_DOUBLE_EQ(d3[0].threshold, 4.0);
  EXPECT_EQ(d3[0].decision, "stop");
  auto d4 = s.OnPoint(4, 10, "val_loss", 3.5);  // others 3, 5, 4.5: median 4.5
  EXPECT_DOUBLE_EQ(d4[0].threshold, 4.5);
  EXPECT_EQ(d4[0].decision, "continue");
}

TEST(EarlyStopper, ANaNValueIsWorseThanAnyNumber) {
  EarlyStopper s(1, Asha(2));
  s.AddTrial(1, Lr("a"), false, false);
  s.AddTrial(2, Lr("b"), false, false);
  s.OnPoint(1, 10, "val_loss", 3.0);
  EXPECT_EQ(s.OnPoint(2, 10, "val_loss", std::nan(""))[0].decision, "stop");
}

TEST(EarlyStopper, RestoreRebuildsTheRecordSoNothingIsJudgedTwice) {
  EarlyStopper first(1, Asha(2));
  for (int i = 1; i <= 3; ++i) first.AddTrial(i, Lr(std::to_string(i)), false, false);
  std::vector<StopDecisionRecord> stored;
  for (auto& d : first.OnPoint(1, 10, "val_loss", 3.0)) stored.push_back(d);
  for (auto& d : first.OnPoint(2, 10, "val_loss", 4.0)) stored.push_back(d);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[1].decision, "stop");

  // A new stopper (the coordinator restarted) from the stored judgments and the stored points.
  EarlyStopper again(1, Asha(2));
  for (int i = 1; i <= 3; ++i) again.AddTrial(i, Lr(std::to_string(i)), false, false);
  for (const auto& d : stored) again.Restore(d);
  EXPECT_TRUE(again.Stopped(2));
  EXPECT_TRUE(again.OnPoint(1, 10, "val_loss", 3.0).empty());  // rung 0 of 1 was judged
  EXPECT_TRUE(again.OnPoint(2, 10, "val_loss", 4.0).empty());  // stopped
  auto d = again.OnPoint(3, 10, "val_loss", 2.0);               // the one judgment still due
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].compared.size(), 3u);  // compared with the two restored values
  EXPECT_EQ(d[0].decision, "continue");
}

TEST(ReplayDecisions, RecomputesEveryJudgmentAndFindsAChangedOne) {
  const EarlyStopRule rule = Asha(2);
  EarlyStopper s(1, rule);
  std::map<int64_t, std::vector<std::pair<int64_t, double>>> series;
  const std::vector<double> loss = {3.0, 4.0, 2.5, 5.0};
  for (size_t i = 0; i < loss.size(); ++i) s.AddTrial(int64_t(i + 1), Lr(std::to_string(i)), false, false);
  std::vector<StopDecisionRecord> stored;
  int64_t id = 0;
  for (size_t i = 0; i < loss.size(); ++i) {
    const int64_t t = int64_t(i + 1);
    series[t] = {{5, 9.0}, {10, loss[i]}, {20, loss[i] - 0.5}};
    for (const auto& p : series[t]) {
      for (auto& d : s.OnPoint(t, p.first, "val_loss", p.second)) {
        d.id = ++id;
        stored.push_back(d);
      }
    }
  }
  ASSERT_GE(stored.size(), 4u);
  EXPECT_TRUE(ReplayDecisions(rule, stored, series).empty());
  // A stored decision that does not follow from the rule, or a value the metrics do not hold, is
  // reported.
  auto flipped = stored;
  flipped[1].decision = flipped[1].decision == "stop" ? "continue" : "stop";
  auto bad = ReplayDecisions(rule, flipped, series);
  ASSERT_FALSE(bad.empty());
  EXPECT_NE(bad[0].find("decision 2"), std::string::npos) << bad[0];
  auto moved = series;
  moved[1][1].second = 3.25;
  EXPECT_FALSE(ReplayDecisions(rule, stored, moved).empty());
}

}  // namespace
}  // namespace ablate::server
