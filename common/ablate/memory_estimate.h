// Device memory of one trial, estimated from its config before it runs (the GPU-sharing placement
// in the coordinator and the worker; docs/design.md, "GPU sharing").
//
// The estimate counts what the CUDA backend (worker/trainer/cuda/gpt_cuda.h) allocates, rounded
// up: fp32 weights and gradients, the bf16 weight copy, the optimizer state (two fp32 moments, or
// one byte per value plus block scales with optimizer.state_bits 8, plus the spectral
// optimizer's Gram/Newton scratch for the largest matrix), the activations kept for the backward
// (about 24 (B, T, C)-sized float tensors per layer, the 4C-wide MLP counting 4 each), the
// logits and their gradient (two (B, T, V) floats), the deterministic backward's dQ slices with
// attention.deterministic (one (B, T, C) float slice per 64 or 128 keys), and a fixed allowance for
// the CUDA context, cuBLAS workspaces and allocator slack (kContextBytes). A trial's real peak
// replaces the estimate once the trainer reports it (gpu_mem_peak_bytes, after its first step).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "ablate/trial_config.h"

namespace ablate::config {

// The CUDA context, cuBLAS/cuBLASLt handles and workspaces, and slack: an allowance of 512 MiB
// per process (a CUDA 12 context on Hopper takes a few hundred MiB outside any cudaMalloc).
inline constexpr int64_t kContextBytes = int64_t(512) << 20;

// The trial's parameter count (the model of worker/trainer/model/gpt.h).
int64_t ParameterCount(const TrialConfig& config);

// The estimate above, in bytes, for one rank (each of config.gpus ranks holds as much).
int64_t EstimateDeviceBytes(const TrialConfig& config);

}  // namespace ablate::config
