// Attention diagnostics on the device (kernels/ALGORITHMS.md §3): one layer's SageBwd-vs-FPA shadow errors,
// computed without leaving the GPU except for the final 6-number sums per tensor.
//
//   o, dq, dk, dv  the SageBwd CUDA kernels (forward + backward, the model's AttnOptions) against
//                  the FPA CUDA kernels on the same q, k, v and dO (x = sage, y = fpa).
//   p, ds          the backward's P and dS, (B, H, T, T) causal, never materialized: one kernel
//                  recomputes, per (query, key) pair, the SageBwd emulator's values (the int8
//                  operands quantized exactly as attention_cpu.h specifies, at the kernel's 64 x 64
//                  tiles, with the SageBwd kernel's LSE and O) and the exact ones (fp32 dot products
//                  of the bf16 q, k, v, dO with the FPA kernel's LSE and O), and accumulates the
//                  ErrorStats sums in double.
//   max_logit      max over the whole batch and the causal triangle of tau q . k (fp32).
// The sums use double atomics: the last bits vary run to run (diagnostics only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <memory>

#include "ablate/status.h"
#include "attention/attention_cpu.h"
#include "attention/cuda/attention_cuda.h"

namespace ablate::trainer::cuda {

// Device scratch reused across layers and steps (grows with the shape); movable, frees on reset.
struct DiagScratch {
  DiagScratch();
  ~DiagScratch();
  DiagScratch(DiagScratch&&) noexcept;
  DiagScratch& operator=(DiagScratch&&) noexcept;
  struct Impl;
  std::unique_ptr<Impl> impl;
};

struct LayerShadowInput {
  int nb = 1;  // sequences compared (the leading nb of the batch)
  int B = 1;   // the whole batch (for max_logit)
  int H = 1, N = 1, D = 64;
  const __nv_bfloat16 *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;  // (B, H, N, D)
};

struct LayerShadowErrors {
  kernels::ErrorStats o, dq, dk, dv, p, ds;
  double max_logit = 0;
};

// Synchronizes `stream` at the end.
Status ShadowAttentionErrors(const LayerShadowInput& in, const kernels::AttnOptions& opt,
                             DiagScratch* scratch, LayerShadowErrors* out, cudaStream_t stream);

}  // namespace ablate::trainer::cuda
