// Attention on the CPU: exact (fpa) and the SageBwd INT8 emulator, forward and backward.
//
// These are the CPU twins of the CUDA kernels (kernels/ALGORITHMS.md §1) and the trainer's CPU attention.
// Every function is a template over the scalar type T (float for the trainer, double for the
// float64 references in tests); the arithmetic is the same, only the precision differs.
//
// Layout, for every tensor: (B, H, N, D) row-major contiguous, i.e. element (b, h, n, d) sits at
// ((b*H + h)*N + n)*D + d. lse is (B, H, N). The softmax scale tau = 1/sqrt(D) is folded into S:
// S = tau * Q K^T. Causal masking hides keys j > i.
//
// Thread safety: pure functions of their inputs, deterministic (results do not depend on the
// thread count: no cross-thread reductions). The SageBwd emulator parallelizes with OpenMP over
// (b, h) (and Q tiles in the forward); FPA issues BLAS GEMMs per head (OpenBLAS threads them) and
// parallelizes its row-wise softmax work with OpenMP. Call them from outside OpenMP regions.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/attention.h"

namespace ablate::kernels {


// ----------------------------------------------------------------------------------------------
// FPA: exact attention. The reference of everything else.
// ----------------------------------------------------------------------------------------------

// q, k, v: (B, H, N, D); o: (B, H, N, D) out; lse: (B, H, N) out, natural-log sum-exp of S rows.
template <typename T>
void FpaForward(const AttnShape& s, const T* q, const T* k, const T* v, T* o, T* lse);

// do_: (B, H, N, D) dL/dO; o and lse from FpaForward. dq, dk, dv: (B, H, N, D) out (overwritten).
template <typename T>
void FpaBackward(const AttnShape& s, const T* q, const T* k, const T* v, const T* o, const T* lse,
                 const T* do_, T* dq, T* dk, T* dv);

// ----------------------------------------------------------------------------------------------
// SageBwd: float emulation of the INT8 kernel of kernels/ALGORITHMS.md §1.2.
//
// Every INT8 operand is quantized exactly as the kernel does it — s = max|X| / 127 over the
// quantization group (all-zero group: s = 1, X^ = 0), X^ = round_half_even(X / s) — and the
// integer products are computed exactly (int8 operands, int32 sums, for any tile size) and then
// scaled into T accumulators, so the emulation differs from the kernel only in accumulation order.
// Products of scales are formed left to right as written below (tau * sQ * sK, ...). Groups:
//   Q^  one scale per (Bq x D) Q tile        (after optional Q-smoothing: Q - mean over the tile)
//   K^  one scale per (Bkv x D) K tile       (after K-smoothing: K - mean over all N tokens)
//   V^  one scale per (Bkv x D) V tile
//       (kv_group > 0: K^ and V^ per kv_group keys, which is also the forward's K tile)
//   P~  forward O = P~ V: one scale per query row of each (Bq x Bkv) block, s = exp(rowmax(S_ij)
//       - m_new) / 127 (the online-softmax max); the row sum l uses the unquantized P~ (fp32)
//   P   backward dV = P^T dO: one scale per key column of each block; dO^ one scale per Q tile
//   dP  = dO V^T with dO and V rounded to bf16, fp32 accumulation (or INT8 with dO^, V^ tiles when
//       int8_dp is set)
//   dS  = P o (dP - D), kept in T until quantized; for dQ = dS K: one scale per query row of the
//       block; for dK = dS^T Q: one scale per key column of the block (dS is quantized twice)
// The forward walks K tiles in ascending order for each Q tile (this order is part of the
// contract: the per-tile P~ scales depend on the running max). LSE is kept in the smoothed
// domain (the logits of Q^ K^ including the Q-smoothing bias), consistently in fwd and bwd.
// K-smoothing adds tau * rowsum(dS_ij) * kbar to dQ (rowsum of the unquantized dS). Measured: the
// emulated dS rows do not sum to 0 (the forward's P~V error enters through D_i), so with a large
// key mean this term dominates the dQ error (K offset sigma 8: dQ rel L2 0.11 with it, 0.018
// without; sagebwd_cpu_test KSmoothingRemovesKeyOffset).
// Q-smoothing adds tau * mu_Q . K_s_j^T (full precision, K_s = K - kbar) to the logits of block
// (i, j) and tau * colsum(dS_ij) (x) mu_Q(tile i) to dK_j.
// Causal: blocks entirely above the diagonal are skipped; masked logits are -inf, masked P and dS
// are 0, and every scale is taken over the valid (unpadded, unmasked) elements only.
// The backward re-quantizes Q, K, V and dO deterministically (same tiles and scales as the
// forward) and reads only lse and kmean from SageSaved; opt must equal the forward's.
// ----------------------------------------------------------------------------------------------


// What the forward pass saves for the backward pass (the kernel saves the same things).
template <typename T>
struct SageSaved {
  std::vector<T> lse;    // (B, H, N), smoothed domain
  std::vector<T> kmean;  // (B, H, D), zeros when !smooth_k
};

// Optional capture of the intermediates for diagnostics, per (b, h), full N x N, row-major,
// masked entries 0. p: the backward P (fp32, from the INT8 S); ds: the backward dS before its
// quantization. Sized B*H*N*N by the callee when the pointer is non-null.
template <typename T>
struct SageDebug {
  std::vector<T> p;
  std::vector<T> ds;
};

template <typename T>
void SageForward(const AttnShape& s, const AttnOptions& opt, const T* q, const T* k, const T* v,
                 T* o, SageSaved<T>* saved);

template <typename T>
void SageBackward(const AttnShape& s, const AttnOptions& opt, const T* q, const T* k, const T* v,
                  const T* o, const T* do_, const SageSaved<T>& saved, T* dq, T* dk, T* dv,
                  SageDebug<T>* debug = nullptr);

// Exact-attention intermediates for the same diagnostics (fpa side): P and dS, (B, H, N, N).
template <typename T>
void FpaIntermediates(const AttnShape& s, const T* q, const T* k, const T* v, const T* o,
                      const T* lse, const T* do_, std::vector<T>* p, std::vector<T>* ds);

// ----------------------------------------------------------------------------------------------
// Accuracy measures on flattened tensors (kernels/ALGORITHMS.md §1): x is the approximation, y the
// reference. Computed in double. Degenerate reference: two zero tensors give cosine 1 and errors 0;
// a nonzero x against a zero y gives cosine 0 and infinite relative errors.
// ----------------------------------------------------------------------------------------------
struct ErrorStats {
  double cosine = 0;  // sum(xy) / (|x||y|)
  double rel_l2 = 0;  // |x - y| / |y|
  double rel_l1 = 0;  // sum|x - y| / sum|y|
};
template <typename TX, typename TY>
ErrorStats CompareTensors(const TX* x, const TY* y, int64_t n);

}  // namespace ablate::kernels
