// Clock: the one source of time of the coordinator, the store and the worker agent, so tests can
// drive leases, batching, heartbeats and grace periods without sleeping (inject the environment).
//
// Two scales: MonotonicMs (steady, arbitrary origin; only differences matter: intervals and
// deadlines) and UnixSeconds (the wall clock: timestamps that are stored or shown).
// Thread safety: every implementation is safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace ablate {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t MonotonicMs() const = 0;
  virtual double UnixSeconds() const = 0;
};

// The process-wide clock (std::chrono::steady_clock and system_clock). Never null; not owned, never
// destroyed (threads may outlive main).
const Clock* SystemClock();

// A clock that moves only when told to; both scales move together.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t monotonic_ms = 0, double unix_seconds = 1.7e9)
      : monotonic_ms_(monotonic_ms), unix_seconds_(unix_seconds) {}
  int64_t MonotonicMs() const override { return monotonic_ms_.load(); }
  double UnixSeconds() const override { return unix_seconds_.load(); }

  void AdvanceMs(int64_t ms);
  void AdvanceSeconds(double s);
  void SetMonotonicMs(int64_t ms) { monotonic_ms_ = ms; }
  void SetUnixSeconds(double s) { unix_seconds_ = s; }

 private:
  std::atomic<int64_t> monotonic_ms_;
  std::atomic<double> unix_seconds_;
};

}  // namespace ablate
