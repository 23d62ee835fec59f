// The attention input chain fused on the GPU (layers_cuda.h, QkvNormRopeForwardCuda /
// QkvNormRopeBackwardCuda: the contract is there): QKV split + per-head QK-norm + RoPE from one
// read of the QKV GEMM's bf16 output, and its backward with the gain gradients (per-block partials,
// summed in a fixed order: deterministic). Two shapes of kernel: one warp per (b, t, h) row (any
// even D <= 256), and the vectorized ones (D / 8 lanes per row, 8- and 16-byte accesses) where D
// and the alignment allow; plus the forward that also writes the K mean's partial sums for
// SageBwd's K-smoothing (kernels/ALGORITHMS.md §1.2).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "layers/cuda/layers_common.cuh"

namespace ablate::kernels::cuda {
namespace {

constexpr int kRopeMaxPairs = 4;  // pairs per lane: D / 2 <= 128

constexpr int kVMax = 2 * kRopeMaxPairs;  // v values per lane

// One warp per (b, t, h): q, k and v of one head at one position. Every load (q, k, v, the RoPE
// tables, the gains) is issued before any reduction, so a warp waits for memory once.
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeForwardKernel(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                             const bf16* qkv, const float* q_gain, const float* k_gain,
                             const float* cs, const float* sn, const float* k_offset, int B,
                             int Tn, int H, int D) {
  const int64_t rows = int64_t(B) * Tn * H;
  const int64_t row = int64_t(blockIdx.x) * kFusedWarps + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int h = int(row % H);
  const int64_t bt = row / H;
  const int t = int(bt % Tn);
  const int64_t b = bt / Tn;
  const int64_t C = int64_t(H) * D;
  const int half = D / 2;
  const bool norm = q_gain != nullptr;
  const bf16* src = qkv + bt * 3 * C + int64_t(h) * D;
  const int64_t dst_row = (b * H + h) * Tn + t;
  const int64_t dst = dst_row * D;
  float xa[2][kRopeMaxPairs], xb[2][kRopeMaxPairs], ga[2][kRopeMaxPairs], gb[2][kRopeMaxPairs];
  float c[kRopeMaxPairs], s[kRopeMaxPairs];
  bf16 vv[kVMax];
#pragma unroll
  for (int j = 0; j < kRopeMaxPairs; ++j) {
    const int i = lane + 32 * j;
    const bool in = i < half;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      xa[w][j] = in ? ToF(src[w * C + i]) : 0.f;
      xb[w][j] = in ? ToF(src[w * C + i + half]) : 0.f;
      const float* gain = w == 0 ? q_gain : k_gain;
      ga[w][j] = in && norm ? __ldg(gain + i) : 1.f;
      gb[w][j] = in && norm ? __ldg(gain + i + half) : 1.f;
    }
    c[j] = in ? __ldg(cs + int64_t(t) * half + i) : 0.f;
    s[j] = in ? __ldg(sn + int64_t(t) * half + i) : 0.f;
  }
#pragma unroll
  for (int j = 0; j < kVMax; ++j) {
    const int d = lane + 32 * j;
    if (d < D) vv[j] = src[2 * C + d];
  }
#pragma unroll
  for (int j = 0; j < kVMax; ++j) {
    const int d = lane + 32 * j;
    if (d < D) v[dst + d] = vv[j];
  }
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float rs = 1.f;
    if (norm) {
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < kRopeMaxPairs; ++j) ss += xa[w][j] * xa[w][j] + xb[w][j] * xb[w][j];
      ss = WarpSum(ss);
      rs = 1.0f / sqrtf(ss / float(D) + kEps);
      if (lane == 0) (w == 0 ? q_rstd : k_rstd)[dst_row] = rs;
    }
    bf16* out = w == 0 ? q : k;
    const float* off = w == 1 && k_offset != nullptr ? k_offset + int64_t(h) * D : nullptr;
#pragma unroll
    for (int j = 0; j < kRopeMaxPairs; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        // Without QK-norm the gains are 1 and rs is 1: the values pass through unchanged.
        const float a = norm ? xa[w][j] * rs * ga[w][j] : xa[w][j];
        const float bb = norm ? xb[w][j] * rs * gb[w][j] : xb[w][j];
        const float oa = a * c[j] - bb * s[j] + (off ? __ldg(off + i) : 0.f);
        const float ob = a * s[j] + bb * c[j] + (off ? __ldg(off + i + half) : 0.f);
        out[dst + i] = __float2bfloat16_rn(oa);
        out[dst + i + half] = __float2bfloat16_rn(ob);
      }
    }
  }
}

