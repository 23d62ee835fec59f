// The non-attention layers of the GPT model on the CPU, forward and backward (llm.c's CPU twin).
//
// Every op is a template over the scalar type T: float for the trainer, double for the float64
// references of the finite-difference tests. The arithmetic is the same; only precision differs.
// Instantiated for float and double.
//
// Conventions (llm.c):
//   * Arguments are outputs first, then inputs, then sizes.
//   * Forward functions overwrite their outputs.
//   * Backward functions ADD (+=) into every gradient they produce, input gradients (dinp) and
//     parameter gradients (dweight) alike, so callers zero activation-gradient buffers before
//     the call and parameter gradients accumulate across micro-steps.
//   * Row-wise ops take `N` rows (usually B*T) of length `C`, row-major contiguous.
//   * Unless noted, input and output buffers must not overlap.
//
// Thread safety and determinism: pure functions of their arguments. They parallelize with OpenMP
// over rows, elements or channel slices, and every output element is reduced in a fixed order
// that does not depend on the thread count or on scheduling, so results are bit-identical
// across runs (and across thread counts, except where OpenBLAS decides otherwise for GEMMs).
#pragma once

#include <cstdint>

namespace ablate::kernels {

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * gain. eps is part of the numerical contract.
inline constexpr double kRmsNormEps = 1e-6;
// RoPE frequency base: pair i of a head of size D rotates by pos * base^(-2i/D).
inline constexpr double kRopeBase = 10000.0;

// ---------------------------------------------------------------------------------------------
// Encoder: token embedding lookup (no positional table; positions enter through RoPE).
// ---------------------------------------------------------------------------------------------

// out: (N, C); inp: (N) int32 token ids in [0, V); wte: (V, C).
template <typename T>
void EncoderForward(T* out, const int32_t* inp, const T* wte, int64_t N, int C);

// dwte: (V, C) +=; dout: (N, C). Each row of dwte sums its tokens in token order.
template <typename T>
void EncoderBackward(T* dwte, const T* dout, const int32_t* inp, int64_t N, int C);

// ---------------------------------------------------------------------------------------------
// RMSNorm over the last axis with a learned gain (no bias). Also the QK-norm: N = B*H*T rows of
// length D with one (D) gain shared by every head.
// ---------------------------------------------------------------------------------------------

// out: (N, C); rstd: (N) out, 1/sqrt(mean(inp^2) + eps), saved for the backward pass;
// inp: (N, C); weight: (C). out may alias inp.
template <typename T>
void RmsNormForward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int C);

// dinp: (N, C) +=; dweight: (C) +=; dout, inp: (N, C); weight: (C); rstd: (N) from the forward.
template <typename T>
void RmsNormBackward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                     const T* rstd, int64_t N, int C);

// ---------------------------------------------------------------------------------------------
// Matmul (a linear layer without bias): out = inp . weight^T. cblas_sgemm / cblas_dgemm.
// ---------------------------------------------------------------------------------------------

// out: (N, OC); inp: (N, IC); weight: (OC, IC) row-major (PyTorch's nn.Linear layout).
template <typename T>
void MatmulForward(T* out, const T* inp, const T* weight, int64_t N, int IC, int OC);

// dinp: (N, IC) += dout . weight (skipped when null); dweight: (OC, IC) += dout^T . inp;
// dout: (N, OC).
template <typename T>
void MatmulBackward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, int64_t N,
                    int IC, int OC);

// ---------------------------------------------------------------------------------------------
// RoPE, rotate-half pairing (GPT-NeoX / Llama style): within each head vector x of size D, the
// pair (x[i], x[i + D/2]) for i < D/2 is rotated by the angle theta = pos * base^(-2i/D):
//   y[i]       = x[i] cos(theta) - x[i + D/2] sin(theta)
//   y[i + D/2] = x[i] sin(theta) + x[i + D/2] cos(theta)
// pos is the token's index in its sequence (0-based). D must be even.
// ---------------------------------------------------------------------------------------------

// cos, sin: (Tmax, D/2) out. Computed in double, then rounded to T, so float and double tables
// agree to float precision.
template <typename T>
void RopeTables(T* cos, T* sin, int Tmax, int D, double base = kRopeBase);

