// FPA: exact bf16 flash attention, forward and backward (bf16 in, fp32 accumulate). Kernel-lab
// variant in production: fpa v5 (kernels/bench/README.md "Variants"): forward by wgmma (sm_90a,
// FpaForwardKernelWg: two warpgroups x 64 query rows, P from registers, V read MN-major, two
// CTAs per SM); backward v2b, FlashAttention-2 structure with mma.sync m16n8k16. The mma.sync
// forwards v1, v2 and their rescale-skip forms stay selectable by FPA_FWD_VARIANT (see
// LaunchForward). Round 3's lab forwards (v3: 8 warps x 16 rows, K/V triple-buffered; v2 with
// Bkv = 32) and the v1 backward measured slower and were removed (kernels/bench/README.md names
// the commit that has them).
//
// Layout: q, k, v, o, do, dq, dk, dv (B, H, N, D) bf16 row-major; lse (B, H, N) fp32, natural log.
// S = tau Q K^T, tau = 1/sqrt(D); the softmax runs in base 2 on S * tau * log2(e).
// No quantization: P and dS are rounded to bf16 only as MMA operands.
//
// Forward v1 grid (ceil(N/64), B*H), 4 warps; warp w owns query rows 16w..16w+15 of the 64-row Q
//           tile (Q fragments kept in registers), loops over 64-row K/V tiles (cp.async double
//           buffer), online softmax, O in registers. Causal: tiles past the diagonal are skipped,
//           causal Q tiles are scheduled heaviest first.
// Forward v2 the same with 32 query rows per warp (Bq = 128, 2 CTAs/SM): Q fragments are re-read
//           from shared memory per K tile, K/V fragments serve two m-blocks. Non-causal d128:
//           with kSkipRescale (O *= alpha skipped, warp-uniformly, when alpha == 1 on all rows).
// Backward  (1) preprocess: Dv = rowsum(dO o O) fp32, zero the fp32 dQ accumulator;
//           (2) main v2(b): grid (ceil(N/128), B*H), 8 warps, one CTA per 128-row K/V tile
//           (resident in smem), Q/dO tiles of 64 rows (+ their lse, D) double-buffered with
//           cp.async; per Q tile: S^T, dP^T (warp tiles 32 keys x 32 queries) -> P^T, dS^T in
//           smem; dV += P^T dO, dK += dS^T Q (warp tiles 32 keys x D/2, registers); dQ_tile =
//           dS K (warp tiles 32 queries x D/4) added to the fp32 accumulator with float2 atomics.
//           (3) postprocess: dq = bf16(tau * dQ_acc). dK is scaled by tau at the store.
// Masking: a compile-time causal flag; a tile gets the (row, col) mask only when it touches the
// diagonal or the sequence tail. Tails: loads past N are zero-filled; masked keys get -inf;
// queries past N get lse = +inf in the backward (P = 0) and are never stored.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "attention/cuda/attention_common.cuh"
#include "attention/cuda/fpa_cuda.h"
#include "attention/cuda/wgmma.cuh"

namespace ablate::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// Per head dimension: tile sizes and the shared memory they need.
template <int D>
struct FpaConfig {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  // Forward.
  static constexpr int kBq = 16 * kWarps;  // 64 query rows, 16 per warp
  static constexpr int kBkv = 64;
  using QTile = Bf16Tile<kBq, D>;
  using KvTile = Bf16Tile<kBkv, D>;
  static constexpr int kFwdSmem = QTile::kBytes + 2 * 2 * KvTile::kBytes;  // Q, 2 x (K, V)

  static_assert(kFwdSmem <= 227 * 1024, "forward shared memory exceeds sm_90's 227 KB");
};

struct FwdParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;
  int N;
  float scale_log2;  // tau * log2(e)
  int lpt_heads;     // the causal production forward: heads per longest-first group (LptBlock)
};

// A forward CTA's share of the work: its Q tile (causal: the last tiles, which see the most keys,
// are scheduled first), its head's q / k / v, and how many K/V tiles it visits.
struct FwdCtaTiles {
  int q0;        // first query row
  int bh;        // (b, h), the row of lse
  int64_t head;  // offset of this (b, h) in q, k, v, o
  const bf16 *q, *k, *v;
  int n_kv;      // K/V tiles to visit (causal: up to the CTA's last row)
};
// kLpt (the causal production forward): grid (BH, Q tiles), longest-first in groups of heads
// (LptBlock); else grid (Q tiles, BH), causal heaviest first within each head.
template <int D, bool kCausal, int kBq, int kBkv, bool kLpt = false>
__device__ __forceinline__ FwdCtaTiles ForwardCtaTiles(const FwdParams& p) {
  FwdCtaTiles c;
  const int N = p.N;
  int rb = int(blockIdx.x);
  c.bh = int(blockIdx.y);
  if constexpr (kLpt) LptBlock(p.lpt_heads, rb, c.bh);
  const int qt = kCausal ? int(kLpt ? gridDim.y : gridDim.x) - 1 - rb : rb;
  c.q0 = qt * kBq;
  c.head = int64_t(c.bh) * N * D;
  c.q = p.q + c.head;
  c.k = p.k + c.head;
  c.v = p.v + c.head;
  const int n_kv_total = CeilDiv(N, kBkv);
  c.n_kv = kCausal ? min(n_kv_total, (min(c.q0 + kBq, N) - 1) / kBkv + 1) : n_kv_total;
  return c;
}

struct BwdParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  const bf16* do_;
  const float* lse;
  const float* dvec;  // (B, H, N) rowsum(dO o O)
  float* dq_acc;      // (B, H, N, D) fp32, zeroed by FpaBwdPreprocessKernel; unscaled sum of dS K
  bf16* dk;
  bf16* dv;
  int N;
  float scale_log2;
  float tau;
  int lpt_heads;  // causal: heads per longest-first group (LptBlock)
};

// Stores a warp's 16 x (8*NT) fp32 accumulator rows (row0 + g, row0 + g + 8) as bf16 (times
// `mul`) into a row-major (rows, D) global matrix; rows >= n_rows are skipped.
template <int NT>
__device__ __forceinline__ void StoreAccBf16(bf16* out, int D, int row0, int n_rows, int lane,
                                             const float (&acc)[NT][4], float mul) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    if (row >= n_rows) continue;
    bf16* dst = out + int64_t(row) * D + 2 * t;
#pragma unroll
    for (int nb = 0; nb < NT; ++nb) {
      *reinterpret_cast<uint32_t*>(dst + nb * 8) =
          PackBf16x2(acc[nb][2 * half] * mul, acc[nb][2 * half + 1] * mul);
    }
  }
}