// One warp per (b, t, h), a fixed set of rows per warp; gain partials per block (q then k). Every
// load of a row is issued before its reductions.
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeBackwardKernel(bf16* dqkv, float* partial, const bf16* dq, const bf16* dk,
                              const bf16* dv, const bf16* qkv, const float* q_gain,
                              const float* k_gain, const float* q_rstd, const float* k_rstd,
                              const float* cs, const float* sn, int B, int Tn, int H, int D) {
  extern __shared__ float sh[];  // (kFusedWarps, 2, D): each warp's own gain accumulators
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t rows = int64_t(B) * Tn * H;
  const int64_t C = int64_t(H) * D;
  const int half = D / 2;
  const bool norm = q_gain != nullptr;
  float* acc = sh + warp * 2 * D;
  if (norm) {
    for (int i = lane; i < 2 * D; i += 32) acc[i] = 0.f;
  }
  float wa[2][kRopeMaxPairs], wb[2][kRopeMaxPairs];  // the gains, loaded once
#pragma unroll
  for (int j = 0; j < kRopeMaxPairs; ++j) {
    const int i = lane + 32 * j;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const float* gain = w == 0 ? q_gain : k_gain;
      wa[w][j] = i < half && norm ? gain[i] : 0.f;
      wb[w][j] = i < half && norm ? gain[i + half] : 0.f;
    }
  }
  for (int64_t row = int64_t(blockIdx.x) * kFusedWarps + warp; row < rows;
       row += int64_t(gridDim.x) * kFusedWarps) {
    const int h = int(row % H);
    const int64_t bt = row / H;
    const int t = int(bt % Tn);
    const int64_t b = bt / Tn;
    const int64_t src_row = (b * H + h) * Tn + t;
    const int64_t src = src_row * D;
    const bf16* x = qkv + bt * 3 * C + int64_t(h) * D;
    bf16* out = dqkv + bt * 3 * C + int64_t(h) * D;
    float u[2][kRopeMaxPairs], z[2][kRopeMaxPairs], xa[2][kRopeMaxPairs], xb[2][kRopeMaxPairs];
    float c[kRopeMaxPairs], s[kRopeMaxPairs];
    bf16 vv[kVMax];
#pragma unroll
    for (int j = 0; j < kRopeMaxPairs; ++j) {
      const int i = lane + 32 * j;
      const bool in = i < half;
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        const bf16* g = w == 0 ? dq : dk;
        u[w][j] = in ? ToF(g[src + i]) : 0.f;
        z[w][j] = in ? ToF(g[src + i + half]) : 0.f;
        xa[w][j] = in && norm ? ToF(x[w * C + i]) : 0.f;
        xb[w][j] = in && norm ? ToF(x[w * C + i + half]) : 0.f;
      }
      c[j] = in ? __ldg(cs + int64_t(t) * half + i) : 0.f;
      s[j] = in ? __ldg(sn + int64_t(t) * half + i) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kVMax; ++j) {
      const int d = lane + 32 * j;
      if (d < D) vv[j] = dv[src + d];
    }
    float rs[2] = {1.f, 1.f};
    if (norm) {
      rs[0] = q_rstd[src_row];
      rs[1] = k_rstd[src_row];
    }
