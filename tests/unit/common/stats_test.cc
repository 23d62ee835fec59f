// ablate/stats.h against values computed independently: t quantiles from published tables, the
// closed form of Student's t at two degrees of freedom (two-sided p = 1 - |t| / sqrt(t^2 + 2)),
// sign-flip p-values counted by hand, Holm worked through.
#include "ablate/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ablate::stats {
namespace {

TEST(StatsTest, SummaryIsTheSampleMeanSdAndSe) {
  const Summary s = Summarize({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_EQ(s.n, 8);
  EXPECT_DOUBLE_EQ(s.mean, 5.0);
  EXPECT_NEAR(s.sd, std::sqrt(32.0 / 7.0), 1e-12);
  EXPECT_NEAR(s.se, std::sqrt(32.0 / 7.0) / std::sqrt(8.0), 1e-12);
  const Summary one = Summarize({3.5});
  EXPECT_EQ(one.n, 1);
  EXPECT_EQ(one.sd, 0.0);
  EXPECT_EQ(Summarize({}).n, 0);
}

TEST(StatsTest, TQuantilesMatchTheTables) {
  EXPECT_NEAR(TCritical(1), 12.7062047, 1e-6);
  EXPECT_NEAR(TCritical(2), 4.3026527, 1e-6);
  EXPECT_NEAR(TCritical(4), 2.7764451, 1e-6);
  EXPECT_NEAR(TCritical(9), 2.2621572, 1e-6);
  EXPECT_NEAR(TCritical(9, 0.99), 3.2498355, 1e-6);
  EXPECT_NEAR(TTwoSidedP(TCritical(10), 10), 0.05, 1e-9);
  for (double t : {0.5, 1.0, 3.0, 10.0}) {
    EXPECT_NEAR(TTwoSidedP(t, 2), 1.0 - t / std::sqrt(t * t + 2.0), 1e-12) << t;
  }
}

TEST(StatsTest, PairedDifferencesByHand) {
  // d = a - b = {1, 2, 3}: mean 2, sd 1, se 1/sqrt(3), t = 2 sqrt(3), df 2.
  const Comparison c = Paired({11, 12, 13}, {10, 10, 10});
  EXPECT_EQ(c.test, "paired-t");
  EXPECT_EQ(c.n, 3);
  EXPECT_DOUBLE_EQ(c.delta, 2.0);
  EXPECT_NEAR(c.se, 1.0 / std::sqrt(3.0), 1e-12);
  const double t = 2.0 * std::sqrt(3.0);
  EXPECT_NEAR(c.p_value, 1.0 - t / std::sqrt(t * t + 2.0), 1e-12);
  ASSERT_TRUE(c.has_interval);
  EXPECT_NEAR(c.ci_low, 2.0 - 4.3026527 / std::sqrt(3.0), 1e-6);
  EXPECT_NEAR(c.ci_high, 2.0 + 4.3026527 / std::sqrt(3.0), 1e-6);
  // Of the 8 sign patterns of {1, 2, 3}, |sum| >= 6 for (+,+,+) and (-,-,-) only.
  EXPECT_DOUBLE_EQ(c.p_permutation, 0.25);
}

TEST(StatsTest, SignFlipCountsTiesAndNeverReachesZero) {
  // {1, 1, 1, 1}: 2 of 16 patterns reach |sum| 4.
  EXPECT_DOUBLE_EQ(Paired({1, 1, 1, 1}, {0, 0, 0, 0}).p_permutation, 2.0 / 16.0);
  // {1, -1}: |sum| >= 0 for every pattern.
  EXPECT_DOUBLE_EQ(Paired({1, 0}, {0, 1}).p_permutation, 1.0);
  // 24 pairs (sampled patterns): still a probability, small for a consistent shift.
  std::vector<double> a(24), b(24, 0.0);
  for (int i = 0; i < 24; ++i) a[i] = 1.0 + 0.01 * i;
  const double p = Paired(a, b).p_permutation;
  EXPECT_GT(p, 0.0);
  EXPECT_LT(p, 1e-5);
}

TEST(StatsTest, NoDifferenceIsNotAnError) {
  const Comparison same = Paired({1.5, 2.5, 3.5}, {1.5, 2.5, 3.5});
  EXPECT_EQ(same.delta, 0.0);
  EXPECT_EQ(same.p_value, 1.0);
  EXPECT_EQ(same.p_permutation, 1.0);
  ASSERT_TRUE(same.has_interval);
  EXPECT_EQ(same.ci_low, 0.0);
  EXPECT_EQ(same.ci_high, 0.0);
  const Comparison shift = Paired({2, 3, 4}, {1, 2, 3});  // +1 on every seed, no spread
  EXPECT_EQ(shift.p_value, 0.0);
  EXPECT_DOUBLE_EQ(shift.p_permutation, 0.25);
}

TEST(StatsTest, FewerThanThreePairsHaveNoInterval) {
  const Comparison two = Paired({1, 3}, {0, 1});
  EXPECT_EQ(two.n, 2);
  EXPECT_FALSE(two.has_interval);
  EXPECT_LT(two.p_value, 1.0);
  const Comparison one = Paired({1}, {0});
  EXPECT_FALSE(one.has_interval);
  EXPECT_EQ(one.p_value, 1.0);
}

TEST(StatsTest, WelchByHand) {
  // a = {1, 2, 3} (var 1), b = {2, 4, 6} (var 4): se^2 = 1/3 + 4/3, df = (5/3)^2 / ((1/3)^2 / 2 +
  // (4/3)^2 / 2) = 50/17.
  const Comparison c = Welch({1, 2, 3}, {2, 4, 6});
  EXPECT_EQ(c.test, "welch-t");
  EXPECT_DOUBLE_EQ(c.delta, -2.0);
  EXPECT_NEAR(c.se, std::sqrt(5.0 / 3.0), 1e-12);
  EXPECT_NEAR(c.df, 50.0 / 17.0, 1e-12);
  EXPECT_NEAR(c.p_value, TTwoSidedP(2.0 / std::sqrt(5.0 / 3.0), 50.0 / 17.0), 1e-15);
  ASSERT_TRUE(c.has_interval);
  EXPECT_NEAR(c.ci_high - c.ci_low, 2.0 * TCritical(50.0 / 17.0) * std::sqrt(5.0 / 3.0), 1e-12);
  EXPECT_FALSE(Welch({1, 2}, {3, 4, 5}).has_interval);
}

TEST(StatsTest, HolmStepDown) {
  const std::vector<double> adj = Holm({0.01, 0.04, 0.03});
  ASSERT_EQ(adj.size(), 3u);
  EXPECT_NEAR(adj[0], 0.03, 1e-15);  // 3 x 0.01
  EXPECT_NEAR(adj[2], 0.06, 1e-15);  // 2 x 0.03
  EXPECT_NEAR(adj[1], 0.06, 1e-15);  // 1 x 0.04, raised to keep the order
  EXPECT_EQ(Holm({0.5, 0.9})[1], 1.0);  // capped
  EXPECT_TRUE(Holm({}).empty());
}

}  // namespace
}  // namespace ablate::stats
