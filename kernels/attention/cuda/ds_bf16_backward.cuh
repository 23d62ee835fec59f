// SageBwd's bf16-dS pass (AttnOptions::ds_bf16; numerics kernels/ALGORITHMS.md §1.2): dQ and dK
// again, their dS products in bf16, over SageBwd's INT8 codes. Included by fpa_backward.cu only,
// whose preprocess and postprocess run around it (SageDsBf16BackwardCuda).
//
// DsBf16BackwardKernel, a FlashAttention-2 kernel on mma.sync m16n8k16: 8 warps, 128 keys per
// CTA (the K tile resident in shared memory), Q tiles of 64 double-buffered with cp.async (with
// their lse, D).
//
// Each Q tile (64 queries) runs three phases with a different warp layout each (w = warp 0..7):
//   (1) S^T = K^ Q^T from the codes, dP^T = V dO^T (128 x 64): warp w owns key rows
//       32*(w%4)..+31 x query columns 32*(w/4)..+31; dS^T = P^T o (dP^T - D) is written to shared
//       memory (bf16).
//   -- __syncthreads --
//   (2) dK += dS^T Q (128 x D): warp w owns key rows 32*(w%4)..+31 x head columns (D/2)*(w/4)..;
//       the accumulators stay in registers across Q tiles; dK is scaled by tau at the store.
//   (3) dQ_tile = dS K (64 x D), contracting over the 128 keys: warp w owns query rows
//       32*(w%2)..+31 x head columns (D/4)*(w/2)..; added to the fp32 accumulator with
//       float2 atomics (sm_90 red.global.add.v2.f32), one pass per (Q tile, K tile).
// The warp tiles (32 x 32 / 32 x D/2 / 32 x D/4) cut shared-memory operand traffic per MMA to
// ~60% of 16 key rows x a 32-query tile per warp at D = 128.
#pragma once

namespace ablate::kernels::fpa {
namespace {

// 4-byte cp.async (.ca) with zero fill when !valid (src must still be a mapped address).
__device__ __forceinline__ void CpAsync4(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_size));
}

// Rows [row0, row0 + TILE::kRows) of INT8 codes (row-major, TILE::kRowBytes / 2 per row) into the
// bf16 tile at `smem`, each code as its exact bf16 value; rows >= n_rows zero. Synchronous (the
// caller's barrier publishes the stores).
template <typename TILE, int THREADS>
__device__ __forceinline__ void LoadCodesTile(char* smem, const int8_t* codes, int row0, int n_rows,
                                              int tid) {
  constexpr int kPer = TILE::kRows * TILE::kChunks / THREADS;  // 16-byte bf16 chunks = 8 codes
  static_assert(kPer * THREADS == TILE::kRows * TILE::kChunks, "chunks split over the threads");
  uint2 w[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * THREADS + tid, r = idx / TILE::kChunks, c = idx % TILE::kChunks;
    w[i] = row0 + r < n_rows ? *reinterpret_cast<const uint2*>(
                                   codes + int64_t(row0 + r) * (TILE::kRowBytes / 2) + c * 8)
                             : make_uint2(0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * THREADS + tid, r = idx / TILE::kChunks, c = idx % TILE::kChunks;
    uint32_t out[4];
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const uint32_t word = h < 2 ? w[i].x : w[i].y;
      const int sh = 16 * (h & 1);
      out[h] = PackBf16x2(float(int8_t(word >> sh)), float(int8_t(word >> (sh + 8))));
    }
    *reinterpret_cast<uint4*>(smem + TILE::ChunkOffset(r, c)) =
        make_uint4(out[0], out[1], out[2], out[3]);
  }
}