#pragma unroll
    for (int j = 0; j < kVMax; ++j) {
      const int d = lane + 32 * j;
      if (d < D) out[2 * C + d] = vv[j];
    }
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      float ga[kRopeMaxPairs], gb[kRopeMaxPairs];
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < kRopeMaxPairs; ++j) {
        ga[j] = u[w][j] * c[j] + z[w][j] * s[j];  // R^T
        gb[j] = z[w][j] * c[j] - u[w][j] * s[j];
        dot += wa[w][j] * ga[j] * xa[w][j] + wb[w][j] * gb[j] * xb[w][j];
      }
      bf16* o = out + w * C;
      if (norm) {
        dot = WarpSum(dot);
        const float r = rs[w];
        const float kk = r * r * r * dot / float(D);
#pragma unroll
        for (int j = 0; j < kRopeMaxPairs; ++j) {
          const int i = lane + 32 * j;
          if (i < half) {
            o[i] = __float2bfloat16_rn(r * wa[w][j] * ga[j] - kk * xa[w][j]);
            o[i + half] = __float2bfloat16_rn(r * wb[w][j] * gb[j] - kk * xb[w][j]);
            acc[w * D + i] += ga[j] * xa[w][j] * r;
            acc[w * D + i + half] += gb[j] * xb[w][j] * r;
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kRopeMaxPairs; ++j) {
          const int i = lane + 32 * j;
          if (i < half) {
            o[i] = __float2bfloat16_rn(ga[j]);
            o[i + half] = __float2bfloat16_rn(gb[j]);
          }
        }
      }
    }
  }
  if (!norm) return;
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * D; c += blockDim.x) {
    float t = 0.f;
    for (int w = 0; w < kFusedWarps; ++w) t += sh[w * 2 * D + c];
    partial[int64_t(blockIdx.x) * 2 * D + c] = t;
  }
}


// Vectorized QKV kernels for D in {8, 16, ..., 256} (D / 8 a power of two): L = D / 8 lanes per
// (b, t, h) row, so one warp holds 32 / L rows. Lane l owns the rotary pairs 4l .. 4l + 3 (8-byte
// loads of q and k at 4l and D/2 + 4l, float4 loads of the RoPE tables) and v's values 8l .. 8l + 7
// (one 16-byte load). The per-element arithmetic is the scalar kernels'; only the order of the
// row reductions differs. The scalar kernels (2-byte accesses, one row per warp) were 3-5x above
// the memory bound at D = 64; these keep every access 8 or 16 bytes wide.
__device__ __forceinline__ void LoadBf4(const bf16* p, float (&f)[4]) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
}

__device__ __forceinline__ void StoreBf4(bf16* p, const float (&f)[4]) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f[2], f[3]);
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&a);
  u.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = u;
}

template <int L>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Blocks of the vectorized forward: enough to fill the GPU several times; the gains are loaded once
// per thread, so a few rows per group are worth it.
int QkvVecForwardBlocks(int64_t rows, int L) {
  const int64_t per_block = int64_t(kFusedWarps) * (32 / L);
  return int(std::max<int64_t>(1, std::min<int64_t>(4096, (rows + per_block - 1) / per_block)));
}

