// SageBwd on the GPU: the backward driver (the host API is attention_cuda.h, the numerics
// kernels/ALGORITHMS.md §1.2). One CTA per (b,h, K tile) (d128: per pair of K tiles, a producer
// warpgroup and two consumers) walks the Q tiles (causal: only tiles with a visible key); the
// per-tile body is BwdTile's (sage_backward_tile.cuh). This file holds the kernel around it (the
// CTA's set-up, the producer, each Q tile's stage, the dK / dV stores), the dQ conversion
// (DqFinalizeKernel: dqacc + the K-smoothing correction to bf16) and the launcher, which runs
// the dO quantization (sage_quant.cu), the kernel and the conversion as programmatic dependents.
// Accumulation order differs from the emulator; dQ's fp32 atomics make its last bits vary from
// run to run unless the backward is deterministic (opt.deterministic: each CTA adds into its own
// slice of the scratch, the conversion sums the slices in K order).
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "attention/cuda/fpa_common.cuh"
#include "attention/cuda/sage_backward_tile.cuh"

namespace ablate::kernels::sage {
namespace {


// grid: (K tiles, BH); block: 128. Warp w owns keys 16w..16w+15 of the K tile for dK and dV, and
// query rows 16w..16w+15 of each Q tile for S, dP, P, dS and dQ. BwdPlan::ws: grid (groups of C =
// kWsConsumers K tiles, BH), block 128 (C + 1): warpgroup 0 the producer, warpgroup 1 + c the
// consumer of K tile C jj + c, whose warp w (of 4) owns the rows above.
template <int D, bool kCausal, bool kKv128, bool kInt8Dp>
__global__ void __launch_bounds__(BwdThreads(BwdPlanFor(D, kCausal, kKv128, kInt8Dp)),
                                  BwdMinBlocks(D, BwdPlanFor(D, kCausal, kKv128, kInt8Dp)))
    SageBackwardKernel(const __grid_constant__ BwdParams p) {
  constexpr BwdPlan kPlan = BwdPlanFor(D, kCausal, kKv128, kInt8Dp);
  constexpr bool kWs = kPlan.ws;
  constexpr bool kTma = kPlan.tma;
  static_assert(kTma || kWs, "the Q side by TMA, or by the producer's cp.async (BwdPlan::ws)");
  constexpr bool kPair = kPlan.dq_pair;
  static_assert(!kPair || (kWs && D == 128 && kWsConsumers == 2), "BwdPlan::dq_pair: BwdPlan::ws at D = 128");
  constexpr bool kEarly = kPlan.early;
  static_assert(!kEarly || kPair, "BwdPlan::early builds on BwdPlan::dq_pair");
  constexpr bool kSwap = kPlan.keys_as_rows;
  static_assert(!kSwap || kEarly, "BwdPlan::keys_as_rows builds on BwdPlan::early");
  using L = std::conditional_t<kWs, BwdWsLayout<D>, BwdLayout<D>>;

  extern __shared__ __align__(16) char smem[];
  // GmmaTiles need a 1024-byte-aligned base (L::kBytes has the slack).
  char* const buf = smem + ((1024 - (cuda::SmemAddr(smem) & 1023)) & 1023);
  // kWs: cw = this thread's consumer warpgroup (-1: the producer), tid its index in its
  // warpgroup; base = its consumer region. Otherwise cw = 0, tid = threadIdx.x, base = buf.
  // (Broadcast from lane 0 so that the compiler knows it is warp-uniform: the consumer region's
  // address, and the wgmma descriptors built from it, then live in uniform registers.)
  const int cw = kWs ? __shfl_sync(0xffffffffu, int(threadIdx.x >> 7) - 1, 0) : 0;
  const int tid = kWs ? int(threadIdx.x & 127) : int(threadIdx.x);
  char* const base = [&] {
    if constexpr (kWs) {
      return buf + L::kCons0 + max(cw, 0) * L::kConsBytes;
    } else {
      return buf;
    }
  }();
  int8_t* s_kh = reinterpret_cast<int8_t*>(base + L::kKh);
  int8_t* s_kht = reinterpret_cast<int8_t*>(base + L::kKht);
  char* s_v = base + L::kV;  // bf16 V, or int8 V^ with int8_dp
  // (Without kWs: the Q side's tiles, which kWs keeps in the stages.)
  int8_t* s_qh = reinterpret_cast<int8_t*>(base + L::kQh);
  int8_t* s_qht = reinterpret_cast<int8_t*>(base + L::kQht);
  char* s_do = base + L::kDo;  // bf16 dO, or int8 dO^ with int8_dp
  int8_t* s_doht = reinterpret_cast<int8_t*>(base + L::kDoht);
  float* s_part = reinterpret_cast<float*>(base + L::kPart);
  int8_t* s_pt = reinterpret_cast<int8_t*>(base + L::kPT);
  int8_t* s_dsh = reinterpret_cast<int8_t*>(base + L::kDsh);
  int8_t* s_dst = reinterpret_cast<int8_t*>(base + L::kDsT);
  float* s_vec = reinterpret_cast<float*>(base + L::kVec);
  float* s_csp = s_vec;               // per key column: scale of P
  float* s_csds = s_vec + kTile;      // per key column: scale of dS
  float* s_colsum = s_vec + 2 * kTile;  // per key column: sum of dS
  float* s_bias = s_vec + 4 * kTile;    // (vectors 3 and 7 unused)
  float* s_cinv2 = s_vec + 8 * kTile;   // per key column: (1 / scale of P, 1 / scale of dS)
  // The Q side's lse, D_i and mu (kWs: in the stage, set per tile).
  float* s_lse = s_vec + 5 * kTile;
  float* s_drow = s_vec + 6 * kTile;
  float* s_mu = reinterpret_cast<float*>(base + L::kMu);
  float* s_kbar;
  if constexpr (kWs) {
    s_kbar = reinterpret_cast<float*>(base + L::kKbar);
  } else {
    s_kbar = s_mu + D;
  }

  cuda::GridDepLaunchDependents();  // DqFinalizeKernel waits for this grid's completion
  constexpr bool kLpt = kPlan.longest_first;
  int jb = int(blockIdx.x), bh = int(blockIdx.y);
  if constexpr (kLpt) LptBlock(p.lpt_heads, jb, bh);
  constexpr int kCons = kWs ? kWsConsumers : 1;  // K tiles per CTA
  const int j = kCons * jb + max(cw, 0);  // this thread's K tile
  const int warp = kWs ? int((threadIdx.x >> 5) & 3) : int(threadIdx.x >> 5);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Byte offsets of this thread's stores into P^T / dS^T [key][q] (key c = 8n + 2t + b, query
  // rows 16w + g + 8h at bytes 16w + 2g + h: BwdQueryOfSlot, the order of Q^T and dO^T, so one
  // 16-bit store covers h = 0, 1) and dS^ [q][key] (row 16w + g + 8h, keys 8n + 2t, +1),
  // 64B-swizzled, where the swizzle term is fixed per thread and the rest is a constant (the
  // per-store XOR / shifts of GmmaTile::ByteOffset folded by hand; equal to it for every thread,
  // n, b: 16-byte unit u of row r sits at u ^ ((r / 2) % 4)).
  const int pt_base = 128 * t + (((warp ^ t) & 3) << 4) + 2 * g;
  // dS^'s keys run in K^T's FwdKeyOfSlot order: keys 16m + 2t + b and 16m + 8 + 2t + b (b = 0,
  // 1) at bytes 16m + 4t .. 16m + 4t + 3 of the row, one 32-bit store per m.
  const int dsh_base = (warp * 16 + g) * kTile + 4 * t;
  const int dsh_sw = ((g >> 1) & 3) << 4;
  const int c0 = j * kTile;
  const int64_t nd = int64_t(p.n) * D, npd = int64_t(p.np) * D;
  const float tau = p.tau;

  // The address word of the wgmma descriptors of every tile in the buffer (kWs: in this
  // consumer's region, dlo_q in the stage of the current Q tile).
  const uint32_t dlo = cuda::wgmma::DescLo(cuda::SmemAddr(base));
  uint32_t dlo_q = dlo;

  using cuda::wgmma::LoadGmmaTileAsync;
  // kWs without kTma: Q^ and dO (the S / dP operands) of the Q tile at row rr into qh_dst / do_dst,
  // and Q^T / dO^T (the dK / dV operands) into qht_dst / doht_dst, copied by the producer's
  // kThreads threads (index tid); cp.async, not committed.
  auto copy_q_do = [&](int8_t* qh_dst, char* do_dst, int rr, int tid) {
    LoadGmmaTileAsync<typename L::TileI8, kThreads, false>(
        qh_dst, p.qh + bh * npd + int64_t(rr) * D, 0, kTile, tid);
    if (p.int8_dp) {
      LoadGmmaTileAsync<typename L::TileI8, kThreads, false>(
          do_dst, p.doh + bh * npd + int64_t(rr) * D, 0, kTile, tid);
    } else {
      LoadGmmaTileAsync<typename L::TileBf, kThreads>(do_dst, p.do_ + bh * nd, rr, p.n, tid);
    }
  };
  auto copy_qt_dot = [&](int8_t* qht_dst, int8_t* doht_dst, int rr, int tid) {
    LoadGmmaTileAsync<typename L::TileT, kThreads, false>(qht_dst, p.qht + bh * npd + rr, 0, D,
                                                          tid, p.np);
    LoadGmmaTileAsync<typename L::TileT, kThreads, false>(doht_dst, p.doht + bh * npd + rr, 0, D,
                                                          tid, p.np);
  };
  // kTma: one thread's TMA copies of the Q tile at row rr: Q^ and dO (dO^ with int8_dp) completing
  // on the mbarrier bar_a, Q^T and dO^T on bar_b (kWs: both on the stage's full barrier, bar_b ==
  // bar_a). The thread's arrive.expect_tx is its arrival on each barrier.
  auto tma_q_side = [&](char* qh_dst, char* do_dst, char* qht_dst, char* doht_dst, int rr,
                        uint32_t bar_a, uint32_t bar_b) {
    namespace wg = cuda::wgmma;
    using T8 = typename L::TileI8;
    using TB = typename L::TileBf;
    using TT = typename L::TileT;
    const uint32_t a_bytes = T8::kBytes + (p.int8_dp ? T8::kBytes : TB::kBytes);
    if (bar_a == bar_b) {
      wg::MbarArriveExpectTx(bar_a, a_bytes + 2 * TT::kBytes);
    } else {
      wg::MbarArriveExpectTx(bar_a, a_bytes);
      wg::MbarArriveExpectTx(bar_b, 2 * TT::kBytes);
    }
    wg::LoadGmmaTileTma<T8, 1>(cuda::SmemAddr(qh_dst), &p.tm_qh, 0, rr, bh, bar_a);
    if (p.int8_dp) {
      wg::LoadGmmaTileTma<T8, 1>(cuda::SmemAddr(do_dst), &p.tm_do, 0, rr, bh, bar_a);
    } else {
      wg::LoadGmmaTileTma<TB, 2>(cuda::SmemAddr(do_dst), &p.tm_do, 0, rr, bh, bar_a);
    }
    wg::LoadGmmaTileTma<TT, 1>(cuda::SmemAddr(qht_dst), &p.tm_qht, rr, 0, bh, bar_b);
    wg::LoadGmmaTileTma<TT, 1>(cuda::SmemAddr(doht_dst), &p.tm_doht, rr, 0, bh, bar_b);
  };
  // kWs: the ring of Q-side stages; use `it` = the CTA loop's it-th Q tile (both roles walk the
  // same tiles from ibeg).
  const int ibeg = kWs ? (kCausal ? kCons * jb : 0) : 0;
  const cuda::wgmma::MbarRing<2> ring{[&] {
    if constexpr (kWs) {
      return cuda::SmemAddr(buf + L::kBar);
    } else {
      return 0u;
    }
  }()};
  if constexpr (kWs) {
    namespace wg = cuda::wgmma;
    if (threadIdx.x == 0) {
      ring.Init(kThreads, (kPair ? kCons : min(kCons, p.ntk - kCons * jb)) * kThreads);
      if constexpr (kSwap) {  // each consumer's "tile done" barrier (below)
        for (int c = 0; c < kCons; ++c) {
          wg::MbarInit(cuda::SmemAddr(buf + L::kBar) + L::kTileDoneOff + 8 * c, kThreads);
        }
      }
      if constexpr (kTma) wg::FenceMbarInit();
    }
    __syncthreads();
    if (cw < 0) {
      // Producer: copies only (its registers go to the consumers).
      wg::SetMaxNRegDec<kWsProducerRegs>();
      cuda::GridDepWait();  // dO^T / dO^, D_i, the scales of dO: the prep launch's
      for (int i = ibeg, it = 0; i < p.ntq; ++i, ++it) {
        const int rr = i * kTile;
        ring.ProducerAcquire(it);
        char* const q = BwdStageBase<D, kWs>(buf, it & 1);
        if constexpr (kTma) {
          if (tid == 0) {
            const uint32_t full = ring.Full(it & 1);
            tma_q_side(q + L::kQh, q + L::kDo, q + L::kQht, q + L::kDoht, rr, full, full);
          }
        } else {
          copy_q_do(reinterpret_cast<int8_t*>(q + L::kQh), q + L::kDo, rr, tid);
          copy_qt_dot(reinterpret_cast<int8_t*>(q + L::kQht),
                      reinterpret_cast<int8_t*>(q + L::kDoht), rr, tid);
        }
        if (tid < kTile) {
          const bool ok = rr + tid < p.n;
          // (kSwap: in the log2 domain, read by 16 threads per query there)
          reinterpret_cast<float*>(q + L::kLse)[tid] =
              ok ? p.lse[int64_t(bh) * p.n + rr + tid] * (kSwap ? cuda::kLog2e : 1.0f) : 0.0f;
          reinterpret_cast<float*>(q + L::kDrow)[tid] =
              ok ? p.drow[int64_t(bh) * p.n + rr + tid] : 0.0f;
        } else if (tid == kTile) {
          reinterpret_cast<float*>(q + L::kScal)[0] = p.sq[int64_t(bh) * p.ntq + i];
          reinterpret_cast<float*>(q + L::kScal)[1] = p.sdo[int64_t(bh) * p.ntq + i];
        }
        if (p.smooth_q) {
          for (int d = tid; d < D; d += kThreads) {
            reinterpret_cast<float*>(q + L::kMu)[d] = p.mu[(int64_t(bh) * p.ntq + i) * D + d];
          }
        }
        if constexpr (kTma) {
          if (tid != 0) ring.ProducerCommit(it);  // thread 0 arrived with its expect_tx
        } else {
          CopyWait();
          wg::FenceProxyAsync();  // cp.async writes -> the consumers' wgmma reads
          ring.ProducerCommit(it);
        }
      }
      return;
    }
    // No second K tile: the empty barriers count one consumer (kPair: both consumers run, this
    // one's keys all masked).
    if (!kPair && j >= p.ntk) return;
    wg::SetMaxNRegInc<kWsConsumerRegs>();
  }
  // (kPair, a K tile past N: no K^ / K^T to copy; whatever the tiles hold meets only masked
  // scores and zero dS^ codes.)
  // (Two tests, the copies as issued earlier: one test changes the PTX of the
  // production d128 kernels, whose timing moves by 1-2% with any such change.)
  if (!kPair || j < p.ntk) {
    LoadGmmaTileAsync<typename L::TileI8, kThreads, false>(
        s_kh, p.kh + bh * npd + int64_t(c0) * D, 0, kTile, tid);
  }
  if constexpr (kSwap) {
    // K^T with the keys of each 16 in the order of the dS^ codes' stmatrix.trans stores (key
    // g + 8h at byte 2g + h, BwdQueryOfSlot's order) instead of the quantize launch's
    // FwdKeyOfSlot order (key 8(i / 2) + 2t + i % 2 at byte 4t + i): bytes 1 and 2 of every
    // 32-bit word swap. 16-byte loads, permuted, stored into the swizzled tile.
    using TT = typename L::TileT;
    static_assert(TT::kRowBytes == 64 && TT::kRows == D, "K^T: D rows of 64 keys");
    if (j < p.ntk) {
#pragma unroll
      for (int i = 0; i < D * 4 / kThreads; ++i) {
        const int x = tid + i * kThreads, r = x >> 2, u = x & 3;
        uint4 w = *reinterpret_cast<const uint4*>(p.kht + bh * npd + int64_t(r) * p.np + c0 +
                                                  16 * u);
        w.x = __byte_perm(w.x, 0, 0x3120);
        w.y = __byte_perm(w.y, 0, 0x3120);
        w.z = __byte_perm(w.z, 0, 0x3120);
        w.w = __byte_perm(w.w, 0, 0x3120);
        *reinterpret_cast<uint4*>(s_kht + TT::ByteOffset(r, 16 * u)) = w;
      }
    }
  } else if (!kPair || j < p.ntk) {
    LoadGmmaTileAsync<typename L::TileT, kThreads, false>(s_kht, p.kht + bh * npd + c0, 0, D,
                                                          tid, p.np);
  }
  if (p.int8_dp) {
    LoadGmmaTileAsync<typename L::TileI8, kThreads, false>(
        s_v, p.vh + bh * npd + int64_t(c0) * D, 0, kTile, tid);
  } else {
    LoadGmmaTileAsync<typename L::TileBf, kThreads>(s_v, p.v + bh * nd, c0, p.n, tid);
  }
  if (p.smooth_q) {
    for (int d = tid; d < D; d += kThreads) s_kbar[d] = p.kbar[int64_t(bh) * D + d];
  }
  const float skj = KvGroupScale(p.sk, p, bh, j);
  const float svj = KvGroupScale(p.sv, p, bh, j);

  constexpr int kNtD = D / 8;
  float dk[kNtD][4], dv[kNtD][4];
#pragma unroll
  for (int n = 0; n < kNtD; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  }
  const int kr[2] = {warp * 16 + g, warp * 16 + g + 8};  // this thread's key rows (dK, dV)

  const int i0 = kCausal ? c0 / kTile : 0;
  // Without kWs: the lse / D_i rows of the Q tile at rr into registers (threads 0..63), loaded
  // at the top of its iteration (single-buffered: 2-3 CTAs per SM overlap one CTA's copies with
  // another's work), and the mbarriers of the Q side's two copy groups (one phase per Q tile).
  float lse_i = 0.0f, drow_i = 0.0f;
  auto load_rows = [&](int rr) {  // lse_i, drow_i of row rr + threadIdx.x (threads 0..63)
    if (threadIdx.x < kTile) {
      const bool ok = rr + int(threadIdx.x) < p.n;
      lse_i = ok ? p.lse[int64_t(bh) * p.n + rr + threadIdx.x] : 0.0f;
      drow_i = ok ? p.drow[int64_t(bh) * p.n + rr + threadIdx.x] : 0.0f;
    }
  };
  const uint32_t tma_bar = [&] {
    if constexpr (!kWs) {
      return cuda::SmemAddr(buf + L::kTmaBar);
    } else {
      return 0u;
    }
  }();
  if constexpr (!kWs) {
    if (threadIdx.x == 0) {
      cuda::wgmma::MbarInit(tma_bar, 1);
      cuda::wgmma::MbarInit(tma_bar + 8, 1);
      cuda::wgmma::FenceMbarInit();
    }  // (the loop top's barrier precedes every other use)
  }
  // Launched as a dependent of the prep launch (pdl): the K-tile copies above read the forward's
  // outputs only; dO^T / dO^, D_i, the scales of dO and the zeroed dsrow / dqacc are the prep's.
  cuda::GridDepWait();
  if constexpr (kWs) {  // this consumer's K-side copies
    CopyWait();
    cuda::wgmma::FenceProxyAsync();
    BwdWgSync<kWs>(cw);
  }
  // kPair: the descriptor words of both consumers' regions.
  const auto cons_dlo = [&](int c) {
    if constexpr (kPair) {
      return cuda::wgmma::DescLo(cuda::SmemAddr(buf + L::kCons0 + c * L::kConsBytes));
    } else {
      return 0u;
    }
  };
  const uint32_t dlo_c0 = cons_dlo(0), dlo_c1 = cons_dlo(1);
  float* s_xrow = nullptr;  // kPair: the stage's per-consumer row max |dS| [2][64]
  // kEarly: the next tile's S and dP accumulators, in flight across the loop's back edge; the
  // first tile's issued here.
  int32_t s_next[32];
  float dp_next[32];
  if constexpr (kEarly) {
    if (ibeg < p.ntq) {
      ring.ConsumerWait(0);
      const uint32_t dlo_n = cuda::wgmma::DescLo(cuda::SmemAddr(BwdStageBase<D, kWs>(buf, 0)));
      cuda::wgmma::Fence();
      if constexpr (kSwap) {
        PhaseOneIssueDpT<D, L>(dlo, dlo_n, dp_next);
        PhaseOneIssueST<D, L>(dlo, dlo_n, s_next);
      } else {
        PhaseOneIssueDpBf16<D, L>(dlo, dlo_n, dp_next);
        PhaseOneIssueS<D, L>(dlo, dlo_n, s_next);
      }
    }
  }
  BwdTile<D, kCausal, kKv128, kInt8Dp> tile{.p = p, .buf = buf, .base = base, .cw = cw, .tid = tid, .bh = bh,
                                 .j = j, .c0 = c0, .warp = warp, .lane = lane, .g = g, .t = t,
                                 .qbh = p.det_heads * jb + bh,
                                 .kr = {kr[0], kr[1]}, .pt_base = pt_base, .dsh_base = dsh_base,
                                 .dsh_sw = dsh_sw, .tau = tau, .skj = skj, .svj = svj, .dlo = dlo,
                                 .dlo_c0 = dlo_c0, .dlo_c1 = dlo_c1, .tma_bar = tma_bar,
                                 .ring = ring, .s_pt = s_pt, .s_dsh = s_dsh, .s_dst = s_dst,
                                 .s_part = s_part, .s_vec = s_vec, .s_csp = s_csp,
                                 .s_csds = s_csds, .s_colsum = s_colsum, .s_bias = s_bias,
                                 .s_cinv2 = s_cinv2, .dk = dk, .dv = dv, .s_next = s_next,
                                 .dp_next = dp_next};
  for (int i = kWs ? ibeg : i0, it = 0; i < p.ntq; ++i, ++it) {
    const int r0 = i * kTile;
    float sqi, sdoi;
    if constexpr (kWs) {
      namespace wg = cuda::wgmma;
      // causal: above this consumer's diagonal (consumer 1's first tile); kPair runs it masked
      if (!kPair && i < i0) {
        ring.ConsumerRelease(it);
        continue;
      }
      // The previous tile's reads of this consumer's region are done. (Without it the tile's
      // stores would still be ordered, by the barriers after the statistics, but the warps
      // start the tile apart: 0.983-0.994x at d128.) kSwap: its P^T / dS^T stores wait
      // for the previous tile's products by an mbarrier instead, right before them; its other
      // shared data (column partials, dS^) are ordered by its pair barriers.
      if constexpr (!kSwap) BwdWgSync<kWs>(cw);
      if constexpr (!kEarly) ring.ConsumerWait(it);  // (kEarly: before its phase 1's issue)
      char* const q = BwdStageBase<D, kWs>(buf, it & 1);
      dlo_q = wg::DescLo(cuda::SmemAddr(q));
      s_lse = reinterpret_cast<float*>(q + L::kLse);
      s_drow = reinterpret_cast<float*>(q + L::kDrow);
      s_mu = reinterpret_cast<float*>(q + L::kMu);
      s_xrow = reinterpret_cast<float*>(q + L::kXrow);
      sqi = reinterpret_cast<const float*>(q + L::kScal)[0];
      sdoi = reinterpret_cast<const float*>(q + L::kScal)[1];
      if (p.smooth_q) {
        BlockBias<D>(p.k + bh * nd, s_mu, s_kbar, j, p.n, tau, s_bias, tid);
        BwdWgSync<kWs>(cw);
      }
    } else {
      __syncthreads();  // the previous block's shared reads are done
      if (threadIdx.x == 0) {
        tma_q_side(reinterpret_cast<char*>(s_qh), s_do, reinterpret_cast<char*>(s_qht),
                   reinterpret_cast<char*>(s_doht), r0, tma_bar, tma_bar + 8);
      }
      load_rows(r0);
      if (threadIdx.x < kTile) {
        s_lse[threadIdx.x] = lse_i;
        s_drow[threadIdx.x] = drow_i;
      }
      if (p.smooth_q) {
        for (int d = threadIdx.x; d < D; d += blockDim.x) {
          s_mu[d] = p.mu[(int64_t(bh) * p.ntq + i) * D + d];
        }
      }
      if (it == 0) {  // the K side's cp.async copies, issued before the loop
        CopyWait();
        cuda::wgmma::FenceProxyAsync();
      }
      __syncthreads();
      if (p.smooth_q) {
        BlockBias<D>(p.k + bh * nd, s_mu, s_kbar, j, p.n, tau, s_bias);
        __syncthreads();
      }
      sqi = p.sq[int64_t(bh) * p.ntq + i];
      sdoi = p.sdo[int64_t(bh) * p.ntq + i];
      cuda::wgmma::MbarWait(tma_bar, it & 1);  // Q^, dO landed (TMA)
    }

    if constexpr (kSwap) {
      tile.TileKeysAsRows(i, it, r0, sqi, sdoi, dlo_q, s_lse, s_drow, s_xrow);
    } else {
      tile.TileRows(i, it, r0, sqi, sdoi, dlo_q, s_lse, s_drow, s_xrow);
    }
    // Q-smoothing's dK term tau rowsum_q(dS)[key] mu (kernels/ALGORITHMS.md 1.2) after the tile's
    // wgmmas, not per element of the dK epilogue behind a runtime test (if-converted there: ~250
    // instructions per warp and tile at d128 issued with or without Q-smoothing).
    if (p.smooth_q) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float cs = tau * s_colsum[kr[h]];
#pragma unroll
        for (int n = 0; n < kNtD; ++n) {
          const float2 mu = *reinterpret_cast<const float2*>(s_mu + n * 8 + 2 * t);
          dk[n][2 * h] = fmaf(cs, mu.x, dk[n][2 * h]);
          dk[n][2 * h + 1] = fmaf(cs, mu.y, dk[n][2 * h + 1]);
        }
      }
    }
    // kWs: every wgmma of this tile has completed and its shared reads of the stage are done.
    if constexpr (kWs) ring.ConsumerRelease(it);
  }
  if constexpr (kEarly) cuda::wgmma::Wait<0>();  // the last tile's unused S / dP (they read K^, V)
  // The staging buffer's reads complete before the CTA exits (its shared memory goes); the dqacc
  // adds themselves complete with the grid, which DqFinalizeKernel waits for (pdl).
  if constexpr (!DqByRed<D>()) {
    if (lane == 0) cuda::wgmma::BulkWaitRead<0>();
  }
  // dK and dV through shared memory and 16-byte row stores (StageAccBf16), in the first
  // 4 * 64 * D bytes of `base`: this consumer's K^ / V / K^T tiles (kWs; free now: kPair waits
  // for the other consumer's last dQ product, which reads this one's K^T), or the CTA's K^ / V /
  // Q^.
  using OT = cuda::Bf16Tile<kTile, D>;
  static_assert(L::kKh == 0 && (kWs ? L::kKht + L::TileT::kBytes : L::kDo) >= 2 * OT::kBytes,
                "staging room");
  if constexpr (kPair) {
    tile.PairSync();
  } else {
    BwdWgSync<kWs>(cw);
  }
  cuda::StageAccBf16<OT>(base, warp * 16, 0, lane, dk, 1.0f, 1.0f);
  cuda::StageAccBf16<OT>(base + OT::kBytes, warp * 16, 0, lane, dv, 1.0f, 1.0f);
  BwdWgSync<kWs>(cw);
  const int nr = min(kTile, p.n - c0);
  if (nr > 0) {
    cuda::StoreTileRows<OT>(base, p.dk + bh * nd + int64_t(c0) * D, D, nr, tid, kThreads);
    cuda::StoreTileRows<OT>(base + OT::kBytes, p.dv + bh * nd + int64_t(c0) * D, D, nr, tid,
                            kThreads);
  }
}


