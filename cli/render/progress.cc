#include "render/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ablate::cli {

std::string ProgressBar(double fraction, int width, bool unicode) {
  if (width < 1) width = 1;
  if (!std::isfinite(fraction)) fraction = 0;
  fraction = std::clamp(fraction, 0.0, 1.0);
  std::string bar = "[";
  if (unicode) {
    static const char* kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    const int eighths = static_cast<int>(std::floor(fraction * width * 8));
    const int full = eighths / 8;
    for (int i = 0; i < full; ++i) bar += "█";
    int used = full;
    if (full < width && eighths % 8 != 0) {
      bar += kEighths[eighths % 8];
      ++used;
    }
    bar.append(width - used, ' ');
  } else {
    const int full = static_cast<int>(std::floor(fraction * width));
    bar.append(full, '#');
    bar.append(width - full, '-');
  }
  return bar + "]";
}

std::string FormatPercent(double fraction) {
  if (!std::isfinite(fraction)) return "-";
  fraction = std::clamp(fraction, 0.0, 1.0);
  // The small epsilon keeps 0.29 * 100 = 28.999... from showing as 28%.
  return std::to_string(static_cast<int>(std::floor(fraction * 100 + 1e-9))) + "%";
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const long long s = static_cast<long long>(std::llround(seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  }
  return buf;
}

std::string FormatAge(double now, double then) {
  if (then <= 0 || !std::isfinite(then)) return "never";
  const double age = now - then;
  if (!(age >= 1)) return "just now";
  const long long s = static_cast<long long>(age);
  if (s < 60) return std::to_string(s) + "s ago";
  if (s < 3600) return std::to_string(s / 60) + "m ago";
  if (s < 86400) return std::to_string(s / 3600) + "h ago";
  return std::to_string(s / 86400) + "d ago";
}

void EtaEstimator::Add(double t, double done, double total) {
  total_ = total;
  if (!samples_.empty() && (done < samples_.back().second || t < samples_.back().first)) {
    samples_.clear();
  }
  samples_.emplace_back(t, done);
  // Keep one sample at or before the window's start so the rate spans the whole window.
  while (samples_.size() > 2 && samples_[1].first <= t - window_s_) samples_.pop_front();
}

std::optional<double> EtaEstimator::Rate() const {
  if (samples_.size() < 2) return std::nullopt;
  const auto& [t0, d0] = samples_.front();
  const auto& [t1, d1] = samples_.back();
  if (t1 - t0 < 1 || d1 <= d0) return std::nullopt;
  return (d1 - d0) / (t1 - t0);
}

std::optional<double> EtaEstimator::SecondsLeft() const {
  if (samples_.empty()) return std::nullopt;
  const double left = total_ - samples_.back().second;
  if (left <= 0) return 0.0;
  std::optional<double> rate = Rate();
  if (!rate) return std::nullopt;
  return left / *rate;
}

}  // namespace ablate::cli
