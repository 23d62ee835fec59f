// FPA's backward (head dim 64 and 128) in the FlashAttention-3 structure (sm_90a, wgmma,
// warp-specialized), included by fpa_backward.cu only (which runs the preprocess and postprocess
// around it; the numerics are kernels/ALGORITHMS.md §1.1).
//
// One CTA per 128 keys (causal: longest-first across heads), three warpgroups:
//   producer (warpgroup 0, 24 registers): for each Q tile of 64 rows, Q and dO by TMA into a
//     two-stage ring (mbarriers full / empty), with the tile's lse (log2 domain; +inf past N) and
//     D = rowsum(dO o O) (0 past N);
//   consumer c = 0, 1 (240 registers each): keys kv0 + 64 c .. + 63, whose K and V tiles stay in
//     shared memory and whose dK, dV (64 x D each) stay in registers for the whole loop. Per Q
//     tile, keys as the accumulators' rows:
//       S^T = K Q^T, dP^T = V dO^T                 (wgmma, both operands in shared memory)
//       P^T = exp2(S^T tau log2e - lse), dS^T = P^T o (dP^T - D)
//                                                  (masks on diagonal / tail tiles only)
//       dV += P^T dO, dK += dS^T Q                 (A = P^T, dS^T as bf16 from registers,
//                                                   B = dO, Q read MN-major)
//       dS^T -> the shared dS tile [q][128 keys] (stmatrix.trans, two buffers)
//       dQ = dS K over both consumers' 128 keys (after one barrier of the pair), 64 columns per
//       product: d128, consumer c columns 64 c .. of every tile; d64, consumer (tile % 2) all
//       64 of the tile; staged in shared memory and added into the fp32 dQ accumulator by one
//       bulk reduce-add per row (cp.reduce.async.bulk).
// Deterministic (det_heads > 0): CTA jb adds into slice jb of the scratch; every element of a
// slice gets exactly one add (d128: consumer c owns columns 64 c ..; d64: one consumer a tile)
// onto zero.
#pragma once