// Online-softmax step for row half h (rows g, g + 8) of a warp's 16 x (8 NT) raw logits s: the
// running log2-domain max m moves to max(m, scale_log2 * rowmax); returns alpha = exp2(m_old -
// m_use), the rescale of the row's earlier sums, and sets m_use, the offset the caller subtracts
// (0 for a row with no valid key yet).
template <int NT>
__device__ __forceinline__ float OnlineRowMax(const float (&s)[NT][4], int h, float scale_log2,
                                              float& m, float& m_use) {
  float mx = -INFINITY;
#pragma unroll
  for (int nb = 0; nb < NT; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * h], s[nb][2 * h + 1]));
  mx = QuadMax(mx) * scale_log2;
  const float m_new = fmaxf(m, mx);
  m_use = m_new == -INFINITY ? 0.f : m_new;
  const float alpha = FastExp2(m - m_use);
  m = m_new;
  return alpha;
}

// The 1 / l of a warp's two accumulator rows (row0 + g, row0 + g + 8; 0 for a row with no
// visible key) from the quad partial sums l, and their natural-log LSE (m: the log2-domain
// running max) written to lse[row] for rows < n_rows: the forward kernels' epilogue.
__device__ __forceinline__ void FinishRows(const float (&m)[2], const float (&l)[2], int row0,
                                           int n_rows, int lane, float* lse, float (&inv)[2]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float lsum = QuadSum(l[h]);
    inv[h] = lsum > 0.f ? 1.f / lsum : 0.f;
    const int row = row0 + g + 8 * h;
    if (t == 0 && row < n_rows) lse[row] = (m[h] + __log2f(lsum)) * kLn2;
  }
}

// ----------------------------------------------------------------------------------------------
// Forward.
// ----------------------------------------------------------------------------------------------

// kSkipRescale (lab variant 7): skip O *= alpha when no row of the warp's 16-row half got a new max
// (alpha == 1 exactly for all of them: exact).
template <int D, bool kCausal, bool kSkipRescale = false>
__global__ void __launch_bounds__(kThreads) FpaForwardKernel(FwdParams p) {
  using Cfg = FpaConfig<D>;
  constexpr int kBq = Cfg::kBq, kBkv = Cfg::kBkv;
  constexpr int kNT = kBkv / 8;  // n-blocks of S per warp
  constexpr int kDT = D / 8;     // n-blocks of O per warp
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;

  extern __shared__ __align__(128) char smem[];
  char* qs = smem;
  // Stage st of K at ks + st * kStage, of V at vs + st * kStage (no pointer arrays: a run-time
  // index into one would put it on the stack).
  char* ks = smem + QTile::kBytes;
  char* vs = ks + 2 * KvTile::kBytes;
  constexpr int kStage = KvTile::kBytes;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int N = p.N;
  const FwdCtaTiles cta = ForwardCtaTiles<D, kCausal, kBq, kBkv>(p);
  const int q0 = cta.q0, n_kv = cta.n_kv;
  const int64_t head = cta.head;
  const bf16 *q = cta.q, *k = cta.k, *v = cta.v;

  LoadTileAsync<QTile, kThreads>(qs, q, q0, N, tid);
  LoadTileAsync<KvTile, kThreads>(ks, k, 0, N, tid);
  LoadTileAsync<KvTile, kThreads>(vs, v, 0, N, tid);
  CpAsyncCommit();

  uint32_t qa[D / 16][4];
  float o[kDT][4];
  ZeroAcc(o);
  float m[2] = {-INFINITY, -INFINITY};  // running max (base-2 scaled) of rows g, g+8
  float l[2] = {0.f, 0.f};              // this thread's partial row sums
  const int row_w = q0 + 16 * warp;     // first query row of this warp

  for (int j = 0; j < n_kv; ++j) {
    CpAsyncWait<0>();
    __syncthreads();  // tile j visible; every warp is done with the buffers of tile j-1
    if (j + 1 < n_kv) {
      const int nb = (j + 1) & 1;
      LoadTileAsync<KvTile, kThreads>(ks + nb * kStage, k, (j + 1) * kBkv, N, tid);
      LoadTileAsync<KvTile, kThreads>(vs + nb * kStage, v, (j + 1) * kBkv, N, tid);
    }
    CpAsyncCommit();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) LoadAFrag<QTile>(qa[kk], SmemAddr(qs), 16 * warp, 16 * kk, lane);
    }
    const uint32_t kb = SmemAddr(ks + (j & 1) * kStage), vb = SmemAddr(vs + (j & 1) * kStage);
    const int k0 = j * kBkv;

    // S = Q K^T (16 x 64 per warp).
    float s[kNT][4];
    ZeroAcc(s);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        LoadBFrag2<KvTile>(b, kb, 16 * np, 16 * kk, lane);
        MmaBf16(s[2 * np], qa[kk], b[0], b[1]);
        MmaBf16(s[2 * np + 1], qa[kk], b[2], b[3]);
      }
    }
    const bool need_mask = (k0 + kBkv > N) || (kCausal && k0 + kBkv - 1 > row_w);
    if (need_mask) {
      ApplyMask(s, row_w, k0, lane,
                [N](int r, int c) { return c >= N || (kCausal && c > r); });
    }

    // Online softmax (base 2).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m_use;
      const float alpha = OnlineRowMax(s, h, p.scale_log2, m[h], m_use);
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kNT; ++nb) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[nb][e] = FastExp2(fmaf(s[nb][e], p.scale_log2, -m_use));
          sum += s[nb][e];
        }
      }
      l[h] = l[h] * alpha + sum;
      if (kSkipRescale && __all_sync(0xffffffffu, alpha == 1.f)) continue;
#pragma unroll
      for (int nb = 0; nb < kDT; ++nb) {
        o[nb][2 * h] *= alpha;
        o[nb][2 * h + 1] *= alpha;
      }
    }

    // O += P V.
    uint32_t pa[kNT / 2][4];
    AccToBf16A<kNT>(pa, s);
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
#pragma unroll
      for (int np = 0; np < kDT / 2; ++np) {
        uint32_t b[4];
        LoadBFrag2Trans<KvTile>(b, vb, 16 * kk, 16 * np, lane);
        MmaBf16(o[2 * np], pa[kk], b[0], b[1]);
        MmaBf16(o[2 * np + 1], pa[kk], b[2], b[3]);
      }
    }
  }
  CpAsyncWait<0>();

  // Normalize, store O and the natural-log LSE.
  float inv[2];
  FinishRows(m, l, row_w, N, lane, p.lse + int64_t(cta.bh) * N, inv);
#pragma unroll
  for (int nb = 0; nb < kDT; ++nb) {
    o[nb][0] *= inv[0];
    o[nb][1] *= inv[0];
    o[nb][2] *= inv[1];
    o[nb][3] *= inv[1];
  }
  StoreAccBf16<kDT>(p.o + head, D, row_w, N, lane, o, 1.f);
}


