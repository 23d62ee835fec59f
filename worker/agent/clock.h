// Clock: the agent's only source of time, so tests can drive batching, heartbeats and the
// cancel grace period without sleeping (STYLE.md, "inject the environment").
//
// Times are milliseconds on a monotonic scale with an arbitrary origin; only differences matter.
// Thread safety: implementations are safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace ablate::agent {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() = 0;
};

// The process-wide monotonic clock (std::chrono::steady_clock). Never null; not owned.
Clock* RealClock();

// A clock that moves only when told to.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 0) : now_ms_(start_ms) {}
  int64_t NowMs() override { return now_ms_.load(); }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }
  void SetMs(int64_t ms) { now_ms_ = ms; }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace ablate::agent