// Rows [row0, row0 + TILE::kRows) of a bf16 row-major matrix minus a per-column mean (fp32), as
// bf16(x - mean), into the tile at `smem`; rows >= n_rows zero. Synchronous.
template <typename TILE, int THREADS>
__device__ __forceinline__ void LoadCenteredTile(char* smem, const bf16* x, const float* mean,
                                                 int row0, int n_rows, int tid) {
  constexpr int kPer = TILE::kRows * TILE::kChunks / THREADS;
  static_assert(kPer * THREADS == TILE::kRows * TILE::kChunks, "chunks split over the threads");
  uint4 w[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * THREADS + tid, r = idx / TILE::kChunks, c = idx % TILE::kChunks;
    w[i] =
        row0 + r < n_rows
            ? *reinterpret_cast<const uint4*>(x + int64_t(row0 + r) * (TILE::kRowBytes / 2) + c * 8)
            : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i * THREADS + tid, r = idx / TILE::kChunks, c = idx % TILE::kChunks;
    uint4 out = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < n_rows) {
      const uint32_t in[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
      uint32_t o[4];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&in[h]));
        o[h] = PackBf16x2(f.x - mean[c * 8 + 2 * h], f.y - mean[c * 8 + 2 * h + 1]);
      }
      out = make_uint4(o[0], o[1], o[2], o[3]);
    }
    *reinterpret_cast<uint4*>(smem + TILE::ChunkOffset(r, c)) = out;
  }
}

template <int D>
struct DsBf16Config {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBkv = kBwdKeys;
  static constexpr int kBq = 64;
  using KTile = Bf16Tile<kBkv, D>;
  using QTile = Bf16Tile<kBq, D>;
  using PTile = Bf16Tile<kBkv, kBq>;  // dS^T: key rows x query columns
  // K (bf16, centred when kbar is given), V (or its codes), 2 stages x (Q, dO), dS^T, 2 stages
  // x (lse, D) of the Q tile (fp32), the codes of K and 2 stages x the codes of Q (the S operands).
  static constexpr int kRowVecBytes = kBq * 4;
  static constexpr int kSmem =
      3 * KTile::kBytes + 6 * QTile::kBytes + PTile::kBytes + 4 * kRowVecBytes;
  static_assert(kSmem <= 227 * 1024, "DsBf16BackwardKernel's shared memory exceeds sm_90's 227 KB");
  static_assert(kBkv == 4 * 32 && kBq == 2 * 32, "warp layouts assume 4 x 2 warps of 32 x 32");
};

