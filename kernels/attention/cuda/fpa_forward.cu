// FPA on the GPU: the forward kernel (sm_90a, wgmma) and its launcher; the host API is
// attention_cuda.h, the numerics kernels/ALGORITHMS.md §1.1. Grid (BH, Q tiles of 128 rows)
// causal (longest-first across heads, LptGrid) or (Q tiles, BH); two warpgroups x 64 query rows,
// K / V double-buffered by cp.async into swizzled GmmaTiles, S = Q K^T by wgmma, the online
// softmax in base 2 on S * tau * log2(e), O += P V by wgmma with P from registers, two CTAs per
// SM. Masking: a compile-time causal flag; a tile gets the (row, col) mask only when it touches
// the diagonal or the sequence tail; loads past N are zero-filled, masked keys get -inf.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "attention/cuda/fpa_common.cuh"

namespace ablate::kernels::fpa {
namespace {

struct FwdParams {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* o;
  float* lse;
  int N;
  float scale_log2;  // tau * log2(e)
  int lpt_heads;     // causal: heads per longest-first group (LptBlock; set by LptGrid)
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
// kLpt (causal): grid (BH, Q tiles), longest-first in groups of heads
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
// The forward by wgmma: 8 warps = two warpgroups x 64 query rows (Bq = 128), Bkv = 64,
// K / V double-buffered by cp.async into 128B-swizzled GmmaTiles; S = Q K^T by wgmma from shared
// memory (one warpgroup per 64-row Q half), the online softmax of v2 per warp (16 rows), O += P V
// by wgmma with P from registers (the v2 A fragments as they are) and V read MN-major (stored
// [key][d]: MmaBf16RSTransB / DescMN), O accumulated in the wgmma registers. The mask test is per
// CTA and no warp skips a tile, so every branch around a wgmma is uniform (ptxas serializes
// wgmmas under branches it cannot prove uniform).
// ----------------------------------------------------------------------------------------------
template <int D>
struct FwdConfig {
  static constexpr int kThreads = 256;
  static constexpr int kBq = 128, kBkv = 64;
  using Tile = wgmma::GmmaTile<64, 2 * D>;  // 64 rows of D bf16: a Q half, a K or a V tile
  static constexpr int kQ = 0;              // Q halves 0 and 1
  static constexpr int kStage0 = 2 * Tile::kBytes;
  static constexpr int kStage = 2 * Tile::kBytes;  // K, then V
  static constexpr int kSmem = kStage0 + 2 * kStage + 1024;  // + alignment slack
  // Two CTAs per SM (128 registers at d128, 0 spills): 1.27x one CTA of the same kernel at d128.
  static constexpr int kMinBlocks = 2;
};

template <int D, bool kCausal>
__global__ void __launch_bounds__(256, FwdConfig<D>::kMinBlocks)
    FpaForwardKernel(FwdParams p) {
  using Cfg = FwdConfig<D>;
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

template <int D, bool kCausal>
Status LaunchForward(const AttnShape& s, FwdParams p, cudaStream_t stream) {
  using C = FwdConfig<D>;
  auto kernel = FpaForwardKernel<D, kCausal>;
  ABLATE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem),
      "FpaForwardCuda: cudaFuncSetAttribute");
  ABLATE_ASSIGN_OR_RETURN(const dim3 grid, LptGrid(kCausal, s.B * s.H, CeilDiv(s.N, C::kBq),
                                                    kernel, C::kThreads, size_t(C::kSmem),
                                                    &p.lpt_heads));
  kernel<<<grid, C::kThreads, C::kSmem, stream>>>(p);
  return CudaStatus(cudaGetLastError(), "FpaForwardCuda: launch");
}

}  // namespace
}  // namespace ablate::kernels::fpa

namespace ablate::kernels {

using bf16 = __nv_bfloat16;

Status FpaForwardCuda(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                      float* lse, cudaStream_t stream) {
  using namespace fpa;
  ABLATE_RETURN_IF_ERROR(CheckShared(s, q, k, v, o, "FpaForwardCuda"));
  if (lse == nullptr) return InvalidArgument("FpaForwardCuda: lse is null");
  const float tau = 1.f / std::sqrt(float(s.D));
  const FwdParams p{q, k, v, o, lse, s.N, tau * kLog2e, 0};
  if (s.D == 64) return s.causal ? LaunchForward<64, true>(s, p, stream) : LaunchForward<64, false>(s, p, stream);
  return s.causal ? LaunchForward<128, true>(s, p, stream) : LaunchForward<128, false>(s, p, stream);
}

}  // namespace ablate::kernels
