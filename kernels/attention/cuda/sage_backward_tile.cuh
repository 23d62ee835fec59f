// SageBwd on the GPU: the backward's shared-memory layouts, its build plan (BwdPlan: which
// structure each product configuration runs, and why) and the per-Q-tile body (BwdTile), included
// by sage_backward.cu only. P and dS of a block stay in registers: per-row scales by quad
// shuffles, per-column scales (a max over the 64 rows of 4 warps) by a reduce-scatter over the
// 8 lane groups plus a 3 x 4 x 64 fp32 partial table in shared memory; the scales and their
// reciprocals without branches (sage_scale.cuh); the int8 copies (P^T, dS^T, dS^) made by one
// FMA into the 1.5 * 2^23 mantissa and written straight from registers. dK, dV stay in
// registers; dQ is accumulated into the workspace's fp32 dqacc (DqAccIndex blocks), rowsum dS (the
// K-smoothing correction) with scalar atomics. The numerics are kernels/ALGORITHMS.md §1.2.
#pragma once

#include "attention/cuda/sage_common.cuh"

namespace ablate::kernels::sage {
namespace {

// Backward shared-memory layout (without BwdPlan::ws): the S / dP operands (K^, V, Q^, dO) as
// 1024-byte-aligned GmmaTiles (wgmma.cuh, no padding), the operands of dV, dK and dQ (K^T, Q^T,
// dO^T [D][64] and P^T, dS^, dS^T [64][64]) as 64-byte-swizzled GmmaTiles, then the column
// partials, vectors and mu, the dQ staging blocks and the TMA mbarriers, plus 1 KB of slack to
// align the dynamic shared memory base.
template <int D>
struct BwdLayout {
  using TileI8 = cuda::wgmma::GmmaTile<kTile, D>;      // K^, Q^ (V^, dO^ with int8_dp)
  using TileBf = cuda::wgmma::GmmaTile<kTile, 2 * D>;  // V, dO (bf16)
  using TileT = cuda::wgmma::GmmaTile<D, kTile>;       // K^T, Q^T, dO^T: [D][64 tokens]
  using TileP = cuda::wgmma::GmmaTile<kTile, kTile>;   // P^T, dS^T [key][q], dS^ [q][key]
  static constexpr int kKh = 0;
  static constexpr int kV = TileI8::kBytes;
  static constexpr int kQh = kV + TileBf::kBytes;
  static constexpr int kDo = kQh + TileI8::kBytes;
  static constexpr int kKht = kDo + TileBf::kBytes;
  static constexpr int kQht = kKht + TileT::kBytes;
  static constexpr int kDoht = kQht + TileT::kBytes;
  static constexpr int kPT = kDoht + TileT::kBytes;  // P^T, dS^, dS^T: 4 KB each, aligned
  static constexpr int kDsh = kPT + TileP::kBytes;
  static constexpr int kDsT = kPT + 2 * TileP::kBytes;
  static constexpr int kPart = kPT + 3 * TileP::kBytes;
  static constexpr int kVec = kPart + 3 * 4 * kTile * 4;
  static constexpr int kMu = kVec + 10 * kTile * 4;
  // The dQ staging blocks (not DqByRed), one 16 x 64 f32 block (4 KB, DqAccIndex order) per
  // warp; 256-byte aligned (the stmatrix addresses are a row's base XOR the unit offset).
  static constexpr int kDqSt = (kMu + 2 * D * 4 + 255) / 256 * 256;
  // Two mbarriers (Q^ / dO, then Q^T / dO^T of the Q tile).
  static constexpr int kTmaBar = kDqSt + DqStagingBytes<D>();
  static constexpr int kBytes = kTmaBar + 16 + 1024;
  static_assert(kBytes <= 227 * 1024, "backward shared memory over the sm_90 limit");
  static_assert(TileI8::kBytes % 1024 == 0 && TileBf::kBytes % 1024 == 0,
                "GmmaTiles stay 1024-byte aligned");
  static_assert(kKht % 1024 == 0 && TileT::kBytes % 1024 == 0 && kPT % 1024 == 0 &&
                    TileP::kBytes % 1024 == 0,
                "64B-swizzled tiles stay aligned");
};


// Warp-specialized backward layout (BwdPlan::ws): kWsConsumers consumer regions (one per consumer
// warpgroup: its 64 keys' K^, V, K^T, the P^T / dS^ / dS^T tiles it writes, its column partials,
// vectors, kbar and dQ staging blocks) and two stages of the Q side (Q^, dO, Q^T, dO^T, lse, D_i,
// mu, the tile's scales of Q and dO) that the producer warpgroup fills and the consumers read,
// then the four mbarriers (full[2], empty[2]). Tile offsets keep BwdLayout's member names,
// relative to the region they live in (consumer or stage), so the kernel body reads either layout.
template <int D>
struct BwdWsLayout {
  using TileI8 = cuda::wgmma::GmmaTile<kTile, D>;
  using TileBf = cuda::wgmma::GmmaTile<kTile, 2 * D>;
  using TileT = cuda::wgmma::GmmaTile<D, kTile>;
  using TileP = cuda::wgmma::GmmaTile<kTile, kTile>;
  static constexpr int Up(int x, int a) { return (x + a - 1) / a * a; }
  // Consumer region.
  static constexpr int kKh = 0;
  static constexpr int kV = kKh + TileI8::kBytes;
  static constexpr int kKht = kV + TileBf::kBytes;
  static constexpr int kPT = kKht + TileT::kBytes;
  static constexpr int kDsh = kPT + TileP::kBytes;
  static constexpr int kDsT = kDsh + TileP::kBytes;
  static constexpr int kPart = kDsT + TileP::kBytes;
  static constexpr int kVec = kPart + 3 * 4 * kTile * 4;
  static constexpr int kKbar = kVec + 10 * kTile * 4;
  static constexpr int kDqSt = Up(kKbar + D * 4, 256);  // (256-byte aligned, as BwdLayout's)
  static constexpr int kConsBytes = Up(kDqSt + DqStagingBytes<D>(), 1024);
  // Stage.
  static constexpr int kQh = 0;
  static constexpr int kDo = kQh + TileI8::kBytes;
  static constexpr int kQht = kDo + TileBf::kBytes;
  static constexpr int kDoht = kQht + TileT::kBytes;
  static constexpr int kLse = kDoht + TileT::kBytes;
  static constexpr int kDrow = kLse + kTile * 4;
  static constexpr int kMu = kDrow + kTile * 4;
  static constexpr int kScal = kMu + D * 4;  // scale of Q^, of dO^ for the tile
  static constexpr int kXrow = kScal + 16;     // BwdPlan::dq_pair: per consumer, row max |dS| [2][64]
  static constexpr int kStageBytes = Up(kXrow + kWsConsumers * kTile * 4, 1024);
  // Buffer.
  static constexpr int kCons0 = 0;
  static constexpr int kStage0 = kWsConsumers * kConsBytes;
  static constexpr int kBar = kStage0 + 2 * kStageBytes;  // the ring's 2 x 2 mbarriers
  // BwdPlan::keys_as_rows: one "tile done" mbarrier per consumer, kTileDoneOff bytes after kBar.
  static constexpr int kTileDoneOff = 32;
  static constexpr int kBytes = kBar + 64 + 1024;  // + slack to align the base to 1024
  static_assert(kTileDoneOff + 8 * kWsConsumers <= 64, "the mbarriers fit their 64 bytes");
  static_assert(kBytes <= 227 * 1024, "backward shared memory over the sm_90 limit");
  static_assert(kKht % 1024 == 0 && kPT % 1024 == 0 && kQht % 1024 == 0 && kDoht % 1024 == 0 &&
                    kDo % 1024 == 0 && kV % 1024 == 0,
                "swizzled tiles stay 1024-byte aligned");
};

// How the backward kernel is built for a product configuration: head dim, causal, 128-key K / V
// groups (d128 without Q-smoothing: SageKvGroup) and an int8 dP. Every kernel builds on the same
// tile body: interior blocks (no N tail, no causal diagonal) skip the masks; P by ex2.approx in the
// log2 domain; the P^T, dS^T and dS^ codes by one FMA into the mantissa of 1.5 * 2^23 (QuantBits,
// QuantPack2: no F2I / clamp); all five products by wgmma, the dV / dK / dQ products two in flight;
// column partials by ColumnReduceScatter; the Q^T / dO^T copies (phase 2 only) waited for after
// phase 1; dQ partials added by 16-byte reductions (d64) or bulk reductions from shared memory
// (d128, DqByRed). Measured, each against the one before (docs/bench/attention.md has the figures):
//   ws            d128: warp-specialized. C = kWsConsumers (2) + 1 warpgroups: warpgroup 0 is the
//                 producer (each Q tile's Q^, dO, Q^T, dO^T by TMA with `tma`, else cp.async, plus
//                 its lse, D_i, mu and scales into a two-stage ring, mbarriers full / empty),
//                 warpgroup 1 + c the consumer of K tile C jj + c of CTA jj, running the per-tile
//                 body with named barriers per warpgroup; the producer gives its registers to them
//                 (setmaxnreg). One CTA per SM. (d128 non-causal 1.05x of one warpgroup per CTA.)
//                 d64: one warpgroup per CTA, __launch_bounds__(128, 3): 3 CTAs per SM.
//   tma           the Q side of each Q tile copied by TMA (one thread, a few cp.async.bulk.tensor
//                 per tile completing on mbarriers, wgmma.cuh LoadGmmaTileTma) instead of every
//                 thread's 16-byte cp.async (1.05-1.08x at d64); at d128 with dq_pair only (with
//                 64-key groups it measured 0.96-0.97x: spills).
//   longest_first causal: grid (BH, K tiles), CTAs longest-first across the heads of each group
//                 (LptBlock): 1.07-1.16x.
//   dq_pair       128-key K / V groups: the two consumers share dQ. dS^ is quantized with one
//                 scale per query row over both consumers' 128 keys (the emulator's bkv = 128:
//                 SageBwdKeyBlock; the row maxima are exchanged through the stage), and consumer c
//                 computes dQ columns 64c..64c+63 of the Q tile over all 128 keys, so each folds
//                 and reduces half the dQ block (one 64 x 64 product of K = 128 instead of two of
//                 K = 64). Both consumers run every Q tile of the CTA (a causal tile above a
//                 consumer's diagonal or a K tile past N is computed fully masked: P = dS = 0).
//                 (1.02-1.03x non-causal, 1.05-1.09x causal.)
//   early         dq_pair with a bf16 dP: the next Q tile's phase-1 products issued before this
//                 tile's last two epilogues, dP = dO V^T after the fourth phase-2 epilogue (in the
//                 registers its product freed), S = Q^ K^T after the fifth, so the tensor cores run
//                 them while the consumer folds. (1.000-1.024x causal, 1.021-1.022x non-causal.)
//   keys_as_rows  early, causal: each consumer computes S^T = K^ Q^^T and dP^T = V dO^T, its 64
//                 keys as the accumulator's rows and the Q tile's queries as its columns. The P^T
//                 and dS^T scales (one per key) are then row statistics of the thread's own
//                 registers and quad shuffles, and their codes are already in [key][q] order (Q^T /
//                 dO^T hold the queries in BwdQueryOfSlot order). The one chain that crosses warps
//                 is dS^'s: one scale per query over both consumers' 128 keys (two pair barriers),
//                 its codes stored by stmatrix.trans (K^T is copied with its keys permuted to
//                 match). 9% fewer instructions; causal 1.000-1.021x, non-causal 0.986-1.002x.
// int8_dp and smooth_q are otherwise runtime parameters (BwdParams) of the same kernel.
struct BwdPlan {
  bool ws, tma, longest_first, dq_pair, early, keys_as_rows;
};
constexpr BwdPlan BwdPlanFor(int d, bool causal, bool kv128, bool int8_dp) {
  BwdPlan p{};
  p.ws = d == 128;
  p.dq_pair = d == 128 && kv128;
  p.tma = d == 64 || p.dq_pair;
  p.longest_first = causal;
  p.early = p.dq_pair && !int8_dp;
  p.keys_as_rows = p.early && causal;
  return p;
}
constexpr int BwdMinBlocks(int d, BwdPlan p) { return d == 64 && !p.ws ? 3 : 1; }
constexpr int BwdThreads(BwdPlan p) { return p.ws ? (kWsConsumers + 1) * kThreads : kThreads; }
// Reduce-scatter over the 8 lanes that share t (lane bits 2..4 = g) of 16 per-thread values v[k]
// (k = 2n + b: accumulator column 8n + 2t + b): each level keeps the half of the values its lane
// bit selects and folds in the partner's copy of that half, so 8 + 4 + 2 shuffles replace the
// 3 x 16 of a butterfly per value. Returns, in r[0..1], the reduction of columns 8g + 2t + {0,1}.
template <typename Op>
__device__ __forceinline__ void ColumnReduceScatter(const float (&v)[16], int lane, Op op,
                                                    float (&r)[2]) {
  float a[8], b[4];
  const bool h2 = (lane >> 4) & 1, h1 = (lane >> 3) & 1, h0 = (lane >> 2) & 1;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float keep = h2 ? v[8 + i] : v[i], give = h2 ? v[i] : v[8 + i];
    a[i] = op(keep, __shfl_xor_sync(0xffffffffu, give, 16));
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float keep = h1 ? a[4 + i] : a[i], give = h1 ? a[i] : a[4 + i];
    b[i] = op(keep, __shfl_xor_sync(0xffffffffu, give, 8));
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float keep = h0 ? b[2 + i] : b[i], give = h0 ? b[i] : b[2 + i];
    r[i] = op(keep, __shfl_xor_sync(0xffffffffu, give, 4));
  }
}

// bias[c] = tau * mu . (K_c - kbar) for the keys of tile j (threads 0..63), 0 past N.
template <int D>
__device__ __forceinline__ void BlockBias(const __nv_bfloat16* k, const float* mu,
                                          const float* kbar, int j, int n, float tau,
                                          float* bias, int c = threadIdx.x) {
  if (c < kTile) {
    const int gc = j * kTile + c;
    float acc = 0.0f;
    if (gc < n) {
      const __nv_bfloat16* kc = k + int64_t(gc) * D;
      for (int d = 0; d < D; ++d) acc += mu[d] * (__bfloat162float(kc[d]) - kbar[d]);
    }
    bias[c] = tau * acc;
  }
}


// ----------------------------------------------------------------------------------------------
// Backward.
// ----------------------------------------------------------------------------------------------

struct BwdParams {
  // BwdPlan::tma: the Q side's tensor maps (GmmaTileTensorMap): Q^, dO (bf16) or dO^ (int8_dp), Q^T,
  // dO^T. The kernel takes BwdParams as a __grid_constant__ parameter, whose maps TMA reads.
  CUtensorMap tm_qh;
  CUtensorMap tm_do;
  CUtensorMap tm_qht;
  CUtensorMap tm_doht;
  const __nv_bfloat16 *k, *v, *do_;  // (BH, N, D)
  const int8_t *qh, *qht, *kh, *kht, *vh, *doh, *doht;
  const float *sq, *sk, *sv, *sdo, *kbar, *mu, *lse, *drow;
  float *dsrow, *dqacc;
  __nv_bfloat16 *dk, *dv;
  int n, np, ntq, ntk;
  int kv_shift;   // as FwdParams::kv_shift
  int lpt_heads;  // causal: heads per longest-first group (LptBlock; set by LptGrid)
  // Deterministic: B*H, and dqacc / dsrow are the scratch's slices, one per CTA (K tiles C jb ..
  // C jb + C - 1): CTA jb adds into head jb * det_heads + bh (at most two adders per element,
  // onto zero, so the order does not matter); 0: the one shared accumulator.
  int det_heads;
  bool smooth_q, int8_dp;
  float tau;
};

// Phase 1 of the backward by wgmma (one warpgroup = the CTA's 4 warps): S = Q^ K^T
// (s8, D / 32 x m64n64k32) and dP = dO V^T (bf16, 2D / 32 x m64n64k16; s8 scaled by sdv with
// int8_dp) for the tile's 64 query rows x 64 keys, from the GmmaTiles of BwdLayout L. Both groups
// are issued before the wait. The accumulators come back in the mma.sync layout the epilogue
// reads: warp w holds rows 16w..16w+15, si[n][e] = d[4n + e] (wgmma.cuh). K^ and V are at their
// L offsets from the buffer of dlo, Q^ and dO from that of dlo_q (BwdPlan::ws: the stage; else dlo).
// The products' issue (after a wgmma fence; committed as one group each), shared with
// BwdPlan::early's issue ahead of the tile: an s8 or bf16 product of the tile at kA in the buffer of
// a_lo (A) and the one at kB in that of b_lo (B): S = Q^ K^T (or dO^ V^T with int8_dp) and
// dP = dO V^T take the Q side as A, BwdPlan::keys_as_rows's S^T = K^ Q^^T and dP^T = V dO^T the K side.
template <int D, typename L, int kA, int kB>
__device__ __forceinline__ void PhaseOneIssueS8(uint32_t a_lo, uint32_t b_lo, int32_t (&acc)[32]) {
  namespace wg = cuda::wgmma;
  using T8 = typename L::TileI8;
  wg::MmaS8First(acc, TileDesc<T8>(a_lo, kA), TileDesc<T8>(b_lo, kB));
#pragma unroll
  for (int k = 32; k < D; k += 32) {
    wg::MmaS8(acc, TileDesc<T8>(a_lo, kA, k), TileDesc<T8>(b_lo, kB, k), true);
  }
  wg::Commit();
}
template <int D, typename L, int kA, int kB>
__device__ __forceinline__ void PhaseOneIssueBf16(uint32_t a_lo, uint32_t b_lo, float (&dacc)[32]) {
  namespace wg = cuda::wgmma;
  using TB = typename L::TileBf;
  wg::MmaBf16First(dacc, TileDesc<TB>(a_lo, kA), TileDesc<TB>(b_lo, kB));
#pragma unroll
  for (int k = 32; k < 2 * D; k += 32) {
    wg::MmaBf16(dacc, TileDesc<TB>(a_lo, kA, k), TileDesc<TB>(b_lo, kB, k), true);
  }
  wg::Commit();
}
template <int D, typename L>
__device__ __forceinline__ void PhaseOneIssueS(uint32_t dlo, uint32_t dlo_q, int32_t (&sacc)[32]) {
  PhaseOneIssueS8<D, L, L::kQh, L::kKh>(dlo_q, dlo, sacc);
}
template <int D, typename L>
__device__ __forceinline__ void PhaseOneIssueDpBf16(uint32_t dlo, uint32_t dlo_q, float (&dacc)[32]) {
  PhaseOneIssueBf16<D, L, L::kDo, L::kV>(dlo_q, dlo, dacc);
}
template <int D, typename L>
__device__ __forceinline__ void PhaseOneIssueST(uint32_t dlo, uint32_t dlo_q, int32_t (&acc)[32]) {
  PhaseOneIssueS8<D, L, L::kKh, L::kQh>(dlo, dlo_q, acc);
}
template <int D, typename L>
__device__ __forceinline__ void PhaseOneIssueDpT(uint32_t dlo, uint32_t dlo_q, float (&dacc)[32]) {
  PhaseOneIssueBf16<D, L, L::kV, L::kDo>(dlo, dlo_q, dacc);
}
template <int D, typename L>
__device__ __forceinline__ void PhaseOneWgmma(uint32_t dlo, uint32_t dlo_q, bool int8_dp, float sdv,
                                              int32_t (&si)[8][4], float (&dp)[8][4]) {
  namespace wg = cuda::wgmma;
  int32_t sacc[32];
  wg::Fence();
  PhaseOneIssueS<D, L>(dlo, dlo_q, sacc);
  if (int8_dp) {
    int32_t dacc[32];
    PhaseOneIssueS8<D, L, L::kDo, L::kV>(dlo_q, dlo, dacc);
    wg::Wait<0>();
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[n][e] = sdv * __int2float_rn(dacc[4 * n + e]);
    }
  } else {
    float dacc[32];
    PhaseOneIssueDpBf16<D, L>(dlo, dlo_q, dacc);
    wg::Wait<0>();
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dp[n][e] = dacc[4 * n + e];
    }
  }
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) si[n][e] = sacc[4 * n + e];
  }
}

