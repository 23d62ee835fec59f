// analysis::Compare: the seed as the unit (nuisance axes averaged within a seed first), pairing
// by seed, the counts of diverged / failed / pending seeds, Welch when seeds do not match, Holm over
// the call, and the errors that name what is wrong. Expected figures are computed here from the
// same inputs by hand, not by the code under test.
#include "analysis/compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ablate::analysis {
namespace {

TrialValue T(const std::string& lr, const std::string& width, int seed, double v,
             Outcome o = Outcome::kOk, const std::string& kind = "fpa") {
  TrialValue t;
  t.axes = {{"optimizer.lr", lr}, {"model.width", width}, {"seed", std::to_string(seed)},
            {"attention.kind", kind}};
  t.seed = std::to_string(seed);
  t.outcome = o;
  t.value = v;
  return t;
}

CompareSpec Spec(const std::string& factor, const std::string& baseline = "",
                 std::vector<std::string> by = {}) {
  CompareSpec s;
  s.factor = factor;
  s.baseline = baseline;
  s.by = std::move(by);
  return s;
}

// Four seeds, two widths (a nuisance axis), lr 0.1 better than 0.001 by about 1.
std::vector<TrialValue> LargeEffect() {
  std::vector<TrialValue> v;
  const double noise[4] = {0.03, -0.02, 0.01, -0.04};
  for (int s = 0; s < 4; ++s) {
    v.push_back(T("0.001", "1", s, 3.0 + noise[s]));
    v.push_back(T("0.001", "2", s, 3.2 + noise[s]));
    v.push_back(T("0.1", "1", s, 2.0 + 0.5 * noise[s] + 0.01 * s));
    v.push_back(T("0.1", "2", s, 2.1 - 0.5 * noise[s]));
  }
  return v;
}

TEST(CompareTest, SeedIsTheUnitAndNuisanceAxesAreAveragedFirst) {
  CompareSpec spec;
  spec.factor = "optimizer.lr";
  auto r = Compare(LargeEffect(), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->baseline, "0.001");  // numeric order: the smaller first
  ASSERT_EQ(r->rows.size(), 1u);
  const ComparisonRow& row = r->rows[0];
  EXPECT_TRUE(row.paired);
  EXPECT_EQ(row.test.n, 4);
  // By hand: per seed, mean over widths, then the paired differences.
  const double noise[4] = {0.03, -0.02, 0.01, -0.04};
  double sum = 0, d[4];
  for (int s = 0; s < 4; ++s) {
    const double base = (3.0 + noise[s] + 3.2 + noise[s]) / 2;
    const double lvl = (2.0 + 0.5 * noise[s] + 0.01 * s + 2.1 - 0.5 * noise[s]) / 2;
    d[s] = lvl - base;
    sum += d[s];
  }
  const double mean = sum / 4;
  double ss = 0;
  for (double x : d) ss += (x - mean) * (x - mean);
  const double se = std::sqrt(ss / 3) / 2;
  EXPECT_NEAR(row.test.delta, mean, 1e-12);
  EXPECT_NEAR(row.test.se, se, 1e-12);
  ASSERT_TRUE(row.test.has_interval);
  EXPECT_NEAR(row.test.ci_high, mean + 3.1824463 * se, 1e-6);  // t_{0.975, 3}
  EXPECT_LT(row.test.ci_high, 0.0);
  EXPECT_LT(row.p_adjusted, 0.05);
  EXPECT_EQ(row.left_out, 0);
  EXPECT_EQ(row.level_count.complete, 4);
}

TEST(CompareTest, NoEffectIsNotSeparated) {
  std::vector<TrialValue> v;
  const double a[4] = {2.31, 2.35, 2.29, 2.33}, b[4] = {2.34, 2.30, 2.32, 2.31};
  for (int s = 0; s < 4; ++s) {
    v.push_back(T("0.001", "1", s, a[s]));
    v.push_back(T("0.1", "1", s, b[s]));
  }
  auto r = Compare(v, Spec("optimizer.lr"));
  ASSERT_TRUE(r.ok());
  const ComparisonRow& row = r->rows[0];
  ASSERT_TRUE(row.test.has_interval);
  EXPECT_LT(row.test.ci_low, 0.0);
  EXPECT_GT(row.test.ci_high, 0.0);
  EXPECT_GT(row.p_adjusted, 0.05);
}

TEST(CompareTest, DivergedAndFailedSeedsAreCountedAndLeftOut) {
  std::vector<TrialValue> v = LargeEffect();
  v.push_back(T("0.1", "3", 1, 0, Outcome::kDiverged));  // seed 1 of lr 0.1 diverged once
  v.push_back(T("0.001", "3", 2, 0, Outcome::kFailed));  // seed 2 of the baseline failed
  v.push_back(T("0.1", "3", 3, 0, Outcome::kMissing));   // seed 3 still running
  auto r = Compare(v, Spec("optimizer.lr"));
  ASSERT_TRUE(r.ok());
  const ComparisonRow& row = r->rows[0];
  EXPECT_EQ(row.level_count.diverged, 1);
  EXPECT_EQ(row.level_count.missing, 1);
  EXPECT_EQ(row.baseline_count.failed, 1);
  EXPECT_EQ(row.test.n, 1);      // only seed 0 is complete on both sides
  EXPECT_EQ(row.left_out, 6);    // 4 + 4 seeds, 2 of them in the one pair
  EXPECT_FALSE(row.test.has_interval);
}

TEST(CompareTest, UnmatchedSeedsAreComparedUnpaired) {
  std::vector<TrialValue> v;
  for (int s = 0; s < 3; ++s) v.push_back(T("0.001", "1", s, 3.0 + 0.1 * s));
  for (int s = 10; s < 13; ++s) v.push_back(T("0.1", "1", s, 2.0 + 0.1 * (s - 10)));
  auto r = Compare(v, Spec("optimizer.lr"));
  ASSERT_TRUE(r.ok());
  const ComparisonRow& row = r->rows[0];
  EXPECT_FALSE(row.paired);
  EXPECT_EQ(row.test.test, "welch-t");
  EXPECT_NEAR(row.test.delta, -1.0, 1e-12);
  EXPECT_NEAR(row.mean, 2.1, 1e-12);
  EXPECT_NEAR(row.baseline_mean, 3.1, 1e-12);
}

TEST(CompareTest, CellsOfByAreComparedApartAndHolmSpansTheCall) {
  std::vector<TrialValue> v;
  for (int s = 0; s < 4; ++s) {
    for (const char* kind : {"fpa", "sagebwd"}) {
      const double shift = std::string(kind) == "fpa" ? -1.0 : -0.01 * (s % 2 ? 1 : -1);
      v.push_back(T("0.001", "1", s, 3.0 + 0.01 * s, Outcome::kOk, kind));
      v.push_back(T("0.1", "1", s, 3.0 + 0.01 * s + shift + 0.002 * s, Outcome::kOk, kind));
      v.push_back(T("1.0", "1", s, 3.0 + 0.02 * s, Outcome::kOk, kind));
    }
  }
  auto r = Compare(v, Spec("optimizer.lr", "", {"attention.kind"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 4u);
  EXPECT_EQ(r->rows[0].cell, std::vector<std::string>{"fpa"});
  EXPECT_EQ(r->rows[2].cell, std::vector<std::string>{"sagebwd"});
  EXPECT_EQ(r->rows[0].value, "0.1");
  EXPECT_EQ(r->rows[1].value, "1.0");
  std::vector<double> p;
  for (const auto& row : r->rows) p.push_back(row.test.p_value);
  const std::vector<double> adj = stats::Holm(p);
  for (size_t i = 0; i < adj.size(); ++i) EXPECT_DOUBLE_EQ(r->rows[i].p_adjusted, adj[i]) << i;
  EXPECT_LT(r->rows[0].p_adjusted, 0.05);  // fpa: lr 0.1 is 1.0 better
  EXPECT_GT(r->rows[2].p_adjusted, 0.05);  // sagebwd: no effect
}

TEST(CompareTest, ErrorsNameWhatIsWrong) {
  const std::vector<TrialValue> v = LargeEffect();
  auto bad = Compare(v, Spec("optimizer.beta"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("'optimizer.beta' is not an axis"), std::string::npos);
  EXPECT_NE(bad.status().ToString().find("optimizer.lr"), std::string::npos);  // lists the axes
  auto base = Compare(v, Spec("optimizer.lr", "0.5"));
  ASSERT_FALSE(base.ok());
  EXPECT_NE(base.status().ToString().find("levels: 0.001, 0.1"), std::string::npos)
      << base.status().ToString();
  auto twice = Compare(v, Spec("optimizer.lr", "", {"optimizer.lr"}));
  ASSERT_FALSE(twice.ok());
  EXPECT_FALSE(Compare(v, Spec("seed")).ok());
  auto by = Compare(v, Spec("optimizer.lr", "", {"model.depth"}));
  ASSERT_FALSE(by.ok());
  EXPECT_NE(by.status().ToString().find("'model.depth'"), std::string::npos);
}

// fpa is best at lr 0.1, sagebwd at lr 0.001 (each arm has its own best learning rate).
std::vector<TrialValue> TwoArmsTwoRates() {
  std::vector<TrialValue> v;
  const double noise[4] = {0.03, -0.02, 0.01, -0.04};
  for (int s = 0; s < 4; ++s) {
    v.push_back(T("0.1", "1", s, 2.0 + noise[s], Outcome::kOk, "fpa"));
    v.push_back(T("0.001", "1", s, 3.0 + noise[s], Outcome::kOk, "fpa"));
    v.push_back(T("0.1", "1", s, 3.5 - noise[s], Outcome::kOk, "sagebwd"));
    v.push_back(T("0.001", "1", s, 2.2 + 0.5 * noise[s], Outcome::kOk, "sagebwd"));
  }
  return v;
}

TEST(CompareTest, BestOverComparesEachLevelAtItsOwnBestValue) {
  CompareSpec spec = Spec("attention.kind");
  spec.best_over = "optimizer.lr";
  auto r = Compare(TwoArmsTwoRates(), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 1u);
  const ComparisonRow& row = r->rows[0];
  EXPECT_EQ(row.baseline, "fpa");
  EXPECT_EQ(row.baseline_best_value, "0.1");
  EXPECT_EQ(row.best_value, "0.001");
  EXPECT_TRUE(r->optimistic);  // chosen and tested on the same seeds
  EXPECT_EQ(row.test.n, 4);
  // By hand: sagebwd at 0.001 minus fpa at 0.1, seed by seed.
  const double noise[4] = {0.03, -0.02, 0.01, -0.04};
  double mean = 0;
  for (double e : noise) mean += (2.2 + 0.5 * e - (2.0 + e)) / 4;
  EXPECT_NEAR(row.test.delta, mean, 1e-12);
  EXPECT_NEAR(row.baseline_mean, 2.0 + (0.03 - 0.02 + 0.01 - 0.04) / 4, 1e-12);
  // Higher is better: each arm takes its other rate.
  spec.lower_is_better = false;
  auto hi = Compare(TwoArmsTwoRates(), spec);
  ASSERT_TRUE(hi.ok());
  EXPECT_EQ(hi->rows[0].baseline_best_value, "0.001");
  EXPECT_EQ(hi->rows[0].best_value, "0.1");
}

TEST(CompareTest, SelectSeedsChooseAndTheOthersTest) {
  CompareSpec spec = Spec("attention.kind");
  spec.best_over = "optimizer.lr";
  spec.select_seeds = {"0", "1"};
  auto r = Compare(TwoArmsTwoRates(), spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->optimistic);
  EXPECT_EQ(r->test_seeds, (std::vector<std::string>{"2", "3"}));
  const ComparisonRow& row = r->rows[0];
  EXPECT_EQ(row.best_value, "0.001");
  EXPECT_EQ(row.test.n, 2);  // only the test seeds pair
  EXPECT_FALSE(row.test.has_interval);
  EXPECT_NEAR(row.test.delta, ((2.2 + 0.005 - 2.01) + (2.2 - 0.02 - 1.96)) / 2, 1e-12);
}

TEST(CompareTest, BestOverSkipsAValueWhereASelectionSeedDiverged) {
  std::vector<TrialValue> v = TwoArmsTwoRates();
  for (TrialValue& t : v) {
    if (t.axes["attention.kind"] == "fpa" && t.axes["optimizer.lr"] == "0.1" && t.seed == "0") {
      t.outcome = Outcome::kDiverged;
    }
  }
  CompareSpec spec = Spec("attention.kind");
  spec.best_over = "optimizer.lr";
  auto r = Compare(v, spec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rows[0].baseline_best_value, "0.001");
  EXPECT_EQ(r->rows[0].baseline_count.diverged, 0);  // the diverged value was not chosen
}

// A sweep cut short by a deadline: its canceled trials are no result, so their seeds are left out
// (not counted as failed), and the best rate is chosen on the seeds every rate of the level has.
TEST(CompareTest, CanceledTrialsAreLeftOutAndRatesAreJudgedOnCommonSeeds) {
  std::vector<TrialValue> v = TwoArmsTwoRates();
  for (TrialValue& t : v) {
    if (t.seed == "3") t.outcome = Outcome::kCanceled;  // the deadline took seed 3 everywhere
    // ... and seed 2 of fpa at 0.001, which would make 0.001 look better on its seeds 0 and 1
    // (3.01, 2.98) than on all three: only common seeds are compared.
    if (t.seed == "2" && t.axes["attention.kind"] == "fpa" && t.axes["optimizer.lr"] == "0.001") {
      t.outcome = Outcome::kCanceled;
    }
  }
  CompareSpec spec = Spec("attention.kind");
  spec.best_over = "optimizer.lr";
  auto r = Compare(v, spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 1u);
  const ComparisonRow& row = r->rows[0];
  EXPECT_EQ(row.baseline_best_value, "0.1");
  EXPECT_EQ(row.best_value, "0.001");
  EXPECT_EQ(row.baseline_count.failed, 0);
  EXPECT_EQ(row.level_count.failed, 0);
  EXPECT_EQ(row.test.n, 3);  // seeds 0, 1, 2 at each chosen rate
  const double noise[3] = {0.03, -0.02, 0.01};
  double mean = 0;
  for (double e : noise) mean += (2.2 + 0.5 * e - (2.0 + e)) / 3;
  EXPECT_NEAR(row.test.delta, mean, 1e-12);
  // Without best_over a canceled seed is absent too, not failed.
  auto plain = Compare(v, Spec("attention.kind"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->rows[0].baseline_count.failed, 0);
}

// A rate that diverged on any selection seed is not chosen, even on a seed the others lack.
TEST(CompareTest, BestOverSkipsARateThatDivergedOnASeedTheOthersLack) {
  std::vector<TrialValue> v = TwoArmsTwoRates();
  for (TrialValue& t : v) {
    if (t.axes["attention.kind"] != "fpa") continue;
    if (t.axes["optimizer.lr"] == "0.001" && t.seed == "3") t.outcome = Outcome::kCanceled;
    if (t.axes["optimizer.lr"] == "0.1" && t.seed == "3") t.outcome = Outcome::kDiverged;
  }
  CompareSpec spec = Spec("attention.kind");
  spec.best_over = "optimizer.lr";
  auto r = Compare(v, spec);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rows[0].baseline_best_value, "0.001");
}

TEST(CompareTest, BestOverErrors) {
  const std::vector<TrialValue> v = TwoArmsTwoRates();
  CompareSpec spec = Spec("attention.kind");
  spec.best_over = "attention.kind";
  EXPECT_NE(Compare(v, spec).status().message().find("other than the factor"), std::string::npos);
  spec.best_over = "optimizer.beta";
  EXPECT_NE(Compare(v, spec).status().message().find("not an axis"), std::string::npos);
  spec.best_over = "";
  spec.select_seeds = {"0"};
  EXPECT_NE(Compare(v, spec).status().message().find("needs --best-over"), std::string::npos);
  spec.best_over = "optimizer.lr";
  spec.select_seeds = {"7"};
  EXPECT_NE(Compare(v, spec).status().message().find("seeds: 0, 1, 2, 3"), std::string::npos);
  spec.select_seeds = {"0", "1", "2", "3"};
  EXPECT_NE(Compare(v, spec).status().message().find("none is left"), std::string::npos);
}

TEST(CompareTest, MixedBuildsAreCountedPerLevel) {
  std::vector<TrialValue> v = LargeEffect();
  for (TrialValue& t : v) t.builds = {"0.4.0|abc|1"};
  v[0].builds = {"0.4.0|abc|1", "0.4.0|def|2"};  // resumed under another build
  auto r = Compare(v, Spec("optimizer.lr"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rows[0].baseline_count.builds, 2);
  EXPECT_EQ(r->rows[0].level_count.builds, 1);
}

TEST(CompareTest, LevelsSortNumerically) {
  EXPECT_TRUE(AxisValueLess("9", "10"));
  EXPECT_TRUE(AxisValueLess("1e-3", "0.01"));
  EXPECT_TRUE(AxisValueLess("10", "fpa"));
  EXPECT_FALSE(AxisValueLess("sagebwd", "fpa"));
}

}  // namespace
}  // namespace ablate::analysis