// ----------------------------------------------------------------------------------------------
// Forward v2: 4 warps x 32 query rows (Bq = 128), Bkv = 64; Q fragments re-read from shared
// memory per K tile instead of held in registers, so each warp's 32 x 64 S tile and 32 x D O tile
// amortize every K / V fragment over two m-blocks (~1.6x fewer ldmatrix per MMA than v1).
// ----------------------------------------------------------------------------------------------
// kBkv / kStages: 64 / 2 in production (d64); 32 / 3 is lab variant 5 at d128 (S at 32 floats
// per thread so that S + O fit without the 64 x 128 version's spills; K/V triple-buffered).
template <int D, int kBkvT = 64, int kStagesT = 2>
struct FpaFwdV2Config {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(kStagesT >= 2 && (kBkvT == 32 || kBkvT == 64), "2+ stages, Bkv 32 or 64");
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBq = 32 * kWarps;  // 128
  static constexpr int kBkv = kBkvT;
  static constexpr int kStages = kStagesT;
  using QTile = Bf16Tile<kBq, D>;
  using KvTile = Bf16Tile<kBkv, D>;
  static constexpr int kSmem = QTile::kBytes + kStages * 2 * KvTile::kBytes;  // Q, stages x (K, V)
  static_assert(2 * kSmem <= 227 * 1024, "forward v2: two CTAs per SM must fit in 227 KB");
};

// kSkipRescale (lab variant 6, production for non-causal d128): as in FpaForwardKernel.
template <int D, bool kCausal, int kBkvT = 64, int kStagesT = 2, bool kSkipRescale = false>
__global__ void __launch_bounds__(128, 2) FpaForwardKernelV2(FwdParams p) {
  using Cfg = FpaFwdV2Config<D, kBkvT, kStagesT>;
  constexpr int kStages = Cfg::kStages;
  constexpr int kThr = Cfg::kThreads;
  constexpr int kBq = Cfg::kBq, kBkv = Cfg::kBkv;
  constexpr int kNT = kBkv / 8;  // n-blocks of S per m-block
  constexpr int kDT = D / 8;     // n-blocks of O per m-block
  using QTile = typename Cfg::QTile;
  using KvTile = typename Cfg::KvTile;

  extern __shared__ __align__(128) char smem[];
  char* qs = smem;
  char* ks = smem + QTile::kBytes;
  char* vs = ks + kStages * KvTile::kBytes;
  constexpr int kStage = KvTile::kBytes;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int N = p.N;
  const FwdCtaTiles cta = ForwardCtaTiles<D, kCausal, kBq, kBkv>(p);
  const int q0 = cta.q0, n_kv = cta.n_kv;
  const int64_t head = cta.head;
  const bf16 *q = cta.q, *k = cta.k, *v = cta.v;

  LoadTileAsync<QTile, kThr>(qs, q, q0, N, tid);
  LoadTileAsync<KvTile, kThr>(ks, k, 0, N, tid);
  LoadTileAsync<KvTile, kThr>(vs, v, 0, N, tid);
  CpAsyncCommit();
#pragma unroll
  for (int st = 1; st < kStages - 1; ++st) {
    if (st < n_kv) {
      LoadTileAsync<KvTile, kThr>(ks + st * kStage, k, st * kBkv, N, tid);
      LoadTileAsync<KvTile, kThr>(vs + st * kStage, v, st * kBkv, N, tid);
    }
    CpAsyncCommit();
  }
  int buf = 0;  // stage of tile j

  float o[2][kDT][4];
  ZeroAcc(o[0]);
  ZeroAcc(o[1]);
  float m[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};  // [mi][h], base-2 scaled
  float l[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  const int row_w = q0 + 32 * warp;  // first query row of this warp
  const uint32_t qb = SmemAddr(qs);

  for (int j = 0; j < n_kv; ++j) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // tile j visible; every warp is done with the stage of tile j-1
    const int cur = buf;
    buf = buf + 1 == kStages ? 0 : buf + 1;
    if (j + kStages - 1 < n_kv) {
      const int nb = cur == 0 ? kStages - 1 : cur - 1;  // (j + kStages - 1) % kStages
      LoadTileAsync<KvTile, kThr>(ks + nb * kStage, k, (j + kStages - 1) * kBkv, N, tid);
      LoadTileAsync<KvTile, kThr>(vs + nb * kStage, v, (j + kStages - 1) * kBkv, N, tid);
    }
    CpAsyncCommit();
    const int k0 = j * kBkv;
    // Causal: this warp's rows see none of these keys (no barrier below: safe to skip).
    if (kCausal && k0 > row_w + 31) continue;
    const uint32_t kb = SmemAddr(ks + cur * kStage), vb = SmemAddr(vs + cur * kStage);

    // S = Q K^T (32 x 64 per warp).
    float s[2][kNT][4];
    ZeroAcc(s[0]);
    ZeroAcc(s[1]);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[2][4];
      LoadAFrag<QTile>(qa[0], qb, 32 * warp, 16 * kk, lane);
      LoadAFrag<QTile>(qa[1], qb, 32 * warp + 16, 16 * kk, lane);
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        LoadBFrag2<KvTile>(b, kb, 16 * np, 16 * kk, lane);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          MmaBf16(s[mi][2 * np], qa[mi], b[0], b[1]);
          MmaBf16(s[mi][2 * np + 1], qa[mi], b[2], b[3]);
        }
      }
    }
    const bool need_mask = (k0 + kBkv > N) || (kCausal && k0 + kBkv - 1 > row_w);
    if (need_mask) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ApplyMask(s[mi], row_w + 16 * mi, k0, lane,
                  [N](int r, int c) { return c >= N || (kCausal && c > r); });
      }
    }

    // Online softmax (base 2), per m-block and row half.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float m_use;
        const float alpha = OnlineRowMax(s[mi], h, p.scale_log2, m[mi][h], m_use);
        float sum = 0.f;
#pragma unroll
        for (int nb = 0; nb < kNT; ++nb) {
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            s[mi][nb][e] = FastExp2(fmaf(s[mi][nb][e], p.scale_log2, -m_use));
            sum += s[mi][nb][e];
          }
        }
        l[mi][h] = l[mi][h] * alpha + sum;
        if (kSkipRescale && __all_sync(0xffffffffu, alpha == 1.f)) continue;
#pragma unroll
        for (int nb = 0; nb < kDT; ++nb) {
          o[mi][nb][2 * h] *= alpha;
          o[mi][nb][2 * h + 1] *= alpha;
        }
      }
    }

    // O += P V (P converted to bf16 A fragments 16 keys at a time, to keep registers low).
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      uint32_t pa[2][1][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        pa[mi][0][0] = PackBf16x2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        pa[mi][0][1] = PackBf16x2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        pa[mi][0][2] = PackBf16x2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        pa[mi][0][3] = PackBf16x2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < kDT / 2; ++np) {
        uint32_t b[4];
        LoadBFrag2Trans<KvTile>(b, vb, 16 * kk, 16 * np, lane);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          MmaBf16(o[mi][2 * np], pa[mi][0], b[0], b[1]);
          MmaBf16(o[mi][2 * np + 1], pa[mi][0], b[2], b[3]);
        }
      }
    }
  }
  CpAsyncWait<0>();

  // Normalize, store O and the natural-log LSE.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    float inv[2];
    FinishRows(m[mi], l[mi], row_w + 16 * mi, N, lane, p.lse + int64_t(cta.bh) * N, inv);