// BwdPlan::ws: stage sg of the Q-side ring in the CTA's shared memory buf (otherwise buf itself).
template <int D, bool kWs>
__device__ __forceinline__ char* BwdStageBase(char* buf, int sg) {
  if constexpr (kWs) {
    return buf + BwdWsLayout<D>::kStage0 + sg * BwdWsLayout<D>::kStageBytes;
  } else {
    return buf;
  }
}
// A barrier over the CTA (BwdPlan::ws: over consumer warpgroup cw).
template <bool kWs>
__device__ __forceinline__ void BwdWgSync(int cw) {
  if constexpr (kWs) {
    cuda::wgmma::NamedBarSync(1 + cw, kThreads);
  } else {
    __syncthreads();
  }
}

// One thread's part of the backward's Q-tile loop (BwdPlan::ws: a consumer warpgroup's thread; without
// it every thread of the CTA): the loop body in its two forms, TileKeysAsRows (BwdPlan::keys_as_rows: S^T /
// dP^T, the keys as the accumulators' rows) and TileRows (every other configuration: the query rows),
// with the state of SageBackwardKernel they read: the CTA's constants and shared tiles by value,
// dK / dV and BwdPlan::early's next-tile S / dP by reference to the kernel's arrays. The kernel sets
// up the Q tile at the loop's top (its stage, lse / D_i, scales), passes what a body reads of it
// as arguments, and adds Q-smoothing's dK term and releases the stage after the body. (Every
// member function inlines; the tile's per-stage pointers as arguments rather than members, and
// the struct built right before the loop, keep the kernels' address arithmetic close to the
// one-function form's: an earlier A/B)
template <int D, bool kCausal, bool kKv128, bool kInt8Dp>
struct BwdTile {
  static constexpr BwdPlan kPlan = BwdPlanFor(D, kCausal, kKv128, kInt8Dp);
  static constexpr bool kWs = kPlan.ws;
  static constexpr bool kPair = kPlan.dq_pair;
  static constexpr bool kEarly = kPlan.early;
  static constexpr int kCons = kWs ? kWsConsumers : 1;  // K tiles per CTA
  static constexpr int kNtD = D / 8;
  using L = std::conditional_t<kWs, BwdWsLayout<D>, BwdLayout<D>>;
  // (SageBackwardKernel checks them; here they also count as referenced in every configuration.)
  static_assert(!kEarly || kPair, "BwdPlan::early builds on BwdPlan::dq_pair");
  static_assert(!kPair || kCons == 2, "BwdPlan::dq_pair: two consumers");

