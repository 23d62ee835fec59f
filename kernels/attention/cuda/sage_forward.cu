// SageBwd on the GPU: the forward kernel and its launcher (the host API is attention_cuda.h, the
// numerics kernels/ALGORITHMS.md §1.2, the quantization sage_quant.cu). One CTA per 128 or 192
// query rows (two or three 64-row Q groups, one warpgroup each) walks the K tiles (causal: up to
// the diagonal), S = Q^ K^T and O += P~^ V^ by s8 wgmma, the online softmax in the log2 domain,
// the lazy rescale of O at d64 and with three groups. At d128 the kernel is warp-specialized (a
// producer warpgroup fills a ring of K^ / V^T stages), stepping two K tiles (one 128-key K / V
// quantization group) at a time with the stages filled by TMA when there is no Q-smoothing.
// Without Q-smoothing the kernel quantizes its Q rows itself (and writes Q^, Q^T and their scale
// for the backward); it also zeroes the backward's dQ accumulator.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include "attention/cuda/sage_common.cuh"

namespace ablate::kernels::sage {
namespace {

struct FwdParams {
  // 128-key groups: the K^ and V^T tensor maps (GmmaTileTensorMap) of the K tiles' stages; the kernel
  // takes FwdParams as a __grid_constant__ parameter, whose maps TMA reads.
  CUtensorMap tm_kh;
  CUtensorMap tm_vht;
  const __nv_bfloat16* k;  // (BH, N, D), for the Q-smoothing bias
  int8_t* qh;               // read; written by the forwards that quantize Q (below)
  const int8_t *kh, *vht;
  float* sq;                // read; written like qh
  const float *sk, *sv, *kbar, *mu;
  __nv_bfloat16* o;
  float* lse;
  // The forward kernel zeroes the backward's accumulators for their rows (dsrow, dqacc: (BH, N) and
  // (BH, N, D)) and set *armed = kDqArmed, so the backward's memory-bound prep launch skips that
  // pass. Measured (ncu, H200): the forward kernel +5.4 us (B16 H12 N1024 d64 causal), +8.3 us
  // (B4 H16 N2048 d128), +16 us (B2 H16 N8192 d128 causal) with the stores after its first
  // copies were issued (at its end: +6.0 / +12.7 / +23.6), the prep launch -11 / -13.9 us (first
  // two). Since the launch is a programmatic dependent of the quantize launch, the stores come
  // before its GridDepWait (they overlap the quantize launch's tail): forward launcher -2.5 us at
  // the first shape (event-timed), the kernel alone +0.4 / +4.4 us under ncu (serialized, no
  // overlap).
  float *dsrow, *dqacc;
  int* armed;
  // Without Q-smoothing the forward quantizes Q itself (FusedQLoad,
  // FusedQQuantize): from q into their shared Q^ tiles, and into qh, qht and sq for the backward
  // (the quantize launch then has no Q job: its Q read and code writes were a third of its bytes).
  const __nv_bfloat16* q;
  int8_t* qht;
  int n, np, ntq, ntk;
  int kv_shift;  // K / V scales per group of 64 << kv_shift keys: sk[bh * ntk + (j >> kv_shift)]
  int lpt_heads;  // causal: heads per longest-first group (LptBlock; set by LptGrid)
  bool smooth_q;
  float tau;
};

// Fused Q quantization of the forward without Q-smoothing: the 128 threads `tid` of a Q
// group quantize rows q0 .. q0 + 63 of head bh as QuantizeKernel's mode-0 job does (the same
// scale and codes: GroupScale of the tile's max |Q|, QuantizeRows8; padded rows 0). Thread
// (c8, rg) holds 16-byte column chunk c8 of kPer consecutive rows. Two steps, so that the
// caller can issue other copies between them: FusedQLoad issues the loads of the thread's rows,
// FusedQQuantize writes the codes into the group's GmmaTile s_tile (generic-proxy stores: the
// caller fences and synchronizes before the first wgmma reads them) and, for the backward, into
// p.qh (row-major), p.qht (transposed, staged in s_t: D x 64 bytes) and the scale into p.sq;
// it returns the scale. s_red: 4 floats; bar: a named barrier of the 128 threads.
template <int D>
struct FusedQ {
  static constexpr int kC8 = D / 8, kPer = kTile / (128 / kC8);
  using Rows = float[kPer][8];
};
template <int D>
__device__ __forceinline__ void FusedQLoad(const FwdParams& p, int64_t bh, int q0, int tid,
                                           typename FusedQ<D>::Rows& v) {
  constexpr int kC8 = FusedQ<D>::kC8, kPer = FusedQ<D>::kPer;
  const int c8 = tid % kC8, sbase = (tid / kC8) * kPer, nr = min(kTile, p.n - q0);
  const __nv_bfloat16* qb = p.q + (bh * p.n + q0) * D + c8 * 8;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    int4 raw = make_int4(0, 0, 0, 0);
    if (sbase + k < nr) raw = __ldg(reinterpret_cast<const int4*>(qb + int64_t(sbase + k) * D));
    Bf16x8ToFloat(raw, v[k]);
  }
}
template <int D, typename TILE>
__device__ __forceinline__ float FusedQQuantize(const FwdParams& p, int64_t bh, int q0,
                                                const typename FusedQ<D>::Rows& v,
                                                int8_t* s_tile, int8_t* s_t, float* s_red,
                                                int bar, int tid) {
  constexpr int kC8 = FusedQ<D>::kC8, kPer = FusedQ<D>::kPer;
  const int c8 = tid % kC8, sbase = (tid / kC8) * kPer;
  float m = WarpAbsMax<kPer>(v);
  if ((tid & 31) == 0) s_red[tid >> 5] = m;
  cuda::wgmma::NamedBarSync(bar, 128);
#pragma unroll
  for (int w = 0; w < 4; ++w) m = fmaxf(m, s_red[w]);
  const float s = GroupScale(m), inv = 1.0f / s;
  if (tid == 0) p.sq[bh * p.ntq + q0 / kTile] = s;
  uint32_t code[kPer][2];
  QuantizeRows8<kPer>(v, inv, code);
  int8_t* qh = p.qh + (bh * p.np + q0) * D + c8 * 8;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const uint2 c2 = make_uint2(code[k][0], code[k][1]);
    *reinterpret_cast<uint2*>(s_tile + TILE::ByteOffset(sbase + k, c8 * 8)) = c2;
    *reinterpret_cast<uint2*>(qh + int64_t(sbase + k) * D) = c2;
  }
  StageCodesT<kPer>(s_t, code, c8, sbase);
  cuda::wgmma::NamedBarSync(bar, 128);
  WriteCodesT<D>(s_t, p.qht + bh * D * p.np + q0, p.np, tid, 128, true);
  return s;
}