// One (b, t, h) row of the vectorized forward for the L lanes of group `grp` (lane l of it):
// loads q, k, v of the row from qkv, writes q, k (normed, rotated), v and the rstds when `valid`.
// kRounded: k's outputs as stored (bf16-rounded) also come back in ka / kb (pairs 4l .. 4l + 3 and
// D/2 + 4l ..), for the K-mean sums. k_offset (H x D, or null) is added to k after RoPE, before
// its rounding. Every lane of the warp must call it (group shuffles).
template <int L, bool kRounded>
__device__ __forceinline__ void QkvNormRopeRowVec(bf16* q, bf16* k, bf16* v, float* q_rstd,
                                                  float* k_rstd, const bf16* qkv, bool norm,
                                                  const float (&ga)[2][4], const float (&gb)[2][4],
                                                  const float* cs, const float* sn,
                                                  const float* k_offset, int64_t b, int t, int h,
                                                  int Tn, int H, bool valid, int l,
                                                  float (&ka)[4], float (&kb)[4]) {
  constexpr int D = 8 * L, half = 4 * L;
  const int64_t C = int64_t(H) * D;
  const int64_t bt = b * Tn + t;
  const bf16* src = qkv + bt * 3 * C + int64_t(h) * D;
  const int64_t dst_row = (b * H + h) * Tn + t;
  const int64_t dst = dst_row * D;
  float xa[2][4], xb[2][4];
  LoadBf4(src + 4 * l, xa[0]);
  LoadBf4(src + half + 4 * l, xb[0]);
  LoadBf4(src + C + 4 * l, xa[1]);
  LoadBf4(src + C + half + 4 * l, xb[1]);
  const uint4 vv = *reinterpret_cast<const uint4*>(src + 2 * C + 8 * l);
  const float4 c4 = __ldg(reinterpret_cast<const float4*>(cs + int64_t(t) * half + 4 * l));
  const float4 s4 = __ldg(reinterpret_cast<const float4*>(sn + int64_t(t) * half + 4 * l));
  const float c[4] = {c4.x, c4.y, c4.z, c4.w};
  const float s[4] = {s4.x, s4.y, s4.z, s4.w};
  if (valid) *reinterpret_cast<uint4*>(v + dst + 8 * l) = vv;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    float rs = 1.f;
    if (norm) {
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) ss += xa[w][j] * xa[w][j] + xb[w][j] * xb[w][j];
      ss = GroupSum<L>(ss);
      rs = 1.0f / sqrtf(ss / float(D) + kEps);
      if (valid && l == 0) (w == 0 ? q_rstd : k_rstd)[dst_row] = rs;
    }
    float oa[4], ob[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float a = norm ? xa[w][j] * rs * ga[w][j] : xa[w][j];
      const float bb = norm ? xb[w][j] * rs * gb[w][j] : xb[w][j];
      oa[j] = a * c[j] - bb * s[j];
      ob[j] = a * s[j] + bb * c[j];
    }
    if (w == 1 && k_offset != nullptr) {
      const float* off = k_offset + int64_t(h) * D;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        oa[j] += __ldg(off + 4 * l + j);
        ob[j] += __ldg(off + half + 4 * l + j);
      }
    }
    if (valid) {
      bf16* out = w == 0 ? q : k;
      StoreBf4(out + dst + 4 * l, oa);
      StoreBf4(out + dst + half + 4 * l, ob);
    }
    if (kRounded && w == 1) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ka[j] = __bfloat162float(__float2bfloat16_rn(oa[j]));
        kb[j] = __bfloat162float(__float2bfloat16_rn(ob[j]));
      }
    }
  }
}

// The gains of lane l's pairs (1 without QK-norm).
template <int L>
__device__ __forceinline__ void LoadRopeGains(const float* q_gain, const float* k_gain, int l,
                                              float (&ga)[2][4], float (&gb)[2][4]) {
  constexpr int half = 4 * L;
  const bool norm = q_gain != nullptr;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const float* gain = w == 0 ? q_gain : k_gain;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      ga[w][j] = norm ? __ldg(gain + 4 * l + j) : 1.f;
      gb[w][j] = norm ? __ldg(gain + half + 4 * l + j) : 1.f;
    }
  }
}

template <int L>
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeForwardVecKernel(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                                const bf16* qkv, const float* q_gain, const float* k_gain,
                                const float* cs, const float* sn, const float* k_offset, int B,
                                int Tn, int H) {
  constexpr int G = 32 / L;
  const int64_t rows = int64_t(B) * Tn * H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int l = lane % L, grp = lane / L;
  float ga[2][4], gb[2][4], ka[4], kb[4];
  LoadRopeGains<L>(q_gain, k_gain, l, ga, gb);
  // The loop bound is the warp's first row, so every lane of a warp runs the same iterations (the
  // group sums shuffle across the whole warp); rows past the end load row rows-1 and store nothing.
  for (int64_t wrow = (int64_t(blockIdx.x) * kFusedWarps + warp) * G; wrow < rows;
       wrow += int64_t(gridDim.x) * kFusedWarps * G) {
    const int64_t row = wrow + grp;
    const bool valid = row < rows;
    const int64_t r = valid ? row : rows - 1;
    const int h = int(r % H);
    const int64_t bt = r / H;
    QkvNormRopeRowVec<L, false>(q, k, v, q_rstd, k_rstd, qkv, q_gain != nullptr, ga, gb, cs, sn,
                                k_offset, bt / Tn, int(bt % Tn), h, Tn, H, valid, l, ka, kb);
  }
}

