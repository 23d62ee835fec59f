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

// SageBwd's INT8 products (AttnOptions::int8_products): the forward's logits S = Q K^T (and the
// backward's recomputed S), O = P~ V, the backward's dV = P^T dO, dQ = dS K, dK = dS^T Q, and
// dP = dO V^T (INT8 only with int8_dp; bf16 otherwise).
enum SageProduct : uint32_t {
  kSageS = 1,
  kSagePV = 2,
  kSageDV = 4,
  kSageDQ = 8,
  kSageDK = 16,
  kSageDP = 32,
};
inline constexpr uint32_t kSageAllProducts = 63;

// FPA is exact attention; SageBwd quantizes Q, K, V, P and dS (and dP with int8_dp) to INT8 as
// kernels/ALGORITHMS.md §1.2 says (attention_cpu.h has the quantization groups in detail).
struct AttnOptions {
  AttnKind kind = AttnKind::kSageBwd;
  // Both kinds, GPU only (the CPU is deterministic): reduce dQ over key blocks in a fixed order,
  // so identical runs are bit-identical (cuda/attention_cuda.h, AttnDetScratchBytes). Off: fp32
  // atomics add the key blocks' parts in arrival order.
  bool deterministic = false;
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
  // The dS products in bf16 instead of INT8 (the paper's claim (ii) isolated): dQ = dS K and
  // dK = dS^T Q take dS and the smoothed K / Q rounded to bf16, accumulated in T (fp32 on the
  // GPU, as a second pass after the INT8 backward; there without smooth_q and
  // dq_kmean_correction).
  bool ds_bf16 = false;
  // Finer scale groups for the backward's INT8 operands (CPU emulator only, to explore the
  // accuracy of a kernel design before writing it; the GPU kernels refuse them; 0 = the block):
  // the dQ product's dS row scales over groups of ds_row_keys keys (else the block's bkv), the
  // dK product's dS column scales over groups of ds_col_rows query rows (else the Q tile's bq),
  // the dV product's P column scales over groups of p_col_rows query rows (else bq).
  int ds_row_keys = 0;
  int ds_col_rows = 0;
  int p_col_rows = 0;
  // With smooth_k, add tau * rowsum(dS) (x) kbar to dQ (kernels/ALGORITHMS.md §1.2). Off by
  // default: the exact dS rows sum to zero, so the term's true value is zero and what it adds is
  // the emulated dS's row-sum error (the forward's quantization error, through D) times |kbar|
  // (keys offset by a sigma-8 mean: dQ rel. L2 0.114 with it, 0.018 without). Kept to measure.
  bool dq_kmean_correction = false;
  // The CPU emulator's INT8 products (SageProduct bits; the mechanism probes' error
  // decomposition): a product whose bit is clear is computed in T from its unquantized (smoothed)
  // operands. The GPU kernels run every product in INT8 and refuse any other mask.
  uint32_t int8_products = kSageAllProducts;
};

// The tiles of the SageBwd GPU kernels, which the CPU emulator runs too wherever a model trains
// (the trainer sets them with SageGpuTiles; the emulator's other tiles are for the kernels' tests).
inline constexpr int kSageBq = 64;   // SageBwd query rows per tile (fwd and bwd, D = 64 and 128)
inline constexpr int kSageBkv = 64;  // SageBwd key rows per tile

// The K / V quantization group the SageBwd kernels run at head dim d: 128 keys at d128 without
// Q-smoothing (the forward steps two K tiles at a time), else 64.
inline int SageKvGroup(const AttnOptions& opt, int d) {
  return d == 128 && !opt.smooth_q ? 2 * kSageBkv : kSageBkv;
}

// The SageBwd backward's key block (the emulator's bkv) at head dim d: 128 where the backward
// quantizes dS^ for dQ with one scale per query row over 128 keys (with 128-key K / V groups),
// else 64.
inline int SageBwdKeyBlock(const AttnOptions& opt, int d) { return SageKvGroup(opt, d); }

// The CPU emulator options that the SageBwd kernels implement for `opt` at head dim d.
inline AttnOptions SageGpuTiles(const AttnOptions& opt, int d) {
  AttnOptions o = opt;
  o.bq = kSageBq;
  o.bkv = SageBwdKeyBlock(opt, d);
  o.kv_group = SageKvGroup(opt, d);
  return o;
}

}  // namespace ablate::kernels