// The forward kernel: kGroups (2, or 3 at d128 with 128-key K / V groups: FwdGroups) 64-row
// quantization groups of queries per CTA (Q^ scales, mu and the emulator's Bq stay 64), one
// warpgroup and one m16 row block per warp per group. S = Q^ K^T by wgmma from swizzled GmmaTiles
// (wgmma.cuh): Q^ as kGroups [64][D] int8 tiles, each K stage a [64][D] K^ tile and a [D][64]
// V^T tile, all 1024-byte aligned in a buffer whose base the kernel aligns (kBytes has the
// slack). Softmax in the log2 domain (the logits scaled by log2 e; LSE converted back): P~^ =
// rne(127 exp2(x - rowmax)) (= P~ / s_P of the emulator: s_P = exp(rowmax - m_new) / 127 cancels
// m_new), made by one FMA into the mantissa of 1.5 * 2^23 and packed from the S registers straight
// into the s8 A fragments of P^ V^, a wgmma with A from registers (the V^T key order is permuted
// to match: FwdKeyOfSlot); l += exp(rowmax - m_new) * rowsum; O += s_P s_V (P^ V^).
// At d128 (kWarpSpecialized) a producer warpgroup (128 threads) in front of the kMathThreads
// consumer threads fills kStages K^ / V^T stages (the K tile's two scales at kScal, mbarriers
// full / empty at kBar): by cp.async with 64-key groups (Q-smoothing), by TMA with 128-key groups
// (kK128), where the consumers step two K tiles (one K / V group) at a time.
// Whether the forward quantizes Q itself (FusedQLoad / FusedQQuantize; the quantize launch then
// has no Q job): without Q-smoothing. (Measured at d64, B16 H12 N1024 causal: the quantize launch
// 38.6 -> 27.1 us against the forward kernel 106.8 -> 116.3 us, forward 1.019-1.028x, backward
// unchanged.)
constexpr bool FwdFusesQ(bool smooth_q) { return !smooth_q; }

template <int D, bool kSmoothQ, int kGroupsT>
struct FwdConfig {
  // kGroups = 3: three consumer warpgroups of 64 rows (192 rows per CTA) at 160 registers each
  // instead of two at 240: more warps per scheduler for the softmax's latency.
  static constexpr int kGroups = kGroupsT;  // 64-row Q groups per CTA
  static constexpr bool kWarpSpecialized = D == 128;
  static constexpr bool kK128 = D == 128 && !kSmoothQ;  // 128-key K / V groups: two K tiles a step
  static_assert(kGroups == 2 || (kGroups == 3 && kK128),
                "three consumer groups: the 128-key warp-specialized forward");
  static constexpr int kRows = kGroups * kTile;
  // (A function: a constant here would be a never-referenced member in the configurations
  // without kWarpSpecialized, one compiler warning each.)
  static constexpr int ConsumerRegs() { return WsConsumerRegs(kGroups * 128); }
  using TileI8 = cuda::wgmma::GmmaTile<kTile, D>;  // Q^ group, K^
  using TileT = cuda::wgmma::GmmaTile<D, kTile>;   // V^T [D][64 keys]
  static constexpr int kWarps = kRows / 16;  // one m16 row block each
  static constexpr int kMathThreads = kWarps * 32;  // the threads of the attention math
  static constexpr int kThreadsLaunch = kMathThreads + (kWarpSpecialized ? 128 : 0);
  static constexpr int kStages = kK128 ? 4 : kWarpSpecialized ? 3 : 2;
  static constexpr int kQh = 0;                                 // Q^ [kGroups] GmmaTiles
  static constexpr int kStage0 = kQh + kGroups * TileI8::kBytes;
  static constexpr int kVh = TileI8::kBytes;  // V^T offset inside a stage
  static constexpr int kStage = TileI8::kBytes + TileT::kBytes;
  // bias [kGroups][64], mu [kGroups][D], kbar [D]
  static constexpr int kF32 = kStage0 + kStages * kStage;
  // kWarpSpecialized: the stages' K / V scales, [kStages][2].
  static constexpr int kScal = kF32 + (kGroups * kTile + (kGroups + 1) * D) * 4;
  // kWarpSpecialized: full[], empty[] (without it kStages mbarrier words stay reserved: the
  // layout, and so the kernel's code, they were measured with).
  static constexpr int kBar = kScal + (kWarpSpecialized ? kStages * 8 : 0);
  // FwdFusesQ (without Q-smoothing): the fused Q quantization's staging, [kGroups][D][64]
  // transposed codes + [kGroups][4] float maxima.
  // (Reserved with Q-smoothing too.)
  static constexpr int kQt = (kBar + (kWarpSpecialized ? 2 * kStages : kStages) * 8 + 15) / 16 * 16;
  static constexpr int kQRed = kQt + kGroups * D * kTile;
  static constexpr int kBytes = kQRed + 4 * kGroups * 4 + 1024;
  static constexpr int kMinBlocks = kWarpSpecialized ? 1 : (D == 64 ? 2 : 1);
  static_assert(kBytes * kMinBlocks <= 227 * 1024, "forward shared memory over the sm_90 limit");
  static_assert(kStage0 % 16 == 0 && kVh % 16 == 0 && kStage % 16 == 0 && kF32 % 16 == 0,
                "16-byte aligned forward regions");
};

