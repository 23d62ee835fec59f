#include "trainer/loop/schedule.h"

#include <algorithm>
#include <cmath>

namespace ablate::trainer {

double LrMultiplier(const std::string& schedule, int step, int steps, int warmup,
                    double min_lr_ratio, double decay_fraction) {
  if (warmup > 0 && step <= warmup) return double(step) / warmup;
  if (schedule == "constant") return 1.0;
  const double floor = min_lr_ratio;
  if (schedule == "wsd") {
    int decay_steps = std::max(1, int(std::lround(decay_fraction * steps)));
    int decay_start = steps - decay_steps;
    if (step <= decay_start) return 1.0;
    double x = double(step - decay_start) / decay_steps;
    return floor + (1.0 - floor) * (1.0 - std::min(1.0, x));
  }
  int span = std::max(1, steps - warmup);
  double x = std::clamp(double(step - warmup) / span, 0.0, 1.0);
  if (schedule == "linear") return floor + (1.0 - floor) * (1.0 - x);
  return floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(M_PI * x));  // cosine
}

double PowerAt(const std::string& p_schedule, int step, int steps, double p_start, double p_end) {
  if (p_schedule == "constant" || steps <= 1) return p_start;
  double x = std::clamp(double(step - 1) / (steps - 1), 0.0, 1.0);
  if (p_schedule == "cosine") x = 0.5 * (1.0 - std::cos(M_PI * x));
  return p_start + (p_end - p_start) * x;
}

}  // namespace ablate::trainer
