// Learning-rate and spectral-power schedules: pure functions of the step.
#pragma once

#include <string>

namespace ablate::trainer {

// Multiplier of the peak learning rate at optimizer step `step` (1-based) of `steps`.
// Warm-up rises linearly from 1/warmup to 1 over the first `warmup` steps; then
//   cosine:   floor + (1 - floor) * (1 + cos(pi * x)) / 2, x = progress after warm-up in [0, 1]
//   linear:   floor + (1 - floor) * (1 - x)
//   wsd:      1 until the last decay_fraction of the steps, then linear to floor
//   constant: 1
// floor = min_lr_ratio.
double LrMultiplier(const std::string& schedule, int step, int steps, int warmup,
                    double min_lr_ratio, double decay_fraction);

// Spectral power at step `step` (1-based) of `steps`: p_start for constant, else moving from p_start
// to p_end linearly or along a half cosine.
double PowerAt(const std::string& p_schedule, int step, int steps, double p_start, double p_end);

}  // namespace ablate::trainer
