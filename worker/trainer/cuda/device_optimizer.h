// The trainer's optimizers on the GPU: a device twin of trainer::Optimizer (optim/optimizer.h).
// This class (host code) owns the groups, the state arena and the work space, and drives the
// kernels of kernels/: optim/cuda/optim_cuda.h (the update kernels, twins of the per-element rules
// of optim/optim_cpu.h) and spectral/cuda/spectral_cuda.h (batched Psi_p).
//
// Same groups, same semantics, same Save() blob (a checkpoint's optimizer state loads on either
// backend):
//   AdamW group     one fused kernel over every AdamW tensor (2048-value chunks, decoupled weight
//                   decay on matrices, bias correction). fp32 state reproduces the CPU bit for bit
//                   (the kernel rounds every operation as the CPU expression does, no FMA
//                   contraction); so does 8-bit state (kernels/quant's code tables, thresholds and
//                   round-half-even, uploaded from the CPU library).
//   spectral group  a direction kernel (rms: the bias-corrected Adam direction; momentum: B and its
//                   Nesterov variant) writes every hidden matrix into a batch buffer, Psi_p runs
//                   batched over same-shape matrices (BatchedPsi: Newton-Schulz for p = 0, the
//                   coupled Newton chain for dyadic p, cuSOLVER syevd for general p), an apply
//                   kernel does W <- W (1 - lr wd) - lr s Psi_p(U) (s = sqrt(max(1, rows/cols)) at
//                   p = 0).
// Psi_p is not bitwise equal to the CPU (GEMM summation order); tests/gpu/worker/trainer/
// optim_gpu_test.cc states the bounds.
// TF32 (optimizer.tf32): the spectral GEMMs use TF32 tensor cores; psi_route then ends in "+tf32".
//
// Synchronization: Step enqueues everything on the stream given at Create and returns without
// waiting, unless `stats` is non-null (then it waits once at the end of the step to fill stats;
// newton_residual is computed only then, it costs one extra GEMM per coupled-Newton call). The eigh
// route (general p) calls cuSOLVER, which may synchronize internally, and its failure (info != 0)
// is reported only by a Step with stats (or never: the update then holds NaN, which the training
// loop's loss check sees). Save/Load synchronize the stream.
//
// Memory: state_bytes() (as on the CPU: m and v, or B; 8-bit for matrices with state_bits 8) plus
// workspace_bytes(): the direction and update batches (2 floats per spectral value) and the Psi
// work space (about 6 r x r floats per spectral matrix, r its short side).
//
// Thread safety: not thread-safe; one optimizer per training loop, used from one host thread.
// Errors: Create fails with Internal for a tensor outside the buffer (the CPU's message),
// InvalidArgument for state_bits other than 8/32 or an empty shape, Internal for CUDA, cuBLAS and
// cuSOLVER failures (a failed allocation names its bytes).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ablate/status.h"
#include "ablate/trial_config.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/optimizer.h"

namespace ablate::trainer::cuda {

class DeviceOptimizer {
 public:
  // params: the model's tensors (roles decide the groups, as on the CPU); num_params: the length of
  // the flat weight/gradient buffers. stream: where every kernel runs (may be 0, the legacy default
  // stream). Allocates all state and work space now (zeroed state).
  static StatusOr<std::unique_ptr<DeviceOptimizer>> Create(const config::OptimizerSection& cfg,
                                                           const std::vector<ParamTensor>& params,
                                                           size_t num_params, cudaStream_t stream);
  ~DeviceOptimizer();
  DeviceOptimizer(const DeviceOptimizer&) = delete;
  DeviceOptimizer& operator=(const DeviceOptimizer&) = delete;

  // One update. d_weights: (num_params) fp32 device, updated in place; d_grads: (num_params) fp32
  // device, already clipped. step: 1-based (bias correction); lr_scale: the schedule's multiplier;
  // p: this step's spectral power. Errors (before anything is enqueued): InvalidArgument for a p
  // outside [-1, 1] or one the configured psi_method cannot produce (as the CPU's Psi), null
  // pointers, step < 1; Internal for a failed launch, and (with stats) a failed eigendecomposition.
  Status Step(float* d_weights, const float* d_grads, int64_t step, double lr_scale, double p,
              OptimizerStats* stats);

  // A bf16 mirror of the weights (device, num_params values, the flat layout), or null (the
  // default) for none. While set, every Step also writes bf16(w) (round to nearest even) of every
  // value it updates, from the kernels that write w, which is every tensor: the AdamW kernel and
  // the spectral apply kernel. The caller can then skip its own fp32 -> bf16 pass (GptCuda's
  // WeightsUpdated) after a Step. The fp32 results do not change. Enqueues nothing.
  void SetBf16Mirror(void* d_mirror);

  size_t state_bytes() const;       // device bytes of optimizer state (same count as the CPU's)
  size_t state_bytes_fp32() const;  // what the same state costs in fp32
  size_t workspace_bytes() const;   // device scratch besides the state (see Memory above)
  int spectral_tensors() const;     // tensors in the spectral group

  // Serialized state, byte-identical in layout to trainer::Optimizer::Save (synchronizes). Empty
  // when the device copy fails (Load of that then fails with DataLoss).
  std::string Save() const;
  // Accepts a blob from either backend with this layout; DataLoss (the CPU's messages) otherwise.
  Status Load(const std::string& blob);

  struct Impl;

 private:
  explicit DeviceOptimizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ablate::trainer::cuda
