#include "ablate/clock.h"

#include <chrono>
#include <cmath>

namespace ablate {
namespace {

class RealClock final : public Clock {
 public:
  int64_t MonotonicMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  double UnixSeconds() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

const Clock* SystemClock() {
  static const RealClock* clock = new RealClock();
  return clock;
}

void FakeClock::AdvanceMs(int64_t ms) {
  monotonic_ms_ += ms;
  unix_seconds_ = unix_seconds_.load() + double(ms) / 1000.0;
}

void FakeClock::AdvanceSeconds(double s) {
  monotonic_ms_ += int64_t(std::llround(s * 1000.0));
  unix_seconds_ = unix_seconds_.load() + s;
}

}  // namespace ablate
