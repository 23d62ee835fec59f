// ablate/clock.h: the system clock's two scales and the fake clock tests drive.
#include "ablate/clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace ablate {
namespace {

TEST(Clock, SystemClockMovesForwardOnBothScales) {
  const Clock* c = SystemClock();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c, SystemClock());  // one process-wide instance
  const int64_t m0 = c->MonotonicMs();
  const double u0 = c->UnixSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(c->MonotonicMs() - m0, 19);
  EXPECT_GT(c->UnixSeconds(), u0);
  EXPECT_GT(u0, 1.6e9);  // after 2020: seconds since the epoch, not milliseconds
  EXPECT_LT(u0, 1e10);
}

TEST(Clock, FakeClockMovesOnlyWhenTold) {
  FakeClock c(1000, 2000.0);
  EXPECT_EQ(c.MonotonicMs(), 1000);
  EXPECT_DOUBLE_EQ(c.UnixSeconds(), 2000.0);
  c.AdvanceMs(1500);
  EXPECT_EQ(c.MonotonicMs(), 2500);
  EXPECT_DOUBLE_EQ(c.UnixSeconds(), 2001.5);
  c.AdvanceSeconds(0.25);
  EXPECT_EQ(c.MonotonicMs(), 2750);
  EXPECT_DOUBLE_EQ(c.UnixSeconds(), 2001.75);
  c.SetUnixSeconds(5);
  c.SetMonotonicMs(7);
  EXPECT_DOUBLE_EQ(c.UnixSeconds(), 5);
  EXPECT_EQ(c.MonotonicMs(), 7);
}

}  // namespace
}  // namespace ablate
