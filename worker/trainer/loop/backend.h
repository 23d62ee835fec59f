// The compute backend behind RunTrial: the model, its gradients and the optimizer on one device.
// RunTrial (train_loop.h) owns the data, the schedule, the metrics lines, evaluation, checkpoints
// and divergence; a backend does the arithmetic. The CPU backend (train_loop.cc) wraps Gpt<float>
// and Optimizer; the CUDA backend (worker/trainer/cuda/, linked into ablate-train when CUDA is
// built) registers itself with RegisterTrainBackend("cuda", ...) before RunTrial is called.
//
// Call order per step: ZeroGrad, then TrainMicroStep once per micro-batch, TakeTrainLoss,
// GradNormAndClip, OptimizerStep; then optionally Diagnostics (needs the step's last micro-batch
// activations), EvalLoss (may clobber them) and the Save* calls. Thread safety: one thread.
// Data parallel (gpus: k > 1): the loop still makes one TrainMicroStep call per micro-batch of the
// global batch, accumulation_steps() x k calls with grad_scale 1 / (that count); the backend
// assigns call i to rank i / accumulation_steps() and reduces across ranks in GradNormAndClip.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ablate/gemm_tuning.h"
#include "ablate/status.h"
#include "ablate/trial_config.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/optimizer.h"

namespace ablate::trainer {

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;

  virtual size_t num_params() const = 0;
  virtual double FlopsPerToken() const = 0;
  // The peak FLOP/s used for MFU when train.peak_tflops is 0, and how it was obtained.
  virtual std::pair<double, std::string> PeakFlops() const = 0;
  // Backend-specific keys of the start line ("backend", "threads" or "device", ...).
  virtual nlohmann::json StartInfo() const = 0;
  // The device memory this process holds for the trial (per rank; 0 for the CPU backend): what it
  // allocated plus the context allowance (ablate/memory_estimate.h). Reported as
  // gpu_mem_peak_bytes so the GPU-sharing placement can use it instead of the estimate.
  virtual int64_t DeviceMemoryBytes() const { return 0; }
  virtual size_t optimizer_state_bytes() const = 0;
  virtual size_t optimizer_state_bytes_fp32() const = 0;
  virtual int spectral_tensors() const = 0;

  virtual Status ZeroGrad() = 0;
  // Forward + backward of one micro-batch ((mb, seq_len) host tokens) with grads += grad_scale *
  // dLoss/dW; its loss goes into the running sum that TakeTrainLoss returns.
  virtual Status TrainMicroStep(const int32_t* inputs, const int32_t* targets, int mb,
                                float grad_scale) = 0;
  // The sum of the micro-batch losses since the last call (double sum of the float losses).
  virtual StatusOr<double> TakeTrainLoss() = 0;
  // The global gradient L2 norm before clipping; clips to max_norm when max_norm > 0 and the norm
  // exceeds it (grads *= float(max_norm / norm)).
  virtual StatusOr<double> GradNormAndClip(double max_norm) = 0;
  virtual Status OptimizerStep(int64_t step, double lr_scale, double p, OptimizerStats* stats) = 0;
  virtual StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int mb) = 0;
  virtual StatusOr<std::vector<Gpt<float>::LayerDiagnostics>> Diagnostics() = 0;
  // The backend's step profiler (ablate-train --profile; trainer/model/step_profile.h), made on
  // the first call and owned by the backend; the model and the backend mark on it while it is
  // active. Unimplemented where the backend has none.
  virtual StatusOr<StepProfiler*> StepProfile() {
    return Unimplemented(
        "--profile: this backend has no step profiler (data parallel, gpus > 1: profile one GPU)");
  }

  // GEMM tuning (common/ablate/gemm_tuning.h): SetGemmTuning replays a table for every GEMM
  // from now on (null: the heuristic's algorithms; FailedPrecondition, and no table, where it was
  // measured on another device or cuBLASLt); TuneGemms times cuBLASLt's candidates for every GEMM
  // problem the backend has run so far and returns the table; GemmTuningUse says how many of the
  // problems set up since SetGemmTuning used the table ({"gemm_problems", "gemm_tuned",
  // "gemm_rejected"}; null without a table). Unimplemented where the backend has no cuBLASLt GEMMs
  // (the CPU backend).
  virtual Status SetGemmTuning(std::shared_ptr<const GemmTuning> tuning) {
    (void)tuning;
    return Unimplemented("GEMM tuning: only the CUDA backend has cuBLASLt GEMMs to tune");
  }
  virtual StatusOr<GemmTuning> TuneGemms(int candidates, int reps, double min_gain) {
    (void)candidates, (void)reps, (void)min_gain;
    return Unimplemented("GEMM tuning: only the CUDA backend has cuBLASLt GEMMs to tune");
  }
  virtual nlohmann::json GemmTuningUse() const { return nullptr; }

  // Checkpoint sections: the fp32 weights in the Gpt layout, and the optimizer blob (the same bytes
  // on every backend, so a checkpoint resumes on either).
  virtual StatusOr<std::string> SaveWeights() = 0;
  virtual StatusOr<std::string> SaveOptimizer() = 0;
  virtual Status LoadWeights(const std::string& bytes) = 0;
  virtual Status LoadOptimizer(const std::string& blob) = 0;
};

// Builds a backend for `config` around the initialized CPU model (its weights are the seed's
// initialization; a device backend copies them and may drop the model afterwards).
using TrainBackendFactory = std::function<StatusOr<std::unique_ptr<TrainBackend>>(
    const config::TrialConfig& config, Gpt<float> model)>;

// Makes `device` (the trial config's device value, e.g. "cuda") available to RunTrial. Not
// thread-safe; call from main before any RunTrial.
void RegisterTrainBackend(const std::string& device, TrainBackendFactory factory);
bool HaveTrainBackend(const std::string& device);

}  // namespace ablate::trainer