#pragma unroll
    for (int nb = 0; nb < kDT; ++nb) {
      o[mi][nb][0] *= inv[0];
      o[mi][nb][1] *= inv[0];
      o[mi][nb][2] *= inv[1];
      o[mi][nb][3] *= inv[1];
    }
    StoreAccBf16<kDT>(p.o + head, D, row_w + 16 * mi, N, lane, o[mi], 1.f);
  }
}

// ----------------------------------------------------------------------------------------------
// Forward by wgmma (lab variant 8): 8 warps = two warpgroups x 64 query rows (Bq = 128), Bkv = 64,
// K / V double-buffered by cp.async into 128B-swizzled GmmaTiles; S = Q K^T by wgmma from shared
// memory (one warpgroup per 64-row Q half), the online softmax of v2 per warp (16 rows), O += P V
// by wgmma with P from registers (the v2 A fragments as they are) and V read MN-major (stored
// [key][d]: MmaBf16RSTransB / DescMN), O accumulated in the wgmma registers. The mask test is per
// CTA and no warp skips a tile, so every branch around a wgmma is uniform (ptxas serializes
// wgmmas under branches it cannot prove uniform).
// ----------------------------------------------------------------------------------------------
template <int D>
struct FpaFwdWgConfig {
  static constexpr int kThreads = 256;
  static constexpr int kBq = 128, kBkv = 64;
  using Tile = wgmma::GmmaTile<64, 2 * D>;  // 64 rows of D bf16: a Q half, a K or a V tile
  static constexpr int kQ = 0;              // Q halves 0 and 1
  static constexpr int kStage0 = 2 * Tile::kBytes;
  static constexpr int kStage = 2 * Tile::kBytes;  // K, then V
  static constexpr int kSmem = kStage0 + 2 * kStage + 1024;  // + alignment slack
  // Two CTAs per SM (128 registers at d128, 0 spills): 1.27x one CTA of the same kernel at d128
  // (lab variant 8, removed after its run).
  static constexpr int kMinBlocks = 2;
};

template <int D, bool kCausal>
__global__ void __launch_bounds__(256, FpaFwdWgConfig<D>::kMinBlocks)
    FpaForwardKernelWg(FwdParams p) {
  using Cfg = FpaFwdWgConfig<D>;
  using Tile = typename Cfg::Tile;
  namespace wg = wgmma;
  constexpr int kBq = Cfg::kBq, kBkv = Cfg::kBkv, kCh = D / 64, kDT = D / 8;
  extern __shared__ __align__(128) char smem_raw[];
  char* const smem = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  const uint32_t sbase = SmemAddr(smem), dlo = wg::DescLo(sbase);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int N = p.N;
  const FwdCtaTiles cta = ForwardCtaTiles<D, kCausal, kBq, kBkv, /*kLpt=*/kCausal>(p);
  const int q0 = cta.q0, n_kv = cta.n_kv;
  const int64_t head = cta.head;
  const bf16 *q = cta.q, *k = cta.k, *v = cta.v;
  const int row_w = q0 + 16 * warp;                        // this warp's 16 rows
  const int q_byte = Cfg::kQ + (warp / 4) * Tile::kBytes;  // its warpgroup's Q half

  wg::LoadGmmaTileAsync<Tile, Cfg::kThreads>(smem + Cfg::kQ, q, q0, N, tid);
  wg::LoadGmmaTileAsync<Tile, Cfg::kThreads>(smem + Cfg::kQ + Tile::kBytes, q, q0 + 64, N, tid);
  auto load_kv = [&](int stage, int key0) {
    char* st = smem + Cfg::kStage0 + stage * Cfg::kStage;
    wg::LoadGmmaTileAsync<Tile, Cfg::kThreads>(st, k, key0, N, tid);
    wg::LoadGmmaTileAsync<Tile, Cfg::kThreads>(st + Tile::kBytes, v, key0, N, tid);
  };
  load_kv(0, 0);
  CpAsyncCommit();

  float o[kCh][32];
#pragma unroll
  for (int ch = 0; ch < kCh; ++ch) {
#pragma unroll
    for (int r = 0; r < 32; ++r) o[ch][r] = 0.f;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // [h], base-2 scaled

  for (int j = 0; j < n_kv; ++j) {
    CpAsyncWait<0>();
    wg::FenceProxyAsync();  // cp.async writes -> wgmma's reads
    __syncthreads();        // tile j visible; every warp is done with tile j - 1's stage
    if (j + 1 < n_kv) load_kv((j + 1) & 1, (j + 1) * kBkv);
    CpAsyncCommit();
    const int k0 = j * kBkv;
    const int st_byte = Cfg::kStage0 + (j & 1) * Cfg::kStage;

    // S = Q K^T (64 x 64 per warpgroup, 16 x 64 per warp).
    float sacc[32];
    wg::Fence();
    wg::MmaBf16First(sacc, wg::TileDesc<Tile>(dlo, q_byte), wg::TileDesc<Tile>(dlo, st_byte));
#pragma unroll
    for (int kb = 32; kb < 2 * D; kb += 32) {
      wg::MmaBf16(sacc, wg::TileDesc<Tile>(dlo, q_byte, kb), wg::TileDesc<Tile>(dlo, st_byte, kb),
                  true);
    }
    wg::Commit();
    wg::Wait<0>();
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = sacc[4 * n + e];
    }
    if ((k0 + kBkv > N) || (kCausal && k0 + kBkv - 1 > q0)) {  // per CTA
      ApplyMask(s, row_w, k0, lane, [N](int r, int c) { return c >= N || (kCausal && c > r); });
    }

    // Online softmax (base 2) per row half; O rescaled in the wgmma accumulators.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m_use;
      const float alpha = OnlineRowMax(s, h, p.scale_log2, m[h], m_use);
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          s[nb][e] = FastExp2(fmaf(s[nb][e], p.scale_log2, -m_use));
          sum += s[nb][e];
        }
      }
      l[h] = l[h] * alpha + sum;
