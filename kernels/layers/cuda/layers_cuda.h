// The non-attention layers of the GPT model on the GPU: the device twins of kernels/layers/layers_cpu.h,
// plus the pieces the GPU trainer needs around them (casts, gradient norm and clipping, loss
// reduction, tensor comparison for the diagnostics).
//
// Conventions (those of layers_cpu.h, with three differences called out):
//   * Outputs first, then inputs, then sizes, then the stream. Row-wise ops take N rows of C.
//   * Compute is fp32 whatever the storage type. Templates over Tin / Tout take float or
//     __nv_bfloat16 (bf16); which combinations exist is listed per function (others do not link).
//   * Difference 1: backward functions take `accumulate`: true adds into the input gradient (the CPU
//     twin's +=), false overwrites it (saves a memset). Parameter gradients (dweight) always add.
//   * Difference 2: the embedding backward is a deterministic scatter-add over token buckets built on
//     the host (BuildTokenBuckets / BuildEncoderBackwardPlan): rows summed in position order per
//     token (or per fixed chunk of a token, then the chunks in order).
//   * Difference 3: reductions over rows (RMSNorm's dweight, the gradient norm, the mean loss) run in
//     a fixed order through caller-provided scratch: results are bit-identical run to run.
// Every launcher validates its sizes (InvalidArgument), enqueues on `stream`, never synchronizes the
// host, and returns Internal when the launch fails. Buffers are device pointers unless noted; inputs
// and outputs must not overlap unless noted. Thread safety: reentrant; calls sharing scratch must be
// ordered on one stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ablate/status.h"