// dq = dqacc (+ tau * rowsum(dS) * kbar with the K-mean correction), to bf16. Grid (blocks per
// head, BH): each thread converts DqFinPer runs of one head (DqFinRuns), all loads issued before
// the first store, 16-byte stores, with 32-bit index arithmetic (one flat grid over BH x N x D / 8
// needed a 64-bit division by N per thread). A run is eight columns d..d+7 of one row (its two
// 16-byte units of even and odd columns in dqacc's DqAccIndex order); DqByRed: of rows r and r + 8
// of a 16-row block (the four consecutive units that hold both), one per thread, so that a thread
// converts 16 values either way (two per thread halved the grid: 19.6 -> 24.0 us at the GPT-2
// small shape, its last wave half empty). Also clears *armed (dqacc is no longer zero).
constexpr int kDqFinThreads = 256;
template <int D>
constexpr int DqFinPer() {
  return DqByRed<D>() ? 1 : 2;
}
template <int D>
__host__ __device__ constexpr int DqFinRuns(int n, int np) {
  return DqByRed<D>() ? np * D / 16 : n * D / 8;
}
// kDet: dqacc and dsrow are the deterministic scratch's slices (DetSlicesOfRow), summed in slice
// order.
template <int D, bool kDet>
__global__ void __launch_bounds__(kDqFinThreads) DqFinalizeKernel(
    const float* __restrict__ dqacc, const float* __restrict__ dsrow,
    const float* __restrict__ kbar, int n, int np, bool correct, float tau,
    __nv_bfloat16* __restrict__ dq, int* __restrict__ armed, int slices, int keys, bool causal) {
  constexpr int kRun = D / 8;  // runs of eight per row
  constexpr bool kPairs = DqByRed<D>();
  // Heads last to first: the backward kernel finished the last heads last, so theirs are the
  // dqacc blocks still in L2 (an earlier run: this launch 26.2 -> 25.4 us at B4 H16 N2048 d128,
  // 21.3 -> 20.3 us at B16 H12 N1024 d64, in place).
  const int bh = int(gridDim.y) - 1 - int(blockIdx.y), runs = DqFinRuns<D>(n, np);
  constexpr int kDqFinPer = DqFinPer<D>();
  const int first = blockIdx.x * (kDqFinThreads * kDqFinPer) + threadIdx.x;
  cuda::GridDepWait();  // dqacc, dsrow: the backward kernel (pdl)
  if (first == 0 && blockIdx.y == 0) *armed = 0;
  // Run i: its first row and its columns d.. .
  const auto run_of = [&](int i, int& row, int& d) {
    if constexpr (kPairs) {
      const int rem = i % (8 * kRun);
      row = i / (8 * kRun) * 16 + rem / kRun;
    } else {
      row = i / kRun;
    }
    d = i % kRun * 8;
  };
  // kPairs: units t = 0..3 (columns d + 2t, + 1 of the run's two rows); otherwise units 0 / 1
  // (columns d, d + 2, d + 4, d + 6 / d + 1, d + 3, ...).
  constexpr int kUnits = kPairs ? 4 : 2;
  float4 u[kDqFinPer][kUnits];
#pragma unroll
  for (int k = 0; k < kDqFinPer; ++k) {
    const int i = first + k * kDqFinThreads;
    if (i < runs) {
      int row, d;
      run_of(i, row, d);
      const auto load = [&](int64_t hb, float4(&x)[kUnits]) {
        if constexpr (kPairs) {
          const float4* src =
              reinterpret_cast<const float4*>(dqacc + DqAccIndex<D>(hb, np, row, d));
#pragma unroll
          for (int t = 0; t < 4; ++t) x[t] = src[t];
        } else {
          x[0] = *reinterpret_cast<const float4*>(dqacc + DqAccIndex<D>(hb, np, row, d));
          x[1] = *reinterpret_cast<const float4*>(dqacc + DqAccIndex<D>(hb, np, row, d + 1));
        }
      };
      load(bh, u[k]);
      if constexpr (kDet) {  // (rows r and r + 8 of a run are in one Q tile: the same slices)
        const int ns = DetSlicesOfRow(row, slices, keys, causal);
        for (int sl = 1; sl < ns; ++sl) {
          float4 x[kUnits];
          load(int64_t(sl) * gridDim.y + bh, x);
#pragma unroll
          for (int t = 0; t < kUnits; ++t) {
            u[k][t].x += x[t].x;
            u[k][t].y += x[t].y;
            u[k][t].z += x[t].z;
            u[k][t].w += x[t].w;
          }
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kDqFinPer; ++k) {
    const int i = first + k * kDqFinThreads;
    if (i >= runs) break;
    int r, d;
    run_of(i, r, d);
#pragma unroll
    for (int h = 0; h < (kPairs ? 2 : 1); ++h) {
      const int row = r + 8 * h;
      if (kPairs && row >= n) break;  // (without kPairs every run's row is below n)
      float v[8];
      if constexpr (kPairs) {
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          v[2 * t] = h ? u[k][t].z : u[k][t].x;
          v[2 * t + 1] = h ? u[k][t].w : u[k][t].y;
        }
      } else {
        const float4 &ev = u[k][0], &od = u[k][1];
        const float w[8] = {ev.x, od.x, ev.y, od.y, ev.z, od.z, ev.w, od.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = w[e];
      }
      if (correct) {
        float rs = dsrow[int64_t(bh) * n + row];
        if constexpr (kDet) {
          const int ns = DetSlicesOfRow(row, slices, keys, causal);
          for (int sl = 1; sl < ns; ++sl) rs += dsrow[(int64_t(sl) * gridDim.y + bh) * n + row];
        }
        const float c = tau * rs;
        const float4 k0 = *reinterpret_cast<const float4*>(kbar + bh * D + d);
        const float4 k1 = *reinterpret_cast<const float4*>(kbar + bh * D + d + 4);
        const float kb[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] += c * kb[e];
      }
      uint4 out;
      out.x = cuda::PackBf16x2(v[0], v[1]);
      out.y = cuda::PackBf16x2(v[2], v[3]);
      out.z = cuda::PackBf16x2(v[4], v[5]);
      out.w = cuda::PackBf16x2(v[6], v[7]);
      *reinterpret_cast<uint4*>(dq + (int64_t(bh) * n + row) * D + d) = out;
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Host side.
// ----------------------------------------------------------------------------------------------

using BwdKernel = void (*)(BwdParams);
struct BwdLaunch {
  BwdKernel kernel = nullptr;
  int smem = 0;
  bool lpt = false;  // grid (BH, K tiles) instead of (K tiles, BH)
  int threads = kThreads;
  int keys = kTile;  // keys per CTA
};
template <int D, bool kCausal, bool kKv128, bool kInt8Dp>
BwdLaunch BwdLaunchOf() {
  constexpr BwdPlan kPlan = BwdPlanFor(D, kCausal, kKv128, kInt8Dp);
  constexpr int kSmem = kPlan.ws ? BwdWsLayout<D>::kBytes : BwdLayout<D>::kBytes;
  return {SageBackwardKernel<D, kCausal, kKv128, kInt8Dp>, kSmem, kPlan.longest_first,
          BwdThreads(kPlan), kPlan.ws ? kWsConsumers * kTile : kTile};
}
// The kernels that exist: at d64 one per mask (smooth_q and int8_dp are runtime parameters); at
// d128 with 64-key groups (Q-smoothing) one per mask (int8_dp at run time), with 128-key groups
// one per mask and dP precision.
template <int D>
BwdLaunch BwdLaunchFor(bool causal, bool kv128, bool int8_dp) {
  if constexpr (D == 128) {
    if (kv128) {
      if (int8_dp) {
        return causal ? BwdLaunchOf<D, true, true, true>() : BwdLaunchOf<D, false, true, true>();
      }
      return causal ? BwdLaunchOf<D, true, true, false>() : BwdLaunchOf<D, false, true, false>();
    }
  }
  return causal ? BwdLaunchOf<D, true, false, false>() : BwdLaunchOf<D, false, false, false>();
}

// The deterministic backward's scratch (DetSlicesOfRow): one slice per CTA of the kernel that
// `opt` selects at head dim D, the dQ slices, then the rowsum(dS) slices.
struct DetLayout {
  int slices = 0, keys = 0;
  size_t dq_bytes = 0, bytes = 0;
};
template <int D>
DetLayout DetLayoutFor(const AttnShape& s, const AttnOptions& opt) {
  const bool kv128 = SageKvGroup(opt, D) == 2 * kTile;
  DetLayout d;
  d.keys = BwdLaunchFor<D>(s.causal, kv128, opt.int8_dp).keys;
  d.slices = CeilDiv(s.N, d.keys);
  const int64_t heads = int64_t(d.slices) * s.B * s.H, np = int64_t(CeilDiv(s.N, kTile)) * kTile;
  d.dq_bytes = size_t(cuda::RoundUp(4 * heads * np * D, 256));
  d.bytes = d.dq_bytes + size_t(cuda::RoundUp(4 * heads * s.N, 256));
  return d;
}

template <int D>
Status BackwardImpl(const AttnShape& s, const AttnOptions& opt, const __nv_bfloat16* q,
                    const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o,
                    const __nv_bfloat16* do_, const float* lse, __nv_bfloat16* dq,
                    __nv_bfloat16* dk, __nv_bfloat16* dv, const Workspace& w, cudaStream_t stream,
                    void* det_scratch, size_t det_scratch_bytes) {
  const int bh = s.B * s.H, nt = CeilDiv(s.N, kTile);
  const int kvg = SageKvGroup(opt, D);
  DetLayout det;
  float *det_dq = nullptr, *det_dsrow = nullptr;
  if (opt.deterministic) {
    det = DetLayoutFor<D>(s, opt);
    if (det_scratch == nullptr || det_scratch_bytes < det.bytes ||
        reinterpret_cast<uintptr_t>(det_scratch) % 256 != 0) {
      return InvalidArgument("SageBwd CUDA: the deterministic backward needs a 256-byte aligned "
                             "scratch of " + std::to_string(det.bytes) + " bytes (got " +
                             std::to_string(det_scratch ? det_scratch_bytes : 0) +
                             "; AttnDetScratchBytes)");
    }
    det_dq = static_cast<float*>(det_scratch);
    det_dsrow = reinterpret_cast<float*>(static_cast<char*>(det_scratch) + det.dq_bytes);
  }
  // dO^ (row-major codes only with int8_dp), D_i = rowsum(dO o O), dsrow and dqacc zeroed.
  QuantParams qp{};
  qp.n = s.N;
  qp.np = nt * kTile;
  qp.job[0] = {do_, opt.int8_dp ? w.doh : nullptr, w.doht, w.sdo, 0, false, true};
  qp.o = o;
  qp.drow = w.drow;
  qp.dsrow = w.dsrow;
  qp.dqacc = w.dqacc;
  qp.armed = w.armed;
  qp.det_dq = det_dq;
  qp.det_dsrow = det_dsrow;
  qp.det_slices = det.slices;
  qp.det_keys = det.keys;
  qp.det_causal = s.causal;
  ABLATE_RETURN_IF_ERROR((LaunchQuantize<D, true, 1>(s, qp, 1, stream)));

  BwdParams p;
  p.k = k;
  p.v = v;
  p.do_ = do_;
  p.qh = w.qh;
  p.qht = w.qht;
  p.kh = w.kh;
  p.kht = w.kht;
  p.vh = w.vh;
  p.doh = w.doh;
  p.doht = w.doht;
  p.sq = w.sq;
  p.sk = w.sk;
  p.sv = w.sv;
  p.sdo = w.sdo;
  p.kbar = w.kbar;
  p.mu = w.mu;
  p.lse = lse;
  p.drow = w.drow;
  p.dsrow = opt.deterministic ? det_dsrow : w.dsrow;
  p.dqacc = opt.deterministic ? det_dq : w.dqacc;
  p.det_heads = opt.deterministic ? bh : 0;
  p.dk = dk;
  p.dv = dv;
  p.n = s.N;
  p.np = nt * kTile;
  p.ntq = nt;
  p.ntk = nt;
  p.kv_shift = KvShift(kvg);
  p.lpt_heads = 0;  // LptGrid picks it at the launch
  p.smooth_q = opt.smooth_q;
  p.int8_dp = opt.int8_dp;
  p.tau = 1.0f / std::sqrt(static_cast<float>(D));
  const bool kv128 = SageKvGroup(opt, D) == 2 * kTile;
  if (BwdPlanFor(D, s.causal, kv128, opt.int8_dp).tma) {  // the Q side's tensor maps
    ABLATE_RETURN_IF_ERROR(CodesTensorMap<D>(&p.tm_qh, w.qh, s, "Q^"));
    if (opt.int8_dp) {
      ABLATE_RETURN_IF_ERROR(CodesTensorMap<D>(&p.tm_do, w.doh, s, "dO^"));
    } else {  // bf16 dO (BH, N, D): its rows past N read as zeros
      namespace wg = cuda::wgmma;
      const uint64_t n = s.N;
      ABLATE_RETURN_IF_ERROR((wg::GmmaTileTensorMap<wg::GmmaTile<kTile, 2 * D>, 2>(
          &p.tm_do, do_, D, n, bh, 2 * D, 2 * n * D, "dO")));
    }
    ABLATE_RETURN_IF_ERROR(CodesTTensorMap<D>(&p.tm_qht, w.qht, s, "Q^T"));
    ABLATE_RETURN_IF_ERROR(CodesTTensorMap<D>(&p.tm_doht, w.doht, s, "dO^T"));
  }
  const BwdLaunch L = BwdLaunchFor<D>(s.causal, kv128, opt.int8_dp);
  ABLATE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(L.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.smem),
      "SageBwd backward smem attribute");
  // Both launches below are programmatic dependents of the one before (each waits before it
  // reads what that one writes).
  ABLATE_ASSIGN_OR_RETURN(const dim3 grid, LptGrid(L.lpt, bh, CeilDiv(s.N, L.keys), L.kernel,
                                                    L.threads, L.smem, &p.lpt_heads));
  ABLATE_CUDA_RETURN_IF_ERROR(
      cuda::LaunchKernel(L.kernel, grid, dim3(L.threads), L.smem, stream, /*pdl=*/true, p),
      "SageBwd backward kernel launch");

  const int per_block = kDqFinThreads * DqFinPer<D>();
  const Status fin = CudaStatus(
      cuda::LaunchKernel(
          opt.deterministic ? DqFinalizeKernel<D, true> : DqFinalizeKernel<D, false>,
          dim3(static_cast<unsigned>(CeilDiv(DqFinRuns<D>(s.N, nt * kTile), per_block)), bh),
          dim3(kDqFinThreads), 0, stream, /*pdl=*/true, static_cast<const float*>(p.dqacc),
          static_cast<const float*>(p.dsrow), static_cast<const float*>(w.kbar), s.N, nt * kTile,
          opt.smooth_k && opt.dq_kmean_correction, p.tau, dq, w.armed, det.slices, det.keys,
          s.causal),
      "SageBwd DqFinalizeKernel launch");
  if (!fin.ok() || !opt.ds_bf16) return fin;
  // ds_bf16: dQ and dK again, their dS products in bf16 (fpa_common.cuh), over the INT8 pass's
  // (whose dV stays); dqacc (or the scratch's dQ slices) is free again after the conversion.
  const fpa::SageDsBf16Args a{w.qh,
                              w.kh,
                              w.vh,
                              w.doh,
                              w.sq,
                              w.sk,
                              w.sv,
                              w.sdo,
                              opt.smooth_k ? w.kbar : nullptr,
                              w.drow,
                              opt.deterministic ? det_dq : w.dqacc,
                              nt * kTile,
                              KvShift(kvg),
                              opt.int8_dp,
                              opt.deterministic};
  return fpa::SageDsBf16BackwardCuda(s, a, q, k, v, o, lse, do_, dq, dk, stream);
}
}  // namespace
}  // namespace ablate::kernels::sage

namespace ablate::kernels {

size_t SageDetScratchBytes(const AttnShape& shape, const AttnOptions& opt) {
  if (shape.B < 1 || shape.H < 1 || shape.N < 1 || (shape.D != 64 && shape.D != 128)) return 0;
  return shape.D == 64 ? sage::DetLayoutFor<64>(shape, opt).bytes
                       : sage::DetLayoutFor<128>(shape, opt).bytes;
}

Status SageBackwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                        const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o,
                        const float* lse, const __nv_bfloat16* do_, __nv_bfloat16* dq,
                        __nv_bfloat16* dk, __nv_bfloat16* dv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream, void* det_scratch,
                        size_t det_scratch_bytes) {
  ABLATE_RETURN_IF_ERROR(sage::CheckArgs(shape, workspace, workspace_bytes,
                                         {q, k, v, o, do_, lse, dq, dk, dv}));
  ABLATE_RETURN_IF_ERROR(sage::CheckOptions(opt));
  const sage::Workspace w = sage::CarveWorkspace(shape, static_cast<char*>(workspace));
  return shape.D == 64 ? sage::BackwardImpl<64>(shape, opt, q, k, v, o, do_, lse, dq, dk, dv, w,
                                                stream, det_scratch, det_scratch_bytes)
                       : sage::BackwardImpl<128>(shape, opt, q, k, v, o, do_, lse, dq, dk, dv, w,
                                                 stream, det_scratch, det_scratch_bytes);
}

}  // namespace ablate::kernels