#pragma unroll
      for (int ch = 0; ch < kCh; ++ch) {
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          o[ch][4 * nb + 2 * h] *= alpha;
          o[ch][4 * nb + 2 * h + 1] *= alpha;
        }
      }
    }

    // O += P V: P as bf16 A fragments (16 keys per k-step), V MN-major, 64 columns per wgmma.
    uint32_t pa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pa[kk][0] = PackBf16x2(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = PackBf16x2(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = PackBf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = PackBf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    wg::Fence();  // O was rescaled and pa written by this thread
#pragma unroll
    for (int ch = 0; ch < kCh; ++ch) {
      const uint32_t vb = sbase + st_byte + Tile::kBytes + ch * Tile::kChunkBytes;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        wg::MmaBf16RSTransB(o[ch], pa[kk], wg::DescMN<Tile>(vb, 16 * kk), true);
      }
    }
    wg::Commit();
    wg::Wait<0>();
  }
  CpAsyncWait<0>();

  // Normalize, store O and the natural-log LSE.
  float inv[2];
  FinishRows(m, l, row_w, N, lane, p.lse + int64_t(cta.bh) * N, inv);
  float acc[kDT][4];
#pragma unroll
  for (int ch = 0; ch < kCh; ++ch) {
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[ch * 8 + nb][e] = o[ch][4 * nb + e] * inv[e >> 1];
    }
  }
  // O through the Q tiles (free once both warpgroups are past their last S) and 16-byte row
  // stores (StageAccBf16).
  using OT = Bf16Tile<kBq, D>;
  static_assert(OT::kBytes <= 2 * Tile::kBytes, "staging room");
  __syncthreads();
  StageAccBf16<OT>(smem + Cfg::kQ, 16 * warp, 0, lane, acc, 1.f, 1.f);
  __syncthreads();
  StoreTileRows<OT>(smem + Cfg::kQ, p.o + head + int64_t(q0) * D, D, min(kBq, N - q0), tid,
                    Cfg::kThreads);
}

// ----------------------------------------------------------------------------------------------
// Backward.
// ----------------------------------------------------------------------------------------------

// Dv[row] = sum_d dO[row][d] * O[row][d] (fp32), one warp per row; zeroes the row of the fp32
// dQ accumulator.
template <int D>
__global__ void __launch_bounds__(256) FpaBwdPreprocessKernel(const bf16* o, const bf16* do_,
                                                              float* dvec, float* dq_acc,
                                                              int64_t rows) {
  GridDepLaunchDependents();  // the main kernel (pdl) waits for this grid's completion
  const int64_t row = int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  constexpr int kPer = D / 32;  // 2 or 4 elements per lane
  float* zrow = dq_acc + row * D + lane * kPer;
  if constexpr (kPer == 4) {
    *reinterpret_cast<float4*>(zrow) = make_float4(0.f, 0.f, 0.f, 0.f);
  } else {
    *reinterpret_cast<float2*>(zrow) = make_float2(0.f, 0.f);
  }
  const bf16* orow = o + row * D + lane * kPer;
  const bf16* drow = do_ + row * D + lane * kPer;
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; i += 2) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(orow + i));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(drow + i));
    acc = fmaf(a.x, b.x, fmaf(a.y, b.y, acc));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) dvec[row] = acc;
}

// dq[i] = bf16(tau * dq_acc[i]), 4 elements per thread.
__global__ void __launch_bounds__(256) FpaBwdPostprocessKernel(const float* dq_acc, bf16* dq,
                                                               int64_t n4, float tau) {
  GridDepWait();  // dq_acc: the main kernel (pdl)
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 a = reinterpret_cast<const float4*>(dq_acc)[i];
  uint2 out;
  out.x = PackBf16x2(a.x * tau, a.y * tau);
  out.y = PackBf16x2(a.z * tau, a.w * tau);
  reinterpret_cast<uint2*>(dq)[i] = out;
}

// ----------------------------------------------------------------------------------------------
// Backward v2: 8 warps, 128 keys per CTA, Q tiles of 64, P^T and dS^T through shared memory.
// ----------------------------------------------------------------------------------------------
//
// Each Q tile (64 queries) runs three phases with a different warp layout each (w = warp 0..7):
//   (1) S^T = K Q^T, dP^T = V dO^T (128 x 64): warp w owns key rows 32*(w%4)..+31 x query
//       columns 32*(w/4)..+31; P^T and dS^T = P^T o (dP^T - D) are written to shared memory (bf16).
//   -- __syncthreads --
//   (2) dV += P^T dO, dK += dS^T Q (128 x D): warp w owns key rows 32*(w%4)..+31 x head columns
//       (D/2)*(w/4)..; accumulators stay in registers across Q tiles.
//   (3) dQ_tile = dS K (64 x D), contracting over the 128 keys: warp w owns query rows
//       32*(w%2)..+31 x head columns (D/4)*(w/2)..; added to the fp32 accumulator with
//       float2 atomics (sm_90 red.global.add.v2.f32), one pass per (Q tile, K tile).
// The warp tiles (32 x 32 / 32 x D/2 / 32 x D/4) cut shared-memory operand traffic per MMA to
// ~60% of v1 (whose warps held 16 key rows x a 32-query tile at D = 128).
// v2b: the Q tile's lse and D vectors are staged in shared memory with cp.async alongside Q / dO
// (v2 read them by __ldg inside phase 1).

// 4-byte cp.async (.ca) with zero fill when !valid (src must still be a mapped address).
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_size));
}

template <int D>
struct FpaBwdV2Config {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBkv = 128;
  static constexpr int kBq = 64;
  using KTile = Bf16Tile<kBkv, D>;
  using QTile = Bf16Tile<kBq, D>;
  using PTile = Bf16Tile<kBkv, kBq>;  // P^T / dS^T: key rows x query columns
  // K, V, 2 stages x (Q, dO), P^T, dS^T, 2 stages x (lse, D) of the Q tile (fp32).
  static constexpr int kRowVecBytes = kBq * 4;
  static constexpr int kSmem =
      2 * KTile::kBytes + 4 * QTile::kBytes + 2 * PTile::kBytes + 4 * kRowVecBytes;
  static_assert(kSmem <= 227 * 1024, "backward v2 shared memory exceeds sm_90's 227 KB");
  static_assert(kBkv == 4 * 32 && kBq == 2 * 32, "warp layouts assume 4 x 2 warps of 32 x 32");
};