namespace ablate::kernels::cuda {

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------------------------
// Encoder (token embedding lookup). out: (N, C) fp32; tokens: (N) int32 in [0, V) (not checked);
// wte: (V, C) fp32.
Status EncoderForwardCuda(float* out, const int32_t* tokens, const float* wte, int64_t N, int C,
                          cudaStream_t stream);

// Token buckets for the deterministic embedding backward, built on the host from the host copy of
// the tokens: the distinct tokens in ascending order, offsets into `rows` (size n_unique + 1), and
// the row indices of each token in ascending order (size N).
struct TokenBuckets {
  std::vector<int32_t> tokens;
  std::vector<int32_t> offsets;
  std::vector<int32_t> rows;
};
void BuildTokenBuckets(const int32_t* host_tokens, int64_t N, int V, TokenBuckets* out);

// dwte: (V, C) += the rows of dout (N, C) summed per token. unique, offsets, rows: device copies of
// a TokenBuckets (n_unique distinct tokens).
Status EncoderBackwardCuda(float* dwte, const float* dout, const int32_t* unique,
                           const int32_t* offsets, const int32_t* rows, int n_unique, int C,
                           cudaStream_t stream);

// The parallel embedding backward (what GptCuda uses). One block per distinct token (above) is
// serial in that token's rows: with few distinct tokens (a byte corpus: ~30 of them per batch) a
// few blocks summed hundreds of rows each. The plan cuts each token's rows (ascending) into chunks
// of at most kEncoderChunkRows; one block per chunk sums its rows in order; a token with one chunk
// is added straight into dwte, a token with several gets one partial per chunk in scratch, summed
// in chunk order by a second kernel. Fixed chunks, fixed orders: bit-identical run to run.
// data holds, in one int32 vector (one upload): rows (N) | chunk_begin (n_chunks + 1) |
// chunk_token (n_chunks) | chunk_slot (n_chunks; -1: added to dwte directly) | multi_token
// (n_multi) | multi_begin (n_multi + 1, into the scratch slots).
constexpr int kEncoderChunkRows = 64;
struct EncoderBackwardPlan {
  std::vector<int32_t> data;
  int64_t n = 0;
  int n_chunks = 0, n_multi = 0, n_slots = 0;
};
void BuildEncoderBackwardPlan(const int32_t* host_tokens, int64_t N, int V,
                              EncoderBackwardPlan* out);
size_t EncoderBackwardPlanInts(int64_t N);     // data.size() <= this for N tokens
size_t EncoderBackwardScratch(int64_t N, int C);  // scratch floats enough for any N tokens
// dwte: (V, C) += the rows of dout (N, C) summed per token; d_data: the device copy of plan.data.
// InvalidArgument for a scratch below plan.n_slots * C floats.
Status EncoderBackwardPlannedCuda(float* dwte, const float* dout, const EncoderBackwardPlan& plan,
                                  const int32_t* d_data, int C, float* scratch,
                                  size_t scratch_floats, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// RMSNorm with a gain (also the per-head QK-norm: N = B*T*H rows of D, one (D) gain).
// out: (N, C); rstd: (N) fp32 out; inp: (N, C); weight: (C) fp32. out may alias inp when the types
// match. Tin, Tout in {float, bf16}.
template <typename Tin, typename Tout>
Status RmsNormForwardCuda(Tout* out, float* rstd, const Tin* inp, const float* weight, int64_t N,
                          int C, cudaStream_t stream);

// Scratch floats RmsNormBackwardCuda needs for N rows of C.
size_t RmsNormBackwardScratch(int64_t N, int C);
// dinp: (N, C) fp32 (+= when accumulate, else =); dweight: (C) fp32 +=; dout: (N, C) Tdout;
// inp: (N, C) Tinp (the forward's input); weight: (C); rstd: (N) from the forward.
// Tdout, Tinp in {float, bf16}.
template <typename Tdout, typename Tinp>
Status RmsNormBackwardCuda(float* dinp, bool accumulate, float* dweight, const Tdout* dout,
                           const Tinp* inp, const float* weight, const float* rstd, int64_t N,
                           int C, float* scratch, size_t scratch_floats, cudaStream_t stream);

// The RMSNorm backward of the residual stream in one pass, for C <= 1024: dinp as
// RmsNormBackwardCuda<float, float> (+= when accumulate), plus dinp_bf (N, C) bf16 = the updated
// dinp rounded (the next GEMM's operand; may be null), and dweight += the column sums of
// dout * inp * rstd accumulated in the same pass (per-block partials in scratch, summed in a fixed
// order: deterministic). InvalidArgument for C > 1024.
size_t RmsNormBackwardFusedScratch(int64_t N, int C);
Status RmsNormBackwardFusedCuda(float* dinp, bf16* dinp_bf, bool accumulate, float* dweight,
                                const float* dout, const float* inp, const float* weight,
                                const float* rstd, int64_t N, int C, float* scratch,
                                size_t scratch_floats, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// RoPE, rotate-half pairing, same as the CPU twin. cos, sin: (>= Tn, D/2) fp32 tables (RopeTables
// of layers_cpu.h, uploaded). inp, out: (BH, Tn, D). out may alias inp when the types match.
// Tin, Tout in {float, bf16}.
template <typename Tin, typename Tout>
Status RopeForwardCuda(Tout* out, const Tin* inp, const float* cos, const float* sin, int64_t BH,
                       int Tn, int D, cudaStream_t stream);
// dinp: (BH, Tn, D) fp32 (+= or =) R^T dout. Tdout in {float, bf16}.
template <typename Tdout>
Status RopeBackwardCuda(float* dinp, bool accumulate, const Tdout* dout, const float* cos,
                        const float* sin, int64_t BH, int Tn, int D, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Activations, elementwise over n values. GELU: tanh approximation (the CPU's sigmoid form);
// ReLU^2: max(x, 0)^2. out may alias inp when the types match. Tin, Tout in {float, bf16}.
template <typename Tin, typename Tout>
Status GeluForwardCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream);
template <typename Tin, typename Tout>
Status Relu2ForwardCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream);
// dinp (+= or =) act'(inp) * dout. T (dinp, inp, dout) in {float, bf16}.
template <typename T>
Status GeluBackwardCuda(T* dinp, bool accumulate, const T* inp, const T* dout, int64_t n,
                        cudaStream_t stream);
template <typename T>
Status Relu2BackwardCuda(T* dinp, bool accumulate, const T* inp, const T* dout, int64_t n,
                         cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Residual: out = inp1 + inp2 (fp32; out may alias either). The model fuses its residual adds into
// the projection GEMMs (beta = 1); this is the stand-alone op.
Status ResidualForwardCuda(float* out, const float* inp1, const float* inp2, int64_t n,
                           cudaStream_t stream);
// dinp1 += dout; dinp2 += dout.
Status ResidualBackwardCuda(float* dinp1, float* dinp2, const float* dout, int64_t n,
                            cudaStream_t stream);

// out = (Tout) inp, elementwise (the bf16 copies of the master weights and of activations).
// (Tin, Tout) in {(float, bf16), (bf16, float), (float, float)}.
template <typename Tin, typename Tout>
Status CastCuda(Tout* out, const Tin* inp, int64_t n, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Fused classifier: per row r, loss_r = logsumexp(logits_r) - logits_r[target_r] and
// dlogits_r = dloss * (softmax(logits_r) - onehot(target_r)), in one kernel: one block per row reads
// the row once for the max and the sum (online), then writes the gradient; no probabilities are
// stored. losses: (N) fp32 out or null; dlogits: (N, V) out or null, may alias logits (in place);
// targets: (N) in [0, V). T in {float, bf16}.
template <typename T>
Status SoftmaxCrossEntropyCuda(float* losses, T* dlogits, const T* logits, const int32_t* targets,
                               int64_t N, int V, float dloss, cudaStream_t stream);

// acc[0] += (double)(float)(sum_i x[i] / n): the mean of n losses summed in a fixed order in double,
// rounded to float as the CPU model's Forward returns it, added to a device accumulator.
Status AccumulateMeanCuda(double* acc, const float* x, int64_t n, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Global gradient norm and clipping, without a host round trip.
size_t SumSquaresScratch(size_t n);  // floats of scratch for SumSquaresCuda
// out[0] = sum_i x[i]^2 in double (per-block fp32 partials, summed in order in double).
Status SumSquaresCuda(double* out, const float* x, size_t n, float* scratch, size_t scratch_floats,
                      cudaStream_t stream);
// With norm = sqrt(*sumsq): when max_norm > 0 and norm > max_norm, x *= float(max_norm / norm)
// (the CPU loop's arithmetic); otherwise nothing.
Status ClipByNormCuda(float* x, size_t n, const double* sumsq, double max_norm,
                      cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Permutes between token-major and head-major layouts (layers_cpu.h). qkv: (B, Tn, 3, H, D);
// q, k: (B, H, Tn, D) Tqk; v: (B, H, Tn, D) Tv. (Tin, Tqk, Tv) in {(float, float, bf16),
// (float, bf16, bf16), (float, float, float)}.
template <typename Tin, typename Tqk, typename Tv>
Status QkvSplitForwardCuda(Tqk* q, Tqk* k, Tv* v, const Tin* qkv, int B, int Tn, int H, int D,
                           cudaStream_t stream);
// dqkv: (B, Tn, 3, H, D) overwritten (every element written). (Tqk, Tv, Tout) in
// {(float, bf16, bf16), (float, float, float)}.
template <typename Tqk, typename Tv, typename Tout>
Status QkvSplitBackwardCuda(Tout* dqkv, const Tqk* dq, const Tqk* dk, const Tv* dv, int B, int Tn,
                            int H, int D, cudaStream_t stream);
// inp: (B, H, Tn, D) -> out: (B, Tn, H*D), and back (overwritten). T in {float, bf16}.
template <typename T>
Status HeadsMergeForwardCuda(T* out, const T* inp, int B, int Tn, int H, int D,
                             cudaStream_t stream);
template <typename T>
Status HeadsMergeBackwardCuda(T* dinp, const T* dout, int B, int Tn, int H, int D,
                              cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// The attention input chain fused: QKV split + per-head QK-norm + RoPE, the device twin of
// QkvSplitForward -> RmsNormForward (N*H rows of D, gains q_gain / k_gain) -> RopeForward on q and
// k (v only permuted), reading the QKV GEMM's bf16 output once. qkv: (B, Tn, 3, H, D) bf16;
// q, k, v: (B, H, Tn, D) bf16 out; q_rstd, k_rstd: (B, H, Tn) fp32 out. q_gain == k_gain == null
// means no QK-norm (the rstd outputs are then not written and may be null). cos, sin: RoPE tables
// as RopeForwardCuda. D even and <= 256.
// k_sums (optional, the K mean's first pass for SageBwd's K-smoothing, kernels::SageKMeanParts):
// k_sums[((b H + h) P + p) D + d] = the sum in double of k[b][h][t][d] as stored (bf16) over the
// tokens t of part p = [p R, min(Tn, (p + 1) R)), R = k_rows_per_part, P = ceil(Tn / R); the
// same q, k, v, rstds. It needs the vectorized kernel (below) and runs one block per (part, head).
// k_offset (optional, (H, D) fp32, the trainer's attention.k_offset of one layer): added to every
// k row of head h after RoPE, in fp32 before the bf16 rounding, so k and k_sums include it: the
// twin of RopeForward followed by kernels::AddHeadOffset. The backward needs nothing for it.
Status QkvNormRopeForwardCuda(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                              const bf16* qkv, const float* q_gain, const float* k_gain,
                              const float* cos, const float* sin, int B, int Tn, int H, int D,
                              cudaStream_t stream, double* k_sums = nullptr,
                              int k_rows_per_part = 0, const float* k_offset = nullptr);
// Its backward: dqkv (B, Tn, 3, H, D) bf16 overwritten with the gradient of the chain given
// dq, dk, dv (B, H, Tn, D) bf16 (the attention backward's outputs); qkv, the rstds and the gains
// as in the forward. With QK-norm, dq_gain / dk_gain (D) fp32 += the gain gradients (per-block
// partials in scratch, summed in a fixed order: deterministic).
// Both run vectorized (8/16-byte accesses, D / 8 lanes per row) when D / 8 is a power of two and
// the bf16 buffers and RoPE tables are 16-byte aligned, else one warp per row (any even D <= 256).
size_t QkvNormRopeBackwardScratch(int B, int Tn, int H, int D);
Status QkvNormRopeBackwardCuda(bf16* dqkv, float* dq_gain, float* dk_gain, const bf16* dq,
                               const bf16* dk, const bf16* dv, const bf16* qkv, const float* q_gain,
                               const float* k_gain, const float* q_rstd, const float* k_rstd,
                               const float* cos, const float* sin, int B, int Tn, int H, int D,
                               float* scratch, size_t scratch_floats, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Diagnostics helpers.
// acc[0..5] += sum x*y, x*x, y*y, (x-y)^2, |x-y|, |y| over n elements (double atomics: the last bits
// vary run to run). (Tx, Ty) in {(bf16, bf16), (float, float)}.
template <typename Tx, typename Ty>
Status CompareAccumulateCuda(double* acc, const Tx* x, const Ty* y, int64_t n,
                             cudaStream_t stream);
// *out = max(*out, max over (bh, i, j <= i) of tau * q_i . k_j), fp32 with an atomic max;
// InitMaxCuda sets *out = -inf. q, k: (BH, Tn, D) bf16. Diagnostics only (a plain dot-product kernel).
Status InitMaxCuda(float* out, cudaStream_t stream);
Status MaxCausalLogitCuda(float* out, const bf16* q, const bf16* k, int64_t BH, int Tn, int D,
                          float tau, cudaStream_t stream);

}  // namespace ablate::kernels::cuda