// out, inp: (BH, Tn, D), i.e. (B, H, T, D) with BH = B*H; cos, sin: (>= Tn, D/2).
// out may alias inp (in-place rotation).
template <typename T>
void RopeForward(T* out, const T* inp, const T* cos, const T* sin, int64_t BH, int Tn, int D);

// dinp: (BH, Tn, D) += R^T dout (the inverse rotation); dout: (BH, Tn, D).
template <typename T>
void RopeBackward(T* dinp, const T* dout, const T* cos, const T* sin, int64_t BH, int Tn, int D);

// x: (BH, Tn, D), BH = B*H; offset: (H, D). x[b h][t] += offset[h] for every t: one fixed vector
// per head added to its keys (the trainer's attention.k_offset). A constant: its backward passes
// the gradient through unchanged.
template <typename T>
void AddHeadOffset(T* x, const T* offset, int64_t BH, int H, int Tn, int D);

// ---------------------------------------------------------------------------------------------
// MLP activations, elementwise over n values.
// ---------------------------------------------------------------------------------------------

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// out may alias inp.
template <typename T>
void GeluForward(T* out, const T* inp, int64_t n);
// dinp += gelu'(inp) * dout.
template <typename T>
void GeluBackward(T* dinp, const T* inp, const T* dout, int64_t n);

// ReLU^2: max(x, 0)^2. out may alias inp.
template <typename T>
void Relu2Forward(T* out, const T* inp, int64_t n);
// dinp += 2 max(inp, 0) * dout.
template <typename T>
void Relu2Backward(T* dinp, const T* inp, const T* dout, int64_t n);

// ---------------------------------------------------------------------------------------------
// Residual: out = inp1 + inp2. out may alias either input.
// ---------------------------------------------------------------------------------------------
template <typename T>
void ResidualForward(T* out, const T* inp1, const T* inp2, int64_t n);
// dinp1 += dout; dinp2 += dout.
template <typename T>
void ResidualBackward(T* dinp1, T* dinp2, const T* dout, int64_t n);

// ---------------------------------------------------------------------------------------------
// Fused softmax + cross-entropy. Per row r: loss_r = logsumexp(logits_r) - logits_r[target_r],
// and dlogits_r = dloss * (softmax(logits_r) - onehot(target_r)). No probability tensor is
// materialized: each row is processed in place, one row at a time.
// ---------------------------------------------------------------------------------------------

// losses: (N) out, or null; dlogits: (N, V) out (overwritten, not accumulated), or null; it may
// alias logits (the gradient replaces the logits in place); logits: (N, V); targets: (N) in
// [0, V) (precondition, not checked); dloss: dL/dloss_r, the same for every row (1/N for a mean
// loss, times any gradient-accumulation scale).
template <typename T>
void SoftmaxCrossEntropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t N,
                         int V, T dloss);

// ---------------------------------------------------------------------------------------------
// Permutes between the projections' token-major layout and attention's head-major layout.
// ---------------------------------------------------------------------------------------------

// qkv: (B, Tn, 3, H, D), the output of one GEMM with the stacked (3C, C) [wq; wk; wv] weight;
// q, k, v: (B, H, Tn, D) out.
template <typename T>
void QkvSplitForward(T* q, T* k, T* v, const T* qkv, int B, int Tn, int H, int D);
// dqkv: (B, Tn, 3, H, D) +=; dq, dk, dv: (B, H, Tn, D).
template <typename T>
void QkvSplitBackward(T* dqkv, const T* dq, const T* dk, const T* dv, int B, int Tn, int H, int D);

// inp: (B, H, Tn, D) -> out: (B, Tn, H, D) = (B, Tn, C), the attention output for the projection.
template <typename T>
void HeadsMergeForward(T* out, const T* inp, int B, int Tn, int H, int D);
// dinp: (B, H, Tn, D) +=; dout: (B, Tn, H, D).
template <typename T>
void HeadsMergeBackward(T* dinp, const T* dout, int B, int Tn, int H, int D);

}  // namespace ablate::kernels