// The same rows with the K mean's partial sums (SageBwd's K-smoothing): block (p, BH - 1 - bh)
// does tokens [p R, min(Tn, (p + 1) R)) of head bh = b H + h, group g (of kFusedThreads / L)
// tokens g, g + groups, ...; each lane sums its k outputs as stored (bf16) in double, the groups
// are added in a fixed order: k_sums[(bh P + p) D + d] (P = gridDim.x parts). Deterministic.
template <int L>
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeForwardSumsKernel(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                                 double* k_sums, const bf16* qkv, const float* q_gain,
                                 const float* k_gain, const float* cs, const float* sn,
                                 const float* k_offset, int Tn, int H, int rows_per_part) {
  constexpr int D = 8 * L, half = 4 * L, kGroups = kFusedThreads / L;
  __shared__ double part[kGroups][D];
  const int l = threadIdx.x % L, grp = threadIdx.x / L;
  // Heads in descending order: the lowest heads' q, k, v are written last, so they are the ones
  // still in L2 when the quantization launch after this pass starts at head 0.
  const int bh = int(gridDim.y) - 1 - int(blockIdx.y), h = bh % H;
  const int64_t b = bh / H;
  const int t0 = blockIdx.x * rows_per_part, t1 = min(Tn, t0 + rows_per_part);
  float ga[2][4], gb[2][4], ka[4], kb[4];
  LoadRopeGains<L>(q_gain, k_gain, l, ga, gb);
  double sa[4] = {0.0, 0.0, 0.0, 0.0}, sb[4] = {0.0, 0.0, 0.0, 0.0};
  // The loop bound is the warp's first token (the group shuffles span the warp); tokens past t1
  // load token t1 - 1 and store nothing.
  constexpr int G = 32 / L;
  for (int tw = t0 + grp / G * G; tw < t1; tw += kGroups) {
    const int tt = tw + grp % G;
    const bool valid = tt < t1;
    QkvNormRopeRowVec<L, true>(q, k, v, q_rstd, k_rstd, qkv, q_gain != nullptr, ga, gb, cs, sn,
                               k_offset, b, valid ? tt : t1 - 1, h, Tn, H, valid, l, ka, kb);
    if (valid) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        sa[j] += ka[j];
        sb[j] += kb[j];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    part[grp][4 * l + j] = sa[j];
    part[grp][half + 4 * l + j] = sb[j];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kFusedThreads) {
    double s = 0.0;
    for (int g = 0; g < kGroups; ++g) s += part[g][d];
    k_sums[(int64_t(bh) * gridDim.x + blockIdx.x) * D + d] = s;
  }
}

