// The separated best of the ablation table: marked only when its 95% interval is apart from every
// other cell's.
#include "analysis/results.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ablate::analysis {
namespace {

server::ResultRow R(double mean, double lo, double hi, int n = 3) {
  server::ResultRow r;
  r.n = n;
  r.trials = n;
  r.mean = mean;
  r.ci_low = lo;
  r.ci_high = hi;
  return r;
}

TEST(SeparatedBest, MarkedOnlyWhenItsIntervalIsApart) {
  // The case: 2.3370 ± 0.0003 beside 2.3371 ± 0.0004 is not a best.
  EXPECT_EQ(SeparatedBest({R(2.3371, 2.3361, 2.3381), R(2.3370, 2.3362, 2.3378)}, true), -1);
  EXPECT_EQ(SeparatedBest({R(2.5, 2.45, 2.55), R(2.3, 2.25, 2.35), R(2.6, 2.5, 2.7)}, true), 1);
  EXPECT_EQ(SeparatedBest({R(2.5, 2.45, 2.55), R(2.3, 2.25, 2.35)}, false), 0);  // higher wins
  // Touching intervals do not separate.
  EXPECT_EQ(SeparatedBest({R(2.5, 2.35, 2.55), R(2.3, 2.25, 2.35)}, true), -1);
}

TEST(SeparatedBest, CellsWithoutIntervalsOrValues) {
  const double nan = NAN;
  // Another cell with one value (no interval): nothing can be said against it.
  EXPECT_EQ(SeparatedBest({R(2.3, 2.25, 2.35), R(2.9, nan, nan, 1)}, true), -1);
  // Cells without values are ignored.
  server::ResultRow empty;
  empty.mean = nan;
  EXPECT_EQ(SeparatedBest({R(2.3, 2.25, 2.35), empty, R(2.9, 2.8, 3.0)}, true), 0);
  // A single cell is best of nothing.
  EXPECT_EQ(SeparatedBest({R(2.3, 2.25, 2.35)}, true), -1);
  EXPECT_EQ(SeparatedBest({}, true), -1);
}

TEST(LowerIsBetter, LossesErrorsAndTimes) {
  EXPECT_TRUE(LowerIsBetter("final_val_loss"));
  EXPECT_TRUE(LowerIsBetter("val_bpb"));
  EXPECT_TRUE(LowerIsBetter("step_time_s"));
  EXPECT_FALSE(LowerIsBetter("tokens_per_s"));
  EXPECT_FALSE(LowerIsBetter("mfu"));
}

}  // namespace
}  // namespace ablate::analysis