// Interior tiles without Q-smoothing take the row max over the raw int32 sums and scale only the
// differences (one FMA on the mantissa form of 1.5 * 2^23 + S - rowmax); the P^ V^ sums are folded
// into O by two FMAs on the same mantissa form. No warp skips a tile and the mask test is per CTA,
// so every branch around a wgmma is uniform by construction (ptxas serializes wgmmas under
// branches it cannot prove uniform: a per-warpgroup form measured 3-5% slower); the tiles a
// warpgroup could skip are computed fully masked (P = 0, alpha = 1: no change). Causal grids are
// (BH, row blocks), longest-first across the heads of each group (LptBlock). With
// kWarpSpecialized, warpgroup 0 is the producer of the kStages-deep K^ / V^T ring (its copies
// waited for, then mbarrier full[s]; by TMA with kK128) with each K tile's two scales; the
// consumers compute without any CTA barrier in the loop (each waits for full[s] and releases
// empty[s] after its P^ V^ wgmmas); registers move from the producer to them (setmaxnreg).
template <int D, bool kCausal, bool kSmoothQ, int kGroupsT>
__global__ void __launch_bounds__(FwdConfig<D, kSmoothQ, kGroupsT>::kThreadsLaunch,
                                  FwdConfig<D, kSmoothQ, kGroupsT>::kMinBlocks)
    SageForwardKernel(const __grid_constant__ FwdParams p) {
  using C = FwdConfig<D, kSmoothQ, kGroupsT>;
  // How the kernel is built for its configuration (measured: docs/bench/attention.md):
  constexpr bool kLptF = kCausal;             // grid (BH, row blocks), longest-first (LptBlock)
  constexpr bool kWsF = C::kWarpSpecialized;  // d128: the producer warpgroup and its ring
  constexpr bool kK128 = C::kK128;            // two K tiles per step, TMA stages
  constexpr bool kTmaF = kK128;
  // S of the next K tile issued before this tile's softmax (d128 causal with Q-smoothing).
  constexpr bool kPipeF = kWsF && kSmoothQ && kCausal;
  // The lazy rescale (the running max moves only by more than kLazyThresh).
  constexpr bool kLazyF = D == 64 || C::kGroups == 3;
  static_assert(!(kPipeF && kK128), "one or the other");
  constexpr int kRows = C::kRows, kGroups = C::kGroups;
  using cuda::FastExp2;
  using cuda::kLog2e;
  namespace wg = cuda::wgmma;
  constexpr int kNtO = D / 8;
  extern __shared__ __align__(16) char smem_raw[];
  char* const smem = smem_raw + ((1024 - (cuda::SmemAddr(smem_raw) & 1023)) & 1023);
  const uint32_t dlo = wg::DescLo(cuda::SmemAddr(smem));
  int8_t* s_qh = reinterpret_cast<int8_t*>(smem + C::kQh);
  int8_t* s_stage = reinterpret_cast<int8_t*>(smem + C::kStage0);
  float* s_bias = reinterpret_cast<float*>(smem + C::kF32);  // [kGroups][64], log2 domain
  float* s_mu = s_bias + kGroups * kTile;                     // [kGroups][D]
  float* s_kbar = s_mu + kGroups * D;

  int rb = int(blockIdx.x), bh = int(blockIdx.y);  // row block (kLptF: heaviest first)
  if constexpr (kLptF) LptBlock(p.lpt_heads, rb, bh);
  const int bx = kCausal ? int(kLptF ? gridDim.y : gridDim.x) - 1 - rb : rb;
  // kWsF: ctid = the thread's index among the consumers (the producer's is negative).
  const int ctid = kWsF ? int(threadIdx.x) - 128 : int(threadIdx.x);
  const int warp = kWsF ? (ctid >> 5) : int(threadIdx.x >> 5);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = bx * kRows;
  const int64_t nd = int64_t(p.n) * D, npd = int64_t(p.np) * D;
  const int wrow = warp * 16;     // first row of this warp inside the CTA
  const int wr0 = r0 + wrow;      // ... in the sequence
  const int grp = wrow / kTile;   // quantization group (Q tile kGroups bx + grp)
  // Rows of this warp's warpgroup (one Q group) in the sequence.
  const bool wvalid = (r0 + (warp / 4) * kTile) < p.n;

  // Launched as a dependent of the quantize launch (pdl): the work that does not depend on it
  // first (it overlaps its tail): the stores of the backward's zeroed accumulators and (kFuseQ)
  // the loads of the Q rows that the consumers quantize (each 128-thread group its 64 rows,
  // after issuing the copies of K tile 0 so that the two latencies overlap); then wait for the
  // quantize launch's K and V codes. kWsF: the producer starts its copies first thing, the
  // consumers quantize Q meanwhile, and the producer zeroes the accumulators after its first
  // kStages copies (below): at the CTA's start those stores delayed the Q loads, the CTA's
  // critical path (lab timeline, B4 H16 N2048 d128: 4.1 us from entry to Q^ in place).
  if (rb == 0 && bh == 0 && threadIdx.x == 0) *p.armed = kDqArmed;
  constexpr bool kFuseQ = FwdFusesQ(kSmoothQ);
  [[maybe_unused]] float fq_scale = 0.0f;  // kFuseQ: the scale of this thread's Q group
  [[maybe_unused]] typename FusedQ<D>::Rows fq_rows;
  [[maybe_unused]] const int fq_group = ctid >> 7;
  [[maybe_unused]] const bool fq_mine = ctid >= 0 && r0 + fq_group * kTile < p.n;
  auto fused_q_quantize = [&]() {
    fq_scale = FusedQQuantize<D, typename C::TileI8>(
        p, bh, r0 + fq_group * kTile, fq_rows, s_qh + fq_group * C::TileI8::kBytes,
        reinterpret_cast<int8_t*>(smem + C::kQt) + fq_group * D * kTile,
        reinterpret_cast<float*>(smem + C::kQRed) + 4 * fq_group, 2 + fq_group, ctid & 127);
  };
  if constexpr (kFuseQ && !kWsF) {
    if (fq_mine) FusedQLoad<D>(p, bh, r0 + fq_group * kTile, ctid & 127, fq_rows);
  }
  if constexpr (!kWsF) {  // the zero stores after the Q loads' issue, not in front of them
    ZeroDqRows<D>(p.dsrow, p.dqacc, bh, p.n, p.np, r0, kRows, threadIdx.x, C::kThreadsLaunch);
    cuda::GridDepWait();
  }

  const int last_row = min(r0 + kRows, p.n) - 1;
  const int last = kCausal ? min(p.ntk - 1, last_row / kTile) : p.ntk - 1;
  // Stage <- K^ tile / V^T columns starting at token c, copied by the kT threads (index tid) of
  // the CTA (kWsF: of the producer).
  auto load_stage = [&](auto threads_c, int8_t* st, int c, int tid) {
    [[maybe_unused]] constexpr int kT = decltype(threads_c)::value;
    wg::LoadGmmaTileAsync<typename C::TileI8, kT, false>(st, p.kh + bh * npd + int64_t(c) * D,
                                                         0, kTile, tid);
    wg::LoadGmmaTileAsync<typename C::TileT, kT, false>(st + C::kVh, p.vht + bh * npd + c, 0, D,
                                                        tid, p.np);
  };
  // kTmaF (kK128): one thread's TMA copies of the K^ tile / V^T columns starting at token c into stage
  // `st`, completing on the mbarrier `bar` (the thread's arrive.expect_tx is its arrival).
  auto tma_stage = [&](int8_t* st, int c, uint32_t bar) {
    if constexpr (kTmaF) {
      using T8 = typename C::TileI8;
      using TT = typename C::TileT;
      wg::MbarArriveExpectTx(bar, T8::kBytes + TT::kBytes);
      wg::LoadGmmaTileTma<T8, 1>(cuda::SmemAddr(st), &p.tm_kh, 0, c, bh, bar);
      wg::LoadGmmaTileTma<TT, 1>(cuda::SmemAddr(st + C::kVh), &p.tm_vht, c, 0, bh, bar);
    }
  };
  // bias[gq][c] = tau * mu_gq . (K_c - kbar) * log2 e (0 past N) for key c of the tile at c0.
  auto store_bias = [&](int gq, int c, int c0) {
    const int gc = c0 + c;
    float b = 0.0f;
    if (gc < p.n) {
      const __nv_bfloat16* kc = p.k + bh * nd + int64_t(gc) * D;
      const float* mu = s_mu + gq * D;
      for (int d = 0; d < D; ++d) b += mu[d] * (__bfloat162float(kc[d]) - s_kbar[d]);
    }
    s_bias[gq * kTile + c] = p.tau * b * kLog2e;
  };
  // kWsF: the K tiles' ring (use j = K tile j) and the producer, which leaves after its last tile.
  const wg::MbarRing<C::kStages> ring{cuda::SmemAddr(smem + C::kBar)};
  float* s_scal = reinterpret_cast<float*>(smem + C::kScal);
  if constexpr (kWsF) {
    if (threadIdx.x == 0) {
      ring.Init(128, C::kMathThreads);
      if constexpr (kTmaF) wg::FenceMbarInit();
    }
    __syncthreads();
    if (ctid < 0) {
      wg::SetMaxNRegDec<kWsProducerRegs>();
      cuda::GridDepWait();
      for (int j = 0; j <= last; ++j) {
        const int st = j % C::kStages;
        ring.ProducerAcquire(j);
        if constexpr (!kTmaF) {
          load_stage(std::integral_constant<int, 128>{}, s_stage + st * C::kStage, j * kTile,
                     threadIdx.x);
        }
        if (threadIdx.x == 0) {
          s_scal[2 * st] = KvGroupScale(p.sk, p, bh, j);
          s_scal[2 * st + 1] = KvGroupScale(p.sv, p, bh, j);
        }
        if constexpr (kTmaF) {  // thread 0 arrives with its expect_tx (after its s_scal stores)
          if (threadIdx.x == 0) {
            tma_stage(s_stage + st * C::kStage, j * kTile, ring.Full(st));
          } else {
            ring.ProducerCommit(j);
          }
        } else {
          CopyWait();
          wg::FenceProxyAsync();  // cp.async writes -> the consumers' wgmma reads
          ring.ProducerCommit(j);
        }
        // The ring is full: time for the zero stores. (Measured: after the consumers are past K
        // tile 0 instead, the Q rows arrive 0.65 us sooner but the loop beside the stores runs
        // as much longer: 0.99-1.00x.)
        if (j == min(last, C::kStages - 1)) {
          ZeroDqRows<D>(p.dsrow, p.dqacc, bh, p.n, p.np, r0, kRows, threadIdx.x, 128);
        }
      }
      return;
    }
    wg::SetMaxNRegInc<C::ConsumerRegs()>();
    if constexpr (kFuseQ) {
      if (fq_mine) {
        FusedQLoad<D>(p, bh, r0 + fq_group * kTile, ctid & 127, fq_rows);
        fused_q_quantize();
      }
    }
    cuda::GridDepWait();  // without kFuseQ: Q^ (and mu, kbar) are the quantize launch's
  }

  // Q^ rows present in the padded workspace (64 or 128) + stage 0 <- K tile 0: one group
  // (kWsF: Q^ only; the consumers' threads).
  if constexpr (kFuseQ) {
    // Q^ is in place (above)
  } else {
    using T8 = typename C::TileI8;
    for (int gq = 0; gq < kGroups && r0 + gq * kTile < p.np; ++gq) {
      wg::LoadGmmaTileAsync<T8, C::kMathThreads, false>(
          s_qh + gq * T8::kBytes, p.qh + bh * npd + int64_t(r0 + gq * kTile) * D, 0, kTile,
          ctid);
    }
  }
  if (kSmoothQ) {
    for (int idx = ctid; idx < kGroups * D; idx += C::kMathThreads) {
      const int qt = kGroups * bx + idx / D;
      s_mu[idx] = qt < p.ntq ? p.mu[(int64_t(bh) * p.ntq + qt) * D + idx % D] : 0.0f;
    }
    for (int d = ctid; d < D; d += C::kMathThreads) s_kbar[d] = p.kbar[int64_t(bh) * D + d];
  }

  float acc[kNtO][4];
#pragma unroll
  for (int n = 0; n < kNtO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float m[2], l[2];  // m: running max of the log2-domain logits
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;

  const std::integral_constant<int, C::kMathThreads> all_c{};
  if constexpr (kWsF) {
    CopyWait();  // this thread's Q^ copies
    wg::FenceProxyAsync();
    wg::NamedBarSync(1, C::kMathThreads);  // Q^, mu, kbar visible to every consumer warpgroup
  } else {
    load_stage(all_c, s_stage, 0, threadIdx.x);
    cuda::CpAsyncCommit();
    if constexpr (kFuseQ) {
      if (fq_mine) fused_q_quantize();
    }
  }
  const float sq =
      !wvalid ? 0.0f : kFuseQ ? fq_scale : p.sq[int64_t(bh) * p.ntq + kGroups * bx + grp];
  // The per-tile steps (one 64-row group per warpgroup):
  // issue_s: S = Q^ K^T of the K tile in the stage at stage_byte, committed (not waited for).
  // The descriptors are formed and pinned (wg::PinDesc) before the fence: an instruction defining
  // a wgmma input between the fence and the wait makes ptxas serialize the wgmmas (C7513).
  [[maybe_unused]] auto issue_s = [&](int stage_byte, int32_t (&sacc)[32]) {
    using T8 = typename C::TileI8;
    const int q_byte = C::kQh + grp * T8::kBytes;
    uint64_t dq[D / 32], dk[D / 32];
#pragma unroll
    for (int i = 0; i < D / 32; ++i) {
      dq[i] = TileDesc<T8>(dlo, q_byte, 32 * i);
      dk[i] = TileDesc<T8>(dlo, stage_byte, 32 * i);
      wg::PinDesc(dq[i]);
      wg::PinDesc(dk[i]);
    }
    wg::Fence();
    wg::MmaS8First(sacc, dq[0], dk[0]);
#pragma unroll
    for (int i = 1; i < D / 32; ++i) wg::MmaS8(sacc, dq[i], dk[i], true);
    wg::Commit();
  };
  // softmax_rows (every forward): the online softmax of the warp's rows from their int32 logits s
  // (logit = a s in the log2 domain; K tile at token c0): updates m, l, returns alpha
  // (the rescale of O), coef (= s_P s_V, with svj = s_V / 127) and P~^ as packed s8 A fragments.
  // s: NB n8 blocks of logits (NB = 8: one K tile; 16: kK128's two), pam: NB / 4 k-steps.
  auto softmax_rows = [&](auto mask_tag, const auto& s, float a, float svj, int c0,
                          auto& pam, float (&alpham)[2], float (&coefm)[2]) {
    constexpr bool kMask = decltype(mask_tag)::value;
    constexpr bool kFast = !kMask && !kSmoothQ;
    constexpr int NB = std::extent_v<std::remove_reference_t<decltype(s)>>;
    static_assert(NB % 4 == 0 && std::extent_v<std::remove_reference_t<decltype(pam)>> == NB / 4,
                  "P~^ k-steps of 32 keys");
    float x[NB][4];
    float rmax[2] = {-INFINITY, -INFINITY};
    float rsub[2], sc[2];
    // kFast: the row max over the int32 sums (a > 0), then d = S - rowmax added into the
    // mantissa of 1.5 * 2^23 (x = 1.5 * 2^23 + d exactly) and a d formed by one FMA, x a -
    // 1.5 * 2^23 a (exact: SoftmaxScale), rounded once like the general path's product: no
    // per-element int -> float conversion or subtraction.
    [[maybe_unused]] int xbias[2];  // kFast: kQMagicBits - rowmax, as the int bits of x
    if constexpr (kFast) {
      int smax[2] = {-(1 << 30), -(1 << 30)};  // |S| < 2^22 (S32ToF32)
#pragma unroll
      for (int n = 0; n < NB; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) smax[e >> 1] = max(smax[e >> 1], s[n][e]);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        smax[h] = QuadMax(smax[h]);
        rmax[h] = S32ToF32(smax[h]) * a;
        // every row sees the whole tile
        const float m_old = m[h];
        float m_new;
        if constexpr (kLazyF) {
          // kLazyF: the running max moves only when the tile's is more than kLazyThresh above
          // it (log2 units; m_old = -inf: always), so that later tiles mostly leave O unscaled
          // (alpha = 1, the cheaper fold of fold_pv); coef = sc s_V / 127 is then up to 2^8
          // times larger, and O and l share the same m, so O / l and the lse are unchanged in
          // exact arithmetic (the P~^ codes do not depend on m: they are relative to the tile's
          // row max).
          m_new = rmax[h] > m_old + kLazyThresh ? rmax[h] : m_old;
          alpham[h] = m_new == m_old ? 1.0f : FastExp2(m_old - m_new);
        } else {
          m_new = fmaxf(m_old, rmax[h]);
          alpham[h] = FastExp2(m_old - m_new);
        }
        sc[h] = FastExp2(rmax[h] - m_new);
        xbias[h] = kQMagicBits - smax[h];
        m[h] = m_new;
      }
    } else {
#pragma unroll
    for (int n = 0; n < NB; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1, c = n * 8 + 2 * t + (e & 1);
        float v = S32ToF32(s[n][e]) * a;
        if (kSmoothQ) v += s_bias[grp * kTile + c];
        if (kMask) {
          const int row = wr0 + g + 8 * h, gc = c0 + c;
          const bool ok = gc < p.n && (!kCausal || gc <= row);
          v = ok ? v : -INFINITY;
        }
        x[n][e] = v;
        rmax[h] = fmaxf(rmax[h], v);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rmax[h] = QuadMax(rmax[h]);
      const float m_new = fmaxf(m[h], rmax[h]);
      const float mref = m_new == -INFINITY ? 0.0f : m_new;
      alpham[h] = FastExp2(m[h] - mref);  // 0 while nothing was visible (acc = 0)
      rsub[h] = rmax[h] == -INFINITY ? 0.0f : -rmax[h];
      sc[h] = FastExp2(rmax[h] - mref);  // = 127 s_P; 0 for a row with no visible key
      m[h] = m_new;
    }
    }
    uint32_t bits[NB][4];
    float rsum[2] = {0.0f, 0.0f};
    [[maybe_unused]] const float xa = -kQMagic * a;  // kFast: exact
#pragma unroll
    for (int n = 0; n < NB; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        // in [0, 1]; masked: 0
        const float ev = kFast ? FastExp2(fmaf(__int_as_float(xbias[h] + s[n][e]), a, xa))
                               : FastExp2(x[n][e] + rsub[h]);
        rsum[h] += ev;
        bits[n][e] = __float_as_uint(fmaf(ev, 127.0f, kQMagic));  // low byte = rne(127 ev)
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] = l[h] * alpham[h] + sc[h] * QuadSum(rsum[h]);
      coefm[h] = sc[h] * svj;
    }
#pragma unroll
    for (int kk = 0; kk < NB / 4; ++kk) {
      const int n0 = 4 * kk;
      pam[kk][0] = PackLowBytes(bits[n0][0], bits[n0][1], bits[n0 + 1][0], bits[n0 + 1][1]);
      pam[kk][1] = PackLowBytes(bits[n0][2], bits[n0][3], bits[n0 + 1][2], bits[n0 + 1][3]);
      pam[kk][2] = PackLowBytes(bits[n0 + 2][0], bits[n0 + 2][1], bits[n0 + 3][0], bits[n0 + 3][1]);
      pam[kk][3] = PackLowBytes(bits[n0 + 2][2], bits[n0 + 2][3], bits[n0 + 3][2], bits[n0 + 3][3]);
    }
  };
  // issue_pv: P^ V^ of the stage's V^T, 64 output columns (one [64][64] V^T slice) per wgmma
  // pair, one commit group per slice, none waited for; fold_pv: waits for the slices in order
  // and folds each into O = alpha O + coef (P^ V^) (kFastS: two FMAs on the 1.5 * 2^23 form).
  // pv_descs: the descriptors of the stage's V^T slices, formed before any wgmma that shares
  // their pipeline stage (kPipeF: before S of the next tile is issued).
  [[maybe_unused]] auto pv_descs = [&](int stage_byte, uint64_t (&dv)[D / 64][2]) {
    using TT = typename C::TileT;
#pragma unroll
    for (int ch = 0; ch < D / 64; ++ch) {
      const int v_byte = stage_byte + C::kVh + ch * 64 * kTile;
      dv[ch][0] = TileDesc<TT>(dlo, v_byte, 0);
      dv[ch][1] = TileDesc<TT>(dlo, v_byte, 32);
      wg::PinDesc(dv[ch][0]);
      wg::PinDesc(dv[ch][1]);
    }
  };
  [[maybe_unused]] auto issue_pv = [&](const uint32_t (&pa0)[2][4],
                                       const uint64_t (&dv)[D / 64][2],
                                       int32_t (&pv)[D / 64][32]) {
    wg::Fence();  // the pa registers were just written
#pragma unroll
    for (int ch = 0; ch < D / 64; ++ch) {
      wg::MmaS8RSFirst(pv[ch], pa0[0], dv[ch][0]);
      wg::MmaS8RS(pv[ch], pa0[1], dv[ch][1]);
      wg::Commit();
    }
  };
  [[maybe_unused]] auto fold_pv = [&](const int32_t (&pv)[D / 64][32], const float (&alpha0)[2],
                                      const float (&coef0)[2]) {
    constexpr int kCh = D / 64;
    const float cb[2] = {-coef0[0] * kQMagic, -coef0[1] * kQMagic};
    // kLazyF: where no row of the warp rescales O (alpha = 1), O += coef P^ V^ by one FMA on the
    // converted sum (exact conversion, one rounding), not the three instructions below.
    [[maybe_unused]] const bool unscaled =
        kLazyF && __all_sync(0xffffffffu, alpha0[0] == 1.0f && alpha0[1] == 1.0f);
    cuda::StaticFor<kCh>([&](auto ch_c) {
      constexpr int ch = decltype(ch_c)::value;
      wg::Wait<kCh - 1 - ch>();
      if constexpr (kLazyF) {
        if (unscaled) {
#pragma unroll
          for (int n = 0; n < 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float& o = acc[ch * 8 + n][e];
              o = fmaf(coef0[e >> 1], __int2float_rn(pv[ch][4 * n + e]), o);
            }
          }
          return;
        }
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          float& o = acc[ch * 8 + n][e];
          o = fmaf(coef0[h], __int_as_float(kQMagicBits + pv[ch][4 * n + e]),
                   fmaf(o, alpha0[h], cb[h]));
        }
      }
    });
  };
  // kWsF: the descriptor offset of K tile j's stage.
  [[maybe_unused]] auto stage_of = [&](int j) {
    return C::kStage0 + (j % C::kStages) * C::kStage;
  };
  // kWsF: waits for K tile j's stage (with Q-smoothing: and stores its bias, own group only).
  [[maybe_unused]] auto ws_wait_tile = [&](int j) {
    if (kSmoothQ) wg::NamedBarSync(2 + grp, 128);  // the previous tile's reads of s_bias[grp]
    ring.ConsumerWait(j);
    if (kSmoothQ && (ctid & 127) < kTile) store_bias(grp, ctid & 127, j * kTile);
    if (kSmoothQ) wg::NamedBarSync(2 + grp, 128);
  };
  // kWsF: the softmax step over the NB * 8 keys from K tile j on, with the scales of j's stage
  // and the mask only where a key is past N or above the CTA's first row.
  [[maybe_unused]] auto ws_softmax_step = [&](int j, const auto& si, auto& pa, float (&alpha)[2],
                                              float (&coef)[2]) {
    constexpr int kKeys = 8 * std::extent_v<std::remove_reference_t<decltype(si)>>;
    const int st = j % C::kStages, c0 = j * kTile;
    const float a = SoftmaxScale(p.tau * sq * s_scal[2 * st] * kLog2e);
    const float svj = s_scal[2 * st + 1] * (1.0f / 127.0f);
    if (c0 + kKeys > p.n || (kCausal && c0 + kKeys - 1 > r0)) {
      softmax_rows(std::true_type{}, si, a, svj, c0, pa, alpha, coef);
    } else {
      softmax_rows(std::false_type{}, si, a, svj, c0, pa, alpha, coef);
    }
  };
  if constexpr (kK128) {
    // kK128: the consumers take two K tiles
    // (one K / V quantization group: one K scale, one V scale) per step: S of both (two wgmma
    // groups), one online-softmax step over the 128 keys (one row max, alpha and l update), P~^
    // as four k-steps of 32 keys, P^ V^ of both tiles summed in one int32 accumulator per 64
    // output columns (four wgmmas), one fold into O per 128 keys. A second tile past `last`
    // (odd count, causal diagonal) is not waited for: its stage's stale codes give logits that
    // the mask drops (P = 0), so every wgmma is issued unconditionally.
    for (int j0 = 0; j0 <= last; j0 += 2) {
      const int j1 = j0 + 1;
      const bool has1 = j1 <= last;
      ring.ConsumerWait(j0);
      if (has1) ring.ConsumerWait(j1);
      int32_t sacc0[32], sacc1[32];
      issue_s(stage_of(j0), sacc0);
      issue_s(stage_of(j1), sacc1);
      wg::Wait<0>();
      int32_t si[16][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) si[n][e] = sacc0[4 * n + e], si[8 + n][e] = sacc1[4 * n + e];
      }
      uint32_t pa[4][4];
      float alpha[2], coef[2];
      ws_softmax_step(j0, si, pa, alpha, coef);
      uint64_t dv0[D / 64][2], dv1[D / 64][2];
      pv_descs(stage_of(j0), dv0);
      pv_descs(stage_of(j1), dv1);
      int32_t pv[D / 64][32];
      wg::Fence();  // the pa registers were just written
#pragma unroll
      for (int ch = 0; ch < D / 64; ++ch) {
        wg::MmaS8RSFirst(pv[ch], pa[0], dv0[ch][0]);
        wg::MmaS8RS(pv[ch], pa[1], dv0[ch][1]);
        wg::MmaS8RS(pv[ch], pa[2], dv1[ch][0]);
        wg::MmaS8RS(pv[ch], pa[3], dv1[ch][1]);
        wg::Commit();
      }
      fold_pv(pv, alpha, coef);
      ring.ConsumerRelease(j0);
      if (has1) ring.ConsumerRelease(j1);
    }
  } else if constexpr (kPipeF) {
    // kPipeF: each consumer issues S of K tile j before the
    // P^ V^ of tile j - 1 and runs tile j's softmax while the tensor cores compute that product
    // (FlashAttention-3's intra-warpgroup overlap); the fold of tile j - 1 follows the softmax of
    // tile j (the same folds in the same order as the loop below: the same O). Stage j - 1 is
    // released after its fold, so a consumer holds two of the kStages stages.
    auto softmax_tile = [&](int j, const int32_t (&sacc)[32], uint32_t (&pa)[2][4],
                            float (&alpha)[2], float (&coef)[2]) {
      int32_t si[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) si[n][e] = sacc[4 * n + e];
      }
      ws_softmax_step(j, si, pa, alpha, coef);
    };
    uint32_t pa[2][4];
    float alpha[2], coef[2];
    {
      int32_t sacc[32];
      ws_wait_tile(0);
      issue_s(stage_of(0), sacc);
      wg::Wait<0>();
      softmax_tile(0, sacc, pa, alpha, coef);
    }
    for (int j = 1; j <= last; ++j) {
      ws_wait_tile(j);
      uint64_t dv[D / 64][2];
      pv_descs(stage_of(j - 1), dv);
      int32_t sacc[32];  // per iteration: no accumulator carried around the loop
      issue_s(stage_of(j), sacc);
      int32_t pv[D / 64][32];
      issue_pv(pa, dv, pv);
      wg::Wait<D / 64>();  // S of tile j (committed before the P^ V^ slices)
      uint32_t pa_next[2][4];
      float alpha_next[2], coef_next[2];
      softmax_tile(j, sacc, pa_next, alpha_next, coef_next);
      fold_pv(pv, alpha, coef);
      ring.ConsumerRelease(j - 1);
      wg::FenceOperands(pa[0]);  // P~^ of tile j - 1 live until its P^ V^ retired (in fold_pv)
      wg::FenceOperands(pa[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) alpha[h] = alpha_next[h], coef[h] = coef_next[h];
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
        for (int i = 0; i < 4; ++i) pa[kk][i] = pa_next[kk][i];
      }
    }
    uint64_t dv[D / 64][2];
    pv_descs(stage_of(last), dv);
    int32_t pv[D / 64][32];
    issue_pv(pa, dv, pv);
    fold_pv(pv, alpha, coef);
    ring.ConsumerRelease(last);
  } else {
    for (int j = 0; j <= last; ++j) {
      const int c0 = j * kTile;
      const int st = kWsF ? j % C::kStages : (j & 1);  // the stage of K tile j
      if constexpr (kWsF) {
        ws_wait_tile(j);
      } else {
        __syncthreads();  // previous tile's reads of the stage refilled below (and s_bias) done
        if (j < last) {
          load_stage(all_c, s_stage + ((j + 1) & 1) * C::kStage, c0 + kTile, threadIdx.x);
        }
        cuda::CpAsyncCommit();  // possibly empty group: keeps the wait count uniform
        if (kSmoothQ && threadIdx.x < 2 * kTile) {
          store_bias(threadIdx.x / kTile, threadIdx.x % kTile, c0);
        }
        cuda::CpAsyncWait<1>();  // tile j (and Q^) landed for this thread
        wg::FenceProxyAsync();  // cp.async writes -> wgmma's reads
        __syncthreads();
      }
      const int stage_byte = C::kStage0 + st * C::kStage;  // descriptor offsets
      const float skj = kWsF ? s_scal[2 * st] : KvGroupScale(p.sk, p, bh, j);
      const float svj0 = kWsF ? s_scal[2 * st + 1] : KvGroupScale(p.sv, p, bh, j);
      const float a = SoftmaxScale(p.tau * sq * skj * kLog2e);
      const float svj = svj0 * (1.0f / 127.0f);
      const bool need_mask =
          c0 + kTile > p.n || (kCausal && c0 + kTile - 1 > r0);

      auto body = [&](auto mask_tag) {
        // S = Q^ K^T for the warp's 16 rows.
        int32_t si[8][4];
        {
          int32_t sacc[32];
          issue_s(stage_byte, sacc);
          wg::Wait<0>();
#pragma unroll
          for (int n = 0; n < 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) si[n][e] = sacc[4 * n + e];
          }
        }
        uint32_t pa[2][4];  // P~^ as s8 A fragments (k = the permuted key order), 2 k-steps
        float alpha[2], coef[2];
        softmax_rows(mask_tag, si, a, svj, c0, pa, alpha, coef);
        {
          uint64_t dv[D / 64][2];
          pv_descs(stage_byte, dv);
          int32_t pv[D / 64][32];
          issue_pv(pa, dv, pv);
          fold_pv(pv, alpha, coef);
        }
      };
      if (need_mask) {
        body(std::true_type{});
      } else {
        body(std::false_type{});
      }
      // kWsF: this thread's P^ V^ wgmmas (the stage's last readers) completed in body().
      if constexpr (kWsF) ring.ConsumerRelease(j);
    }
  }
  // The natural-log LSE of each row, then O = acc / l: one reciprocal per row (an ulp from the
  // quotient at most; the divisions were 5.6% of the d64 forward's instructions, ncu, B16 H12
  // N1024 causal).
  float inv_l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    inv_l[h] = 1.0f / l[h];
    const int row = wr0 + g + 8 * h;
    if (t == 0 && row < p.n) {
      p.lse[int64_t(bh) * p.n + row] = m[h] * cuda::kLn2 + logf(l[h]);
    }
  }
  {
    // O through the stages (free once both warpgroups are past their last products) and
    // 16-byte row stores (StageAccBf16).
    using OT = cuda::Bf16Tile<kTile, D>;
    static_assert(C::kStages * C::kStage >= kGroups * OT::kBytes, "staging room");
    if constexpr (kWsF) {
      wg::NamedBarSync(1, C::kMathThreads);
    } else {
      __syncthreads();
    }
    char* const s_o = smem + C::kStage0 + grp * OT::kBytes;
    cuda::StageAccBf16<OT>(s_o, (warp & 3) * 16, 0, lane, acc, inv_l[0], inv_l[1]);
    wg::NamedBarSync(2 + grp, 128);
    const int q0 = r0 + grp * kTile;
    if (q0 < p.n) {
      cuda::StoreTileRows<OT>(s_o, p.o + bh * nd + int64_t(q0) * D, D, min(kTile, p.n - q0),
                              ctid & 127, 128);
    }
  }
}