// Gain partials per block (P, 2, D) as the scalar kernel's: each group accumulates its rows in
// registers, then the block sums its groups in a fixed order.
template <int L>
__global__ void __launch_bounds__(kFusedThreads)
    QkvNormRopeBackwardVecKernel(bf16* dqkv, float* partial, const bf16* dq, const bf16* dk,
                                 const bf16* dv, const bf16* qkv, const float* q_gain,
                                 const float* k_gain, const float* q_rstd, const float* k_rstd,
                                 const float* cs, const float* sn, int B, int Tn, int H) {
  constexpr int D = 8 * L, half = 4 * L, G = 32 / L;
  extern __shared__ float sh[];  // (kFusedThreads / L groups, 2, D)
  const int64_t rows = int64_t(B) * Tn * H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int l = lane % L, grp = lane / L;
  const int64_t C = int64_t(H) * D;
  const bool norm = q_gain != nullptr;
  float wa[2][4], wb[2][4], acc_a[2][4], acc_b[2][4];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const float* gain = w == 0 ? q_gain : k_gain;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      wa[w][j] = norm ? __ldg(gain + 4 * l + j) : 0.f;
      wb[w][j] = norm ? __ldg(gain + half + 4 * l + j) : 0.f;
      acc_a[w][j] = 0.f;
      acc_b[w][j] = 0.f;
    }
  }
  for (int64_t wrow = (int64_t(blockIdx.x) * kFusedWarps + warp) * G; wrow < rows;
       wrow += int64_t(gridDim.x) * kFusedWarps * G) {
    const int64_t row = wrow + grp;
    const bool valid = row < rows;
    const int64_t r = valid ? row : rows - 1;
    const int h = int(r % H);
    const int64_t bt = r / H;
    const int t = int(bt % Tn);
    const int64_t b = bt / Tn;
    const int64_t src_row = (b * H + h) * Tn + t;
    const int64_t src = src_row * D;
    const bf16* x = qkv + bt * 3 * C + int64_t(h) * D;
    bf16* out = dqkv + bt * 3 * C + int64_t(h) * D;
    float u[2][4], z[2][4], xa[2][4], xb[2][4];
    LoadBf4(dq + src + 4 * l, u[0]);
    LoadBf4(dq + src + half + 4 * l, z[0]);
    LoadBf4(dk + src + 4 * l, u[1]);
    LoadBf4(dk + src + half + 4 * l, z[1]);
    if (norm) {
      LoadBf4(x + 4 * l, xa[0]);
      LoadBf4(x + half + 4 * l, xb[0]);
      LoadBf4(x + C + 4 * l, xa[1]);
      LoadBf4(x + C + half + 4 * l, xb[1]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) xa[0][j] = xb[0][j] = xa[1][j] = xb[1][j] = 0.f;
    }
    const uint4 vv = *reinterpret_cast<const uint4*>(dv + src + 8 * l);
    const float4 c4 = __ldg(reinterpret_cast<const float4*>(cs + int64_t(t) * half + 4 * l));
    const float4 s4 = __ldg(reinterpret_cast<const float4*>(sn + int64_t(t) * half + 4 * l));
    const float c[4] = {c4.x, c4.y, c4.z, c4.w};
    const float s[4] = {s4.x, s4.y, s4.z, s4.w};
    float rs[2] = {1.f, 1.f};
    if (norm) {
      rs[0] = q_rstd[src_row];
      rs[1] = k_rstd[src_row];
    }
    if (valid) *reinterpret_cast<uint4*>(out + 2 * C + 8 * l) = vv;
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      float ga[4], gb[4], oa[4], ob[4];
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        ga[j] = u[w][j] * c[j] + z[w][j] * s[j];  // R^T
        gb[j] = z[w][j] * c[j] - u[w][j] * s[j];
        dot += wa[w][j] * ga[j] * xa[w][j] + wb[w][j] * gb[j] * xb[w][j];
      }
      if (norm) {
        dot = GroupSum<L>(dot);
        const float rr = rs[w];
        const float kk = rr * rr * rr * dot / float(D);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          oa[j] = rr * wa[w][j] * ga[j] - kk * xa[w][j];
          ob[j] = rr * wb[w][j] * gb[j] - kk * xb[w][j];
          if (valid) {
            acc_a[w][j] += ga[j] * xa[w][j] * rr;
            acc_b[w][j] += gb[j] * xb[w][j] * rr;
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          oa[j] = ga[j];
          ob[j] = gb[j];
        }
      }
      if (valid) {
        StoreBf4(out + w * C + 4 * l, oa);
        StoreBf4(out + w * C + half + 4 * l, ob);
      }
    }
  }
  if (!norm) return;
  float* mine = sh + (threadIdx.x / L) * 2 * D;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      mine[w * D + 4 * l + j] = acc_a[w][j];
      mine[w * D + half + 4 * l + j] = acc_b[w][j];
    }
  }
  __syncthreads();
  constexpr int kGroups = kFusedThreads / L;
  for (int i = threadIdx.x; i < 2 * D; i += blockDim.x) {
    float tot = 0.f;
    for (int g = 0; g < kGroups; ++g) tot += sh[g * 2 * D + i];
    partial[int64_t(blockIdx.x) * 2 * D + i] = tot;
  }
}