template <int D, bool kCausal>
__global__ void __launch_bounds__(256, 1) FpaBackwardKernelV2(BwdParams p) {
  GridDepLaunchDependents();  // the postprocess launch waits for this grid's completion
  using Cfg = FpaBwdV2Config<D>;
  constexpr int kThr = Cfg::kThreads;
  constexpr int kBkv = Cfg::kBkv, kBq = Cfg::kBq;
  using KTile = typename Cfg::KTile;
  using QTile = typename Cfg::QTile;
  using PTile = typename Cfg::PTile;
  constexpr int kDH = D / 2;         // phase 2 head columns per warp
  constexpr int kDN2 = kDH / 8;      // ... as n-blocks
  constexpr int kDQ = D / 4;         // phase 3 head columns per warp
  constexpr int kDN3 = kDQ / 8;

  extern __shared__ __align__(128) char smem[];
  char* ks = smem;
  char* vs = ks + KTile::kBytes;
  char* qs = vs + KTile::kBytes;        // 2 stages of QTile::kBytes
  char* dos = qs + 2 * QTile::kBytes;   // 2 stages
  char* ps = dos + 2 * QTile::kBytes;   // P^T
  char* dss = ps + PTile::kBytes;       // dS^T
  float* lse_s = reinterpret_cast<float*>(dss + PTile::kBytes);  // 2 stages of kBq
  float* dv_s = lse_s + 2 * kBq;                                 // 2 stages of kBq

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int N = p.N;
  // Causal: grid (BH, K tiles), key block 0 (which every query sees) the heaviest, longest-first
  // in groups of heads (LptBlock); else grid (K tiles, BH).
  int jb = int(blockIdx.x), bh = int(blockIdx.y);
  if constexpr (kCausal) LptBlock(p.lpt_heads, jb, bh);
  const int kv0 = jb * kBkv;
  const int64_t head = int64_t(bh) * N * D;
  const bf16* q = p.q + head;
  const bf16* dO = p.do_ + head;
  const float* lse = p.lse + int64_t(bh) * N;
  const float* dvec = p.dvec + int64_t(bh) * N;
  float* dq_acc = p.dq_acc + head;
  // lse and D of Q tile `qt` into stage `st` (4-byte cp.async, zero past N; the readers select
  // +inf / 0 there). Threads 0..kBq-1 copy lse, kBq..2kBq-1 copy D.
  auto load_rowvecs = [&](int st, int qt, int tid_) {
    if (tid_ < 2 * kBq) {
      const int i = tid_ % kBq, row = qt * kBq + i;
      const bool valid = row < p.N;
      const float* src = tid_ < kBq ? lse : dvec;
      float* dst = (tid_ < kBq ? lse_s : dv_s) + st * kBq + i;
      CpAsync4(SmemAddr(dst), valid ? src + row : src, valid);
    }
  };

  // Causal: query rows < kv0 see none of these keys (kv0 is a multiple of kBq).
  const int qt_begin = kCausal ? kv0 / kBq : 0;
  const int qt_end = CeilDiv(N, kBq);

  LoadTileAsync<KTile, kThr>(ks, p.k + head, kv0, N, tid);
  LoadTileAsync<KTile, kThr>(vs, p.v + head, kv0, N, tid);
  LoadTileAsync<QTile, kThr>(qs, q, qt_begin * kBq, N, tid);
  LoadTileAsync<QTile, kThr>(dos, dO, qt_begin * kBq, N, tid);
  // Launched as a dependent of the preprocess launch (pdl): K, V, Q, dO above are older; D and
  // the zeroed dQ accumulator are its.
  GridDepWait();
  load_rowvecs(0, qt_begin, tid);
  CpAsyncCommit();

  // Warp layouts.
  const int kr = 32 * (warp & 3);        // phases 1, 2: key rows (CTA-local)
  const int qc = 32 * (warp >> 2);       // phase 1: query columns (tile-local)
  const int dc2 = kDH * (warp >> 2);     // phase 2: head columns
  const int qr3 = 32 * (warp & 1);       // phase 3: query rows (tile-local)
  const int dc3 = kDQ * (warp >> 1);     // phase 3: head columns

  float dk[2][kDN2][4], dv[2][kDN2][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    ZeroAcc(dk[mi]);
    ZeroAcc(dv[mi]);
  }
  const uint32_t kb = SmemAddr(ks), vb = SmemAddr(vs), pb = SmemAddr(ps), dsb = SmemAddr(dss);
  const int kw = kv0 + kr;  // first key row of this warp (phases 1, 2)

  for (int it = qt_begin; it < qt_end; ++it) {
    const int buf = (it - qt_begin) & 1;
    CpAsyncWait<0>();
    __syncthreads();  // Q/dO tile visible; every warp is done with the previous tile's phases 2-3
    if (it + 1 < qt_end) {
      LoadTileAsync<QTile, kThr>(qs + (buf ^ 1) * QTile::kBytes, q, (it + 1) * kBq, N, tid);
      LoadTileAsync<QTile, kThr>(dos + (buf ^ 1) * QTile::kBytes, dO, (it + 1) * kBq, N, tid);
      load_rowvecs(buf ^ 1, it + 1, tid);
    }
    CpAsyncCommit();
    const uint32_t qb = SmemAddr(qs + buf * QTile::kBytes), dob = SmemAddr(dos + buf * QTile::kBytes);
    const int q0 = it * kBq;
    const int qw = q0 + qc;  // first query column of this warp (phase 1)

    // ---- Phase 1: S^T, dP^T (32 keys x 32 queries per warp).
    {
      float s[2][4][4], dp[2][4][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ZeroAcc(s[mi]);
        ZeroAcc(dp[mi]);
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t bq[2][4], bd[2][4];
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          LoadBFrag2<QTile>(bq[np], qb, qc + 16 * np, 16 * kk, lane);
          LoadBFrag2<QTile>(bd[np], dob, qc + 16 * np, 16 * kk, lane);
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          uint32_t a[4];
          LoadAFrag<KTile>(a, kb, kr + 16 * mi, 16 * kk, lane);
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            MmaBf16(s[mi][2 * np], a, bq[np][0], bq[np][1]);
            MmaBf16(s[mi][2 * np + 1], a, bq[np][2], bq[np][3]);
          }
          LoadAFrag<KTile>(a, vb, kr + 16 * mi, 16 * kk, lane);
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            MmaBf16(dp[mi][2 * np], a, bd[np][0], bd[np][1]);
            MmaBf16(dp[mi][2 * np + 1], a, bd[np][2], bd[np][3]);
          }
        }
      }
      const bool need_mask = (kw + 32 > N) || (kCausal && kw + 31 > qw);
      if (need_mask) {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          // Rows are keys, columns are queries here.
          ApplyMask(s[mi], kw + 16 * mi, qw, lane,
                    [N](int key, int qry) { return key >= N || (kCausal && key > qry); });
        }
      }
      // P^T, dS^T = P^T o (dP^T - D) -> shared memory (bf16).
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        float l2[2], dc[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = qw + nb * 8 + 2 * t + e;
          const int i = buf * kBq + qc + nb * 8 + 2 * t + e;
          l2[e] = col < N ? lse_s[i] * kLog2e : INFINITY;  // +inf: P = 0 past N
          dc[e] = col < N ? dv_s[i] : 0.f;
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          float pv[4], dsv[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            pv[e] = FastExp2(fmaf(s[mi][nb][e], p.scale_log2, -l2[e & 1]));
            dsv[e] = pv[e] * (dp[mi][nb][e] - dc[e & 1]);
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int off = PTile::ByteOffset(kr + 16 * mi + g + 8 * h, (qc + nb * 8 + 2 * t) * 2);
            *reinterpret_cast<uint32_t*>(ps + off) = PackBf16x2(pv[2 * h], pv[2 * h + 1]);
            *reinterpret_cast<uint32_t*>(dss + off) = PackBf16x2(dsv[2 * h], dsv[2 * h + 1]);
          }
        }
      }
    }
    __syncthreads();  // P^T, dS^T complete

    // ---- Phase 2: dV += P^T dO, dK += dS^T Q (32 keys x D/2 per warp, contracting 64 queries).
