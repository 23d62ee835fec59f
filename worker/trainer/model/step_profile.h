// Where a training step's time goes, by kind of work (ablate-train --profile N; docs/bench/
// gpu_train.md). The model and the backend mark where each kind of work starts; the time until
// the next mark counts to it. The CPU backend marks on the host clock (HostStepProfiler, below);
// the CUDA backend records CUDA events on the model's stream (trainer/cuda/step_profile_cuda.h),
// so its figures are the device's timeline: a phase includes the time the device waited for the
// host to launch its work, and "host" is the time the device waited for the loop itself (the
// batches, the metrics, the synchronizations).
//
// Cost: one clock read or one cudaEventRecord per mark (about 30 per layer and step, forward and
// backward); ablate-train --profile reports the profiled steps' own tokens/s beside the profile.
#pragma once

#include <array>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "ablate/status.h"

namespace ablate::trainer {

enum class StepPhase : int {
  kHost = 0,           // the loop's work between the model's (batches, metrics, syncs)
  kCopy,               // host -> device uploads of the batch
  kEmbedding,          // token embedding, forward and backward
  kNormRope,           // RMSNorms, the QKV split / QK-norm / RoPE chain, the heads' merge
  kGemm,               // every matrix product (with its fused epilogue), forward and backward
  kAttentionForward,   // the attention kernel's forward
  kAttentionBackward,  // the attention kernel's backward
  kElementwise,        // activations outside GEMM epilogues, residual adds, casts, zeroing
  kLoss,               // softmax cross-entropy and the loss sums
  kGradNorm,           // the gradient norm and clipping
  kOptimizer,          // the optimizer step (and the bf16 weight mirror it refreshes)
  kCount
};

// "host", "copy", "embedding", "norm_rope", "gemm", "attention_fwd", "attention_bwd",
// "elementwise", "loss", "grad_norm", "optimizer".
const char* StepPhaseName(StepPhase p);
// The metric a profile line gives the kind's time per step under: "profile.<name>_ms".
std::string StepPhaseMetric(StepPhase p);

// The accounting, on timestamps given to it (seconds, non-decreasing): Mark(p, t) closes the open
// phase at t and opens p; EndStep(t) ends a step at t and opens the host phase between it and the
// next step's first mark. Break() forgets the open phase (the time until the next mark counts
// nowhere: the loop did something the profile leaves out, such as an evaluation).
class PhaseLedger {
 public:
  void Mark(StepPhase p, double t);
  void EndStep(double t);
  void Break() { open_ = false; }
  int steps() const { return steps_; }
  double seconds(StepPhase p) const { return seconds_[static_cast<int>(p)]; }
  // Flat numbers (each becomes a stored metric of the trial): "profile.steps" (n),
  // "profile.<kind>_ms" (each kind's time per profiled step, kinds as StepPhaseName),
  // "profile.step_ms" (their sum) and "profile.between_steps_ms". The host kind is its time inside
  // the steps per step plus the time between steps per closed interval between them (the last
  // step's is still open), which is also given alone as between_steps_ms.
  nlohmann::json ToJson() const;

 private:
  void Close(double t);
  std::array<double, static_cast<int>(StepPhase::kCount)> seconds_{};
  double between_s_ = 0;  // the part of seconds_[kHost] between steps
  int between_intervals_ = 0;
  bool open_ = false;
  bool open_between_ = false;  // the open phase is a between-steps host phase
  StepPhase open_phase_ = StepPhase::kHost;
  double open_t_ = 0;
  int steps_ = 0;
};

// What the model and the backends mark. Inactive (the default) marks are no-ops; RunTrial
// activates the profiler for the steps it profiles.
class StepProfiler {
 public:
  virtual ~StepProfiler() = default;
  void Mark(StepPhase p) {
    if (active_) Record(p);
  }
  // Activates the marks (Pause deactivates them and breaks the open phase).
  void Resume() { active_ = true; }
  void Pause() {
    active_ = false;
    ledger_.Break();
  }
  // The step's work is all issued: opens the host phase and counts the step (a device profiler
  // waits for the device's timestamps here and folds them into the ledger).
  virtual Status EndStep() = 0;
  const PhaseLedger& ledger() const { return ledger_; }

 protected:
  virtual void Record(StepPhase p) = 0;
  PhaseLedger ledger_;

 private:
  bool active_ = false;
};

inline void ProfileMark(StepProfiler* p, StepPhase phase) {
  if (p != nullptr) p->Mark(phase);
}

// The CPU backend's: the host's steady clock.
class HostStepProfiler final : public StepProfiler {
 public:
  Status EndStep() override;

 private:
  void Record(StepPhase p) override;
  double Now() const;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace ablate::trainer