namespace ablate::kernels::fpa {
namespace {

struct WsBwdParams {
  CUtensorMap tm_q;   // Q (BH, N, D) as 64-row GmmaTiles (TMA reads it as a kernel parameter)
  CUtensorMap tm_do;  // dO
  BwdParams b;
};

template <int D_>
struct WsBwdLayout {
  static constexpr int D = D_;
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  using Tile = wgmma::GmmaTile<64, 2 * D>;  // 64 rows of D bf16: K, V, Q, dO
  using DsTile = wgmma::GmmaTile<64, 256>;  // dS [64 q][128 keys] bf16
  using OutTile = Bf16Tile<64, D>;          // dK / dV staging at the end (in the K / V tiles)
  // dQ per Q tile: 64 columns per consumer over the CTA's 128 keys. d128: consumer c computes
  // columns 64 c .. of every tile; d64: consumer (tile % 2) computes all 64 of the tile.
  static constexpr bool kSplitDq = D == 128;
  static constexpr int kThreads = 384;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // Consumer c: K, V.
  static constexpr int kK = 0, kV = Tile::kBytes, kConsBytes = 2 * Tile::kBytes;
  // dS, two buffers (tile it uses it % 2).
  static constexpr int kDs0 = 2 * kConsBytes;
  // Stages: Q, dO, lse (log2 domain), D.
  static constexpr int kStage0 = kDs0 + 2 * DsTile::kBytes;
  static constexpr int kQ = 0, kDo = Tile::kBytes, kLse = 2 * Tile::kBytes, kDrow = kLse + 256;
  static constexpr int kStageBytes = (kDrow + 256 + 1023) / 1024 * 1024;
  // dQ staging: per consumer 64 rows of 64 fp32, rows kStgLd floats apart (two wavefronts per
  // warp store of float2, the fewest for 256 bytes; rows stay 16-byte aligned for the bulk adds).
  static constexpr int kStgLd = 72;
  static constexpr int kDqSt = kStage0 + 2 * kStageBytes;
  static constexpr int kDqStBytes = 64 * kStgLd * 4;
  static constexpr int kBar = kDqSt + 2 * kDqStBytes;  // full[2], empty[2]
  static constexpr int kBytes = kBar + 64 + 1024;      // + slack to align the base to 1024
  static_assert(kBytes <= 227 * 1024, "shared memory over the sm_90 limit");
  static_assert(OutTile::kBytes <= Tile::kBytes, "dK / dV staging fits the K / V tiles");
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 65536, "register budget");
  static_assert(2 * 64 == kBwdKeys, "two consumers of 64 keys per CTA");
};

template <int D, bool kCausal>
__global__ void __launch_bounds__(WsBwdLayout<D>::kThreads, 1)
    FpaBackwardWsKernel(const __grid_constant__ WsBwdParams wp) {
  GridDepLaunchDependents();  // the postprocess launch waits for this grid's completion
  using L = WsBwdLayout<D>;
  using DsTile = typename L::DsTile;
  constexpr int kCh = D / 64;  // 64-column chunks of dK, dV
  using Tile = typename L::Tile;
  namespace wg = wgmma;
  const BwdParams& p = wp.b;
  extern __shared__ __align__(128) char smem_raw[];
  char* const buf = smem_raw + ((1024 - (SmemAddr(smem_raw) & 1023)) & 1023);
  const uint32_t sbase = SmemAddr(buf), dlo = wg::DescLo(sbase);
  const int tid = threadIdx.x, wgi = tid >> 7, wtid = tid & 127;
  const int warp = wtid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int N = p.N;
  int jb = int(blockIdx.x), bh = int(blockIdx.y);
  if constexpr (kCausal) LptBlock(p.lpt_heads, jb, bh);
  const int kv0 = jb * kBwdKeys;  // two consumers of 64 keys
  const int64_t head = int64_t(bh) * N * D;
  const int qt_begin = kCausal ? kv0 / 64 : 0, qt_end = CeilDiv(N, 64);
  const wg::MbarRing<2> ring{sbase + L::kBar};
  if (tid == 0) {
    ring.Init(128, 256);
    wg::FenceMbarInit();
  }
  __syncthreads();

  if (wgi == 0) {
    // Producer.
    wg::SetMaxNRegDec<L::kProducerRegs>();
    GridDepWait();  // D: the preprocess launch's
    for (int qt = qt_begin, it = 0; qt < qt_end; ++qt, ++it) {
      ring.ProducerAcquire(it);
      char* const sg = buf + L::kStage0 + (it & 1) * L::kStageBytes;
      const int q0 = qt * 64;
      if (wtid == 0) {
        const uint32_t full = ring.Full(it & 1);
        wg::MbarArriveExpectTx(full, 2 * Tile::kBytes);
        wg::LoadGmmaTileTma<Tile, 2>(SmemAddr(sg + L::kQ), &wp.tm_q, 0, q0, bh, full);
        wg::LoadGmmaTileTma<Tile, 2>(SmemAddr(sg + L::kDo), &wp.tm_do, 0, q0, bh, full);
      }
      if (wtid < 64) {
        const int r = q0 + wtid;
        const bool ok = r < N;
        reinterpret_cast<float*>(sg + L::kLse)[wtid] =
            ok ? p.lse[int64_t(bh) * N + r] * kLog2e : INFINITY;  // +inf: P = 0 past N
        reinterpret_cast<float*>(sg + L::kDrow)[wtid] = ok ? p.dvec[int64_t(bh) * N + r] : 0.f;
      }
      if (wtid != 0) ring.ProducerCommit(it);  // thread 0 arrived with its expect_tx
    }
    return;
  }

  // Consumer cw: keys k0 .. k0 + 63.
  wg::SetMaxNRegInc<L::kConsumerRegs>();
  const int cw = wgi - 1;
  const int k0 = kv0 + 64 * cw;
  const int cons = cw * L::kConsBytes;
  wg::LoadGmmaTileAsync<Tile, 128>(buf + cons + L::kK, p.k + head, k0, N, wtid);
  wg::LoadGmmaTileAsync<Tile, 128>(buf + cons + L::kV, p.v + head, k0, N, wtid);
  CpAsyncCommit();
  CpAsyncWait<0>();
  wg::FenceProxyAsync();  // cp.async writes -> the wgmmas' reads
  wg::NamedBarSync(1 + cw, 128);
  GridDepWait();  // the zeroed dQ accumulator: the preprocess launch's

  float dv[kCh][32], dk[kCh][32];
#pragma unroll
  for (int ch = 0; ch < kCh; ++ch) {
#pragma unroll
    for (int r = 0; r < 32; ++r) dv[ch][r] = dk[ch][r] = 0.f;
  }
  const int key_r = k0 + 16 * warp + g;  // this thread's key rows key_r, key_r + 8
  const bool keys_tail = k0 + 64 > N;
  float* const dq_base =
      p.dq_acc + int64_t(p.det_heads) * jb * N * D + head + (L::kSplitDq ? 64 * cw : 0);
  float* const stg =
      reinterpret_cast<float*>(buf + L::kDqSt + cw * L::kDqStBytes) + warp * 16 * L::kStgLd;
  // stmatrix.trans addresses of dS^T's four 8 x 8 blocks per 16 queries: lane 8i + r gives row r
  // of block i, i.e. query 8 (i / 2) + r, keys 64 cw + 16 warp + 8 (i % 2) .. + 7 (16 bytes); 16
  // more queries are 16 rows (2048 bytes) on, which keeps the swizzle phase.
  const int ds_lane_off = DsTile::ByteOffset(8 * ((lane >> 3) >> 1) + (lane & 7),
                                             2 * (64 * cw + 16 * warp + 8 * ((lane >> 3) & 1)));

  for (int qt = qt_begin, it = 0; qt < qt_end; ++qt, ++it) {
    const int sgo = L::kStage0 + (it & 1) * L::kStageBytes;
    const int dso = L::kDs0 + (it & 1) * DsTile::kBytes;
    const int q0 = qt * 64;
    ring.ConsumerWait(it);
    // S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 queries, one commit group each.
    float sacc[32], dpacc[32];
    const auto mma_keys_by_queries = [&](float(&acc)[32], int a_off, int b_off) {
      wg::MmaBf16First(acc, wg::TileDesc<Tile>(dlo, a_off), wg::TileDesc<Tile>(dlo, b_off));
#pragma unroll
      for (int kb = 32; kb < 2 * D; kb += 32) {
        wg::MmaBf16(acc, wg::TileDesc<Tile>(dlo, a_off, kb), wg::TileDesc<Tile>(dlo, b_off, kb),
                    true);
      }
      wg::Commit();
    };
    wg::Fence();
    mma_keys_by_queries(sacc, cons + L::kK, sgo + L::kQ);
    mma_keys_by_queries(dpacc, cons + L::kV, sgo + L::kDo);
    wg::Wait<0>();
    // P^T and dS^T as bf16 A fragments (k-step kk: queries 16 kk .. 16 kk + 15). (Computing P^T
    // while dP^T runs and dS^T while dV's product runs, as FlashAttention-3's forward overlaps
    // softmax and products, measured 0.98-0.99x this order at d128: the other consumer's products
    // already keep the tensor cores busy meanwhile.)
    uint32_t pa[4][4], da[4][4];
    {
      const float* s_lse = reinterpret_cast<const float*>(buf + sgo + L::kLse);
      const float* s_dr = reinterpret_cast<const float*>(buf + sgo + L::kDrow);
      float pf[8][4], dsf[8][4];
      const auto fx = [&](auto mask_c) {
        constexpr bool kMask = decltype(mask_c)::value;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float2 l2 = *reinterpret_cast<const float2*>(s_lse + 8 * j + 2 * t);
          const float2 dr = *reinterpret_cast<const float2*>(s_dr + 8 * j + 2 * t);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int b = e & 1;
            const float pe = FastExp2(fmaf(sacc[4 * j + e], p.scale_log2, -(b ? l2.y : l2.x)));
            const float ds = pe * (dpacc[4 * j + e] - (b ? dr.y : dr.x));
            bool valid = true;
            if constexpr (kMask) {
              const int key = key_r + 8 * (e >> 1), q = q0 + 8 * j + 2 * t + b;
              valid = key < N && (!kCausal || key <= q);
            }
            pf[j][e] = valid ? pe : 0.f;
            dsf[j][e] = valid ? ds : 0.f;
          }
        }
      };
      if (keys_tail || (kCausal && k0 + 63 > q0)) {  // uniform over the warpgroup
        fx(std::true_type{});
      } else {
        fx(std::false_type{});
      }
      AccToBf16A<8>(pa, pf);
      AccToBf16A<8>(da, dsf);
    }
    // dS^T -> dS [q][key] of this consumer's 64 keys (the buffer's last reader, tile it - 2's
    // dQ, was waited for by both consumers before tile it - 1's pair barrier).
    {
      const uint32_t a0 = sbase + dso + ds_lane_off;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        StMatrixX4Trans(a0 + kk * 2048, da[kk][0], da[kk][1], da[kk][2], da[kk][3]);
      }
      wg::FenceProxyAsync();  // st.shared -> the dQ wgmmas' reads
    }
    // dV += P^T dO, dK += dS^T Q (64 keys x D columns, 64-column chunks): A from registers, B
    // the stage's tile at b_off read MN-major.
    const auto mma_keys_by_cols = [&](float(&acc)[kCh][32], const uint32_t(&a)[4][4], int b_off) {
#pragma unroll
      for (int ch = 0; ch < kCh; ++ch) {
        const uint32_t b = sbase + sgo + b_off + ch * Tile::kChunkBytes;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          wg::MmaBf16RSTransB(acc[ch], a[kk], wg::DescMN<Tile>(b, 16 * kk), true);
        }
      }
    };
    wg::Fence();
    mma_keys_by_cols(dv, pa, L::kDo);
    mma_keys_by_cols(dk, da, L::kQ);
    wg::Commit();
    wg::NamedBarSync(3, 256);  // both consumers' dS
    if (!L::kSplitDq && (it & 1) != cw) {  // d64: the other consumer's dQ tile
      wg::Wait<0>();  // dV, dK: the stage's Q / dO and P^T / dS^T's registers are free
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        wg::FenceOperands(pa[kk]);
        wg::FenceOperands(da[kk]);
      }
      ring.ConsumerRelease(it);
      continue;
    }
    // dQ (64 columns: d128 64 cw .., d64 all) over the CTA's 128 keys: dS (A, K-major) times K
    // (B, MN-major) of consumer kk / 4's tile.
    float dq[32];
    wg::Fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      const uint32_t kb =
          sbase + (kk >> 2) * L::kConsBytes + L::kK + (L::kSplitDq ? cw * Tile::kChunkBytes : 0);
      const uint64_t a = wg::TileDesc<DsTile>(dlo, dso, 32 * kk);
      const uint64_t b = wg::DescMN<Tile>(kb, 16 * (kk & 3));
      if (kk == 0) {
        wg::MmaBf16TransB<true>(dq, a, b);
      } else {
        wg::MmaBf16TransB<false>(dq, a, b);
      }
    }
    wg::Commit();
    wg::Wait<1>();  // dV, dK: the stage's Q / dO and P^T / dS^T's registers are free
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wg::FenceOperands(pa[kk]);
      wg::FenceOperands(da[kk]);
    }
    ring.ConsumerRelease(it);
    wg::Wait<0>();
    // dQ: the warp's 16 rows into its staging rows (once the previous tile's bulk adds have read
    // them), then one 256-byte bulk reduce-add per row (lanes 0..15; rows past N skipped).
    wg::BulkWaitRead<0>();
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<float2*>(stg + (g + 8 * h) * L::kStgLd + 8 * j + 2 * t) =
            make_float2(dq[4 * j + 2 * h], dq[4 * j + 2 * h + 1]);
      }
    }
    wg::FenceProxyAsync();
    __syncwarp();
    {
      const int row = q0 + 16 * warp + lane;
      if (lane < 16 && row < N) {
        wg::BulkReduceAddF32(dq_base + int64_t(row) * D, SmemAddr(stg + lane * L::kStgLd), 256);
        wg::BulkCommit();
      }
    }
  }
  wg::BulkWait<0>();

  // dV, dK through this consumer's V / K tiles (once both consumers' last dQ products, which
  // read both K tiles, are done) and 16-byte row stores.
  wg::NamedBarSync(3, 256);
  float acc[D / 8][4];
  const int nr = min(64, N - k0);
  const auto store = [&](const float(&x)[kCh][32], int off, bf16* dst, float mul) {
#pragma unroll
    for (int ch = 0; ch < kCh; ++ch) {
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[ch * 8 + nb][e] = x[ch][4 * nb + e];
      }
    }
    StageAccBf16<typename L::OutTile>(buf + cons + off, 16 * warp, 0, lane, acc, mul, mul);
    wg::NamedBarSync(1 + cw, 128);
    StoreTileRows<typename L::OutTile>(buf + cons + off, dst + head + int64_t(k0) * D, D, nr, wtid,
                                       128);
  };
  store(dv, L::kV, p.dv, 1.f);
  store(dk, L::kK, p.dk, p.tau);
}

}  // namespace
}  // namespace ablate::kernels::fpa