  const BwdParams& p;
  char* buf;   // the CTA's 1024-byte-aligned shared memory
  char* base;  // this consumer's region (kWs), else buf
  int cw, tid, bh, j, c0, warp, lane, g, t;
  int qbh;    // the head index of dqacc and dsrow: bh, or this CTA's slice (BwdParams::det_heads)
  int kr[2];  // this thread's key rows (dK, dV)
  // Byte offsets of this thread's P^T / dS^T and dS^ code stores (PtOff, DshOff).
  int pt_base, dsh_base, dsh_sw;
  float tau, skj, svj;  // skj, svj: the scales of this K tile's K^ / V^ group
  uint32_t dlo;               // wgmma descriptor word of `base`
  uint32_t dlo_c0, dlo_c1;    // kPair: those of both consumers' regions
  uint32_t tma_bar;           // without kWs: the Q side's two TMA mbarriers
  cuda::wgmma::MbarRing<2> ring;  // kWs: the Q-side stages
  int8_t *s_pt, *s_dsh, *s_dst;
  float *s_part, *s_vec, *s_csp, *s_csds, *s_colsum, *s_bias, *s_cinv2;
  float (&dk)[kNtD][4];
  float (&dv)[kNtD][4];
  // kEarly: the next tile's S and dP accumulators, in flight across the loop's back edge.
  int32_t (&s_next)[32];
  float (&dp_next)[32];

