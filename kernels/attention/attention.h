// The attention configuration shared by every implementation: the CPU functions
// (attention_cpu.h), the CUDA kernels (cuda/attention_cuda.h) and the trainer, which fills it from
// the trial config's attention section. kernels/ALGORITHMS.md §1 is the numerical contract.
#pragma once

#include <cstdint>

namespace ablate::kernels {

// Tensors are (B, H, N, D) row-major; causal masking hides keys j > i.
struct AttnShape {
  int B = 1;   // batch
  int H = 1;   // heads
  int N = 1;   // sequence length (queries = keys)
  int D = 64;  // head dimension
  bool causal = true;
  int64_t numel() const { return int64_t(B) * H * N * D; }
  int64_t rows() const { return int64_t(B) * H * N; }
};

enum class AttnKind { kFpa, kSageBwd };

// FPA is exact attention; SageBwd quantizes Q, K, V, P and dS (and dP with int8_dp) to INT8 as
// kernels/ALGORITHMS.md §1.2 says (attention_cpu.h has the quantization groups in detail).
struct AttnOptions {
  AttnKind kind = AttnKind::kSageBwd;
  // SageBwd only (FPA has no options):
  // The CPU emulator's tiles. The GPU kernels run their own (SageGpuTiles in
  // attention/cuda/attention_cuda.h gives the emulator options that match them).
  int bq = 128;           // Q tile rows (forward and backward)
  int bkv = 64;           // K/V tile rows
  // K / V quantization group (keys, a multiple of bkv; 0 = bkv): one scale per group for K^ and
  // V^, and the forward's K tile (its online-softmax step and P~ row scales span the group). The
  // backward keeps bkv-key blocks (its P / dS scales) and reads the group's scales.
  int kv_group = 0;
  bool smooth_k = true;   // subtract the per-(b,h) mean of K over tokens before quantizing
  bool smooth_q = false;  // subtract the per-Q-tile mean of Q and add its bias back
  bool int8_dp = false;   // also quantize dP = dO V^T (to measure the paper's dS/dP claim)
  // With smooth_k, add tau * rowsum(dS) (x) kbar to dQ (kernels/ALGORITHMS.md §1.2). Measured: when K has a
  // large mean this term multiplies the forward's quantization error (rows of the emulated dS do not
  // sum to 0) by |kbar|: dQ rel. L2 0.114 with it vs 0.018 without at a sigma-8 key offset. A switch
  // so the trade-off can be measured; on by default as the contract says.
  bool dq_kmean_correction = true;
};

}  // namespace ablate::kernels