// ----------------------------------------------------------------------------------------------
// Host side.
// ----------------------------------------------------------------------------------------------

// The forward kernel for (D, causal, smooth_q): with its K / V tensor maps at d128 without
// Q-smoothing (128-key groups, TMA stages), its shared memory and its grid (causal: longest-first
// across heads, LptGrid).
template <int D, bool kCausal, bool kSmoothQ, int kGroups>
Status LaunchForwardKernel(const AttnShape& s, const Workspace& w, FwdParams p,
                           cudaStream_t stream) {
  using C = FwdConfig<D, kSmoothQ, kGroups>;
  auto kernel = SageForwardKernel<D, kCausal, kSmoothQ, kGroups>;
  if constexpr (C::kK128) {
    ABLATE_RETURN_IF_ERROR(CodesTensorMap<D>(&p.tm_kh, w.kh, s, "K^"));
    ABLATE_RETURN_IF_ERROR(CodesTTensorMap<D>(&p.tm_vht, w.vht, s, "V^T"));
  }
  ABLATE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kBytes),
      "SageBwd forward smem attribute");
  ABLATE_ASSIGN_OR_RETURN(const dim3 grid,
                          LptGrid(kCausal, s.B * s.H, CeilDiv(s.N, C::kRows), kernel,
                                  C::kThreadsLaunch, C::kBytes, &p.lpt_heads));
  return CudaStatus(cuda::LaunchKernel(kernel, grid, dim3(C::kThreadsLaunch), C::kBytes, stream,
                                       /*pdl=*/true, p),
                    "SageBwd forward kernel launch");
}