  __device__ __forceinline__ char* StageBase(int sg) const {
    return BwdStageBase<D, kWs>(buf, sg);
  }
  __device__ __forceinline__ void WgSync() const { BwdWgSync<kWs>(cw); }
  // kPair: a barrier over both consumer warpgroups.
  __device__ __forceinline__ void PairSync() const {
    cuda::wgmma::NamedBarSync(3, kCons * kThreads);
  }
  // P^T / dS^T [key][q]: the 16-bit pair of query rows g, g + 8 at keys 8n + 2t + b;
  // dS^ [q][key]: keys 16m.., row g + 8h (the kernel's pt_base / dsh_base say how).
  __device__ __forceinline__ int PtOff(int n, int b) const { return pt_base + n * 512 + b * 64; }
  __device__ __forceinline__ int DshOff(int m, int h) const {
    return dsh_base + h * 512 + ((m << 4) ^ dsh_sw);
  }
  // dQ columns 64 ch.. of the Q tile at row r0: rows g and g + 8 of this warp (coefficients c0f,
  // c1f), all 32 values scaled first, then added into dqacc (DqByRed: by the lane's eight 16-byte
  // reductions; otherwise by one bulk reduction per warp).
  template <class At>
  __device__ __forceinline__ void EpiDq(int r0, int ch, float c0f, float c1f, const At& at) const {
    // v[4n..4n+3]: columns 8n + 2t, +1 of row g, then of row g + 8.
    float v[32];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      v[4 * n] = c0f * __int2float_rn(at(n, 0));
      v[4 * n + 1] = c0f * __int2float_rn(at(n, 1));
      v[4 * n + 2] = c1f * __int2float_rn(at(n, 2));
      v[4 * n + 3] = c1f * __int2float_rn(at(n, 3));
    }
    if constexpr (DqByRed<D>()) {
      // Run n of the warp's 4 KB block of dqacc holds this lane's v[4n..4n+3] at unit `lane`
      // (DqAccIndex). Padded rows past N add zeros: dqacc holds whole blocks.
      RedAddV4x8(p.dqacc + (int64_t(qbh) * p.np + r0 + warp * 16) * D + ch * 1024 + 4 * lane, v);
    } else {
      // This warp's 16 rows x 64 columns are one 4 KB block of dqacc (DqAccIndex), staged in
      // shared memory in the block's own order (once the previous bulk read of the staging is
      // done) by one stmatrix per 8 columns 8n..8n+7: matrices 0 / 1 the even / odd columns of
      // rows 0-7 (v[4n] / v[4n + 1]: column 8n + 2t of row g is the 32-bit element t of matrix
      // row g), 2 / 3 those of rows 8-15 (v[4n + 2] / v[4n + 3]). Lane 8i + k gives the address
      // of row k of matrix i: row r = k + 8 (i / 2), unit (2n + i % 2) ^ k, i.e. byte
      // (32 n) ^ (16 (i % 2 ^ k)) of the row.
      static_assert(L::kDqSt % 256 == 0, "the staging rows' bases are 256-byte aligned");
      const int64_t blk = (int64_t(qbh) * p.np + r0 + warp * 16) * D + ch * 1024;
      namespace wg = cuda::wgmma;
      float* st = reinterpret_cast<float*>(base + L::kDqSt) + warp * 1024;
      const int mi = lane >> 3, mk = lane & 7;
      const uint32_t row_addr =
          cuda::SmemAddr(st) + 256 * (mk + 8 * (mi >> 1)) + 16 * ((mi & 1) ^ mk);
      wg::BulkWaitRead<0>();  // (every lane: the others have no bulk group; no branch)
      __syncwarp();
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        cuda::StMatrixX4(row_addr ^ (n << 5), __float_as_uint(v[4 * n]),
                         __float_as_uint(v[4 * n + 1]), __float_as_uint(v[4 * n + 2]),
                         __float_as_uint(v[4 * n + 3]));
      }
      // Lane 0 adds the whole block into dqacc with one bulk reduction (padded rows past N add
      // zeros: dqacc holds whole blocks).
      wg::FenceProxyAsync();
      __syncwarp();
      if (lane == 0) {
        wg::BulkReduceAddF32(p.dqacc + blk, cuda::SmemAddr(st), 1024 * 4);
        wg::BulkCommit();
      }
    }
  }
  // A dV / dK fold: x[ch * 8 + n][e] += coef(e / 2) * the int32 product at(n, e) (head-dim
  // columns 64 ch.., key row kr[e / 2]'s coefficient).
  template <class Coef, class At>
  __device__ __forceinline__ void Fold(float (*x)[4], int ch, const Coef& coef,
                                       const At& at) const {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[ch * 8 + n][e] += coef(e >> 1) * __int2float_rn(at(n, e));
    }
  }
  // BwdPlan::dq_pair's dQ product, not committed: columns 64 cw.. of the Q tile over both
  // consumers' 128 keys (dS^ of consumer c times its K^T, two k-steps each).
  __device__ __forceinline__ void MmaDqPair(int32_t (&d)[32]) const {
    namespace wg = cuda::wgmma;
    using TP = typename L::TileP;
    const int bb = L::kKht + cw * TP::kBytes;
    wg::MmaS8(d, TileDesc<TP>(dlo_c0, L::kDsh), TileDesc<TP>(dlo_c0, bb), false);
    wg::MmaS8(d, TileDesc<TP>(dlo_c0, L::kDsh, 32), TileDesc<TP>(dlo_c0, bb, 32), true);
    wg::MmaS8(d, TileDesc<TP>(dlo_c1, L::kDsh), TileDesc<TP>(dlo_c1, bb), true);
    wg::MmaS8(d, TileDesc<TP>(dlo_c1, L::kDsh, 32), TileDesc<TP>(dlo_c1, bb, 32), true);
  }
  // BwdPlan::keys_as_rows's tile body: S^T / dP^T (issued during the previous tile), P^T / dS^T with their
  // scales as row statistics, dS^'s scales over both consumers' keys, the five products.
  __device__ __forceinline__ void TileKeysAsRows(int i, int it, int r0, float sqi, float sdoi,
                                                 uint32_t dlo_q, const float* s_lse,
                                                 const float* s_drow, float* s_xrow) {
    // BwdPlan::keys_as_rows: this thread holds S^T / dP^T, P^T / dS^T at key rows kr[h] (e / 2 = h) and query
    // columns 8n + 2t + (e % 2) of the tile.
    namespace wg = cuda::wgmma;
    using TP = typename L::TileP;
    constexpr int kChBytes = TP::kBytes;  // head-dim columns 64.. of Q^T / dO^T / K^T
    const uint32_t tile_done = cuda::SmemAddr(buf + L::kBar) + L::kTileDoneOff + 8 * cw;
    wg::Wait<0>();  // S^T, dP^T (issued during the previous tile)
    float pf[8][4], dsf[8][4];
    {
      const float a2 = SoftmaxScale(tau * sqi * skj * cuda::kLog2e);
      const bool interior = r0 + kTile <= p.n && c0 + kTile <= p.n &&
                            (!kCausal || c0 + kTile - 1 <= r0);
      // As the other form: the masked one computes every element, then zeroes those outside
      // (queries qc of the tile with qlo[h] <= qc < qhi[h] are visible from key row h).
      const auto tile_fx = [&](auto mask_c) {
        constexpr bool kMask = decltype(mask_c)::value;
        [[maybe_unused]] int qlo[2], qhi[2];
        if constexpr (kMask) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int key = c0 + kr[h];
            qhi[h] = key < p.n ? p.n - r0 : 0;
            qlo[h] = kCausal ? key - r0 : 0;
          }
        }
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          // lse (log2 domain) and D_i of queries 8n + 2t, +1
          const float2 l2 = *reinterpret_cast<const float2*>(s_lse + 8 * n + 2 * t);
          const float2 dr = *reinterpret_cast<const float2*>(s_drow + 8 * n + 2 * t);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int b = e & 1;
            const float x = __int2float_rn(s_next[4 * n + e]);
            const float pe = cuda::FastExp2(fmaf(a2, x, -(b ? l2.y : l2.x)));
            const float ds = pe * (dp_next[4 * n + e] - (b ? dr.y : dr.x));
            bool valid = true;  // (interior: folded away)
            if constexpr (kMask) {
              const int qc = 8 * n + 2 * t + b;
              valid = qc >= qlo[e >> 1] && qc < qhi[e >> 1];
            }
            pf[n][e] = valid ? pe : 0.0f;
            dsf[n][e] = valid ? ds : 0.0f;
          }
        }
      };
      if (interior) {
        tile_fx(std::false_type{});
      } else {
        tile_fx(std::true_type{});
      }
    }
    // The scales of P^T (dV) and dS^T (dK): one per key row, over the tile's 64 queries (the
    // thread's 16 values of the row, then the quad that shares it).
    float ip[2], ids[2], cdv[2], cdk[2];
    {
      float sp[2], sd[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mp = 0.0f, md = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            mp = fmaxf(mp, pf[n][2 * h + b]);
            md = fmaxf(md, fabsf(dsf[n][2 * h + b]));
          }
        }
        sp[h] = GroupScaleBranchless(QuadMax(mp));
        sd[h] = GroupScaleBranchless(QuadMax(md));
        ip[h] = RcpNewton(sp[h]);
        ids[h] = RcpNewton(sd[h]);
      }
      // One warp-uniform test for the four reciprocals (as the other form's three).
      const bool slow = !RcpFastPath(sp[0]) || !RcpFastPath(sp[1]) || !RcpFastPath(sd[0]) ||
                        !RcpFastPath(sd[1]);
      if (__any_sync(0xffffffffu, slow)) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          ip[h] = 1.0f / sp[h];
          ids[h] = 1.0f / sd[h];
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        cdv[h] = sp[h] * sdoi;
        cdk[h] = tau * sd[h] * sqi;
      }
    }
    // P^T and dS^T [key][q] codes: the bytes of key row kr[h] at query slots 4t..4t + 3 of each
    // 16-query half u of k-slice kk (queries 32kk..32kk + 31) are the queries 2t, 2t + 8,
    // 2t + 1, 2t + 9 of that half in BwdQueryOfSlot's order (Q^T / dO^T hold the queries in
    // it), all this thread's: one 32-bit store each, into the 64B-swizzled tiles (16-byte unit
    // 2kk + u of row r at (2kk + u) ^ ((r / 2) % 4), the same for both rows kr[h]). (From
    // registers as the wgmmas' A fragments instead, ptxas spilled 300-440 bytes: an earlier run.)
    {
      const int swz = (g >> 1) & 3;
      const auto store_codes = [&](int8_t* tile, const float(&x)[8][4], const float(&inv)[2]) {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
          for (int u = 0; u < 2; ++u) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int n0 = 4 * kk + 2 * u;
              *reinterpret_cast<uint32_t*>(tile + kr[h] * kTile + (((2 * kk + u) ^ swz) << 4) +
                                           4 * t) =
                  PackLowBytes(QuantBits(x[n0][2 * h], inv[h]),
                               QuantBits(x[n0 + 1][2 * h], inv[h]),
                               QuantBits(x[n0][2 * h + 1], inv[h]),
                               QuantBits(x[n0 + 1][2 * h + 1], inv[h]));
            }
          }
        }
      };
      // (Every warp of this consumer has waited for the previous tile's dV / dK products,
      // which read these tiles; their arrivals end each tile.)
      if (it > 0) wg::MbarWait(tile_done, (it - 1) & 1);
      store_codes(s_pt, pf, ip);
      store_codes(s_dst, dsf, ids);
    }
    // The dS^ scales (one per query row over both consumers' 128 keys) and the rows' dS sums
    // (the K-mean correction of dQ): column partials over this warp's 16 keys (its two rows,
    // then the 8 lane groups), [4 warps] of each into s_part, [4 + warp] the sums.
    {
      float vds[16], vcs[16];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          vds[2 * n + b] = fmaxf(fabsf(dsf[n][b]), fabsf(dsf[n][2 + b]));
          vcs[2 * n + b] = dsf[n][b] + dsf[n][2 + b];
        }
      }
      float rds[2], rcs[2];
      ColumnReduceScatter(vds, lane, [](float x, float y) { return fmaxf(x, y); }, rds);
      ColumnReduceScatter(vcs, lane, [](float x, float y) { return x + y; }, rcs);
      const int c = 8 * g + 2 * t;
      *reinterpret_cast<float2*>(s_part + warp * kTile + c) = make_float2(rds[0], rds[1]);
      *reinterpret_cast<float2*>(s_part + (4 + warp) * kTile + c) = make_float2(rcs[0], rcs[1]);
    }
    wg::FenceProxyAsync();  // the P^T / dS^T stores -> the dV / dK wgmmas' reads
    PairSync();  // both consumers' column partials (and this one's P^T / dS^T codes)
    // Five products: dV, dK of head-dim columns ch * 64.. (A: P^T / dS^T, B: dO^T / Q^T of the
    // stage at bt) and dQ (columns 64 cw.. over both consumers' 128 keys: dS^ of consumer c
    // times its K^T). The first dV one runs beside the dS^ scales and is folded before their
    // barrier (0.988-1.020x over issuing it after them; the first dK
    // one too, in flight through that barrier and the dS^ codes: 0.94-0.97x); the others two
    // at a time, each epilogue beside the next product.
    int32_t acc[2][32];
    const auto issue_ss = [&](int32_t(&d)[32], int at, int bt) {
      wg::Fence();
      wg::MmaS8(d, TileDesc<TP>(dlo, at), TileDesc<TP>(dlo_q, bt), false);
      wg::MmaS8(d, TileDesc<TP>(dlo, at, 32), TileDesc<TP>(dlo_q, bt, 32), true);
      wg::Commit();
    };
    const auto fold_acc = [&](float(&x)[kNtD][4], int ch, const float(&coef)[2],
                              const int32_t(&d)[32]) {
      Fold(x, ch, [&](int h) { return coef[h]; }, [&](int n, int e) { return d[4 * n + e]; });
    };
    issue_ss(acc[0], L::kPT, L::kDoht);
    if (warp < 2) {
      // Warp 0 of consumer c: the scales of queries 32c + lane (scale and 1 / scale into the
      // stage's s_xrow [2][64]); warp 1: their dS sums, added into dsrow.
      const int c = 32 * cw + lane;
      const float* pa = reinterpret_cast<const float*>(buf + L::kCons0 + L::kPart);
      const float* pb = pa + L::kConsBytes / 4;
      if (warp == 0) {
        float m = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) m = fmaxf(m, fmaxf(pa[w * kTile + c], pb[w * kTile + c]));
        const float sc = GroupScaleBranchless(m);
        float inv = RcpNewton(sc);
        if (__any_sync(0xffffffffu, !RcpFastPath(sc))) inv = 1.0f / sc;
        s_xrow[c] = sc;
        s_xrow[kTile + c] = inv;
      } else {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) sum += pa[(4 + w) * kTile + c] + pb[(4 + w) * kTile + c];
        RedAddIf(r0 + c < p.n, p.dsrow + int64_t(qbh) * p.n + r0 + c, sum);
      }
    }
    wg::Wait<0>();
    fold_acc(dv, 0, cdv, acc[0]);
    PairSync();  // the dS^ scales
    {
      // dS^ [q][key] codes: 16-bit units (key rows g, g + 8 of this warp; query 8n + 2t + b),
      // transposed by stmatrix into rows q, this warp's 16 keys at 16-byte unit `warp` of the
      // row (keys g + 8h at byte 2g + h: K^T's order here), 64B-swizzled (unit u of row q at
      // u ^ ((q / 2) % 4)). Lane l gives the address of query row l (+ 32: matrices 4-7).
      const float2* qinv = reinterpret_cast<const float2*>(s_xrow + kTile);
      uint32_t dsh[8];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float2 iv = qinv[4 * n + t];
        dsh[n] = __byte_perm(QuantPack2(dsf[n][0], dsf[n][2], iv.x),
                             QuantPack2(dsf[n][1], dsf[n][3], iv.y), 0x5410);
      }
      const uint32_t sa = cuda::SmemAddr(s_dsh) + lane * kTile + ((warp ^ ((lane >> 1) & 3)) << 4);
      cuda::StMatrixX4Trans(sa, dsh[0], dsh[1], dsh[2], dsh[3]);
      cuda::StMatrixX4Trans(sa + 32 * kTile, dsh[4], dsh[5], dsh[6], dsh[7]);
      wg::FenceProxyAsync();  // st.shared -> the dQ wgmmas' reads
    }
    // The next tile's dP^T (on the last tile: this one's operands, unused; see kEarly) and S^T
    // go into the registers the last two products' epilogues free.
    uint32_t dlo_n = dlo_q;
    const auto next_stage = [&]() {
      if (i + 1 < p.ntq) {
        ring.ConsumerWait(it + 1);
        dlo_n = wg::DescLo(cuda::SmemAddr(StageBase((it + 1) & 1)));
      }
      wg::Fence();
    };
    const auto issue_dq = [&](int32_t(&d)[32]) {
      wg::Fence();
      MmaDqPair(d);
      wg::Commit();
    };
    const auto dq_epi = [&](const int32_t(&d)[32]) {
      EpiDq(r0, cw, tau * s_xrow[warp * 16 + g] * skj, tau * s_xrow[warp * 16 + g + 8] * skj,
             [&](int n, int e) { return d[4 * n + e]; });
    };
    issue_ss(acc[0], L::kDsT, L::kQht);
    issue_ss(acc[1], L::kPT, L::kDoht + kChBytes);
    PairSync();  // both consumers' dS^
    wg::Wait<1>();
    fold_acc(dk, 0, cdk, acc[0]);
    issue_dq(acc[0]);
    wg::Wait<1>();
    fold_acc(dv, 1, cdv, acc[1]);
    issue_ss(acc[1], L::kDsT, L::kQht + kChBytes);
    wg::Wait<1>();
    dq_epi(acc[0]);
    next_stage();
    PhaseOneIssueDpT<D, L>(dlo, dlo_n, dp_next);
    wg::Wait<1>();
    fold_acc(dk, 1, cdk, acc[1]);
    wg::Fence();
    PhaseOneIssueST<D, L>(dlo, dlo_n, s_next);
    wg::MbarArrive(tile_done);  // this tile's reads of P^T / dS^T are done
  }
  // The tile body of every other configuration: S and dP for this warp's 16 query rows, P^T / dS^T
  // with column scales (reduce-scatter and shared partials), dS^ with row scales, the products.
  __device__ __forceinline__ void TileRows(int i, int it, int r0, float sqi, float sdoi,
                                           uint32_t dlo_q, const float* s_lse,
                                           const float* s_drow, float* s_xrow) {
    // S and dP for this warp's 16 query rows x 64 keys; P and dS stay in registers (pf, dsf).
    float pf[8][4], dsf[8][4];
    {
      int32_t si[8][4];
      float dp[8][4];
      if constexpr (kEarly) {
        cuda::wgmma::Wait<0>();
#pragma unroll
        for (int n = 0; n < 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            si[n][e] = s_next[4 * n + e];
            dp[n][e] = dp_next[4 * n + e];
          }
        }
      } else {
        PhaseOneWgmma<D, L>(dlo, dlo_q, p.int8_dp, sdoi * svj, si, dp);
      }
      const float a = tau * sqi * skj;
      // Interior block: every (row, key) visible (no N tail, causal: wholly below the diagonal).
      const bool interior = r0 + kTile <= p.n && c0 + kTile <= p.n &&
                            (!kCausal || c0 + kTile - 1 <= r0);
      // Log2 domain, P = ex2.approx(a log2e x + (bias log2e - lse log2e)): one FMA and the SFU op
      // per element (expf: range reduction + ex2 + scaling, ~8 instructions).
      const float a2 = SoftmaxScale(a * cuda::kLog2e);  // the v5+ forwards' a, bit for bit
      // The Q-smoothing bias as a compile-time choice of two loops (a runtime test per element
      // was if-converted into predicated loads and FMAs issued either way).
      // P and dS by one FMA and the SFU op per element; the masked form (N tail, causal
      // diagonal) computes every element the same way and then zeroes those outside the mask by
      // a select on a per-row key limit, so that it needs no more registers than the interior
      // form (its former per-element predicated loads and exponentials were the loop's register
      // peak, 238 of 240, which the rest of the loop's allocation had to fit around).
      // Elements outside are computed from whatever the tiles hold there and never selected.
      const auto tile_fx = [&](auto sq_c, auto mask_c) {
        constexpr bool kSq = decltype(sq_c)::value, kMask = decltype(mask_c)::value;
        const float l0 = s_lse[warp * 16 + g] * cuda::kLog2e;
        const float l1 = s_lse[warp * 16 + g + 8] * cuda::kLog2e;
        const float dr0 = s_drow[warp * 16 + g], dr1 = s_drow[warp * 16 + g + 8];
        // kMask: keys c0 + c with c < lim[h] are visible from row h (0 for rows past N).
        [[maybe_unused]] int lim[2];
        if constexpr (kMask) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int grow = r0 + warp * 16 + g + 8 * h;
            const int last = kCausal ? min(grow + 1, p.n) : p.n;  // keys < last are visible
            lim[h] = grow < p.n ? last - c0 : 0;
          }
        }