// L for the vectorized kernels, or 0 when D or a pointer does not allow them.
int QkvVecLanes(int D, std::initializer_list<const void*> ptrs) {
  if (D % 8 != 0) return 0;
  const int L = D / 8;
  if (L > 32 || (L & (L - 1)) != 0) return 0;
  for (const void* p : ptrs)
    if (p != nullptr && !Aligned16(p)) return 0;
  return L;
}

template <typename F>
void DispatchLanes(int L, F&& f) {
  switch (L) {
    case 1: f(std::integral_constant<int, 1>()); break;
    case 2: f(std::integral_constant<int, 2>()); break;
    case 4: f(std::integral_constant<int, 4>()); break;
    case 8: f(std::integral_constant<int, 8>()); break;
    case 16: f(std::integral_constant<int, 16>()); break;
    case 32: f(std::integral_constant<int, 32>()); break;
    default: break;
  }
}

Status CheckQkvNormRope(const char* what, int B, int Tn, int H, int D) {
  ABLATE_RETURN_IF_ERROR(CheckSizes(what, int64_t(B) * Tn * H, D));
  if (D % 2 != 0 || D > 2 * 32 * kRopeMaxPairs) {
    return InvalidArgument(std::string(what) + ": head size D must be even and <= " +
                           std::to_string(2 * 32 * kRopeMaxPairs) + ", got " + std::to_string(D));
  }
  return Status::Ok();
}

}  // namespace

Status QkvNormRopeForwardCuda(bf16* q, bf16* k, bf16* v, float* q_rstd, float* k_rstd,
                              const bf16* qkv, const float* q_gain, const float* k_gain,
                              const float* cos, const float* sin, int B, int Tn, int H, int D,
                              cudaStream_t stream, double* k_sums, int k_rows_per_part,
                              const float* k_offset) {
  ABLATE_RETURN_IF_ERROR(CheckQkvNormRope("QkvNormRopeForwardCuda", B, Tn, H, D));
  if ((q_gain == nullptr) != (k_gain == nullptr)) {
    return InvalidArgument("QkvNormRopeForwardCuda: q_gain and k_gain must both be set or null");
  }
  const int64_t rows = int64_t(B) * Tn * H;
  if (rows == 0) return Status::Ok();
  const int L = QkvVecLanes(D, {q, k, v, qkv, cos, sin});
  if (k_sums != nullptr) {
    if (k_rows_per_part < 1) {
      return InvalidArgument("QkvNormRopeForwardCuda: k_rows_per_part must be >= 1, got " +
                             std::to_string(k_rows_per_part));
    }
    if (L == 0) {
      return InvalidArgument("QkvNormRopeForwardCuda: k_sums need the vectorized kernel (D / 8 a "
                             "power of two, 16-byte aligned buffers), got D = " +
                             std::to_string(D));
    }
    const int parts = (Tn + k_rows_per_part - 1) / k_rows_per_part;
    if (int64_t(B) * H > 65535) {
      return InvalidArgument("QkvNormRopeForwardCuda: k_sums with B * H > 65535");
    }
    DispatchLanes(L, [&](auto lanes) {
      constexpr int kL = decltype(lanes)::value;
      QkvNormRopeForwardSumsKernel<kL><<<dim3(parts, B * H), kFusedThreads, 0, stream>>>(
          q, k, v, q_rstd, k_rstd, k_sums, qkv, q_gain, k_gain, cos, sin, k_offset, Tn, H,
          k_rows_per_part);
    });
    return Launched("QkvNormRopeForwardCuda (k sums)");
  }
  if (L > 0) {
    DispatchLanes(L, [&](auto lanes) {
      constexpr int kL = decltype(lanes)::value;
      QkvNormRopeForwardVecKernel<kL><<<QkvVecForwardBlocks(rows, kL), kFusedThreads, 0, stream>>>(
          q, k, v, q_rstd, k_rstd, qkv, q_gain, k_gain, cos, sin, k_offset, B, Tn, H);
    });
  } else {
    QkvNormRopeForwardKernel<<<Blocks(rows, kFusedWarps), kFusedThreads, 0, stream>>>(
        q, k, v, q_rstd, k_rstd, qkv, q_gain, k_gain, cos, sin, k_offset, B, Tn, H, D);
  }
  return Launched("QkvNormRopeForwardCuda");
}