template <int D, bool kCausal>
__global__ void __launch_bounds__(256, 1) DsBf16BackwardKernel(BwdParams p) {
  GridDepLaunchDependents();  // the postprocess launch waits for this grid's completion
  using Cfg = DsBf16Config<D>;
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
  char* dss = dos + 2 * QTile::kBytes;  // dS^T
  float* lse_s = reinterpret_cast<float*>(dss + PTile::kBytes);  // 2 stages of kBq
  float* dv_s = lse_s + 2 * kBq;                                 // 2 stages of kBq
  char* kcs = reinterpret_cast<char*>(dv_s + 2 * kBq);           // K^ codes (bf16)
  char* qcs = kcs + KTile::kBytes;                               // 2 stages of Q^ codes

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
  float* dq_acc = p.dq_acc + (int64_t(p.det_heads) * jb * N) * D + head;
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

  const int64_t chead = int64_t(bh) * p.np * D;  // this head's codes
  // The dP operands dO, V (bf16, or their codes with int8_dp) and the Q^ codes of Q tile `qt`
  // into stage `st`.
  auto load_q_side = [&](int st, int qt) {
    LoadTileAsync<QTile, kThr>(qs + st * QTile::kBytes, q, qt * kBq, N, tid);
    LoadCodesTile<QTile, kThr>(qcs + st * QTile::kBytes, p.qh + chead, qt * kBq, N, tid);
    if (p.int8_dp) {
      LoadCodesTile<QTile, kThr>(dos + st * QTile::kBytes, p.doh + chead, qt * kBq, N, tid);
      return;
    }
    LoadTileAsync<QTile, kThr>(dos + st * QTile::kBytes, dO, qt * kBq, N, tid);
  };
  if (p.kbar != nullptr) {
    LoadCenteredTile<KTile, kThr>(ks, p.k + head, p.kbar + int64_t(bh) * D, kv0, N, tid);
  } else {
    LoadTileAsync<KTile, kThr>(ks, p.k + head, kv0, N, tid);
  }
  LoadCodesTile<KTile, kThr>(kcs, p.kh + chead, kv0, N, tid);
  if (p.int8_dp) {
    LoadCodesTile<KTile, kThr>(vs, p.vh + chead, kv0, N, tid);
  } else {
    LoadTileAsync<KTile, kThr>(vs, p.v + head, kv0, N, tid);
  }
  load_q_side(0, qt_begin);
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

  float dk[2][kDN2][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) ZeroAcc(dk[mi]);
  const uint32_t kb = SmemAddr(ks), vb = SmemAddr(vs), dsb = SmemAddr(dss);
  const uint32_t kcb = SmemAddr(kcs);  // the S operand's K
  const int kw = kv0 + kr;  // first key row of this warp (phases 1, 2)

  for (int it = qt_begin; it < qt_end; ++it) {
    const int buf = (it - qt_begin) & 1;
    CpAsyncWait<0>();
    __syncthreads();  // Q/dO tile visible; every warp is done with the previous tile's phases 2-3
    if (it + 1 < qt_end) {
      load_q_side(buf ^ 1, it + 1);
      load_rowvecs(buf ^ 1, it + 1, tid);
    }
    CpAsyncCommit();
    const uint32_t qb = SmemAddr(qs + buf * QTile::kBytes), dob = SmemAddr(dos + buf * QTile::kBytes);
    const uint32_t qcb = SmemAddr(qcs + buf * QTile::kBytes);  // the S operand's Q
    const int q0 = it * kBq;
    const int qw = q0 + qc;  // first query column of this warp (phase 1)
    // The logits' scale (log2 domain) and dP's: SageBwd's for this warp's 64-key tile. (A warp
    // whose keys are all past N, all masked, reads the last group's scales: its own would lie
    // past the head's.)
    const int ntk = p.np / 64, kg = (min(kw, N - 1) >> 6) >> p.kv_shift;
    const float sqi = p.sq[bh * ntk + it], skj = p.sk[bh * ntk + kg];
    const float scale_log2 = SoftmaxScale(p.tau * sqi * skj * kLog2e);
    const float dp_scale = p.int8_dp ? p.sdo[bh * ntk + it] * p.sv[bh * ntk + kg] : 1.f;

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
          LoadBFrag2<QTile>(bq[np], qcb, qc + 16 * np, 16 * kk, lane);
          LoadBFrag2<QTile>(bd[np], dob, qc + 16 * np, 16 * kk, lane);
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          uint32_t a[4];
          LoadAFrag<KTile>(a, kcb, kr + 16 * mi, 16 * kk, lane);
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            MmaBf16x2(s[mi][2 * np], s[mi][2 * np + 1], a, bq[np]);
          }
          LoadAFrag<KTile>(a, vb, kr + 16 * mi, 16 * kk, lane);
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            MmaBf16x2(dp[mi][2 * np], dp[mi][2 * np + 1], a, bd[np]);
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
      // dS^T = P^T o (dP^T - D) -> shared memory (bf16).
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
            pv[e] = FastExp2(fmaf(s[mi][nb][e], scale_log2, -l2[e & 1]));
            dsv[e] = pv[e] * (dp[mi][nb][e] * dp_scale - dc[e & 1]);
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int off = PTile::ByteOffset(kr + 16 * mi + g + 8 * h, (qc + nb * 8 + 2 * t) * 2);
            *reinterpret_cast<uint32_t*>(dss + off) = PackBf16x2(dsv[2 * h], dsv[2 * h + 1]);
          }
        }
      }
    }
    __syncthreads();  // dS^T complete

    // ---- Phase 2: dK += dS^T Q (32 keys x D/2 per warp, contracting 64 queries).
#pragma unroll
    for (int kk = 0; kk < kBq / 16; ++kk) {
      uint32_t da[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) LoadAFrag<PTile>(da[mi], dsb, kr + 16 * mi, 16 * kk, lane);
#pragma unroll
      for (int np = 0; np < kDN2 / 2; ++np) {
        uint32_t b[4];
        LoadBFrag2Trans<QTile>(b, qb, 16 * kk, dc2 + 16 * np, lane);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          MmaBf16x2(dk[mi][2 * np], dk[mi][2 * np + 1], da[mi], b);
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
            MmaBf16x2(acc[mi][2 * np], acc[mi][2 * np + 1], a[mi], b);
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

  // dK through the K tile (free once every warp is past phase 3) and 16-byte row stores
  // (StageAccBf16).
  __syncthreads();
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    StageAccBf16<KTile>(ks, kr + 16 * mi, dc2, lane, dk[mi], p.tau, p.tau);
  }
  __syncthreads();
  const int nr = min(kBkv, N - kv0);
  StoreTileRows<KTile>(ks, p.dk + head + int64_t(kv0) * D, D, nr, tid, kThr);
}

}  // namespace
}  // namespace ablate::kernels::fpa