#pragma unroll
        for (int n = 0; n < 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float x = __int2float_rn(si[n][e]);
            const float l = (e >> 1) ? l1 : l0;
            const float bl = kSq ? fmaf(s_bias[n * 8 + 2 * t + (e & 1)], cuda::kLog2e, -l) : -l;
            const float pe = cuda::FastExp2(fmaf(a2, x, bl));
            const float ds = pe * (dp[n][e] - ((e >> 1) ? dr1 : dr0));
            bool valid = true;  // (interior: folded away)
            if constexpr (kMask) valid = n * 8 + 2 * t + (e & 1) < lim[e >> 1];
            pf[n][e] = valid ? pe : 0.0f;
            dsf[n][e] = valid ? ds : 0.0f;
          }
        }
      };
      if (interior) {
        if (p.smooth_q) {
          tile_fx(std::true_type{}, std::false_type{});
        } else {
          tile_fx(std::false_type{}, std::false_type{});
        }
      } else {
        if (p.smooth_q) {
          tile_fx(std::true_type{}, std::true_type{});
        } else {
          tile_fx(std::false_type{}, std::true_type{});
        }
      }
    }
    // Row scales of dS (this thread's rows 16w+g, +8: the same rows as its dQ rows) and rowsum.
    float rmax[2], rscale[2], rinv[2];  // per row: max |dS| (kPair: over this consumer's keys)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mds = 0.0f, rs = 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          mds = fmaxf(mds, fabsf(dsf[n][2 * h + b]));
          rs += dsf[n][2 * h + b];
        }
      }
      mds = QuadMax(mds);
      rs = QuadSum(rs);
      rmax[h] = mds;
      if constexpr (kPair) {  // the scale after the pair barrier below, over both consumers' keys
        if (t == 0) s_xrow[cw * kTile + warp * 16 + g + 8 * h] = mds;
      } else {
        rscale[h] = GroupScaleBranchless(mds);
        rinv[h] = RcpNewton(rscale[h]);  // (RcpFastPath: checked with the column scale's below)
      }
      const int grow = r0 + warp * 16 + g + 8 * h;
      if constexpr (kPair && !kCausal) {
        // (Measured: the predicated add below 0.986-0.988x here, 1.022-1.030x on the causal
        // kernel, 1.017-1.036x at d64.)
        if (t == 0 && grow < p.n) atomicAdd(p.dsrow + int64_t(qbh) * p.n + grow, rs);
      } else {
        RedAddIf(t == 0 && grow < p.n, p.dsrow + int64_t(qbh) * p.n + grow, rs);
      }
    }
    // Column partials over this warp's 16 rows (its two rows, then the 8 groups: lane bits 2..4).
    // The column sums of dS serve Q-smoothing's dK term only (which kPair never runs), so the
    // reduce-scatter variants skip them without it: a warp-uniform branch around ~85 instructions
    // per warp and tile (5% of the d64 backward's) that were issued for nothing. Measured: d64
    // backward 1.016-1.030x, d128 (no column sums with kPair) unchanged; the branch costs the
    // d64 kernels 4-8 bytes of spills at their 168-register bound.
    const bool col_sum = !kPair && p.smooth_q;
    {
      float vp[16], vds[16];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          vp[2 * n + b] = fmaxf(pf[n][b], pf[n][2 + b]);
          vds[2 * n + b] = fmaxf(fabsf(dsf[n][b]), fabsf(dsf[n][2 + b]));
        }
      }
      const auto fmax = [](float x, float y) { return fmaxf(x, y); };
      float rp[2], rds[2];
      ColumnReduceScatter(vp, lane, fmax, rp);
      ColumnReduceScatter(vds, lane, fmax, rds);
      const int c = 8 * g + 2 * t;
      *reinterpret_cast<float2*>(s_part + (0 * 4 + warp) * kTile + c) = make_float2(rp[0], rp[1]);
      *reinterpret_cast<float2*>(s_part + (1 * 4 + warp) * kTile + c) = make_float2(rds[0], rds[1]);
      if (col_sum) {
        float vcs[16], rcs[2];
#pragma unroll
        for (int n = 0; n < 8; ++n) {
#pragma unroll
          for (int b = 0; b < 2; ++b) vcs[2 * n + b] = dsf[n][b] + dsf[n][2 + b];
        }
        ColumnReduceScatter(vcs, lane, [](float x, float y) { return x + y; }, rcs);
        *reinterpret_cast<float2*>(s_part + (2 * 4 + warp) * kTile + c) =
            make_float2(rcs[0], rcs[1]);
      }
    }
    if constexpr (kPair) {
      PairSync();  // both consumers' row maxima of |dS| (and this one's column partials)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float other = s_xrow[(1 - cw) * kTile + warp * 16 + g + 8 * h];
        rscale[h] = GroupScaleBranchless(fmaxf(rmax[h], other));
        rinv[h] = RcpNewton(rscale[h]);  // (RcpFastPath: checked with the column scale's below)
      }
    } else {
      WgSync();
    }
    {
      // One scale per thread: warps 0-1 (which = 0) take P's of column c, warps 2-3 dS's (and
      // the dS column sum with Q-smoothing), so the four warps share the combine, the division
      // and the stores (the codes below read the 1 / scales interleaved from s_cinv2).
      static_assert(kThreads == 2 * kTile, "two quantities per column over the warpgroup");
      const int c = tid & (kTile - 1), which = tid >> 6;
      float m = 0.0f, cs = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        m = fmaxf(m, s_part[(which * 4 + w) * kTile + c]);
        if (col_sum && which) cs += s_part[(2 * 4 + w) * kTile + c];
      }
      const float sc = GroupScaleBranchless(m);
      float inv = RcpNewton(sc);
      // One warp-uniform test for the three reciprocals, the rows' (either path above) and the
      // column's (separate tests serialize their chains: each one's branch is a convergence
      // point), the IEEE division for the rare slow path.
      const bool slow = !RcpFastPath(sc) || !RcpFastPath(rscale[0]) || !RcpFastPath(rscale[1]);
      if (__any_sync(0xffffffffu, slow)) {
        inv = 1.0f / sc;
        rinv[0] = 1.0f / rscale[0];
        rinv[1] = 1.0f / rscale[1];
      }
      // int8 dS^ [q][key] (row scales) while the column scales' chain runs: its codes need no
      // column scale, so they fill the wait before the barrier below instead of following it.
      uint32_t dsh_lo[2];  // dS^ codes of the even n-block, stored with the odd one's
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t packed = QuantPack2(dsf[n][2 * h], dsf[n][2 * h + 1], rinv[h]);
          if (n % 2 == 0) {
            dsh_lo[h] = packed;
          } else {  // keys 8(n - 1) + 2t, +1, 8n + 2t, +1: four adjacent bytes (K^T's order)
            *reinterpret_cast<uint32_t*>(s_dsh + DshOff(n >> 1, h)) =
                __byte_perm(dsh_lo[h], packed, 0x5410);
          }
        }
      }
      s_vec[which * kTile + c] = sc;  // s_csp (which = 0) or s_csds (1)
      s_cinv2[2 * c + which] = inv;
      if (col_sum && which) s_colsum[c] = cs;
    }
    WgSync();
    // The dV / dK epilogues' coefficients of this thread's key rows kr[h]. d128: in registers
    // from here (read in the epilogues, they were loaded again after every wgmma wait, whose
    // memory clobber orders them, each behind an address rematerialized from the thread index);
    // d64 reads them in the epilogues (measured 2-3% faster at d64).
    constexpr bool kCoefRegs = D == 128;
    const auto dv_coef = [&](int h) { return s_csp[kr[h]] * sdoi; };
    const auto dk_coef = [&](int h) { return tau * s_csds[kr[h]] * sqi; };
    [[maybe_unused]] float cdv[2], cdk[2];
    if constexpr (kCoefRegs) {
      cdv[0] = dv_coef(0), cdv[1] = dv_coef(1);
      cdk[0] = dk_coef(0), cdk[1] = dk_coef(1);
    }
    // int8 P^T [key][q], dS^T [key][q] (column scales). inv4[n]: (1/s_P, 1/s_dS) of columns
    // 8n + 2t and 8n + 2t + 1 in one 16-byte load. Issued right before its block's codes, each load
    // would come after the previous block's code stores (the compiler cannot tell the tiles
    // apart), its latency exposed in turn: they run kAhead blocks ahead. (At d128 this and the
    // coefficients above pay only since the masked P / dS form stopped being the loop's register
    // peak; before, ptxas made room for them by recomputing the thread index in the loop:
    // an earlier run. Four ahead at d128 lost to two then, 0.981-0.988x; since the dQ staging by
    // stmatrix it gains, backward 1.013x: an earlier run.)
    constexpr int kAhead = 4;
    const float4* const cinv4 = reinterpret_cast<const float4*>(s_cinv2);
    float4 inv4[8];