size_t QkvNormRopeBackwardScratch(int B, int Tn, int H, int D) {
  return size_t(FusedBlocks(int64_t(B) * Tn * H)) * 2 * size_t(std::max(D, 1));
}

Status QkvNormRopeBackwardCuda(bf16* dqkv, float* dq_gain, float* dk_gain, const bf16* dq,
                               const bf16* dk, const bf16* dv, const bf16* qkv, const float* q_gain,
                               const float* k_gain, const float* q_rstd, const float* k_rstd,
                               const float* cos, const float* sin, int B, int Tn, int H, int D,
                               float* scratch, size_t scratch_floats, cudaStream_t stream) {
  ABLATE_RETURN_IF_ERROR(CheckQkvNormRope("QkvNormRopeBackwardCuda", B, Tn, H, D));
  const bool norm = q_gain != nullptr;
  if (norm != (k_gain != nullptr) || norm != (dq_gain != nullptr) || norm != (dk_gain != nullptr)) {
    return InvalidArgument(
        "QkvNormRopeBackwardCuda: q_gain, k_gain, dq_gain, dk_gain must all be set or all null");
  }
  if (norm && scratch_floats < QkvNormRopeBackwardScratch(B, Tn, H, D)) {
    return InvalidArgument("QkvNormRopeBackwardCuda: scratch of " + std::to_string(scratch_floats) +
                           " floats, need " +
                           std::to_string(QkvNormRopeBackwardScratch(B, Tn, H, D)));
  }
  const int64_t rows = int64_t(B) * Tn * H;
  if (rows == 0) return Status::Ok();
  const int P = FusedBlocks(rows);
  const int L = QkvVecLanes(D, {dqkv, dq, dk, dv, qkv, cos, sin});
  if (L > 0) {
    // (kFusedThreads / L) groups x 2 x (8 L) floats: the same 16 KiB for every L.
    const size_t smem = norm ? size_t(kFusedThreads) * 16 * sizeof(float) : 0;
    DispatchLanes(L, [&](auto lanes) {
      constexpr int kL = decltype(lanes)::value;
      QkvNormRopeBackwardVecKernel<kL><<<P, kFusedThreads, smem, stream>>>(
          dqkv, scratch, dq, dk, dv, qkv, q_gain, k_gain, q_rstd, k_rstd, cos, sin, B, Tn, H);
    });
  } else {
    const size_t smem = norm ? size_t(kFusedWarps) * 2 * D * sizeof(float) : 0;
    QkvNormRopeBackwardKernel<<<P, kFusedThreads, smem, stream>>>(
        dqkv, scratch, dq, dk, dv, qkv, q_gain, k_gain, q_rstd, k_rstd, cos, sin, B, Tn, H, D);
  }
  if (norm) {
    // partial is (P, 2, D): column c < D is q's gain, c >= D k's; sum q and k separately.
    SumPartialsColumns(dq_gain, scratch, P, 2 * D, D, stream);
    SumPartialsColumns(dk_gain, scratch + D, P, 2 * D, D, stream);
  }
  return Launched("QkvNormRopeBackwardCuda");
}

}  // namespace ablate::kernels::cuda