// Which forward runs (measured: docs/bench/attention.md): at d128 with 128-key K / V groups (no
// Q-smoothing) three consumer warpgroups of 64 rows per CTA, except causal below N = 4096, where
// the 192-row grid fills the last wave worse (5.3 waves of 132 CTAs instead of 7.8 at N2048) and
// two groups run faster; two groups everywhere else.
template <int D>
Status LaunchForward(const AttnShape& s, const Workspace& w, const FwdParams& p, bool smooth_q,
                     cudaStream_t stream) {
  if constexpr (D == 128) {
    if (smooth_q) {
      return s.causal ? LaunchForwardKernel<D, true, true, 2>(s, w, p, stream)
                      : LaunchForwardKernel<D, false, true, 2>(s, w, p, stream);
    }
    if (!s.causal) return LaunchForwardKernel<D, false, false, 3>(s, w, p, stream);
    return s.N >= 4096 ? LaunchForwardKernel<D, true, false, 3>(s, w, p, stream)
                       : LaunchForwardKernel<D, true, false, 2>(s, w, p, stream);
  } else {
    if (s.causal) {
      return smooth_q ? LaunchForwardKernel<D, true, true, 2>(s, w, p, stream)
                      : LaunchForwardKernel<D, true, false, 2>(s, w, p, stream);
    }
    return smooth_q ? LaunchForwardKernel<D, false, true, 2>(s, w, p, stream)
                    : LaunchForwardKernel<D, false, false, 2>(s, w, p, stream);
  }
}