#pragma unroll
    for (int n = 0; n < kAhead; ++n) inv4[n] = cinv4[n * 4 + t];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      if (n + kAhead < 8) inv4[n + kAhead] = cinv4[(n + kAhead) * 4 + t];
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const float ip = b ? inv4[n].z : inv4[n].x;
        const float ids = b ? inv4[n].w : inv4[n].y;
        // Query rows g (h = 0) and g + 8 (h = 1): two codes (two FMAs + one PRMT: no F2I, no
        // clamp), one 16-bit store.
        const uint32_t pp = QuantPack2(pf[n][b], pf[n][2 + b], ip);
        const uint32_t pds = QuantPack2(dsf[n][b], dsf[n][2 + b], ids);
        *reinterpret_cast<uint16_t*>(s_pt + PtOff(n, b)) = static_cast<uint16_t>(pp);
        *reinterpret_cast<uint16_t*>(s_dst + PtOff(n, b)) = static_cast<uint16_t>(pds);
      }
    }
    if constexpr (!kWs) cuda::wgmma::MbarWait(tma_bar + 8, it & 1);  // Q^T, dO^T landed
    cuda::wgmma::FenceProxyAsync();  // st.shared -> wgmma's reads
    if constexpr (kPair) {
      PairSync();  // the dQ wgmma reads both consumers' dS^
    } else {
      WgSync();
    }

    // dV, dK (this warp's 16 keys) and dQ (this warp's 16 query rows), 64 head-dim columns at a
    // time to bound the live int32 accumulators. The epilogues read the chunk's int32 products
    // through at(n, e) (the m16n8 / m64n64 accumulator layouts agree per warp).
    const float c0f = tau * rscale[0] * skj, c1f = tau * rscale[1] * skj;
    // The dV (kind 0) / dK (kind 1) fold of head-dim chunk ch_c, with the key rows' coefficients
    // from registers (kCoefRegs) or shared memory.
    const auto epi_fold = [&](auto kind_c, auto ch_c, const auto& at) {
      constexpr bool kDv = decltype(kind_c)::value == 0;
      Fold(kDv ? dv : dk, decltype(ch_c)::value, [&](int h) {
        if constexpr (kCoefRegs) {
          return kDv ? cdv[h] : cdk[h];
        } else {
          return kDv ? dv_coef(h) : dk_coef(h);
        }
      }, at);
    };
    // The 64 head-dim rows ch * 64.. of K^T, Q^T, dO^T start ch * kChBytes into their tiles.
    constexpr int kChBytes = L::TileP::kBytes;
    {
      // Six (d128) / three (d64) products in flight two at a time: step s = 3 ch + kind (dV, dK,
      // dQ); the epilogue of step s runs while step s + 1's wgmma does. kPair: five steps, dV /
      // dK of head-dim chunk 0, dQ (this consumer's chunk cw over both consumers' 128 keys: four
      // k-steps), dV / dK of chunk 1.
      namespace wg = cuda::wgmma;
      using TP = typename L::TileP;
      constexpr int kAOf[3] = {L::kPT, L::kDsT, L::kDsh};
      constexpr int kBOf[3] = {L::kDoht, L::kQht, L::kKht};
      constexpr int kSteps = kPair ? 2 * (D / 64) + 1 : 3 * (D / 64);
      constexpr auto kind_of = [](int st) {
        return kPair ? (st == 2 ? 2 : (st < 2 ? st : st - 3)) : st % 3;
      };
      constexpr auto ch_of = [](int st) { return kPair ? (st < 2 ? 0 : 1) : st / 3; };
      int32_t acc[2][32];
      const auto issue = [&](auto s_c) {
        constexpr int st = decltype(s_c)::value, kind = kind_of(st), ch = ch_of(st);
        wg::Fence();
        if constexpr (kPair && kind == 2) {
          MmaDqPair(acc[st & 1]);
        } else {
          constexpr int ab = kAOf[kind], bb = kBOf[kind] + ch * kChBytes;
          const uint32_t blo = kind == 2 ? dlo : dlo_q;  // K^T in the K side, Q^T / dO^T not
          wg::MmaS8(acc[st & 1], TileDesc<TP>(dlo, ab), TileDesc<TP>(blo, bb), false);
          wg::MmaS8(acc[st & 1], TileDesc<TP>(dlo, ab, 32), TileDesc<TP>(blo, bb, 32), true);
        }
        wg::Commit();
      };
      issue(std::integral_constant<int, 0>{});
      issue(std::integral_constant<int, 1>{});
      // kEarly: whether a next tile's phase 1 is issued in the last two steps (uniform).
      const bool early_next = kEarly && i + 1 < p.ntq;
      uint32_t dlo_n = 0;
      cuda::StaticFor<kSteps>([&](auto s_c) {
        constexpr int st = decltype(s_c)::value, kind = kind_of(st);
        if constexpr (st + 1 < kSteps) {
          wg::Wait<1>();
        } else if (kEarly) {
          wg::Wait<1>();  // the next tile's dP may still run
        } else {
          wg::Wait<0>();
        }
        const auto at = [&](int n, int e) { return acc[st & 1][4 * n + e]; };
        const std::integral_constant<int, ch_of(st)> ch_c{};
        if constexpr (kind < 2) epi_fold(std::integral_constant<int, kind>{}, ch_c, at);
        if constexpr (kind == 2) EpiDq(r0, kPair ? cw : ch_of(st), c0f, c1f, at);
        if constexpr (st + 2 < kSteps) issue(std::integral_constant<int, st + 2>{});
        // kEarly: dP of the next tile in the registers step st's product freed, then S. On the
        // last tile both are issued on this tile's operands, their results unused: the
        // accumulators must be defined by a wgmma on every path into the back edge (otherwise
        // the old ones stay live through the body: 350 bytes of spills), and defining them by
        // any other instruction makes ptxas serialize every wgmma of the kernel (C7515).
        if constexpr (kEarly && st == kSteps - 2) {
          if (early_next) {
            ring.ConsumerWait(it + 1);
            dlo_n = wg::DescLo(cuda::SmemAddr(StageBase((it + 1) & 1)));
          } else {
            dlo_n = dlo_q;
          }
          wg::Fence();
          PhaseOneIssueDpBf16<D, L>(dlo, dlo_n, dp_next);
        }
        if constexpr (kEarly && st == kSteps - 1) {
          wg::Fence();
          PhaseOneIssueS<D, L>(dlo, dlo_n, s_next);
        }
      });
    }
  }
};

}  // namespace
}  // namespace ablate::kernels::sage