#pragma unroll
    for (int kk = 0; kk < kBq / 16; ++kk) {
      uint32_t pa[2][4], da[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        LoadAFrag<PTile>(pa[mi], pb, kr + 16 * mi, 16 * kk, lane);
        LoadAFrag<PTile>(da[mi], dsb, kr + 16 * mi, 16 * kk, lane);
      }
#pragma unroll
      for (int np = 0; np < kDN2 / 2; ++np) {
        uint32_t b[4];
        LoadBFrag2Trans<QTile>(b, dob, 16 * kk, dc2 + 16 * np, lane);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          MmaBf16(dv[mi][2 * np], pa[mi], b[0], b[1]);
          MmaBf16(dv[mi][2 * np + 1], pa[mi], b[2], b[3]);
        }
        LoadBFrag2Trans<QTile>(b, qb, 16 * kk, dc2 + 16 * np, lane);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          MmaBf16(dk[mi][2 * np], da[mi], b[0], b[1]);
          MmaBf16(dk[mi][2 * np + 1], da[mi], b[2], b[3]);
        }
      }
    }

    // ---- Phase 3: dQ_tile = dS K (32 queries x D/4 per warp, contracting the 128 keys).
    {
      float acc[2][kDN3][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) ZeroAcc(acc[mi]);
      // Causal: keys past the tile's last query give dS = 0; skip those 16-key steps.
      const int kk_end = kCausal ? min(kBkv / 16, CeilDiv(q0 + kBq - kv0, 16)) : kBkv / 16;
#pragma unroll
      for (int kk = 0; kk < kBkv / 16; ++kk) {
        if (kk >= kk_end) break;
        uint32_t a[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          LoadAFragTrans<PTile>(a[mi], dsb, 16 * kk, qr3 + 16 * mi, lane);
        }
#pragma unroll
        for (int np = 0; np < kDN3 / 2; ++np) {
          uint32_t b[4];
          LoadBFrag2Trans<KTile>(b, kb, 16 * kk, dc3 + 16 * np, lane);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            MmaBf16(acc[mi][2 * np], a[mi], b[0], b[1]);
            MmaBf16(acc[mi][2 * np + 1], a[mi], b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = q0 + qr3 + 16 * mi + g + 8 * h;
          if (row >= N) continue;
          float* dst = dq_acc + int64_t(row) * D + dc3 + 2 * t;
#pragma unroll
          for (int nb = 0; nb < kDN3; ++nb) {
            atomicAdd(reinterpret_cast<float2*>(dst + nb * 8),
                      make_float2(acc[mi][nb][2 * h], acc[mi][nb][2 * h + 1]));
          }
        }
      }
    }
  }
  CpAsyncWait<0>();

  // dV and dK through the K and V tiles (free once every warp is past phase 3) and 16-byte row
  // stores (StageAccBf16).
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    StageAccBf16<KTile>(vs, kr + 16 * mi, dc2, lane, dv[mi], 1.f, 1.f);
    StageAccBf16<KTile>(ks, kr + 16 * mi, dc2, lane, dk[mi], p.tau, p.tau);
  }
  __syncthreads();
  const int nr = min(kBkv, N - kv0);
  StoreTileRows<KTile>(vs, p.dv + head + int64_t(kv0) * D, D, nr, tid, kThr);
  StoreTileRows<KTile>(ks, p.dk + head + int64_t(kv0) * D, D, nr, tid, kThr);
}

// ----------------------------------------------------------------------------------------------
// Host side.
// ----------------------------------------------------------------------------------------------

Status ValidateShape(const AttnShapeCuda& s, const char* who) {
  const std::string w(who);
  if (s.D != 64 && s.D != 128) {
    return InvalidArgument(w + ": head dim D must be 64 or 128, got " + std::to_string(s.D));
  }
  if (s.B < 1 || s.H < 1 || s.N < 1) {
    return InvalidArgument(w + ": B, H, N must be >= 1, got B=" + std::to_string(s.B) +
                           " H=" + std::to_string(s.H) + " N=" + std::to_string(s.N));
  }
  return CheckGridLimits(int64_t(s.B) * s.H, s.N, w);
}

Status CheckPtr(const void* ptr, const char* name, const char* who) {
  if (ptr == nullptr) return InvalidArgument(std::string(who) + ": " + name + " is null");
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
    return InvalidArgument(std::string(who) + ": " + name + " must be 16-byte aligned");
  }
  return Status::Ok();
}

// What both launchers check first: the shape, the options, the four tensors they share.
Status CheckShared(const AttnShapeCuda& s, const FpaCudaOptions& opt, const bf16* q, const bf16* k,
                   const bf16* v, const bf16* o, const char* who) {
  ABLATE_RETURN_IF_ERROR(ValidateShape(s, who));
  ABLATE_RETURN_IF_ERROR(CheckLptHeads(opt.lpt_heads, who));
  ABLATE_RETURN_IF_ERROR(CheckPtr(q, "q", who));
  ABLATE_RETURN_IF_ERROR(CheckPtr(k, "k", who));
  ABLATE_RETURN_IF_ERROR(CheckPtr(v, "v", who));
  return CheckPtr(o, "o", who);
}

// Which forward kernel runs. Production (kernel-lab variant "fpa v5"): the wgmma forward with two
// CTAs per SM (FpaForwardKernelWg, lab variant 9) for every shape: 1.57-1.75x the mma.sync
// forwards it replaced at d128, 1.22x at d64 (kernels/bench/README.md). Lab switch (read once per
// process): FPA_FWD_VARIANT = 1 (v1: Bq = 64, 2 stages; d128), 2 (v2), 6 (v2 + rescale skip;
// d128), 7 (v1 + rescale skip; d128), 9 (production); unset or 0 = production.
int FwdLabVariant() {
  static const int v = [] {
    const char* e = std::getenv("FPA_FWD_VARIANT");
    return e == nullptr ? 0 : std::atoi(e);
  }();
  return v;
}

// lpt: the kernel's grid is (BH, Q tiles), longest-first in groups of heads (ForwardCtaTiles'
// kLpt, LptGrid).
template <typename Kernel>
Status LaunchFwdKernel(Kernel kernel, int bq, int threads, int smem, const AttnShapeCuda& s,
                       FwdParams p, cudaStream_t stream, bool lpt = false) {
  ABLATE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
      "FpaForwardCuda: cudaFuncSetAttribute");
  ABLATE_ASSIGN_OR_RETURN(const dim3 grid, LptGrid(lpt, s.B * s.H, CeilDiv(s.N, bq), kernel,
                                                    threads, size_t(smem), &p.lpt_heads));
  kernel<<<grid, threads, smem, stream>>>(p);
  return CudaStatus(cudaGetLastError(), "FpaForwardCuda: launch");
}

