#include "agent/clock.h"

#include <chrono>

namespace ablate::agent {
namespace {

class SteadyClock : public Clock {
 public:
  int64_t NowMs() override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

Clock* RealClock() {
  static SteadyClock* clock = new SteadyClock();  // never destroyed: threads may outlive main
  return clock;
}

}  // namespace ablate::agent
