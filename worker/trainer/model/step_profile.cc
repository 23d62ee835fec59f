// See step_profile.h.
#include "trainer/model/step_profile.h"

#include <string>

namespace ablate::trainer {

const char* StepPhaseName(StepPhase p) {
  switch (p) {
    case StepPhase::kHost:
      return "host";
    case StepPhase::kCopy:
      return "copy";
    case StepPhase::kEmbedding:
      return "embedding";
    case StepPhase::kNormRope:
      return "norm_rope";
    case StepPhase::kGemm:
      return "gemm";
    case StepPhase::kAttentionForward:
      return "attention_fwd";
    case StepPhase::kAttentionBackward:
      return "attention_bwd";
    case StepPhase::kElementwise:
      return "elementwise";
    case StepPhase::kLoss:
      return "loss";
    case StepPhase::kGradNorm:
      return "grad_norm";
    case StepPhase::kOptimizer:
      return "optimizer";
    case StepPhase::kCount:
      break;
  }
  return "?";
}

std::string StepPhaseMetric(StepPhase p) {
  return std::string("profile.") + StepPhaseName(p) + "_ms";
}

void PhaseLedger::Close(double t) {
  if (!open_) return;
  seconds_[static_cast<int>(open_phase_)] += t - open_t_;
  if (open_between_) {
    between_s_ += t - open_t_;
    ++between_intervals_;
  }
}

void PhaseLedger::Mark(StepPhase p, double t) {
  Close(t);
  open_ = true;
  open_between_ = false;
  open_phase_ = p;
  open_t_ = t;
}

void PhaseLedger::EndStep(double t) {
  Mark(StepPhase::kHost, t);
  open_between_ = true;
  ++steps_;
}

nlohmann::json PhaseLedger::ToJson() const {
  constexpr int kHost = static_cast<int>(StepPhase::kHost);
  const double between_ms = between_intervals_ > 0 ? 1e3 * between_s_ / between_intervals_ : 0.0;
  std::array<double, static_cast<int>(StepPhase::kCount)> ms{};
  double total = 0;
  for (int i = 0; i < static_cast<int>(StepPhase::kCount); ++i) {
    const double inside = i == kHost ? seconds_[i] - between_s_ : seconds_[i];
    ms[i] = steps_ > 0 ? 1e3 * inside / steps_ : 0.0;
    if (i == kHost) ms[i] += between_ms;
    total += ms[i];
  }
  nlohmann::json j = {{"profile.steps", steps_},
                      {"profile.step_ms", total},
                      {"profile.between_steps_ms", between_ms}};
  for (int i = 0; i < static_cast<int>(StepPhase::kCount); ++i) {
    j[StepPhaseMetric(static_cast<StepPhase>(i))] = ms[i];
  }
  return j;
}

void HostStepProfiler::Record(StepPhase p) { ledger_.Mark(p, Now()); }

Status HostStepProfiler::EndStep() {
  ledger_.EndStep(Now());
  return Status::Ok();
}

double HostStepProfiler::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

}  // namespace ablate::trainer
