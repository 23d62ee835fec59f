// Progress bars, durations, ages and the ETA estimate used by `ablate watch` and the listings.
// Thread safety: functions are pure; an EtaEstimator is used by one thread.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <utility>

namespace ablate::cli {

// A bar `width` columns wide between brackets, e.g. "[#####-----]" (ASCII, for logs and dumb
// terminals) or "[█████▍    ]" (Unicode eighth blocks). `fraction` is clamped to [0, 1]; NaN
// draws an empty bar.
std::string ProgressBar(double fraction, int width, bool unicode);

// "45%": floored, so a bar shows 100% only when everything is done.
std::string FormatPercent(double fraction);

// "42s", "3m05s", "2h03m", "3d04h"; "-" for a negative or non-finite value.
std::string FormatDuration(double seconds);

// "5s ago", "3m ago", "2h ago", "4d ago", "just now" for < 1 s (and clock skew into the future);
// "never" when `then` is 0.
std::string FormatAge(double now, double then);

// Estimates the time left from the rate at which work (steps or trials) gets done, measured over a
// sliding window of recent samples. Work going backwards (a lost attempt resuming from an earlier
// checkpoint) restarts the measurement.
class EtaEstimator {
 public:
  explicit EtaEstimator(double window_s = 300) : window_s_(window_s) {}

  // `done` of `total` work units at time `t` (seconds; non-decreasing).
  void Add(double t, double done, double total);
  // Work units per second; none until some work was done over at least a second.
  std::optional<double> Rate() const;
  // Seconds until `total`; 0 when done; none while the rate is unknown.
  std::optional<double> SecondsLeft() const;

 private:
  double window_s_;
  std::deque<std::pair<double, double>> samples_;  // (t, done), oldest first
  double total_ = 0;
};

}  // namespace ablate::cli