template <int D>
Status ForwardImpl(const AttnShape& s, const AttnOptions& opt, const __nv_bfloat16* q,
                   const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o, float* lse,
                   const Workspace& w, const double* k_parts, cudaStream_t stream) {
  const int bh = s.B * s.H, nt = CeilDiv(s.N, kTile);
  const int kvg = SageKvGroup(opt, D);
  const bool k128 = kvg == 2 * kTile;
  QuantParams qp{};
  qp.n = s.N;
  qp.np = nt * kTile;
  qp.kbar = w.kbar;
  qp.mu = w.mu;
  if (opt.smooth_k) {  // K mean: partial sums over up to 16 row ranges per head
    qp.kparts = SageKMeanParts(s.N).parts;
    if (k_parts != nullptr) {  // the caller's (made where K was produced)
      qp.kpart = k_parts;
    } else {
      qp.kpart = w.kpart;
      ABLATE_RETURN_IF_ERROR(LaunchKMeanParts<D>(s, k, w.kpart, stream));
    }
  } else {
    ABLATE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.kbar, 0, sizeof(float) * bh * D, stream),
                                "SageBwd kbar memset");
  }
  // K (minus its mean), V (V^ only with int8_dp; V^T in the forward's permuted key order),
  // Q (minus its tile means with smooth_q) in one launch. K first: its tiles then read K from L2
  // right after KMeanPartKernel. (Measured and dropped: K last and this launch a programmatic
  // dependent of KMeanPartKernel's, with smaller K-mean blocks, so that V and Q run beside the
  // mean: both launches are bandwidth-bound and the forward did not move.)
  qp.job[0] = {k, w.kh, w.kht, w.sk, opt.smooth_k ? 1 : 0, true, false};
  qp.job[1] = {v, opt.int8_dp ? w.vh : nullptr, w.vht, w.sv, 0, true, false};
  qp.job[2] = {q, w.qh, w.qht, w.sq, opt.smooth_q ? 2 : 0, false, true};
  const bool fuse_q = FwdFusesQ(opt.smooth_q);
  if constexpr (D == 128) {
    if (k128) {  // K and V in 128-key groups; Q (never smoothed here) fused into the forward
      ABLATE_RETURN_IF_ERROR((LaunchQuantize<D, false, 2>(s, qp, 2, stream)));
    }
  }
  if (!k128) ABLATE_RETURN_IF_ERROR((LaunchQuantize<D, false, 1>(s, qp, fuse_q ? 2 : 3, stream)));

  FwdParams p;
  p.k = k;
  p.qh = w.qh;
  p.kh = w.kh;
  p.vht = w.vht;
  p.sq = w.sq;
  p.sk = w.sk;
  p.sv = w.sv;
  p.kbar = w.kbar;
  p.mu = w.mu;
  p.o = o;
  p.lse = lse;
  p.dsrow = w.dsrow;
  p.dqacc = w.dqacc;
  p.armed = w.armed;
  p.q = q;
  p.qht = w.qht;
  p.n = s.N;
  p.np = nt * kTile;
  p.ntq = nt;
  p.ntk = nt;
  p.kv_shift = KvShift(kvg);
  p.lpt_heads = 0;  // LptGrid picks it at the launch
  p.smooth_q = opt.smooth_q;
  p.tau = 1.0f / std::sqrt(static_cast<float>(D));
  return LaunchForward<D>(s, w, p, opt.smooth_q, stream);
}

}  // namespace
}  // namespace ablate::kernels::sage

namespace ablate::kernels {

Status SageForwardCuda(const AttnShape& shape, const AttnOptions& opt, const __nv_bfloat16* q,
                       const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                       float* lse, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const double* k_parts) {
  ABLATE_RETURN_IF_ERROR(sage::CheckArgs(shape, workspace, workspace_bytes, {q, k, v, o, lse}));
  ABLATE_RETURN_IF_ERROR(sage::CheckOptions(opt));
  const sage::Workspace w = sage::CarveWorkspace(shape, static_cast<char*>(workspace));
  return shape.D == 64
             ? sage::ForwardImpl<64>(shape, opt, q, k, v, o, lse, w, k_parts, stream)
             : sage::ForwardImpl<128>(shape, opt, q, k, v, o, lse, w, k_parts, stream);
}

}  // namespace ablate::kernels