template <int D, bool kCausal>
Status LaunchForward(const AttnShapeCuda& s, const FwdParams& p, cudaStream_t stream) {
  const int lab = FwdLabVariant();
  using CW = FpaFwdWgConfig<D>;
  switch (lab == 0 ? 9 : lab) {
    case 9:
      return LaunchFwdKernel(FpaForwardKernelWg<D, kCausal>, CW::kBq, CW::kThreads, CW::kSmem, s,
                             p, stream, /*lpt=*/kCausal);
    case 2:
      return LaunchFwdKernel(FpaForwardKernelV2<D, kCausal>, FpaFwdV2Config<D>::kBq,
                             FpaFwdV2Config<D>::kThreads, FpaFwdV2Config<D>::kSmem, s, p, stream);
    default:
      break;
  }
  if constexpr (D == 128) {
    switch (lab) {
      case 1:
        return LaunchFwdKernel(FpaForwardKernel<D, kCausal>, FpaConfig<D>::kBq, kThreads,
                               FpaConfig<D>::kFwdSmem, s, p, stream);
      case 6: {
        using C6 = FpaFwdV2Config<D>;
        return LaunchFwdKernel(FpaForwardKernelV2<D, kCausal, 64, 2, true>, C6::kBq, C6::kThreads,
                               C6::kSmem, s, p, stream);
      }
      case 7:
        return LaunchFwdKernel(FpaForwardKernel<D, kCausal, true>, FpaConfig<D>::kBq, kThreads,
                               FpaConfig<D>::kFwdSmem, s, p, stream);
      default:
        break;
    }
  }
  return InvalidArgument("FpaForwardCuda: unknown FPA_FWD_VARIANT " + std::to_string(lab) +
                         " for D = " + std::to_string(D));
}

template <int D, bool kCausal>
Status LaunchBackward(const AttnShapeCuda& s, BwdParams p, const bf16* o, bf16* dq,
                      cudaStream_t stream) {
  const int64_t rows = s.rows();
  FpaBwdPreprocessKernel<D><<<unsigned((rows + 7) / 8), 256, 0, stream>>>(
      o, p.do_, const_cast<float*>(p.dvec), p.dq_acc, rows);
  ABLATE_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "FpaBackwardCuda: preprocess launch");
  using Cfg2 = FpaBwdV2Config<D>;
  auto kernel = FpaBackwardKernelV2<D, kCausal>;
  ABLATE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg2::kSmem),
      "FpaBackwardCuda: cudaFuncSetAttribute");
  // The main and postprocess launches are programmatic dependents of the one before each.
  ABLATE_ASSIGN_OR_RETURN(const dim3 grid,
                          LptGrid(kCausal, s.B * s.H, CeilDiv(s.N, Cfg2::kBkv), kernel,
                                  Cfg2::kThreads, Cfg2::kSmem, &p.lpt_heads));
  ABLATE_CUDA_RETURN_IF_ERROR(
      LaunchKernel(kernel, grid, dim3(Cfg2::kThreads), Cfg2::kSmem, stream, /*pdl=*/true, p),
      "FpaBackwardCuda: main launch");
  const int64_t n4 = s.numel() / 4;  // D is a multiple of 4
  return CudaStatus(LaunchKernel(FpaBwdPostprocessKernel, dim3(unsigned((n4 + 255) / 256)),
                                 dim3(256), 0, stream, /*pdl=*/true, p.dq_acc, dq, n4, p.tau),
                    "FpaBackwardCuda: postprocess launch");
}

constexpr size_t kAlign = 256;

}  // namespace

size_t FpaWorkspaceBytes(const AttnShapeCuda& s) {
  if (s.B < 1 || s.H < 1 || s.N < 1 || s.D < 1) return 0;
  return size_t(RoundUp(s.numel() * int64_t(sizeof(float)), kAlign)) +
         size_t(RoundUp(s.rows() * int64_t(sizeof(float)), kAlign));
}

Status FpaForwardCuda(const AttnShapeCuda& s, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                      float* lse, void* /*workspace*/, size_t /*ws_bytes*/, cudaStream_t stream,
                      const FpaCudaOptions& opt) {
  ABLATE_RETURN_IF_ERROR(CheckShared(s, opt, q, k, v, o, "FpaForwardCuda"));
  if (lse == nullptr) return InvalidArgument("FpaForwardCuda: lse is null");
  const float tau = 1.f / std::sqrt(float(s.D));
  const FwdParams p{q, k, v, o, lse, s.N, tau * kLog2e, opt.lpt_heads};
  if (s.D == 64) return s.causal ? LaunchForward<64, true>(s, p, stream) : LaunchForward<64, false>(s, p, stream);
  return s.causal ? LaunchForward<128, true>(s, p, stream) : LaunchForward<128, false>(s, p, stream);
}

Status FpaBackwardCuda(const AttnShapeCuda& s, const bf16* q, const bf16* k, const bf16* v,
                       const bf16* o, const float* lse, const bf16* do_, bf16* dq, bf16* dk,
                       bf16* dv, void* workspace, size_t ws_bytes, cudaStream_t stream,
                       const FpaCudaOptions& opt) {
  constexpr const char* kWho = "FpaBackwardCuda";
  ABLATE_RETURN_IF_ERROR(CheckShared(s, opt, q, k, v, o, kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(do_, "do", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(dq, "dq", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(dk, "dk", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(dv, "dv", kWho));
  ABLATE_RETURN_IF_ERROR(CheckPtr(workspace, "workspace", kWho));
  if (lse == nullptr) return InvalidArgument("FpaBackwardCuda: lse is null");
  const size_t need = FpaWorkspaceBytes(s);
  if (ws_bytes < need) {
    return InvalidArgument("FpaBackwardCuda: workspace has " + std::to_string(ws_bytes) +
                           " bytes, needs " + std::to_string(need) + " (FpaWorkspaceBytes)");
  }
  float* dq_acc = static_cast<float*>(workspace);
  float* dvec = reinterpret_cast<float*>(static_cast<char*>(workspace) +
                                         RoundUp(s.numel() * int64_t(sizeof(float)), kAlign));
  const float tau = 1.f / std::sqrt(float(s.D));
  const BwdParams p{q, k, v, do_, lse, dvec, dq_acc, dk, dv, s.N, tau * kLog2e, tau,
                    opt.lpt_heads};
  if (s.D == 64) {
    return s.causal ? LaunchBackward<64, true>(s, p, o, dq, stream)
                    : LaunchBackward<64, false>(s, p, o, dq, stream);
  }
  return s.causal ? LaunchBackward<128, true>(s, p, o, dq, stream)
                  : LaunchBackward<128, false>(s, p, o, dq, stream);
}

}  // namespace ablate::kernels::cuda
