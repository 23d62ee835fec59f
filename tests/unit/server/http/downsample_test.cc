#include "http/downsample.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ablate::server::http {
namespace {

std::vector<Point> Series(int n) {
  std::vector<Point> p;
  for (int i = 0; i < n; ++i) p.push_back({i, "loss", std::sin(i * 0.01) + 0.001 * i});
  return p;
}

TEST(Downsample, ShortSeriesUnchanged) {
  auto p = Series(100);
  auto d = DownsampleMinMax(p, 500);
  ASSERT_EQ(d.size(), 100u);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i].step, p[i].step);
}

TEST(Downsample, BoundedOrderedKeepsEndsAndExtremes) {
  auto p = Series(10000);
  p[4321].value = 100;   // a spike
  p[7777].value = -100;  // a dip
  auto d = DownsampleMinMax(p, 500);
  EXPECT_LE(d.size(), 500u);
  EXPECT_GE(d.size(), 400u);
  EXPECT_EQ(d.front().step, 0);
  EXPECT_EQ(d.back().step, 9999);
  for (size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i - 1].step, d[i].step);
  bool spike = false, dip = false;
  for (const auto& x : d) spike |= x.step == 4321, dip |= x.step == 7777;
  EXPECT_TRUE(spike);
  EXPECT_TRUE(dip);
}

TEST(Downsample, EachBucketKeepsItsMinAndMax) {
  std::vector<Point> p;
  // 2 + 4 buckets x 3 points: values chosen so min and max are known per bucket.
  p.push_back({0, "x", 0});
  double vals[] = {5, 1, 9, 2, 8, 3, 7, 7, 7, 4, 6, 0};
  for (int i = 0; i < 12; ++i) p.push_back({i + 1, "x", vals[i]});
  p.push_back({13, "x", 0});
  auto d = DownsampleMinMax(p, 10);  // 4 buckets of 3
  std::vector<int64_t> steps;
  for (const auto& x : d) steps.push_back(x.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 2, 3, 4, 5, 7, 11, 12, 13}));
}

TEST(Downsample, NanOnlyBucketKeepsAPoint) {
  std::vector<Point> p;
  for (int i = 0; i < 100; ++i) p.push_back({i, "x", i >= 50 ? NAN : 1.0 * i});
  auto d = DownsampleMinMax(p, 10);
  bool nan = false;
  for (const auto& x : d) nan |= std::isnan(x.value);
  EXPECT_TRUE(nan);
  EXPECT_LE(d.size(), 10u);
}

}  // namespace
}  // namespace ablate::server::http
