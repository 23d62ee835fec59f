// SageBwd INT8 attention, forward and backward, for sm_90a (wgmma; mma.sync in one lab forward):
// the CUDA twin of the CPU emulator in attention/sagebwd_cpu.cc (kernels/ALGORITHMS.md §1.2). Host API:
// sagebwd_cuda.h.
//
// Layout: q, k, v, o, do, dq, dk, dv (B, H, N, D) bf16 row-major; lse (B, H, N) f32. Tiles
// (quantization groups and the emulator's bq / bkv): Bq = Bkv = 64 (kSageBq, kSageBkv). Each
// backward warpgroup owns 64 keys, each of its warps 16 rows of a 64-row tile; the forward runs
// 128 or 192 query rows = two or three 64-row Q groups per CTA (see SageForwardKernelV5).
//
// Quantization scheme (the emulator's; s = max|X| / 127 over the group, all-zero group: s = 1;
// X^ = round_half_even(X / s) clamped to [-127, 127]; the kernels multiply by 1/s, taken once per
// group, which can differ from the emulator's division by one step at exact ties):
//   K^  per (b,h, K / V group) after K-smoothing (K - kbar, kbar = mean of K over all N tokens)
//   V^  per (b,h, K / V group);  Q^ per (b,h, Q tile) after optional Q-smoothing (Q - tile mean)
//       (K / V group = SageKvGroup: 128 keys = two K tiles at d128 without Q-smoothing, where the
//       forward steps two K tiles at a time (v9), else one K tile)
//   dO^ per (b,h, Q tile)
//   P~  (forward) per query row of each block, s = exp(rowmax - m_new) / 127 (online max)
//   P   (backward, dV = P^T dO) per key column of each block
//   dS  per query row of the block for dQ = dS K (block: the two consumers' 128 keys with
//       kBwdDqPair, SageBwdKeyBlock), per key column for dK = dS^T Q
// Every int8 product is an s8 wgmma (or m16n8k32 mma; "TN": both operands stored with the
// contraction index contiguous), so each quantized tensor is stored in the orientation(s) its
// products need:
//   S = Q^ K^T      A = Q^ [q][d]      B = K^ [key][d]
//   O += P^ V^      A = P^ [q][key]    B = V^T [d][key]
//   dV += P^T dO^   A = P^T [key][q]   B = dO^T [d][q]
//   dK += dS^T Q^   A = dS^T [key][q]  B = Q^T [d][q]
//   dQ += dS^ K^    A = dS^ [q][key]   B = K^T [d][key]
//   dP = dO V^T     bf16 (A = dO [q][d], B = V [key][d]), or s8 (dO^, V^) with int8_dp
// The quantization kernels write Q^, K^, V^, dO^ and their transposes (padded to 64 rows, zero
// padding) to the workspace; the forward's are reused by the backward. The query index of Q^T
// and dO^T (and of the P^T / dS^T tiles they meet) runs in BwdQueryOfSlot order within each 16;
// the key index of the forward's V^T in FwdKeyOfSlot order.
//
// Backward: one CTA per (b,h, K tile) walks the Q tiles (causal: only tiles with a visible key).
// All five products by wgmma (sm_90a, wgmma.cuh): S and dP from the swizzled Q^ / K^ / dO / V
// tiles, dV / dK / dQ from the P^T / dS^T / dS^ tiles the kernel writes, two of those in flight
// at a time. P and dS of a block stay in registers (P by ex2.approx in the log2 domain): per-row
// scales (dS for dQ) by quad shuffles, per-column scales (P for dV, dS for dK; a max over the 64
// rows of 4 warps) by a reduce-scatter over the 8 lane groups plus a 3 x 4 x 64 fp32 partial
// table in shared memory; the scales and their reciprocals without branches (sage_scale.cuh:
// branch reconvergence points serialized the three scale chains of every warp); the int8 copies
// (P^T, dS^T, dS^) are made by one FMA into the 1.5 * 2^23 mantissa (no F2I / clamp) and written
// straight from registers. dK, dV stay in registers;
// dQ is accumulated into the workspace's fp32 dqacc (16 x 64 blocks, DqAccIndex: each warp's
// share of a Q tile is one block, added by 16-byte reductions from registers at d64, staged in
// shared memory by stmatrix and added by one bulk reduction at d128: DqByRed),
// rowsum dS (K-smoothing correction) with scalar atomics, and a last kernel converts dQ.
// Accumulation order differs from the emulator. Interior blocks (no N tail; causal: wholly below
// the diagonal) skip the mask arithmetic and read lse / D_i once per row. D = 64: 4 warps per
// CTA, __launch_bounds__(128, 3) (<= 168 registers): 3 CTAs (12 warps) per SM, each Q tile's Q^,
// dO, Q^T, dO^T by TMA (v11). D = 128 (sagebwd v9, kBwdWs): one CTA per SM and pair of K tiles, a
// producer warpgroup copying each Q tile's operands into a two-stage ring, two consumer
// warpgroups (240 registers each) running the per-tile body for one K tile each; v10
// (kBwdDqPair, with 128-key K / V groups): the two consumers share dQ (dS^ row scales over their
// 128 keys; each computes half of dQ's columns), v11 its Q side by TMA; v12 (kBwdEarlyP1): the
// next Q tile's S and dP wgmmas issued during this tile's last two phase-2 epilogues (production
// non-causal); kBwdSwap: S^T and dP^T (keys as rows), so that P^T's and dS^T's scales are row
// statistics (production causal now). The per-tile body is BwdTile's (TileRows;
// kBwdSwap: TileKeysAsRows); SageBackwardKernel sets up the CTA, the producer and each Q tile's
// stage around it. The compiled-in variants are BwdCompiled (the GPU test's lab mode times them
// through SageCudaOptions::bwd_variant); BwdProductionFor picks production's.
//
// Forward: SageForwardKernelV5, 128 (kG3: 192) query rows per CTA. Production (FwdProductionFor) is
// the v6 structure: 8 warps = two warpgroups x 64 rows, S = Q^ K^T by wgmma from swizzled tiles,
// P~^ packed from registers into s8 A fragments and multiplied by V^T through wgmma with A from
// registers (V^T stored in the permuted key order FwdKeyOfSlot), the Q quantization fused into the
// prologue, the lazy rescale of O (d64: 23 / 24); at D = 128 warp-specialized (a producer warpgroup
// fills a K^ / V^T ring: v7), stepping two K tiles (one 128-key K / V quantization group) at a time
// with the stages filled by TMA and three consumer warpgroups of 64 rows (27 non-causal, 28 causal
// from N = 4096; 21 causal below it, with two), or with 64-key groups (Q-smoothing) 12 / 15. The
// compiled-in variants are FwdCompiled (SageCudaOptions::fwd_variant); lab variant 8 is the
// mma.sync kernel (m16n8k32 s8 with ldmatrix fragment loads from padded tiles, cp.async copies),
// which quantizes Q in the quantize launch. The quantization is two launches (K-mean parts, then K
// / V, and Q where the forward does not fuse it) in the forward and one (dO with D_i) in the
// backward; the forward kernel zeroes the backward's dQ accumulator.
//
// Removed lab kernels (kernels/bench/README.md, Variants, has their figures): the v3 / v4
// forward and backward, the mma.sync backward v4q and the wgmma steps v7a-v7s (an earlier run; commit
// 78f17c5 has them), the v5b / v5c forwards (4 warps x 32 rows; without the fast interior
// logits), and the backward v6 (fpa.cu's backward v2 structure: 0.76-0.88x of v4).
#include "attention/cuda/sagebwd_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "attention/cuda/attention_common.cuh"
#include "attention/cuda/sage_scale.cuh"
#include "attention/cuda/wgmma.cuh"

namespace ablate::kernels {
namespace {

using cuda::wgmma::TileDesc;

using cuda::CeilDiv;
using ::ablate::CudaStatus;
using cuda::LptBlock;  // (attention_common.cuh, with LptGrid: shared with fpa.cu)
using cuda::LptGrid;
using cuda::GroupScale;
using cuda::GroupScaleBranchless;
using cuda::MmaS8;
using cuda::QuadMax;
using cuda::QuadSum;
using cuda::RcpFastPath;
using cuda::RcpNewton;

constexpr int kTile = 64;  // Bq == Bkv
static_assert(kSageBq == kTile && kSageBkv == kTile, "kernels assume Bq == Bkv == 64");
constexpr int kThreads = 128;
constexpr int kI8T = kTile + 16;  // int8 row stride (bytes) of a tile whose k index is a token

// How a backward warp adds its 16 rows x 64 columns of dQ into dqacc (DqAccIndex, BwdTile::EpiDq):
// at d64 straight from registers by eight 16-byte reductions per lane (red.global.add.v4.f32),
// at d128 staged in shared memory by stmatrix and added by one bulk reduction. The reductions
// from registers made ptxas spill 176-224 bytes in the d128 kernels (at their 240-register
// budget, with 128 fp32 dK / dV values per thread) and ran them 0.73-0.85x; at d64 (168
// registers, no new spills) they run the backward 1.031-1.035x (an earlier run:
// 2026-11-28-h200-s32): no staging stores, no proxy fence, no bulk read of the staging.
template <int D>
constexpr bool DqByRed() {
  return D == 64;
}
// Bytes of shared memory per CTA region for the dQ staging (one 4 KB block per warp).
template <int D>
constexpr int DqStagingBytes() {
  return DqByRed<D>() ? 0 : kTile * 64 * 4;
}

// Backward shared-memory layout (without kBwdWs): the S / dP operands (K^, V, Q^, dO) as
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

// kBwdWs: consumer warpgroups per CTA (one K tile each) and the register budgets after the
// hand-over: the producer warpgroup keeps 24 per thread, the consumers share the rest of the
// SM's 64 K (setmaxnreg takes multiples of 8): 240 for two consumer warpgroups (the backward, the
// two-group forward), 160 for three (the forward's kG3). (Measured and dropped: three backward
// consumers at D = 64 with 160 registers, 80 bytes of spills causal: no faster than 110520
// non-causal (0.488 vs 0.481 ms at B8 H16 N1024) and its causal build failed the emulator
// checks, cause not found.)
constexpr int kWsConsumers = 2;
constexpr int kWsProducerRegs = 24;
constexpr int WsConsumerRegs(int consumer_threads) {
  return (65536 - 128 * kWsProducerRegs) / consumer_threads / 8 * 8;
}
constexpr int kWsConsumerRegs = WsConsumerRegs(kWsConsumers * 128);
static_assert(kWsConsumerRegs == 240 && WsConsumerRegs(3 * 128) == 160, "the budgets above");

// Warp-specialized backward layout (kBwdWs): kWsConsumers consumer regions (one per consumer
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
  static constexpr int kXrow = kScal + 16;     // kBwdDqPair: per consumer, row max |dS| [2][64]
  static constexpr int kStageBytes = Up(kXrow + kWsConsumers * kTile * 4, 1024);
  // Buffer.
  static constexpr int kCons0 = 0;
  static constexpr int kStage0 = kWsConsumers * kConsBytes;
  static constexpr int kBar = kStage0 + 2 * kStageBytes;  // the ring's 2 x 2 mbarriers
  // kBwdSwap: one "tile done" mbarrier per consumer, kTileDoneOff bytes after kBar.
  static constexpr int kTileDoneOff = 32;
  static constexpr int kBytes = kBar + 64 + 1024;  // + slack to align the base to 1024
  static_assert(kTileDoneOff + 8 * kWsConsumers <= 64, "the mbarriers fit their 64 bytes");
  static_assert(kBytes <= 227 * 1024, "backward shared memory over the sm_90 limit");
  static_assert(kKht % 1024 == 0 && kPT % 1024 == 0 && kQht % 1024 == 0 && kDoht % 1024 == 0 &&
                    kDo % 1024 == 0 && kV % 1024 == 0,
                "swizzled tiles stay 1024-byte aligned");
};

// ----------------------------------------------------------------------------------------------
// Device pieces.
// ----------------------------------------------------------------------------------------------

// red.global.add.f32 [addr], v where pred, as one predicated instruction: `if (pred)
// atomicAdd(...)` is a divergent branch, and its reconvergence point keeps the scheduler from
// moving the independent work after it (the next row's or the columns' reductions) in front.
__device__ __forceinline__ void RedAddIf(bool pred, float* addr, float v) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %2, 0;\n"
      "@p red.global.add.f32 [%0], %1;\n"
      "}\n" ::"l"(addr),
      "f"(v), "r"(int(pred)));
}

// Eight red.global.add.v4.f32 (sm_90: 16-byte fp32 reductions without a result) of v[4n..4n+3] at
// base + 512 n bytes, one asm statement: the addresses are immediate offsets of one register pair.
// (atomicAdd on a float4 compiles to atom.global.add.v4.f32, with result registers.)
__device__ __forceinline__ void RedAddV4x8(float* base, const float (&v)[32]) {
  asm volatile(
      "red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n"
      "red.global.add.v4.f32 [%0+512], {%5, %6, %7, %8};\n"
      "red.global.add.v4.f32 [%0+1024], {%9, %10, %11, %12};\n"
      "red.global.add.v4.f32 [%0+1536], {%13, %14, %15, %16};\n"
      "red.global.add.v4.f32 [%0+2048], {%17, %18, %19, %20};\n"
      "red.global.add.v4.f32 [%0+2560], {%21, %22, %23, %24};\n"
      "red.global.add.v4.f32 [%0+3072], {%25, %26, %27, %28};\n"
      "red.global.add.v4.f32 [%0+3584], {%29, %30, %31, %32};\n" ::"l"(base),
      "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "f"(v[4]), "f"(v[5]), "f"(v[6]), "f"(v[7]),
      "f"(v[8]), "f"(v[9]), "f"(v[10]), "f"(v[11]), "f"(v[12]), "f"(v[13]), "f"(v[14]),
      "f"(v[15]), "f"(v[16]), "f"(v[17]), "f"(v[18]), "f"(v[19]), "f"(v[20]), "f"(v[21]),
      "f"(v[22]), "f"(v[23]), "f"(v[24]), "f"(v[25]), "f"(v[26]), "f"(v[27]), "f"(v[28]),
      "f"(v[29]), "f"(v[30]), "f"(v[31]));
}

// The quantizer of the kernels' inner loops, with the reciprocal of the group scale taken once per
// group (may differ from x / s by one step at exact ties, within the tests' tolerance). Fast form
// (backward, kBwdFastQ): round_half_even(x * inv_s) formed by one FMA into the mantissa of 1.5 *
// 2^23 (the integer lands in the low bits, two's complement in the
// low byte; exact for |x inv_s| < 2^22), no clamp: x is one of the values whose largest magnitude
// m gave s = m / 127 (rounded) and inv_s = 1 / s (rounded), so |x inv_s| <= 127 (1 + 2^-22) <
// 127.5. Rounds the exact product once, half to even (the reference form, QuantBitsRn and the
// removed F2I quantizer rne(fl(x inv_s)) clamped, rounds the fp32 product, then to an integer):
// the two differ only at near-ties, as both differ from the emulator's x / s. A
// host sweep (12.8M values, 4.4M of them within an ulp of a tie, 200k group maxima from 2^-20 to
// 2^10 and 0; plus every float within 64 ulps of each tie point for 6 scales) found no |code| >
// 127, every group max coded +-127, and fewer disagreements with the emulator's rne(x / s) in
// double than the F2I form has (1.49M vs 1.79M of the near-tie inputs; 19 of 8.4M random ones).
constexpr float kQMagic = 12582912.0f;  // 1.5 * 2^23
// The forward's lazy rescale (kLazyF): the running max (log2 domain) moves only for a tile row
// max more than this above it (coef then up to 2^8 times s_V / 127).
constexpr float kLazyThresh = 8.0f;
// Its bits: the bits kQMagicBits + x of an int32 x with |x| < 2^22 are the float kQMagic + x.
constexpr int kQMagicBits = 0x4B400000;
__device__ __forceinline__ uint32_t QuantBits(float x, float inv_s) {
  return __float_as_uint(fmaf(x, inv_s, kQMagic));
}
// The F2I quantizer's code (rne(fl(x inv_s)) clamped to [-127, 127]) bit for bit in the low
// byte, without F2I or clamps: the fp32 product x inv_s rounded to an integer by adding 1.5 *
// 2^23; no clamp under QuantBits' condition (x one of the values whose largest magnitude gave the
// scale). QuantBits' single FMA rounds the exact product instead: on bf16 inputs (the quantize
// launches) it disagreed with the emulator's codes 2.5x as often (host count, 8.2M values) and
// failed the GPU test's tight emulator comparisons.
__device__ __forceinline__ uint32_t QuantBitsRn(float x, float inv_s) {
  return __float_as_uint(__fadd_rn(__fmul_rn(x, inv_s), kQMagic));  // _rn: never fused
}
// Two codes packed into the low 16 bits (lo first).
__device__ __forceinline__ uint32_t QuantPack2(float lo, float hi, float inv_s) {
  return __byte_perm(QuantBits(lo, inv_s), QuantBits(hi, inv_s), 0x0040);
}

// Low bytes of four 32-bit words (a, b, c, d) -> one word, a in byte 0.
__device__ __forceinline__ uint32_t PackLowBytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

// int32 -> fp32, exact for |x| < 2^22 (every s8 MMA sum here: K <= 128 products of at most
// 127^2 = 2.06e6 in magnitude): the integer is added into the mantissa of 1.5 * 2^23 (integer
// add + float subtract, both full-rate, instead of the quarter-rate I2F conversion).
constexpr int kMaxS8K = 128;
static_assert(kMaxS8K * 127 * 127 < (1 << 22), "S32ToF32 range");
__device__ __forceinline__ float S32ToF32(int32_t x) {
  return __int_as_float(kQMagicBits + x) - kQMagic;
}

// The softmax scale a = tau sq sk log2e (the forward's; the backward's a2, formed in the same
// order) with its two lowest mantissa bits cleared (a relative change below 2.4e-7, the same in
// both passes, far inside the ex2.approx error): then 1.5 * 2^23 a is exact, and the forward's
// interior tiles form a (S - rowmax) by one FMA on the magic-form sum (SageForwardKernelV5).
__device__ __forceinline__ float SoftmaxScale(float a) {
  return __uint_as_float(__float_as_uint(a) & ~3u);
}

// Backward variants (kernels/bench/README.md, Variants): bits of a template parameter, selected
// per call by SageCudaOptions::bwd_variant (the GPU test's lab mode; production calls leave it at
// -1 = BwdProductionFor). The bits below up to kBwdBulkDq are the steps of sagebwd v4-v8 (each
// measured in the bench notes); every compiled variant has all of them (kBwdBase), so the kernel
// has no code without them, and each has kBwdTma or kBwdWs. The lab variants that lacked some
// (the mma.sync kernels v4 / v4q, the wgmma steps v7a-v7s, the cp.async Q side without kBwdWs)
// were removed earlier; commit 78f17c5 still has them.
// (Bits 1, 2, 4 were v3's Q-tile prefetch, 16-byte dQ atomics and S32ToF32 conversion: 2-6%
// slower together, removed; git history.)
constexpr int kBwdInterior = 8;  // interior blocks (no tail, no causal diagonal) skip the masks
constexpr int kBwdOcc3 = 16;     // D = 64: __launch_bounds__(128, 3): <= 168 registers, 3 CTAs/SM
constexpr int kBwdExp2 = 32;     // P = ex2.approx(x a log2e - lse log2e) instead of expf(a x - lse)
constexpr int kBwdFastQ = 128;   // P^T, dS^T, dS^ codes by QuantBits / QuantPack2 (no F2I / clamp)
constexpr int kBwdWgmma = 256;   // S = Q^ K^T and dP = dO V^T by wgmma from GmmaTiles (v7a)
constexpr int kBwdWgmma2 = 512;  // with 256: dV, dK, dQ by wgmma too (v7b)
constexpr int kBwdColRs = 1024;  // column partials by ColumnReduceScatter (14 shuffles, not 48)
constexpr int kBwdWgPipe = 2048;  // with 512: dV / dK / dQ wgmma two in flight (epilogue overlap)
// (4096 was v7's next-Q-tile prefetch, measured slower and removed.)
constexpr int kBwdSplitWait = 8192;  // with 512: Q^T / dO^T (phase 2 only) waited for after phase 1
// (16384 loaded the next Q tile's lse, D_i and scales one iteration ahead: 0.98-1.02x, removed.)
constexpr int kBwdColVec = 32768;  // with 8192: the per-column 1 / scale of P and dS interleaved,
                                   // one 16-byte shared load per column pair in the quantization
constexpr int kBwdBulkDq = 65536;  // with 2048: dQ partials staged in shared memory (per warp, its
                                   // 16 rows) and added by bulk reductions, not red.global
// sagebwd v8 (110520): what every compiled backward variant builds on.
constexpr int kBwdBase = kBwdInterior + kBwdOcc3 + kBwdExp2 + kBwdFastQ + kBwdWgmma + kBwdWgmma2 +
                         kBwdColRs + kBwdWgPipe + kBwdSplitWait + kBwdColVec + kBwdBulkDq;
static_assert(kBwdBase == 110520, "the variant numbers of the bench notes");
// The optional bits:
// kBwdTma: the Q side of each Q tile (Q^, dO or dO^, Q^T, dO^T) copied by TMA, one thread issuing
// a few cp.async.bulk.tensor per tile that complete on mbarriers (wgmma.cuh, LoadGmmaTileTma),
// instead of every thread of the CTA (kBwdWs: of the producer warpgroup) issuing 16-byte
// cp.async copies with their addresses (~130 of ~1600 instructions per warp and tile at d64).
constexpr int kBwdTma = kSageBwdTma;
constexpr int kBwdLpt = 131072;  // grid (BH, K tiles): causal CTAs longest-first across the
                                 // heads of each group (LptBlock), not head by head
// kBwdWs: warp-specialized. C = kWsConsumers (2) + 1 warpgroups: warpgroup 0 is the producer
// (copies of each Q tile's Q^, dO, Q^T, dO^T, by TMA with kBwdTma, else cp.async, plus its lse,
// D_i, mu and scales into a two-stage ring, mbarriers full / empty), warpgroup 1 + c is the
// consumer of K tile C jj + c of CTA jj, running the per-tile body with named barriers per
// warpgroup; the consumers issue no Q-side copies and share one copy of the Q side, the producer
// gives its registers to them (setmaxnreg). One CTA per SM.
constexpr int kBwdWs = 262144;
// kBwdDqPair (with kBwdWs, D = 128, 128-key K / V groups): the two consumers share dQ. dS^ is
// quantized with one scale per query row over both consumers' 128 keys (the emulator's bkv = 128:
// SageBwdKeyBlock; the row maxima are exchanged through the stage), and consumer c computes dQ
// columns 64c..64c+63 of the Q tile over all 128 keys (both consumers' dS^ and K^T tiles), so
// each consumer folds and reduces half the dQ block it did (one 64 x 64 product of K = 128
// instead of two of K = 64). Both consumers run every Q tile of the CTA (a causal tile above a
// consumer's diagonal or a K tile past N is computed fully masked: P = dS = 0).
constexpr int kBwdDqPair = kSageBwdDqPair;
// kBwdEarlyP1 (with kBwdDqPair; not with int8_dp, whose launches drop the bit): the
// next Q tile's phase-1 products issued before this tile's last two epilogues, dP = dO V^T after
// the fourth phase-2 epilogue (in the registers its product freed), S = Q^ K^T after the fifth,
// so the tensor cores run them while the consumer folds, instead of every consumer waiting for
// its phase 1 at the top of the tile. The consumer waits for the next stage's copies there.
constexpr int kBwdEarlyP1 = kSageBwdEarlyP1;
// kBwdSwap (with kBwdEarlyP1; production causal at d128): each consumer computes S^T = K^ Q^^T and
// dP^T = V dO^T, its 64 keys as the accumulator's rows and the Q tile's queries as its columns. The
// P^T and dS^T scales (one per key) are then row statistics of the thread's own registers and quad
// shuffles (no shared memory, no barrier), and their codes are already in [key][q] order: four
// codes of one key row are one 32-bit word of the P^T / dS^T tiles (Q^T / dO^T hold the queries in
// BwdQueryOfSlot order, the order of those bytes). The one chain that crosses warps is dS^'s: one
// scale per query over both consumers' 128 keys (a column reduction, two pair barriers), its codes
// stored by stmatrix.trans (16-bit units of keys g, g + 8: K^T is copied with its keys permuted to
// match); the first dV product runs beside that chain. 9% fewer instructions than 7712696 and
// 0.986-1.021x its speed: the tile is latency-bound in every step (an earlier run; the codes as the dV
// / dK wgmmas' register A operands made ptxas spill 300-440 bytes). Causal 1.000-1.021x over three
// calls, non-causal 0.986-1.002x: causal only.
constexpr int kBwdSwap = kSageBwdSwap;
// (Measured, not kept: dQ converted in the backward kernel by the last contributor per Q tile,
// found by an acq_rel counter per tile: 0.78-0.98x; once per head
// instead, by the CTA that finishes the head last (each CTA drains its dQ adds and counts itself
// after its dK / dV stores): backward 0.82-0.97x, the count alone 0.98-0.99x; one CTA reads a
// head's dqacc from L2 far slower than the conversion launch streams all of them.)
template <int D, int kVar>
constexpr int BwdMinBlocks() {
  return (D == 64 && (kVar & kBwdWs) == 0) ? 3 : 1;  // kBwdOcc3
}
template <int D, int kVar>
constexpr int BwdThreads() {
  return (kVar & kBwdWs) != 0 ? (kWsConsumers + 1) * kThreads : kThreads;
}

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

// Fragment loads by ldmatrix from the padded tiles: every row stride used here (kI8D = D + 16,
// kI8T bytes) is an odd number of 16-byte chunks, so the 8 row addresses of one 8x8 matrix
// fall in 8 different 16-byte bank groups (conflict-free). int8 tiles are read as b16 (the s8
// m16n8k32 fragments have the bf16 m16n8k16 layout with bytes for elements, see
// attention_common.cuh).
// A (16 rows x 32 bytes at byte column kb of rows at A, byte stride sa).
__device__ __forceinline__ void LdA(uint32_t (&a)[4], const void* A, int sa, int kb, int lane) {
  const char* p = static_cast<const char*>(A) + (lane & 15) * sa + kb + ((lane >> 4) << 4);
  cuda::LdMatrixX4(a, cuda::SmemAddr(p));
}
// B fragments of two n-blocks (rows n0..n0+15 of B, 32 bytes at byte column kb): b[0..1] for
// rows n0..n0+7, b[2..3] for n0+8..n0+15.
__device__ __forceinline__ void LdB2(uint32_t (&b)[4], const void* B, int sb, int n0, int kb,
                                     int lane) {
  const char* p = static_cast<const char*>(B) + (n0 + (lane & 7) + ((lane >> 4) << 3)) * sb + kb +
                  (((lane >> 3) & 1) << 4);
  cuda::LdMatrixX4(b, cuda::SmemAddr(p));
}

// Copies `rows` rows of `row_bytes` bytes (multiple of 16, 16-byte aligned) from global to a
// shared tile with byte stride `dst_stride`.
__device__ __forceinline__ void CopyRows(void* dst, int dst_stride, const void* src,
                                         int64_t src_stride, int rows, int row_bytes) {
  // cp.async (16 bytes, L2 only): no register staging; CopyWait() before the barrier.
  const int chunks = row_bytes / 16;
  const uint32_t d = cuda::SmemAddr(dst);
  for (int idx = threadIdx.x; idx < rows * chunks; idx += blockDim.x) {
    const int r = idx / chunks, c = idx % chunks;
    cuda::CpAsync16(d + r * dst_stride + c * 16,
                    static_cast<const char*>(src) + r * src_stride + c * 16, true);
  }
}

// Waits for this thread's cp.async copies (the caller then syncs the block).
__device__ __forceinline__ void CopyWait() {
  cuda::CpAsyncCommit();
  cuda::CpAsyncWait<0>();
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

// Key order of the forward's V^T and of the backward's K^T (QuantJob::perm16; forward v5: V^T;
// now K^T too, so that a backward thread's dS^ codes of keys 8n + 2t + b, n = 2m,
// 2m + 1, b = 0, 1 are four adjacent bytes: one 32-bit store): within each run of
// 16 keys, byte slot 4t + b holds key 2t + b (b < 2) or 8 + 2t + b - 2 (b >= 2). That is the
// order in which an s32 m16n8 accumulator fragment (lane t: columns 2t, 2t + 1 of n-blocks
// 2h, 2h + 1) lands in the s8 m16n8k32 A fragment (lane t: k bytes 4t..4t+3 of each 16-run), so
// the forward packs P~^ straight from its S registers into A fragments (no shared-memory round
// trip); the contraction runs over the same permutation on both sides, so P^ V^ is unchanged.
__host__ __device__ constexpr int FwdKeyOfSlot(int slot) {
  return ((slot >> 2) << 1) + (slot & 1) + (((slot >> 1) & 1) << 3);
}

// The eight bf16 values of a 16-byte chunk as floats (x[i] = value i): a bf16 is the high half
// of the float with the same bits, so each value is one shift or one mask of its word (the
// intrinsic's conversion issued ~1.6 instructions per value in the quantize launches).
__device__ __forceinline__ void Bf16x8ToFloat(const int4& raw, float (&x)[8]) {
  const uint32_t w[4] = {uint32_t(raw.x), uint32_t(raw.y), uint32_t(raw.z), uint32_t(raw.w)};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    x[2 * e] = __uint_as_float(w[e] << 16);
    x[2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
  }
}

// Query order of the backward's Q^T and dO^T (QuantJob::qperm, every Q^T / dO^T writer): within
// each run of 16 queries, byte slot 2 g + h holds query g + 8 h. A backward thread holds P and dS
// of query rows g and g + 8 (the m16n8 accumulator layout) for each of its keys, so their P^T /
// dS^T codes (A operands of dV = P^T dO^ and dK = dS^T Q^, contracted over queries) become
// adjacent bytes: one 16-bit store instead of two byte stores. Both operands of each product
// use the same order, so the int32 sums are unchanged.
__host__ __device__ constexpr int BwdQueryOfSlot(int slot) {
  return ((slot & 15) >> 1) + ((slot & 1) << 3) + (slot & ~15);
}
// WriteCodesT's byte permutes into that order: a staged 16-byte run holds queries 0..7 in words
// (x, y) and 8..15 in (z, w); output word 2j + h is __byte_perm of words (j of (x, y), j of
// (z, w)) with selector kQpermLo (h = 0) or kQpermHi (h = 1). QpermQueryOfSlot reads from the
// selectors the query each slot gets, and the static_assert ties them to BwdQueryOfSlot.
constexpr unsigned kQpermLo = 0x5140, kQpermHi = 0x7362;
constexpr int QpermQueryOfSlot(int slot) {
  const int w = slot >> 2;
  const int src = int(((w & 1) ? kQpermHi : kQpermLo) >> (4 * (slot & 3))) & 7;
  return (src & 3) + 4 * (w >> 1) + 8 * (src >> 2);
}
constexpr bool QpermIsBwdQueryOrder() {
  for (int s = 0; s < 16; ++s) {
    if (QpermQueryOfSlot(s) != BwdQueryOfSlot(s)) return false;
  }
  return true;
}
static_assert(QpermIsBwdQueryOrder(), "WriteCodesT's qperm selectors give BwdQueryOfSlot order");

// ----------------------------------------------------------------------------------------------
// Quantization kernels.
// ----------------------------------------------------------------------------------------------

// *armed == kDqArmed <=> dsrow and dqacc are zero: set by a v5+ forward after zeroing them, read
// by the backward's prep launch, cleared by the dQ conversion after the backward kernel added into
// them (clearing it in the backward kernel itself cost that kernel 3-4%: its code changed).
constexpr int kDqArmed = 0x5A6E4451;

#ifdef ABLATE_SAGE_TRACE
// Lab timeline (never in production builds): %globaltimer at a few points of every CTA of the
// warp-specialized forward (kind 0) and backward (kind 1), slot 7 = the SM; SageTraceSet. Kind 2:
// the backward's phase clocks (SAGE_PHASE).
constexpr int kTraceCtas = 1 << 16;
__device__ unsigned long long* g_sage_trace = nullptr;
__device__ __forceinline__ void TraceAt(int kind, int slot) {
  if (g_sage_trace == nullptr) return;
  const int cta = int(blockIdx.x + blockIdx.y * gridDim.x);
  if (cta >= kTraceCtas) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  unsigned long long* r = g_sage_trace + (size_t(kind) * kTraceCtas + cta) * 8;
  r[slot] = t;
  r[7] = sm;
}
#define SAGE_TRACE(kind, slot, cond) \
  do {                               \
    if (cond) TraceAt(kind, slot);   \
  } while (0)
// Phase clocks of the warp-specialized backward (kind 2): one consumer thread adds the SM cycles
// (clock; every thread reads it, the add and the mark are predicated) since its previous mark to
// slot k of a shared-memory array, whose slot 8 holds that mark; slot 7 counts the Q tiles;
// SAGE_PHASE_END copies slots 0-7 to the CTA's record. The array is at namespace scope, so that
// the tile bodies (BwdTile's member functions) mark phases too. (earlier the
// mark was a local register of the kernel, which the split out of the kernel left out of the
// tile bodies' reach: the trace build did not compile.)
__shared__ unsigned sage_ph[9];
__device__ __forceinline__ void TracePhaseStore(const unsigned* ph) {
  if (g_sage_trace == nullptr) return;
  const int cta = int(blockIdx.x + blockIdx.y * gridDim.x);
  if (cta >= kTraceCtas) return;
  unsigned long long* r = g_sage_trace + (size_t(2) * kTraceCtas + cta) * 8;
  for (int k = 0; k < 8; ++k) r[k] = ph[k];
}
#define SAGE_PHASE_START(cond)                                \
  do {                                                        \
    if (cond) {                                               \
      for (int k_ = 0; k_ < 8; ++k_) sage_ph[k_] = 0;         \
      sage_ph[8] = unsigned(clock());                         \
    }                                                         \
  } while (0)
#define SAGE_PHASE(k, cond)                                              \
  do { /* branch-free but for the predicated stores: no block split */   \
    const unsigned now_ = unsigned(clock());                             \
    if (cond) {                                                          \
      sage_ph[k] += (k) == 7 ? 1u : now_ - sage_ph[8];                   \
      sage_ph[8] = now_;                                                 \
    }                                                                    \
  } while (0)
#define SAGE_PHASE_END(cond)            \
  do {                                  \
    if (cond) TracePhaseStore(sage_ph); \
  } while (0)
#else
#define SAGE_TRACE(kind, slot, cond) \
  do {                               \
  } while (0)
#define SAGE_PHASE(k, cond) \
  do {                      \
  } while (0)
#define SAGE_PHASE_START(cond) \
  do {                         \
  } while (0)
#define SAGE_PHASE_END(cond) \
  do {                       \
  } while (0)
#endif

// The fp32 dQ accumulator dqacc, (BH, np, D) with np = the padded length (a multiple of 64), is
// stored in 4 KB blocks of 16 rows x 64 columns: rows 16 b .. 16 b + 15 of a head occupy the same
// 16 D floats as in row-major order, as D / 64 consecutive blocks (column chunk c at 1024 c). A
// backward warp's 16 rows x 64 columns of dQ are one block, in the order its adds want:
// - DqByRed (d64): eight 512-byte runs (run m: columns 8 m .. 8 m + 7 of the 16 rows) of 32
//   16-byte units; unit 4 r + t of run m (r < 8, t < 4) holds columns 8 m + 2 t, + 1 of row r,
//   then the same of row r + 8: the four values lane 4 r + t of the warp holds for those columns
//   in its m16n8 accumulator fragments, added by one 16-byte reduction per lane and run.
// - otherwise (d128): 64-float rows of sixteen 16-byte units; unit 2 m of a row holds the even
//   columns of the eight 8 m .. 8 m + 7 (8 m, + 2, + 4, + 6), unit 2 m + 1 the odd ones, and unit
//   u of row r sits at u ^ (r % 8). The warp stages its block in shared memory in this order by
//   stmatrix (an m16n8 accumulator's even columns are one 8 x 8 b16 matrix of 32-bit values, its
//   odd columns another; the swizzle keeps the stores free of bank conflicts) and adds it with one
//   bulk reduction.
// Float offset of (row, col) of head bh:
template <int D>
__host__ __device__ __forceinline__ int64_t DqAccIndex(int64_t bh, int np, int row, int col) {
  const int64_t blk = (bh * np + (row & ~15)) * D + (col >> 6) * 1024;
  if constexpr (DqByRed<D>()) {
    return blk + ((col & 63) >> 3) * 128 + ((row & 7) * 4 + ((col & 7) >> 1)) * 4 +
           ((row >> 3) & 1) * 2 + (col & 1);
  } else {
    const int unit = ((col & 63) >> 3) * 2 + (col & 1);
    return blk + (row & 15) * 64 + ((unit ^ (row & 7)) << 2) + ((col & 7) >> 1);
  }
}

// Zeroes dsrow for rows [r0, r0 + rows) of head bh (clipped to n) and dqacc for the same rows
// (clipped to the padded np: dqacc holds whole 16-row blocks) (all threads of the CTA).
template <int D>
__device__ __forceinline__ void ZeroDqRows(float* dsrow, float* dqacc, int64_t bh, int n, int np,
                                           int r0, int rows, int tid, int nthreads) {
  const int nr = min(rows, n - r0), npr = min(rows, np - r0);
  if (npr <= 0) return;
  float4* dq = reinterpret_cast<float4*>(dqacc + (bh * np + r0) * D);  // rows r0.. are contiguous
  const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int i = tid; i < npr * (D / 4); i += nthreads) __stcs(dq + i, z);  // streaming: no L2 claim
  for (int i = tid; i < nr; i += nthreads) __stcs(dsrow + bh * n + r0 + i, 0.0f);
}

// Partial K sums for the K mean: kpart[bh][part][d] = sum of k[bh][r][d] over the rows of part
// `part` (rows_per_part consecutive rows; double sums). grid: (parts, BH), block: D/2 x 16: thread
// (cp, lane16) sums columns 2cp, 2cp+1 over rows lane16, lane16 + 16, ... of the part; the 16 are
// combined in shared memory. QuantizeKernel's K tiles add the parts up (kbar = sum / N). Parts
// rather than one block per head: BH blocks alone filled a third of the SMs.
constexpr int kKMeanLanes = 16;
constexpr int kKMeanMaxParts = 16;
template <int D>
__global__ void __launch_bounds__(D / 2 * kKMeanLanes) KMeanPartKernel(
    const __nv_bfloat16* __restrict__ k, int n, int rows_per_part, double* __restrict__ kpart) {
  __shared__ double part[kKMeanLanes][D];
  const int pi = blockIdx.x, bh = blockIdx.y, cp = threadIdx.x % (D / 2), lr = threadIdx.x / (D / 2);
  const int rend = min(n, (pi + 1) * rows_per_part);
  const __nv_bfloat16* kb = k + int64_t(bh) * n * D + 2 * cp;
  double s0 = 0.0, s1 = 0.0;
#pragma unroll 4
  for (int r = pi * rows_per_part + lr; r < rend; r += kKMeanLanes) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(kb + int64_t(r) * D));
    s0 += v.x;
    s1 += v.y;
  }
  part[lr][2 * cp] = s0;
  part[lr][2 * cp + 1] = s1;
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    double s = 0.0;
#pragma unroll
    for (int q = 0; q < kKMeanLanes; ++q) s += part[q][d];
    kpart[(int64_t(bh) * gridDim.x + pi) * D + d] = s;
  }
}

// The largest |value| of a thread's kPer rows of 8 values, then of its warp (all lanes get it).
template <int kPer>
__device__ __forceinline__ float WarpAbsMax(const float (&v)[kPer][8]) {
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
#pragma unroll
    for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(v[k][i]));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

// The codes of a thread's kPer rows of 8 values (4 per word, value 4 w + b in byte b of word w)
// by QuantBitsRn, three byte permutes per word (QuantizeKernel and the fused Q quantization of
// the v6+ forwards; earlier QuantizeS8Inv per value and shifts: the same codes).
template <int kPer>
__device__ __forceinline__ void QuantizeRows8(const float (&v)[kPer][8], float inv,
                                              uint32_t (&code)[kPer][2]) {
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const float* x = &v[k][4 * w];
      code[k][w] = PackLowBytes(QuantBitsRn(x[0], inv), QuantBitsRn(x[1], inv),
                                QuantBitsRn(x[2], inv), QuantBitsRn(x[3], inv));
    }
  }
}

// Transposed codes of a 64-row tile staged in shared memory as [D][64] bytes, the four 16-byte
// units of column c XOR-swizzled by (c / 8) % 4 (4-way store conflicts at most). Byte offset of
// unit `unit` of column c:
__device__ __forceinline__ int CodesTUnit(int c, int unit) {
  return c * kTile + ((unit ^ ((c >> 3) & 3)) << 4);
}
// Stages the codes of a thread's kPer consecutive slots sbase .. sbase + kPer - 1 (its 16-byte
// column chunk c8 = columns 8 c8 .. 8 c8 + 7): per column one packed 2-, 4- or 8-byte store of
// byte c % 4 of each slot's word, gathered by byte permutes. The eight columns share the chunk's
// swizzle ((c / 8) % 4 = c8 % 4), so their stores are one address plus 64-byte steps.
template <int kPer>
__device__ __forceinline__ void StageCodesT(int8_t* s_t, const uint32_t (&code)[kPer][2], int c8,
                                            int sbase) {
  static_assert(kPer == 2 || kPer == 4 || kPer == 8, "slots per thread");
  int8_t* dst0 = s_t + CodesTUnit(c8 * 8, sbase >> 4) + (sbase & 15);
  // byte j of a (low byte) and of b (byte 1): selector j | (4 + j) << 4
  const auto pair = [](uint32_t a, uint32_t b, int j) {
    return __byte_perm(a, b, j | ((4 + j) << 4));
  };
  const auto quad = [&](int k0, int w, int j) {  // bytes j of slots k0 .. k0 + 3
    return __byte_perm(pair(code[k0][w], code[k0 + 1][w], j),
                       pair(code[k0 + 2][w], code[k0 + 3][w], j), 0x5410);
  };
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int j = i & 3, w = i >> 2;
    int8_t* dst = dst0 + i * kTile;
    if constexpr (kPer == 8) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(quad(0, w, j), quad(4, w, j));
    } else if constexpr (kPer == 4) {
      *reinterpret_cast<uint32_t*>(dst) = quad(0, w, j);
    } else {
      *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(pair(code[0][w], code[1][w], j));
    }
  }
}
// Copies the staged [D][64] codes to xht (D rows of stride np bytes) as 16-byte runs (threads
// tid of nthreads, after a barrier over the staging stores). np by reference to the kernel
// parameter: read in the loop from the parameter bank, not held in a register (by value,
// the d64 quantize kernel at its 40-register cap spilled 12 bytes).
// qperm: each 16-byte run written in BwdQueryOfSlot order (byte 2 g + h <- staged byte g + 8 h:
// four byte permutes per run).
template <int D>
__device__ __forceinline__ void WriteCodesT(const int8_t* s_t, int8_t* xht, const int& np,
                                            int tid, int nthreads, bool qperm) {
  for (int idx = tid; idx < D * (kTile / 16); idx += nthreads) {
    const int c = idx >> 2, unit = idx & 3;
    int4 x = *reinterpret_cast<const int4*>(s_t + CodesTUnit(c, unit));
    if (qperm) {  // words (x, y) hold queries 0..7, (z, w) 8..15
      x = make_int4(__byte_perm(x.x, x.z, kQpermLo), __byte_perm(x.x, x.z, kQpermHi),
                    __byte_perm(x.y, x.w, kQpermLo), __byte_perm(x.y, x.w, kQpermHi));
    }
    *reinterpret_cast<int4*>(xht + int64_t(c) * np + 16 * unit) = x;
  }
}

// One tensor's tiles for QuantizeKernel.
struct QuantJob {
  const __nv_bfloat16* x;  // (BH, N, D)
  int8_t* xh;              // (BH, Np, D) row-major codes, or nullptr when no kernel reads them
  int8_t* xht;             // (BH, D, Np) transposed codes
  float* scale;            // (BH, tiles)
  int mode;                // 0: X; 1: X - kbar (the K mean, from kpart); 2: X - the tile's mean
  bool perm16;             // xht in FwdKeyOfSlot key order: V^T (forward), K^T (backward's dQ)
  bool qperm;              // xht in the backward's query order (BwdQueryOfSlot): Q, dO
};
struct QuantParams {
  QuantJob job[3];  // blockIdx.z picks one
  const double* kpart;  // mode 1: (BH, kparts, D) partial sums (KMeanPartKernel)
  int kparts;
  float* kbar;  // mode 1: (BH, D) written by each head's tile 0
  float* mu;    // mode 2: (BH, tiles, D)
  // Backward prep (kPrep, job 0 = dO): drow = rowsum(dO o O); dsrow and dqacc zeroed unless
  // *armed == kDqArmed (the forward zeroed them).
  const __nv_bfloat16* o;
  float *drow, *dsrow, *dqacc;
  const int* armed;
  int n, np;
};

// Minimum blocks per SM of QuantizeKernel (launch bounds): the d64 forward launch 6 (<= 40
// registers, 6 blocks per SM instead of 5 at 48: 46.0 -> 43.6 us at B16 H12 N1024 under ncu),
// the d64 prep launch 6 (<= 40 registers; earlier it held its values in registers at
// 4 blocks (<= 64: at 40 that form spilled and measured no better), since then it stages dO in
// shared memory like the two-tile launch: 25.7 -> 23.7 us at B16 H12 N1024 in situ); the
// two-tile launch 2 (<= 64 registers; one 512-thread block per SM at its 116 registers left
// the loads of one block at a time in flight, 80.6 vs 65.3 us at B4 H16 N2048
// d128 under ncu, then with 88 bytes of spills; 3 now, when the tile was staged in
// shared memory and its values converted twice, <= 40 registers: 41.6 -> 37.8 us at B4 H16 N2048
// d128 in situ, and at 2 blocks of 64 registers ncu put it at half occupancy, neither DRAM- nor
// issue-bound); else 1.
template <int D, bool kPrep, int kG>
constexpr int QuantizeMinBlocks() {
  if constexpr (kG == 2) return 3;
  return D == 64 ? 6 : 1;
}

// Quantizes one 64-row tile of a job's tensor (grid: tiles, BH, jobs; block: 256) with one scale
// per tile (GroupScale of the tile's max |X - shift|; padded rows are 0): writes the row-major
// codes (when xh is set), the transposed codes and the scale; mode 2 also the tile mean (mu).
// Register-resident: thread (c8, rg) holds 16-byte column chunk c8 (8 values) of kPer rows, all
// loads issued up front; the transpose goes through 64 x D bytes of shared memory (16-byte
// chunks XOR-swizzled by column: 4-way store conflicts at most), read back as 16-byte runs.
// The thread's rows are the kPer consecutive slots sbase.. of its transposed run, so their codes
// for one column pack into one 32-bit (D 128) / 16-bit (D 64) store; with perm16, slot s of a
// 16-key run holds key FwdKeyOfSlot(s).
// kPrep (the backward's dO): also drow[row] = sum_d dO O (fp32; the kC8 threads of a row are
// adjacent lanes, combined by shuffles; at D = 64 dO is staged in shared memory as with kG = 2),
// dsrow[row] = 0 and the fp32 dQ accumulator rows zeroed (the backward kernel adds into both)
// unless the forward armed them.
// kG = 2 (K / V quantization groups of 128 keys, SageCudaOptions::kv_group; modes 0 and 1):
// 512 threads, each half quantizes one of the group's two tiles as above with the group's scale
// (the max over both halves); a second tile past the padded length writes nothing. Scales are
// stored per group, with the row stride of the per-tile ones (BH, Np / 64). Its values are not
// register-resident: the tile is copied to shared memory by cp.async and each thread converts
// its chunks twice (for the maximum, then for the codes), so it fits 40 registers, 3 blocks per SM.
template <int D, bool kPrep, int kG = 1>
__global__ void __launch_bounds__(256 * kG, (QuantizeMinBlocks<D, kPrep, kG>()))
    QuantizeKernel(QuantParams p) {
  static_assert(kG == 1 || (kG == 2 && !kPrep), "two-tile groups for the K / V jobs only");
  constexpr int kC8 = D / 8;             // 16-byte chunks of a bf16 row
  constexpr int kGroups = 256 / kC8;     // row groups (16 / 32)
  constexpr int kPer = kTile / kGroups;  // rows per thread (4 / 2)
  static_assert(kPer == 2 || kPer == 4, "row groups");
  // kG = 2 (modes 0 and 1) and the d64 prep launch (dO, mode 0): the bf16 tile goes to shared
  // memory by cp.async (each thread reads back only the chunks it copied), and the values are
  // converted twice, for the maximum and for the codes, so that no thread holds its 32 values
  // across the block's reduction (the transposed codes then reuse the tile's buffer). The prep's
  // O chunks (for D_i) come straight to registers. (Measured, ncu in situ: the d64
  // prep 25.7 -> 23.7 us at B16 H12 N1024, 40 registers and 6 blocks per SM instead of 64 and 4;
  // the d128 one staged the same way 28.8 -> 30.9 us at B4 H16 N2048, so it stays
  // register-resident.)
  constexpr bool kStageRaw = kG == 2 || (kPrep && D == 64);
  // The staged maximum on packed bf16 pairs (below): the d64 prep's (its job is dO, mode 0); in
  // the two-tile K / V launch it (and, for K, the column max / min form of max |x - shift|)
  // measured 37.2 against 36.0 us, so that one takes the per-value loop.
  constexpr bool kPackedMax = kStageRaw && kPrep;
  // Each half's buffer: the staged bf16 tile (kStageRaw), then its transposed codes; otherwise
  // mode 2's column sums, then the transposed codes.
  constexpr int kPartBytes = kGroups * D * 8, kTBytes = D * kTile, kRawBytes = kTile * D * 2;
  constexpr int kBufBytes =
      kStageRaw ? kRawBytes : (kPartBytes > kTBytes ? kPartBytes : kTBytes);
  static_assert(kTBytes <= kBufBytes, "the transposed codes fit the buffer");
  __shared__ __align__(16) char s_bufs[kG][kBufBytes];
  __shared__ __align__(16) float s_shift[D];
  __shared__ float s_red[8 * kG];
  const int half = kG == 1 ? 0 : int(threadIdx.x) / 256;
  // unsigned, so that the divisions by kC8 below are shifts (signed: 8 more bytes of spills)
  const unsigned tid = kG == 1 ? threadIdx.x : threadIdx.x % 256;
  double* s_part = reinterpret_cast<double*>(s_bufs[half]);  // mode 2: [kGroups][D] column sums
  int8_t* s_t = reinterpret_cast<int8_t*>(s_bufs[half]);     // [D][64] transposed codes
  cuda::GridDepLaunchDependents();  // the kernel after it (pdl) waits for its completion
  const QuantJob& J = p.job[blockIdx.z];
  const int tiles = kG == 1 ? int(gridDim.x) : p.np / kTile;  // the same value
  const int ti = int(blockIdx.x) * kG + half, bh = blockIdx.y;
  const bool tile_in = kG == 1 || ti < tiles;  // kG = 2: the second tile may be past Np
  const int r0 = ti * kTile, nr = min(kTile, p.n - r0);
  const int c8 = tid % kC8, rg = tid / kC8, sbase = rg * kPer;
  int rows[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    rows[k] = J.perm16 ? (sbase & ~15) + FwdKeyOfSlot((sbase & 15) + k) : sbase + k;
  }
  const int64_t xrow0 = int64_t(bh) * p.n + r0;  // (bh, token r0) row of the (BH, N, D) tensors
  __nv_bfloat16* const raw = reinterpret_cast<__nv_bfloat16*>(s_bufs[half]);  // kStageRaw
  if constexpr (kStageRaw) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {  // rows past N: zero-filled
      const bool ok = rows[k] < nr;
      cuda::CpAsync16(cuda::SmemAddr(raw + rows[k] * D + c8 * 8),
                      ok ? static_cast<const void*>(J.x + (xrow0 + rows[k]) * D + c8 * 8) : J.x,
                      ok);
    }
    cuda::CpAsyncCommit();
  }
  // This thread's chunk of row k of the staged tile (kStageRaw).
  const auto staged_chunk = [&](int k) {
    return *reinterpret_cast<const int4*>(raw + rows[k] * D + c8 * 8);
  };
  float v[kStageRaw ? 1 : kPer][8];
  float dot[kPer];
  // D_i's terms of row k: the dO values x and O's chunk (the same order of operations staged or
  // not).
  const auto row_dot = [](const float (&x)[8], const int4& oc) {
    float o[8];
    Bf16x8ToFloat(oc, o);
    float d = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) d += x[2 * e] * o[2 * e] + x[2 * e + 1] * o[2 * e + 1];
    return d;
  };
  constexpr bool kStagedPrep = kPrep && kStageRaw;
  int4 oraw[kStagedPrep ? kPer : 1];  // the staged prep: O's chunks of its rows (zero past N)
  if constexpr (kStagedPrep) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      oraw[k] = rows[k] < nr ? *reinterpret_cast<const int4*>(p.o + (xrow0 + rows[k]) * D + c8 * 8)
                             : make_int4(0, 0, 0, 0);
    }
  }
#pragma unroll
  for (int k = 0; k < (kStageRaw ? 0 : kPer); ++k) {
    int4 raw = make_int4(0, 0, 0, 0), oc = make_int4(0, 0, 0, 0);
    if (rows[k] < nr) {
      raw = *reinterpret_cast<const int4*>(J.x + (xrow0 + rows[k]) * D + c8 * 8);
      if constexpr (kPrep) {
        oc = *reinterpret_cast<const int4*>(p.o + (xrow0 + rows[k]) * D + c8 * 8);
      }
    }
    Bf16x8ToFloat(raw, v[k]);
    if constexpr (kPrep) dot[k] = row_dot(v[k], oc);
  }
  if constexpr (kPrep) {
    if constexpr (kStagedPrep) {
      cuda::CpAsyncWait<0>();  // this thread's own dO chunks (read without a barrier)
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        float x[8];
        Bf16x8ToFloat(staged_chunk(k), x);
        dot[k] = row_dot(x, oraw[k]);
      }
    }
    const bool zero = *p.armed != kDqArmed;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
#pragma unroll
      for (int o = kC8 / 2; o > 0; o >>= 1) dot[k] += __shfl_xor_sync(0xffffffffu, dot[k], o);
      if (rows[k] < nr && c8 == 0) p.drow[xrow0 + rows[k]] = dot[k];
    }
    if (zero) ZeroDqRows<D>(p.dsrow, p.dqacc, bh, p.n, p.np, r0, kTile, threadIdx.x, blockDim.x);
  }
  float sh[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // modes 1, 2: the shift
  if (J.mode != 0) {
    if (J.mode == 1) {
      if (threadIdx.x < D) {
        double s = 0.0;
        for (int q = 0; q < p.kparts; ++q) s += p.kpart[(int64_t(bh) * p.kparts + q) * D + threadIdx.x];
        const float kb = static_cast<float>(s / p.n);
        s_shift[threadIdx.x] = kb;
        if (ti == 0) p.kbar[int64_t(bh) * D + threadIdx.x] = kb;
      }
    } else if constexpr (!kStageRaw) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        double cs = 0.0;
#pragma unroll
        for (int k = 0; k < kPer; ++k) cs += rows[k] < nr ? double(v[k][i]) : 0.0;
        s_part[rg * D + c8 * 8 + i] = cs;
      }
      __syncthreads();
      if (threadIdx.x < D) {
        double s = 0.0;
        for (int q = 0; q < kGroups; ++q) s += s_part[q * D + threadIdx.x];
        const float mu = static_cast<float>(s / nr);
        s_shift[threadIdx.x] = mu;
        p.mu[(int64_t(bh) * tiles + ti) * D + threadIdx.x] = mu;
      }
    }
    __syncthreads();  // s_shift complete; s_part (aliasing s_t) read
    const float4 sh0 = reinterpret_cast<const float4*>(s_shift)[2 * c8];
    const float4 sh1 = reinterpret_cast<const float4*>(s_shift)[2 * c8 + 1];
    sh[0] = sh0.x, sh[1] = sh0.y, sh[2] = sh0.z, sh[3] = sh0.w;
    sh[4] = sh1.x, sh[5] = sh1.y, sh[6] = sh1.z, sh[7] = sh1.w;
    if constexpr (!kStageRaw) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[k][i] = rows[k] < nr ? v[k][i] - sh[i] : 0.0f;
      }
    }
  }
  // kStageRaw: row k's values (minus the shift) from this thread's chunk of the staged tile.
  // Rows past N are zero-filled, so x - shift there times 0 gives their 0: one FMA per value
  // (fmaf(-sh, 1, x) is the subtraction's rounding), no select.
  const auto staged_row = [&](int k, float (&x)[8]) {
    Bf16x8ToFloat(staged_chunk(k), x);
    if (J.mode != 0) {
      const float okf = rows[k] < nr ? 1.0f : 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = fmaf(-sh[i], okf, x[i]);
    }
  };
  float m = 0.0f;
  if constexpr (kStageRaw) {
    if constexpr (!kStagedPrep) cuda::CpAsyncWait<0>();  // this thread's own chunks (no barrier)
    // kPackedMax (the prep's dO, mode 0): the largest |x| on the packed bf16 pairs, two values
    // per instruction (exact: the floats are the bf16 values; rows past N are zero-filled and
    // count as zeros).
    if constexpr (kPackedMax) {
      const auto bf2 = [](uint32_t w) { return *reinterpret_cast<const __nv_bfloat162*>(&w); };
      alignas(16) __nv_bfloat162 a2[4];
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int4 c = staged_chunk(k);
        const uint32_t w[4] = {uint32_t(c.x), uint32_t(c.y), uint32_t(c.z), uint32_t(c.w)};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          a2[e] = k == 0 ? __habs2(bf2(w[e])) : __hmax2(a2[e], __habs2(bf2(w[e])));
        }
      }
      float x[8];
      Bf16x8ToFloat(*reinterpret_cast<const int4*>(a2), x);
#pragma unroll
      for (int i = 0; i < 8; ++i) m = fmaxf(m, x[i]);
    } else {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        float x[8];
        staged_row(k, x);
#pragma unroll
        for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(x[i]));
      }
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  } else {
    m = WarpAbsMax<kPer>(v);
  }
  if ((threadIdx.x & 31) == 0) s_red[threadIdx.x >> 5] = m;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < 8 * kG; ++w) m = fmaxf(m, s_red[w]);
  const float s = GroupScale(m), inv = 1.0f / s;
  if (threadIdx.x == 0) J.scale[int64_t(bh) * tiles + blockIdx.x] = s;
  uint32_t code[kPer][2];
  if constexpr (kStageRaw) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      float x[1][8];
      staged_row(k, x[0]);
      uint32_t c[1][2];
      QuantizeRows8<1>(x, inv, c);
      code[k][0] = c[0][0];
      code[k][1] = c[0][1];
    }
  } else {
    QuantizeRows8<kPer>(v, inv, code);
  }
  const int64_t hrow0 = int64_t(bh) * p.np + r0;  // (bh, token r0) row of the padded codes
  if (J.xh != nullptr && tile_in) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      *reinterpret_cast<uint2*>(J.xh + (hrow0 + rows[k]) * D + c8 * 8) = make_uint2(code[k][0], code[k][1]);
    }
  }
  if constexpr (kStageRaw) __syncthreads();  // every thread's reads of the tile are done
  StageCodesT<kPer>(s_t, code, c8, sbase);
  __syncthreads();
  if (tile_in) WriteCodesT<D>(s_t, J.xht + int64_t(bh) * D * p.np + r0, p.np, tid, 256, J.qperm);
}

// ----------------------------------------------------------------------------------------------
// Forward.
// ----------------------------------------------------------------------------------------------

// The scale (sk or sv) of K tile j's K / V group: per-group scales with the per-tile row stride
// ntk, one group per 64 << kv_shift keys (FwdParams, BwdParams).
template <typename P>
__device__ __forceinline__ float KvGroupScale(const float* scale, const P& p, int64_t bh, int j) {
  return scale[bh * p.ntk + (j >> p.kv_shift)];
}
// kv_shift of a K / V group of kvg keys (64 or 128).
constexpr int KvShift(int kvg) { return kvg == 2 * kTile ? 1 : 0; }

struct FwdParams {
  // kTmaF: the K^ and V^T tensor maps (GmmaTileTensorMap) of the K tiles' stages; the kernel
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
  // The v5+ forwards zero the backward's accumulators for their rows (dsrow, dqacc: (BH, N) and
  // (BH, N, D)) and set *armed = kDqArmed, so the backward's memory-bound prep launch skips that
  // pass. Measured (ncu, H200): the forward kernel +5.4 us (B16 H12 N1024 d64 causal), +8.3 us
  // (B4 H16 N2048 d128), +16 us (B2 H16 N8192 d128 causal) with the stores after its first
  // copies were issued (at its end: +6.0 / +12.7 / +23.6), the prep launch -11 / -13.9 us (first
  // two). Since the launch is a programmatic dependent of the quantize launch, the stores come
  // before its GridDepWait (they overlap the quantize launch's tail): forward launcher -2.5 us at
  // the first shape (event-timed), the kernel alone +0.4 / +4.4 us under ncu (serialized, no
  // overlap). The v3 forward (SageForwardKernel) ignores these fields (the backward then zeroes).
  float *dsrow, *dqacc;
  int* armed;
  // The v6+ forwards (kWg) without Q-smoothing quantize Q themselves (FusedQLoad,
  // FusedQQuantize): from q into their shared Q^ tiles, and into qh, qht and sq for the backward
  // (the quantize launch then has no Q job: its Q read and code writes were a third of its bytes).
  const __nv_bfloat16* q;
  int8_t* qht;
  int n, np, ntq, ntk;
  int kv_shift;  // K / V scales per group of 64 << kv_shift keys: sk[bh * ntk + (j >> kv_shift)]
  int lpt_heads;  // kLptF: heads per longest-first group (LptBlock)
  bool smooth_q;
  float tau;
};

// Fused Q quantization of the v6+ forwards without Q-smoothing: the 128 threads `tid` of a Q
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
  SAGE_TRACE(0, 3, threadIdx.x == 128);  // (the warp-specialized forward: Q rows arrived)
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

// Forward v5 (kernels/bench/README.md, Variants): 128 query rows per CTA (kG3: 192) = two (three)
// 64-row quantization groups (Q^ scales, mu and the emulator's Bq stay 64), one m16 row block per
// warp (8 warps; v5b's two per warp were removed earlier, their loops earlier), K^ and
// V^T double-buffered by cp.async, fragments by ldmatrix
// (v5a, lab variant 8; the wgmma kernels below keep its structure). Softmax in the log2 domain (the
// logits scaled by log2 e; LSE converted back): P~^ = rne(127 exp2(x - rowmax)) (= P~ / s_P of the
// emulator: s_P = exp(rowmax - m_new) / 127 cancels m_new), made by one FMA into the mantissa of
// 1.5 * 2^23 and packed from the S registers straight into the s8 A fragments of P^ V^ (the V^T key
// order is permuted to match: FwdKeyOfSlot); l += exp(rowmax - m_new) * rowsum; O += s_P s_V (P^
// V^). Tiles with no masked entry for the warp (interior) skip the mask arithmetic; causal tiles
// past a warp's last row are skipped by that warp; causal CTAs run heaviest first.

// kWg (v6 forward): the same regions as GmmaTiles (wgmma.cuh): Q^ as kGroups [64][D]
// int8 tiles (one per warpgroup), each stage a [64][D] K^ tile and a [D][64] V^T tile, all 1024-byte
// aligned in a buffer whose base the kernel aligns (kBytes has the slack).
// kWsF (v7 forward, with kWg): warp-specialized, a producer warpgroup (128 threads) in front of
// the kThreadsV5 consumer threads, kStages = 3 K^ / V^T stages filled by it (the K tile's two
// scales at kScal, mbarriers full / empty at kBar).
// Whether a forward quantizes Q itself (FusedQLoad / FusedQQuantize; the quantize launch then
// has no Q job): the wgmma forwards (variants 10-24) without Q-smoothing. (D = 64 since session
// 13: with the leaner quantize launch, in situ at B16 H12 N1024 causal the launch 38.6 -> 27.1 us
// against the forward kernel 106.8 -> 116.3 us, forward 1.019-1.028x, backward unchanged; in
// an earlier run: before it, neutral.)
constexpr bool FwdFusesQ(bool wgmma, bool smooth_q) { return wgmma && !smooth_q; }

// kK128 (forward 16, 20-22): 4 stages, the consumers step two K tiles at a time.
template <int D, bool kWg = false, bool kWsF = false, bool kK128 = false, bool kG3 = false>
struct FwdV5Config {
  // kG3 (variants 25-28): three consumer warpgroups of 64 rows (192 rows per CTA) at 160
  // registers each instead of two at 240: more warps per scheduler for the softmax's latency.
  static_assert(!kG3 || kK128, "three consumer groups: the 128-key warp-specialized forward");
  static constexpr int kGroups = kG3 ? 3 : 2;  // 64-row Q groups per CTA
  static constexpr int kRows = kGroups * kTile;
  // (A function: a constant here would be a never-referenced member in the configurations
  // without kWsF, one compiler warning each.)
  static constexpr int ConsumerRegs() { return WsConsumerRegs(kGroups * 128); }
  static_assert(!kWsF || kWg, "the warp-specialized forward builds on the wgmma one");
  static_assert(!kK128 || kWsF, "the 128-key forward builds on the warp-specialized one");
  using TileI8 = cuda::wgmma::GmmaTile<kTile, D>;  // Q^ group, K^
  using TileT = cuda::wgmma::GmmaTile<D, kTile>;   // V^T [D][64 keys]
  static constexpr int kWarps = kRows / 16;  // one m16 row block each
  static constexpr int kThreadsV5 = kWarps * 32;  // the threads of the attention math
  static constexpr int kThreadsLaunch = kThreadsV5 + (kWsF ? 128 : 0);
  static constexpr int kStages = kK128 ? 4 : kWsF ? 3 : 2;
  static constexpr int kI8D = D + 16;
  static constexpr int kQh = 0;                                 // Q^ [kRows][kI8D]
  static constexpr int kStage0 = kQh + (kWg ? kGroups * TileI8::kBytes : kRows * kI8D);
  static constexpr int kVh = kWg ? TileI8::kBytes : kTile * kI8D;  // V^T offset inside a stage
  static constexpr int kStage = kWg ? TileI8::kBytes + TileT::kBytes : kTile * kI8D + D * kI8T;
  // bias [kGroups][64], mu [kGroups][D], kbar [D]
  static constexpr int kF32 = kStage0 + kStages * kStage;
  static constexpr int kScal = kF32 + (kGroups * kTile + (kGroups + 1) * D) * 4;  // kWsF: [kStages][2]
  // kWsF: full[], empty[] (without kWsF the kStages mbarrier words that variants 18 / 19 used
  // stay reserved: the layout, and so the kernels' code, of 78f17c5).
  static constexpr int kBar = kScal + (kWsF ? kStages * 8 : 0);
  // FwdFusesQ (without Q-smoothing): the fused Q quantization's staging, [kGroups][D][64]
  // transposed codes + [kGroups][4] float maxima.
  static constexpr bool kQStaging = FwdFusesQ(kWg, false);
  static constexpr int kQt = (kBar + (kWsF ? 2 * kStages : kStages) * 8 + 15) / 16 * 16;
  static constexpr int kQRed = kQt + (kQStaging ? kGroups * D * kTile : 0);
  static constexpr int kBytes = kQRed + (kQStaging ? 4 * kGroups * 4 : 0) + (kWg ? 1024 : 0);
  static constexpr int kMinBlocks = kWsF ? 1 : (D == 64 ? 2 : 1);
  static_assert(kBytes * kMinBlocks <= 227 * 1024, "forward v5 shared memory over the sm_90 limit");
  static_assert(kStage0 % 16 == 0 && kVh % 16 == 0 && kStage % 16 == 0 && kF32 % 16 == 0,
                "16-byte aligned forward v5 regions");
};

// Interior tiles without Q-smoothing take the row max over the raw int32 sums and scale only the
// differences (one FMA on the mantissa form of 1.5 * 2^23 + S - rowmax: v5c's kFastS, now in every
// variant); the P^ V^ sums are folded into O by two FMAs on the same mantissa form.
// kWg (v6 forward): S = Q^ K^T by wgmma from the GmmaTiles (one warpgroup per 64-row Q
// group) and P^ V^ by wgmma with P^ from registers (MmaS8RS: the packed A fragments as they are;
// V^T keeps the permuted key order). No warp skips a tile and the mask test is per CTA, so every
// branch around a wgmma is uniform by construction (ptxas serializes wgmmas under branches it
// cannot prove uniform: a per-warpgroup version, lab variant 9, measured 3-5% slower); the tiles
// a warpgroup could skip are computed fully masked (P = 0, alpha = 1: no change).
// kLptF (lab variant 11, with kWg): grid (BH, row blocks), so causal CTAs run longest-first
// across the heads of each group (LptBlock) rather than head by head.
// kWsF (v7 forward, variant 12 = 10 + it): warpgroup 0 is a producer that fills the
// kStages-deep K^ / V^T ring (cp.async, its copies waited for, then mbarrier full[s]; TMA with
// kTmaF) with each K tile's two scales; warpgroups 1 and 2 compute as in 10 / 11 without any CTA
// barrier in the loop (each waits for full[s] and releases empty[s] after its P^ V^ wgmmas);
// registers move from the producer to them (setmaxnreg 24 / 240).
template <int D, bool kCausal, bool kSmoothQ, bool kWg = false, bool kLptF = false,
          bool kWsF = false, bool kPipeF = false, bool kK128 = false, bool kTmaF = false,
          bool kPingF = false, bool kLazyF = false, bool kG3 = false>
__global__ void __launch_bounds__(FwdV5Config<D, kWg, kWsF, kK128, kG3>::kThreadsLaunch,
                                  FwdV5Config<D, kWg, kWsF, kK128, kG3>::kMinBlocks)
    SageForwardKernelV5(const __grid_constant__ FwdParams p) {
  static_assert(!kPipeF || kWsF, "the pipelined forward loop builds on the warp-specialized one");
  static_assert(!kTmaF || kWsF, "the TMA copies fill the warp-specialized forwards' stages");
  static_assert(!(kPipeF && kK128), "one or the other");
  static_assert(!kPingF || kK128, "the ping-pong issue order is the 128-key loop's");
  static_assert(!kLazyF || kWg, "the lazy rescale is in the wgmma forwards' fold");
  static_assert(!(kG3 && kPingF), "the ping-pong turns are the two groups'");
  using C = FwdV5Config<D, kWg, kWsF, kK128, kG3>;
  constexpr int kRows = C::kRows, kGroups = C::kGroups;
  using cuda::FastExp2;
  using cuda::kLog2e;
  namespace wg = cuda::wgmma;
  constexpr int kNtO = D / 8;
  extern __shared__ __align__(16) char smem_raw[];
  char* const smem =
      kWg ? smem_raw + ((1024 - (cuda::SmemAddr(smem_raw) & 1023)) & 1023) : smem_raw;
  const uint32_t dlo = kWg ? wg::DescLo(cuda::SmemAddr(smem)) : 0u;
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
  // Rows of this warp in the sequence (kWg: of its warpgroup, which shares one Q group).
  const bool wvalid = (kWg ? r0 + (warp / 4) * kTile : wr0) < p.n;
  const int wlast = min(wr0 + 16, p.n) - 1;

  // Launched as a dependent of the quantize launch (pdl): the work that does not depend on it
  // first (it overlaps its tail): the stores of the backward's zeroed accumulators and (kFuseQ)
  // the loads of the Q rows that the consumers quantize (each 128-thread group its 64 rows,
  // after issuing the copies of K tile 0 so that the two latencies overlap); then wait for the
  // quantize launch's K and V codes. kWsF: the producer starts its copies first thing, the
  // consumers quantize Q meanwhile, and the producer zeroes the accumulators after its first
  // kStages copies (below): at the CTA's start those stores delayed the Q loads, the CTA's
  // critical path (lab timeline, B4 H16 N2048 d128: 4.1 us from entry to Q^ in place).
  SAGE_TRACE(0, 0, kWsF && threadIdx.x == 128);
  if (rb == 0 && bh == 0 && threadIdx.x == 0) *p.armed = kDqArmed;
  constexpr bool kFuseQ = FwdFusesQ(kWg, kSmoothQ);
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
    if constexpr (kWg) {
      wg::LoadGmmaTileAsync<typename C::TileI8, kT, false>(st, p.kh + bh * npd + int64_t(c) * D,
                                                           0, kTile, tid);
      wg::LoadGmmaTileAsync<typename C::TileT, kT, false>(st + C::kVh, p.vht + bh * npd + c, 0, D,
                                                          tid, p.np);
    } else {
      CopyRows(st, C::kI8D, p.kh + bh * npd + int64_t(c) * D, D, kTile, D);
      CopyRows(st + C::kVh, kI8T, p.vht + bh * npd + c, p.np, D, kTile);
    }
  };
  // kTmaF: one thread's TMA copies of the K^ tile / V^T columns starting at token c into stage
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
      ring.Init(128, C::kThreadsV5);
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
    SAGE_TRACE(0, 2, threadIdx.x == 128);
    if constexpr (kFuseQ) {
      if (fq_mine) {
        FusedQLoad<D>(p, bh, r0 + fq_group * kTile, ctid & 127, fq_rows);
        fused_q_quantize();
      }
    }
    SAGE_TRACE(0, 1, threadIdx.x == 128);
    cuda::GridDepWait();  // without kFuseQ: Q^ (and mu, kbar) are the quantize launch's
  }

  // Q^ rows present in the padded workspace (64 or 128) + stage 0 <- K tile 0: one group
  // (kWsF: Q^ only; the consumers' threads).
  if constexpr (kFuseQ) {
    // Q^ is in place (above)
  } else if constexpr (kWg) {
    using T8 = typename C::TileI8;
    for (int gq = 0; gq < kGroups && r0 + gq * kTile < p.np; ++gq) {
      wg::LoadGmmaTileAsync<T8, C::kThreadsV5, false>(
          s_qh + gq * T8::kBytes, p.qh + bh * npd + int64_t(r0 + gq * kTile) * D, 0, kTile,
          ctid);
    }
  } else {
    CopyRows(s_qh, C::kI8D, p.qh + bh * npd + int64_t(r0) * D, D, min(kRows, p.np - r0), D);
  }
  if (kSmoothQ) {
    for (int idx = ctid; idx < kGroups * D; idx += C::kThreadsV5) {
      const int qt = kGroups * bx + idx / D;
      s_mu[idx] = qt < p.ntq ? p.mu[(int64_t(bh) * p.ntq + qt) * D + idx % D] : 0.0f;
    }
    for (int d = ctid; d < D; d += C::kThreadsV5) s_kbar[d] = p.kbar[int64_t(bh) * D + d];
  }

  float acc[kNtO][4];
#pragma unroll
  for (int n = 0; n < kNtO; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float m[2], l[2];  // m: running max of the log2-domain logits
  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.0f;

  const std::integral_constant<int, C::kThreadsV5> all_c{};
  if constexpr (kWsF) {
    CopyWait();  // this thread's Q^ copies
    wg::FenceProxyAsync();
    wg::NamedBarSync(1, C::kThreadsV5);  // Q^, mu, kbar visible to every consumer warpgroup
  } else {
    load_stage(all_c, s_stage, 0, threadIdx.x);
    cuda::CpAsyncCommit();
    if constexpr (kFuseQ) {
      if (fq_mine) fused_q_quantize();
    }
  }
  const float sq =
      !wvalid ? 0.0f : kFuseQ ? fq_scale : p.sq[int64_t(bh) * p.ntq + kGroups * bx + grp];
  // The per-tile steps (kWg: one 64-row group per warpgroup):
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
    // kK128 (variant 16 = 12 with kv_group = 128; 20-22): the consumers take two K tiles
    // (one K / V quantization group: one K scale, one V scale) per step: S of both (two wgmma
    // groups), one online-softmax step over the 128 keys (one row max, alpha and l update), P~^
    // as four k-steps of 32 keys, P^ V^ of both tiles summed in one int32 accumulator per 64
    // output columns (four wgmmas), one fold into O per 128 keys. A second tile past `last`
    // (odd count, causal diagonal) is not waited for: its stage's stale codes give logits that
    // the mask drops (P = 0), so every wgmma is issued unconditionally.
    // kPingF (variant 22): the two consumer warpgroups take turns at issuing their S
    // wgmmas (FlashAttention-3's ping-pong), so that one's softmax runs while the other's
    // products do: turn = named barrier kPingBar + grp over both warpgroups (the owner syncs,
    // the other arrives after its own turn). The second warpgroup's arrival before the loop
    // gives the first the first turn; its last turn passes nothing on (every sync has its
    // arrival).
    constexpr int kPingBar = 4;
    const int n_turns = (last + 2) / 2;  // each warpgroup's turns
    int turn = 0;
    auto ping_begin = [&]() {
      if constexpr (kPingF) wg::NamedBarSync(kPingBar + grp, 2 * 128);
    };
    auto ping_end = [&]() {
      if constexpr (kPingF) {
        if (grp == 0 || ++turn < n_turns) wg::NamedBarArrive(kPingBar + (grp ^ 1), 2 * 128);
      }
    };
    if constexpr (kPingF) {
      if (grp == 1) wg::NamedBarArrive(kPingBar, 2 * 128);
    }
    for (int j0 = 0; j0 <= last; j0 += 2) {
      const int j1 = j0 + 1;
      const bool has1 = j1 <= last;
      ring.ConsumerWait(j0);
      if (has1) ring.ConsumerWait(j1);
      SAGE_TRACE(0, 4, j0 == 0 && threadIdx.x == 128);
      int32_t sacc0[32], sacc1[32];
      ping_begin();
      issue_s(stage_of(j0), sacc0);
      issue_s(stage_of(j1), sacc1);
      ping_end();
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
    // kPipeF (variant 15 = 13 + it): each consumer issues S of K tile j before the
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
        if constexpr (kWg) wg::FenceProxyAsync();  // cp.async writes -> wgmma's reads
        __syncthreads();
      }
      if constexpr (!kWg) {
        if (!wvalid || (kCausal && c0 > wlast)) continue;  // warp-uniform; no barrier below
      }
      const int8_t* s_khj = s_stage + st * C::kStage;
      const int8_t* s_vhtj = s_khj + C::kVh;
      const int stage_byte = C::kStage0 + st * C::kStage;  // kWg: descriptor offsets
      const float skj = kWsF ? s_scal[2 * st] : KvGroupScale(p.sk, p, bh, j);
      const float svj0 = kWsF ? s_scal[2 * st + 1] : KvGroupScale(p.sv, p, bh, j);
      const float a = SoftmaxScale(p.tau * sq * skj * kLog2e);
      const float svj = svj0 * (1.0f / 127.0f);
      const bool need_mask =
          c0 + kTile > p.n || (kCausal && c0 + kTile - 1 > (kWg ? r0 : wr0));

      auto body = [&](auto mask_tag) {
        // S = Q^ K^T for the warp's 16 rows.
        int32_t si[8][4];
        if constexpr (kWg) {
          int32_t sacc[32];
          issue_s(stage_byte, sacc);
          wg::Wait<0>();
  #pragma unroll
          for (int n = 0; n < 8; ++n) {
  #pragma unroll
            for (int e = 0; e < 4; ++e) si[n][e] = sacc[4 * n + e];
          }
        } else {
#pragma unroll
        for (int n = 0; n < 8; ++n) si[n][0] = si[n][1] = si[n][2] = si[n][3] = 0;
  #pragma unroll
        for (int k0 = 0; k0 < D; k0 += 32) {
          uint32_t qa[4];
          LdA(qa, s_qh + wrow * C::kI8D, C::kI8D, k0, lane);
  #pragma unroll
          for (int n = 0; n < 8; n += 2) {
            uint32_t b[4];
            LdB2(b, s_khj, C::kI8D, n * 8, k0, lane);
            MmaS8(si[n], qa, b[0], b[1]);
            MmaS8(si[n + 1], qa, b[2], b[3]);
          }
        }
        }
        uint32_t pa[2][4];  // P~^ as s8 A fragments (k = the permuted key order), 2 k-steps
        float alpha[2], coef[2];
        softmax_rows(mask_tag, si, a, svj, c0, pa, alpha, coef);
        float cb[2];
        cb[0] = -coef[0] * kQMagic, cb[1] = -coef[1] * kQMagic;
        if constexpr (kWg) {
          uint64_t dv[D / 64][2];
          pv_descs(stage_byte, dv);
          int32_t pv[D / 64][32];
          issue_pv(pa, dv, pv);
          fold_pv(pv, alpha, coef);
        } else {
        // O = alpha O + s_P s_V (P^ V^), 16 output columns at a time.
  #pragma unroll
        for (int n = 0; n < kNtO; n += 2) {
          int32_t pv[2][4];
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            pv[q][0] = pv[q][1] = pv[q][2] = pv[q][3] = 0;
          }
  #pragma unroll
          for (int kk = 0; kk < 2; ++kk) {
            uint32_t b[4];
            LdB2(b, s_vhtj, kI8T, n * 8, kk * 32, lane);
            MmaS8(pv[0], pa[kk], b[0], b[1]);
            MmaS8(pv[1], pa[kk], b[2], b[3]);
          }
#pragma unroll
          for (int q = 0; q < 2; ++q) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int h = e >> 1;
              // alpha acc + coef (fb - 1.5 * 2^23) as two FMAs (cb = -coef * 1.5 * 2^23: one
              // rounding, ~0.75 coef, an int8-product unit, per tile).
              acc[n + q][e] = fmaf(coef[h], __int_as_float(kQMagicBits + pv[q][e]),
                                       fmaf(acc[n + q][e], alpha[h], cb[h]));
            }
          }
        }
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
  SAGE_TRACE(0, 5, kWsF && threadIdx.x == 128);
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
  if constexpr (kWg) {
    // O through the stages (free once both warpgroups are past their last products) and
    // 16-byte row stores (StageAccBf16).
    using OT = cuda::Bf16Tile<kTile, D>;
    static_assert(C::kStages * C::kStage >= kGroups * OT::kBytes, "staging room");
    if constexpr (kWsF) {
      wg::NamedBarSync(1, C::kThreadsV5);
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
    SAGE_TRACE(0, 6, kWsF && threadIdx.x == 256);
  } else {  // (an else, not a return above: the loop would be unreachable code in wgmma kernels)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = wr0 + g + 8 * h;
      if (row >= p.n) continue;
      __nv_bfloat16* orow = p.o + bh * nd + int64_t(row) * D;
#pragma unroll
      for (int n = 0; n < kNtO; ++n) {
        const __nv_bfloat162 v2 = __floats2bfloat162_rn(acc[n][2 * h] * inv_l[h],
                                                        acc[n][2 * h + 1] * inv_l[h]);
        *reinterpret_cast<__nv_bfloat162*>(orow + n * 8 + 2 * t) = v2;
      }
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Backward.
// ----------------------------------------------------------------------------------------------

struct BwdParams {
  // kBwdTma: the Q side's tensor maps (GmmaTileTensorMap): Q^, dO (bf16) or dO^ (int8_dp), Q^T,
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
  int lpt_heads;  // kBwdLpt: heads per longest-first group (LptBlock)
  bool smooth_q, int8_dp;
  float tau;
};

// Phase 1 of the backward by wgmma (kBwdWgmma, one warpgroup = the CTA's 4 warps): S = Q^ K^T
// (s8, D / 32 x m64n64k32) and dP = dO V^T (bf16, 2D / 32 x m64n64k16; s8 scaled by sdv with
// int8_dp) for the tile's 64 query rows x 64 keys, from the GmmaTiles of BwdLayout L. Both groups
// are issued before the wait. The accumulators come back in the mma.sync layout the epilogue
// reads: warp w holds rows 16w..16w+15, si[n][e] = d[4n + e] (wgmma.cuh). K^ and V are at their
// L offsets from the buffer of dlo, Q^ and dO from that of dlo_q (kBwdWs: the stage; else dlo).
// The products' issue (after a wgmma fence; committed as one group each), shared with
// kBwdEarlyP1's issue ahead of the tile: an s8 or bf16 product of the tile at kA in the buffer of
// a_lo (A) and the one at kB in that of b_lo (B): S = Q^ K^T (or dO^ V^T with int8_dp) and
// dP = dO V^T take the Q side as A, kBwdSwap's S^T = K^ Q^^T and dP^T = V dO^T the K side.
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

// kBwdWs: stage sg of the Q-side ring in the CTA's shared memory buf (otherwise buf itself).
template <int D, int kVar>
__device__ __forceinline__ char* BwdStageBase(char* buf, int sg) {
  if constexpr ((kVar & kBwdWs) != 0) {
    return buf + BwdWsLayout<D>::kStage0 + sg * BwdWsLayout<D>::kStageBytes;
  } else {
    return buf;
  }
}
// A barrier over the CTA (kBwdWs: over consumer warpgroup cw).
template <int kVar>
__device__ __forceinline__ void BwdWgSync(int cw) {
  if constexpr ((kVar & kBwdWs) != 0) {
    cuda::wgmma::NamedBarSync(1 + cw, kThreads);
  } else {
    __syncthreads();
  }
}

// One thread's part of the backward's Q-tile loop (kBwdWs: a consumer warpgroup's thread; without
// it every thread of the CTA): the loop body in its two forms, TileKeysAsRows (kBwdSwap: S^T /
// dP^T, the keys as the accumulators' rows) and TileRows (every other variant: the query rows),
// with the state of SageBackwardKernel they read: the CTA's constants and shared tiles by value,
// dK / dV and kBwdEarlyP1's next-tile S / dP by reference to the kernel's arrays. The kernel sets
// up the Q tile at the loop's top (its stage, lse / D_i, scales), passes what a body reads of it
// as arguments, and adds Q-smoothing's dK term and releases the stage after the body. (Every
// member function inlines; the tile's per-stage pointers as arguments rather than members, and
// the struct built right before the loop, keep the kernels' address arithmetic close to the
// one-function form's: an earlier A/B)
template <int D, bool kCausal, int kVar>
struct BwdTile {
  static constexpr bool kWs = (kVar & kBwdWs) != 0;
  static constexpr bool kPair = (kVar & kBwdDqPair) != 0;
  static constexpr bool kEarly = (kVar & kBwdEarlyP1) != 0;
  static constexpr int kCons = kWs ? kWsConsumers : 1;  // K tiles per CTA
  static constexpr int kNtD = D / 8;
  using L = std::conditional_t<kWs, BwdWsLayout<D>, BwdLayout<D>>;
  // (SageBackwardKernel checks them; here they also count as referenced in every variant.)
  static_assert(!kEarly || kPair, "kBwdEarlyP1 builds on kBwdDqPair");
  static_assert(!kPair || kCons == 2, "kBwdDqPair: two consumers");

  const BwdParams& p;
  char* buf;   // the CTA's 1024-byte-aligned shared memory
  char* base;  // this consumer's region (kWs), else buf
  int cw, tid, bh, j, c0, warp, lane, g, t;
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
    return BwdStageBase<D, kVar>(buf, sg);
  }
  __device__ __forceinline__ void WgSync() const { BwdWgSync<kVar>(cw); }
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
      RedAddV4x8(p.dqacc + (int64_t(bh) * p.np + r0 + warp * 16) * D + ch * 1024 + 4 * lane, v);
    } else {
      // This warp's 16 rows x 64 columns are one 4 KB block of dqacc (DqAccIndex), staged in
      // shared memory in the block's own order (once the previous bulk read of the staging is
      // done) by one stmatrix per 8 columns 8n..8n+7: matrices 0 / 1 the even / odd columns of
      // rows 0-7 (v[4n] / v[4n + 1]: column 8n + 2t of row g is the 32-bit element t of matrix
      // row g), 2 / 3 those of rows 8-15 (v[4n + 2] / v[4n + 3]). Lane 8i + k gives the address
      // of row k of matrix i: row r = k + 8 (i / 2), unit (2n + i % 2) ^ k, i.e. byte
      // (32 n) ^ (16 (i % 2 ^ k)) of the row.
      static_assert(L::kDqSt % 256 == 0, "the staging rows' bases are 256-byte aligned");
      const int64_t blk = (int64_t(bh) * p.np + r0 + warp * 16) * D + ch * 1024;
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
  // kBwdDqPair's dQ product, not committed: columns 64 cw.. of the Q tile over both
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
  // kBwdSwap's tile body: S^T / dP^T (issued during the previous tile), P^T / dS^T with their
  // scales as row statistics, dS^'s scales over both consumers' keys, the five products.
  __device__ __forceinline__ void TileKeysAsRows(int i, int it, int r0, float sqi, float sdoi,
                                                 uint32_t dlo_q, const float* s_lse,
                                                 const float* s_drow, float* s_xrow) {
    // kBwdSwap: this thread holds S^T / dP^T, P^T / dS^T at key rows kr[h] (e / 2 = h) and query
    // columns 8n + 2t + (e % 2) of the tile.
    namespace wg = cuda::wgmma;
    using TP = typename L::TileP;
    constexpr int kChBytes = TP::kBytes;  // head-dim columns 64.. of Q^T / dO^T / K^T
    const uint32_t tile_done = cuda::SmemAddr(buf + L::kBar) + L::kTileDoneOff + 8 * cw;
    wg::Wait<0>();  // S^T, dP^T (issued during the previous tile)
    SAGE_PHASE(1, threadIdx.x == 128);  // phase 1's wgmma wait
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
    SAGE_PHASE(2, threadIdx.x == 128);  // P, dS
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
    SAGE_PHASE(3, threadIdx.x == 128);  // row scales, P^T / dS^T codes, column partials
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
        RedAddIf(r0 + c < p.n, p.dsrow + int64_t(bh) * p.n + r0 + c, sum);
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
    SAGE_PHASE(4, threadIdx.x == 128);  // query scales, dS^ codes
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
    SAGE_PHASE(5, threadIdx.x == 128);  // the products, their epilogues, the next tile's issue
  }
  // The tile body of every other variant: S and dP for this warp's 16 query rows, P^T / dS^T
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
      SAGE_PHASE(1, kWs && threadIdx.x == 128);  // phase 1's wgmma wait
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
    SAGE_PHASE(2, kWs && threadIdx.x == 128);  // P, dS
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
        if (t == 0 && grow < p.n) atomicAdd(p.dsrow + int64_t(bh) * p.n + grow, rs);
      } else {
        RedAddIf(t == 0 && grow < p.n, p.dsrow + int64_t(bh) * p.n + grow, rs);
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
    SAGE_PHASE(3, kWs && threadIdx.x == 128);  // row and column statistics
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
    SAGE_PHASE(4, kWs && threadIdx.x == 128);  // pair barrier, column scales, their barrier
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

    SAGE_PHASE(5, kWs && threadIdx.x == 128);  // the codes, their stores and the pair barrier
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

// grid: (K tiles, BH); block: 128. Warp w owns keys 16w..16w+15 of the K tile for dK and dV, and
// query rows 16w..16w+15 of each Q tile for S, dP, P, dS and dQ. kBwdWs: grid (groups of C =
// kWsConsumers K tiles, BH), block 128 (C + 1): warpgroup 0 the producer, warpgroup 1 + c the
// consumer of K tile C jj + c, whose warp w (of 4) owns the rows above.
template <int D, bool kCausal, int kVar>
__global__ void __launch_bounds__(BwdThreads<D, kVar>(), (BwdMinBlocks<D, kVar>()))
    SageBackwardKernel(const __grid_constant__ BwdParams p) {
  static_assert((kVar & kBwdBase) == kBwdBase, "every backward variant builds on kBwdBase");
  constexpr bool kWs = (kVar & kBwdWs) != 0;
  constexpr bool kTma = (kVar & kBwdTma) != 0;
  static_assert(kTma || kWs, "the Q side by TMA, or by the producer's cp.async (kBwdWs)");
  constexpr bool kPair = (kVar & kBwdDqPair) != 0;
  static_assert(!kPair || (kWs && D == 128 && kWsConsumers == 2), "kBwdDqPair: kBwdWs at D = 128");
  constexpr bool kEarly = (kVar & kBwdEarlyP1) != 0;
  static_assert(!kEarly || kPair, "kBwdEarlyP1 builds on kBwdDqPair");
  constexpr bool kSwap = (kVar & kBwdSwap) != 0;
  static_assert(!kSwap || kEarly, "kBwdSwap builds on kBwdEarlyP1");
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
  constexpr bool kLpt = (kVar & kBwdLpt) != 0;
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
  SAGE_TRACE(1, 0, kWs && threadIdx.x == 128);
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
    SAGE_TRACE(1, 1, threadIdx.x == 128);
    if (cw < 0) {
      // Producer: copies only (its registers go to the consumers).
      wg::SetMaxNRegDec<kWsProducerRegs>();
      cuda::GridDepWait();  // dO^T / dO^, D_i, the scales of dO: the prep launch's
      for (int i = ibeg, it = 0; i < p.ntq; ++i, ++it) {
        const int rr = i * kTile;
        ring.ProducerAcquire(it);
        char* const q = BwdStageBase<D, kVar>(buf, it & 1);
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
    SAGE_TRACE(1, 2, threadIdx.x == 128);
    cuda::wgmma::FenceProxyAsync();
    BwdWgSync<kVar>(cw);
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
      const uint32_t dlo_n = cuda::wgmma::DescLo(cuda::SmemAddr(BwdStageBase<D, kVar>(buf, 0)));
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
  BwdTile<D, kCausal, kVar> tile{.p = p, .buf = buf, .base = base, .cw = cw, .tid = tid, .bh = bh,
                                 .j = j, .c0 = c0, .warp = warp, .lane = lane, .g = g, .t = t,
                                 .kr = {kr[0], kr[1]}, .pt_base = pt_base, .dsh_base = dsh_base,
                                 .dsh_sw = dsh_sw, .tau = tau, .skj = skj, .svj = svj, .dlo = dlo,
                                 .dlo_c0 = dlo_c0, .dlo_c1 = dlo_c1, .tma_bar = tma_bar,
                                 .ring = ring, .s_pt = s_pt, .s_dsh = s_dsh, .s_dst = s_dst,
                                 .s_part = s_part, .s_vec = s_vec, .s_csp = s_csp,
                                 .s_csds = s_csds, .s_colsum = s_colsum, .s_bias = s_bias,
                                 .s_cinv2 = s_cinv2, .dk = dk, .dv = dv, .s_next = s_next,
                                 .dp_next = dp_next};
  SAGE_PHASE_START(kWs && threadIdx.x == 128);  // (lab: consumer 0 thread 0's phase clocks)
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
      if constexpr (!kSwap) BwdWgSync<kVar>(cw);
      if constexpr (!kEarly) ring.ConsumerWait(it);  // (kEarly: before its phase 1's issue)
      SAGE_TRACE(1, 4, it == 0 && threadIdx.x == 128);
      char* const q = BwdStageBase<D, kVar>(buf, it & 1);
      dlo_q = wg::DescLo(cuda::SmemAddr(q));
      s_lse = reinterpret_cast<float*>(q + L::kLse);
      s_drow = reinterpret_cast<float*>(q + L::kDrow);
      s_mu = reinterpret_cast<float*>(q + L::kMu);
      s_xrow = reinterpret_cast<float*>(q + L::kXrow);
      sqi = reinterpret_cast<const float*>(q + L::kScal)[0];
      sdoi = reinterpret_cast<const float*>(q + L::kScal)[1];
      if (p.smooth_q) {
        BlockBias<D>(p.k + bh * nd, s_mu, s_kbar, j, p.n, tau, s_bias, tid);
        BwdWgSync<kVar>(cw);
      }
      SAGE_PHASE(0, kWs && threadIdx.x == 128);  // loop top: barrier, stage wait
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
    SAGE_PHASE(6, kWs && threadIdx.x == 128);  // phase 2: the dV / dK / dQ wgmmas and epilogues
    SAGE_PHASE(7, kWs && threadIdx.x == 128);  // (the tile count)
  }
  SAGE_TRACE(1, 5, kWs && threadIdx.x == 128);
  SAGE_PHASE_END(kWs && threadIdx.x == 128);
  if constexpr (kEarly) cuda::wgmma::Wait<0>();  // the last tile's unused S / dP (they read K^, V)
  // The staging buffer's reads complete before the CTA exits (its shared memory goes); the dqacc
  // adds themselves complete with the grid, which DqFinalizeKernel waits for (pdl).
  if constexpr (!DqByRed<D>()) {
    if (lane == 0) cuda::wgmma::BulkWaitRead<0>();
  }
  SAGE_TRACE(1, 3, kWs && threadIdx.x == 256);
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
    BwdWgSync<kVar>(cw);
  }
  cuda::StageAccBf16<OT>(base, warp * 16, 0, lane, dk, 1.0f, 1.0f);
  cuda::StageAccBf16<OT>(base + OT::kBytes, warp * 16, 0, lane, dv, 1.0f, 1.0f);
  BwdWgSync<kVar>(cw);
  const int nr = min(kTile, p.n - c0);
  if (nr > 0) {
    cuda::StoreTileRows<OT>(base, p.dk + bh * nd + int64_t(c0) * D, D, nr, tid, kThreads);
    cuda::StoreTileRows<OT>(base + OT::kBytes, p.dv + bh * nd + int64_t(c0) * D, D, nr, tid,
                            kThreads);
  }
  SAGE_TRACE(1, 6, kWs && threadIdx.x == 256);
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
template <int D>
__global__ void __launch_bounds__(kDqFinThreads) DqFinalizeKernel(
    const float* __restrict__ dqacc, const float* __restrict__ dsrow,
    const float* __restrict__ kbar, int n, int np, bool correct, float tau,
    __nv_bfloat16* __restrict__ dq, int* __restrict__ armed) {
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
      if constexpr (kPairs) {
        const float4* src =
            reinterpret_cast<const float4*>(dqacc + DqAccIndex<D>(bh, np, row, d));
#pragma unroll
        for (int t = 0; t < 4; ++t) u[k][t] = src[t];
      } else {
        u[k][0] = *reinterpret_cast<const float4*>(dqacc + DqAccIndex<D>(bh, np, row, d));
        u[k][1] = *reinterpret_cast<const float4*>(dqacc + DqAccIndex<D>(bh, np, row, d + 1));
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
        const float c = tau * dsrow[int64_t(bh) * n + row];
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

// Workspace carve-up (see sagebwd_cuda.h).
struct Workspace {
  int8_t *qh, *qht, *kh, *kht, *vh, *vht, *doh, *doht;
  float *sq, *sk, *sv, *sdo, *kbar, *mu, *drow, *dsrow, *dqacc;
  double* kpart;
  int* armed;  // kDqArmed: dsrow and dqacc are zero (a v5+ forward zeroed them)
  size_t bytes;
};

Workspace CarveWorkspace(const AttnShape& s, char* base) {
  const int64_t bh = int64_t(s.B) * s.H;
  const int ntq = CeilDiv(s.N, kTile), ntk = ntq;
  const int64_t np = int64_t(ntq) * kTile;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += (bytes + 255) / 256 * 256;
    return p;
  };
  Workspace w;
  const size_t q8 = size_t(bh * np * s.D);
  w.qh = reinterpret_cast<int8_t*>(take(q8));
  w.qht = reinterpret_cast<int8_t*>(take(q8));
  w.kh = reinterpret_cast<int8_t*>(take(q8));
  w.kht = reinterpret_cast<int8_t*>(take(q8));
  w.vh = reinterpret_cast<int8_t*>(take(q8));
  w.vht = reinterpret_cast<int8_t*>(take(q8));
  w.doh = reinterpret_cast<int8_t*>(take(q8));
  w.doht = reinterpret_cast<int8_t*>(take(q8));
  w.sq = reinterpret_cast<float*>(take(4 * size_t(bh * ntq)));
  w.sk = reinterpret_cast<float*>(take(4 * size_t(bh * ntk)));
  w.sv = reinterpret_cast<float*>(take(4 * size_t(bh * ntk)));
  w.sdo = reinterpret_cast<float*>(take(4 * size_t(bh * ntq)));
  w.kbar = reinterpret_cast<float*>(take(4 * size_t(bh * s.D)));
  w.mu = reinterpret_cast<float*>(take(4 * size_t(bh * ntq * s.D)));
  w.drow = reinterpret_cast<float*>(take(4 * size_t(bh * s.N)));
  w.dsrow = reinterpret_cast<float*>(take(4 * size_t(bh * s.N)));
  w.dqacc = reinterpret_cast<float*>(take(4 * size_t(bh * np * s.D)));  // DqAccIndex blocks
  w.kpart = reinterpret_cast<double*>(take(8 * size_t(bh * kKMeanMaxParts * s.D)));
  w.armed = reinterpret_cast<int*>(take(sizeof(int)));
  w.bytes = off;
  return w;
}

Status CheckArgs(const AttnShape& s, void* workspace, size_t workspace_bytes,
                 std::initializer_list<const void*> ptrs) {
  if (s.B < 1 || s.H < 1 || s.N < 1 || (s.D != 64 && s.D != 128)) {
    return InvalidArgument("SageBwd CUDA: unsupported shape B=" + std::to_string(s.B) +
                           " H=" + std::to_string(s.H) + " N=" + std::to_string(s.N) +
                           " D=" + std::to_string(s.D) + " (D must be 64 or 128)");
  }
  ABLATE_RETURN_IF_ERROR(cuda::CheckGridLimits(int64_t(s.B) * s.H, s.N, "SageBwd CUDA"));
  const size_t need = CarveWorkspace(s, nullptr).bytes;
  if (workspace == nullptr || workspace_bytes < need) {
    return InvalidArgument("SageBwd CUDA: workspace of " + std::to_string(workspace_bytes) +
                           " bytes, need " + std::to_string(need));
  }
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return InvalidArgument("SageBwd CUDA: workspace must be 256-byte aligned");
  }
  for (const void* ptr : ptrs) {
    if (ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
      return InvalidArgument("SageBwd CUDA: null or not 16-byte aligned tensor pointer");
    }
  }
  return Status::Ok();
}

// TMA tensor maps (kBwdTma, kTmaF) of the workspace's int8 codes as the kernels' GmmaTiles
// take them, one 64-token tile of head bh at a time: row-major codes (BH, Np, D) (Q^, K^, dO^)
// and transposed codes (BH, D, Np) (Q^T, V^T, dO^T).
template <int D>
Status CodesTensorMap(CUtensorMap* map, const int8_t* codes, const AttnShape& s, const char* what) {
  const uint64_t np = uint64_t(CeilDiv(s.N, kTile)) * kTile;
  return cuda::wgmma::GmmaTileTensorMap<cuda::wgmma::GmmaTile<kTile, D>, 1>(
      map, codes, D, np, uint64_t(s.B) * s.H, D, np * D, what);
}
template <int D>
Status CodesTTensorMap(CUtensorMap* map, const int8_t* codes, const AttnShape& s,
                       const char* what) {
  const uint64_t np = uint64_t(CeilDiv(s.N, kTile)) * kTile;
  return cuda::wgmma::GmmaTileTensorMap<cuda::wgmma::GmmaTile<D, kTile>, 1>(
      map, codes, np, D, uint64_t(s.B) * s.H, np, D * np, what);
}

// QuantizeKernel over `jobs` tensors (grid: tiles, BH, jobs).
template <int D, bool kPrep, int kG = 1>
Status LaunchQuantize(const AttnShape& s, const QuantParams& qp, int jobs, cudaStream_t stream) {
  QuantizeKernel<D, kPrep, kG>
      <<<dim3(CeilDiv(s.N, kTile * kG), s.B * s.H, jobs), 256 * kG, 0, stream>>>(qp);
  return CudaStatus(cudaGetLastError(), "SageBwd QuantizeKernel launch");
}

// Forward variants (SageCudaOptions::fwd_variant; each as the one it adds to): 8 = v5a + kFastS
// (SageForwardKernelV5 by mma.sync, 8 warps x 16 rows, the fast interior logits; its Q from the
// quantize launch), 10 = v6 = 8 with S and P^ V^ by wgmma (kWg; 9, its per-warpgroup-branch form,
// measured slower and was removed), 11 = 10 + kLptF (grid in longest-first order across heads:
// causal 1.04-1.11x of 10, non-causal 0.99x), 12 / 13 = 10 / 11 + kWsF (v7 forward,
// warp-specialized: 1.12-1.16x of 10 non-causal, 1.08-1.14x of 11 causal at d128; 0.87-0.95x at
// d64, where the non-specialized kernel runs two CTAs per SM). 14 / 15 = 12 / 13 + kPipeF (the
// next tile's S issued before the softmax: causal 1.01-1.05x of 13, non-causal 0.985-0.99x of
// 12); 16 / 17 = 12 / 13 + kK128 (two K tiles per step over 128-key K / V quantization groups,
// kv_group 128: 1.10-1.20x of 12 non-causal, 1.02-1.12x of 15 causal); 18 / 19 / 20 / 21 = 10 /
// 11 / 16 / 17 + kTmaF (each K tile's K^ / V^T stage filled by one thread's TMA copies on an
// mbarrier, not by every thread's cp.async; an earlier forward lab: 21 1.045x of 17 at d128
// causal, the others within 0.997-1.009x). 22 = 20 + kPingF (the two consumers' S wgmmas issued
// in turns) + kLazyF (the running max moves only by more than kLazyThresh, so most folds are one
// FMA): 1.024-1.043x of 20 at d128 non-causal (an earlier run; the ping-pong alone 1.014-1.027x, with
// P^ V^ in turns too 0.99x; both on the causal kernel 0.99-1.01x of 21, lazy alone there 0.99x);
// 23 / 24 = 10 / 11 + kLazyF (1.006-1.017x at d64; 1.024x forward at the training shape B16 H12
// N1024 d64 causal). 25 / 26 = 20 / 21 + kG3 (three consumer warpgroups of 64 rows, 192 rows
// per CTA, at 160 registers each instead of two at 240: more warps per scheduler for the
// softmax's latency), 27 / 28 = 25 / 26 + kLazyF (an earlier run: same call against production:
// forward 1.135x / 1.101x at N8192 non-causal / causal, 1.033x / 1.030x at N4096, 1.020x /
// 0.983x at N2048, where the 192-row grid fills the last wave worse: 5.3 waves of 132 CTAs
// instead of 7.8).
// Compiled in (FwdCompiled): production's and those the GPU tests compare them with (8: the
// quantize launch's Q; 10 / 11 / 20 / 25 / 26: the eager rescale; 16: the 128-key groups without
// TMA), and 22 / 25 / 26, production's neighbours.
// Removed earlier (commit 78f17c5 has them): 3 = the v3 / v4 forward (SageForwardKernel),
// 5 / 6 / 7 = v5a (without the fast interior logits), v5b (4 warps x 32 rows), v5c, and 13, 14,
// 17, 18, 19. Their template flags: FwdFlagsOf below. FwdProductionFor is what production calls
// run (measured: kernels/bench/README.md): d128 with 128-key K / V groups (SageKvGroup: without
// Q-smoothing) 27 (non-causal) and, causal, 28 from N = 4096 on, else v9 + TMA = 21; with 64-key
// groups 12 / 15; d64 v6 + lazy rescale = 23 / 24.
constexpr int FwdProductionFor(int d, bool causal, int kv_group, int n) {
  if (d == 128) {
    if (kv_group != 2 * kTile) return causal ? 15 : 12;
    return causal ? (n >= 4096 ? 28 : 21) : 27;
  }
  return causal ? 24 : 23;
}

template <int D, bool kWg = false, bool kLptF = false, bool kWsF = false, bool kPipeF = false,
          bool kK128 = false, bool kTmaF = false, bool kPingF = false, bool kLazyF = false,
          bool kG3 = false>
Status LaunchForwardV5(const AttnShape& s, const FwdParams& p, bool smooth_q, cudaStream_t stream) {
  using C = FwdV5Config<D, kWg, kWsF, kK128, kG3>;
  using K = void (*)(FwdParams);
  K kernel = nullptr;
  if constexpr (kK128) {  // no Q-smoothing (its bias buffer holds one K tile)
    if (smooth_q) return InvalidArgument("SageBwd CUDA: kv_group 128 without smooth_q");
    kernel = s.causal ? SageForwardKernelV5<D, true, false, kWg, kLptF, kWsF, false,
                                            true, kTmaF, kPingF, kLazyF, kG3>
                      : SageForwardKernelV5<D, false, false, kWg, kLptF, kWsF, false,
                                            true, kTmaF, kPingF, kLazyF, kG3>;
  } else {
    kernel = s.causal ? (smooth_q ? SageForwardKernelV5<D, true, true, kWg, kLptF,
                                                        kWsF, kPipeF, false, kTmaF, false,
                                                        kLazyF>
                                  : SageForwardKernelV5<D, true, false, kWg, kLptF,
                                                        kWsF, kPipeF, false, kTmaF, false,
                                                        kLazyF>)
                      : (smooth_q ? SageForwardKernelV5<D, false, true, kWg, kLptF,
                                                        kWsF, kPipeF, false, kTmaF, false,
                                                        kLazyF>
                                  : SageForwardKernelV5<D, false, false, kWg, kLptF,
                                                        kWsF, kPipeF, false, kTmaF, false,
                                                        kLazyF>);
  }
  ABLATE_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kBytes),
      "SageBwd forward v5 smem attribute");
  FwdParams pl = p;
  ABLATE_ASSIGN_OR_RETURN(const dim3 grid,
                          LptGrid(kLptF, s.B * s.H, CeilDiv(s.N, C::kRows), kernel,
                                  C::kThreadsLaunch, C::kBytes, &pl.lpt_heads));
  return CudaStatus(cuda::LaunchKernel(kernel, grid, dim3(C::kThreadsLaunch), C::kBytes, stream,
                                       /*pdl=*/true, pl),
                    "SageBwd forward v5 kernel launch");
}

// LaunchForwardV5's template flags of each compiled-in v5+ forward variant (the list above),
// built the way the variants were: each one names the variant it adds to.
struct FwdVariantFlags {
  bool wg = true, lpt = false, ws = false, pipe = false, k128 = false, tma = false, ping = false,
       lazy = false, g3 = false;
};
constexpr FwdVariantFlags FwdFlagsOf(int v) {
  FwdVariantFlags f;
  switch (v) {
    case 8: f.wg = false; return f;  // v5a + kFastS: mma.sync
    case 11: f.lpt = true; return f;
    case 12: case 13: f = FwdFlagsOf(v - 2); f.ws = true; return f;
    case 14: case 15: f = FwdFlagsOf(v - 2); f.pipe = true; return f;
    case 16: case 17: f = FwdFlagsOf(v - 4); f.k128 = true; return f;
    case 20: case 21: f = FwdFlagsOf(v - 4); f.tma = true; return f;
    case 22: f = FwdFlagsOf(20); f.ping = f.lazy = true; return f;
    case 23: case 24: f = FwdFlagsOf(v - 13); f.lazy = true; return f;
    case 25: case 26: f = FwdFlagsOf(v - 5); f.g3 = true; return f;
    case 27: case 28: f = FwdFlagsOf(v - 2); f.lazy = true; return f;
    default: return f;  // 10
  }
}
template <int... V>
struct FwdVariantList {};
using FwdCompiled =
    FwdVariantList<8, 10, 11, 12, 15, 16, 20, 21, 22, 23, 24, 25, 26, 27, 28>;
template <int... V>
constexpr bool FwdCompiledHas(int v, FwdVariantList<V...>) {
  return ((v == V) || ...);
}
template <int... V>
constexpr bool FwdK128Agrees(FwdVariantList<V...>) {
  return ((FwdFlagsOf(V).k128 == SageFwdVariantSteps128(V)) && ...);
}
static_assert(FwdK128Agrees(FwdCompiled{}),
              "SageFwdVariantSteps128 (sagebwd_cuda.h) disagrees with FwdFlagsOf");

// Variant V: its tensor maps (kTmaF), then its kernel.
template <int D, int V>
Status LaunchFwdVariant(const AttnShape& s, const Workspace& w, FwdParams& p, bool smooth_q,
                        cudaStream_t stream) {
  constexpr FwdVariantFlags f = FwdFlagsOf(V);
  if constexpr (f.tma) {
    ABLATE_RETURN_IF_ERROR(CodesTensorMap<D>(&p.tm_kh, w.kh, s, "K^"));
    ABLATE_RETURN_IF_ERROR(CodesTTensorMap<D>(&p.tm_vht, w.vht, s, "V^T"));
  }
  return LaunchForwardV5<D, f.wg, f.lpt, f.ws, f.pipe, f.k128, f.tma, f.ping, f.lazy, f.g3>(
      s, p, smooth_q, stream);
}
template <int D, int V0, int... V>
Status LaunchFwdVariantIn(int var, const AttnShape& s, const Workspace& w, FwdParams& p,
                          bool smooth_q, cudaStream_t stream, FwdVariantList<V0, V...>) {
  if (var == V0) return LaunchFwdVariant<D, V0>(s, w, p, smooth_q, stream);
  if constexpr (sizeof...(V) > 0) {
    return LaunchFwdVariantIn<D>(var, s, w, p, smooth_q, stream, FwdVariantList<V...>{});
  } else {
    return InvalidArgument("SageBwd CUDA: forward variant " + std::to_string(var) +
                           " is not compiled in");
  }
}

template <int D>
Status ForwardImpl(const AttnShape& s, const SageCudaOptions& opt, const __nv_bfloat16* q,
                   const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o, float* lse,
                   const Workspace& w, const double* k_parts, cudaStream_t stream) {
  const int bh = s.B * s.H, nt = CeilDiv(s.N, kTile);
  const int kvg = SageKvGroup(opt, D);
  const int fvar = opt.fwd_variant < 0 ? FwdProductionFor(D, s.causal, kvg, s.N) : opt.fwd_variant;
  if (!FwdCompiledHas(fvar, FwdCompiled{})) {
    return InvalidArgument("SageBwd CUDA: forward variant " + std::to_string(fvar) +
                           " is not compiled in");
  }
  const bool k128 = kvg == 2 * kTile;
  if ((kvg != kTile && !k128) || k128 != SageFwdVariantSteps128(fvar)) {
    return InvalidArgument("SageBwd CUDA: kv_group " + std::to_string(kvg) +
                           " with forward variant " + std::to_string(fvar) +
                           " (kv_group 128 goes with the variants that step 128 keys at d128, "
                           "SageFwdVariantSteps128, and they with it)");
  }
  ABLATE_RETURN_IF_ERROR(cuda::CheckLptHeads(opt.lpt_heads, "SageBwd CUDA"));
  QuantParams qp{};
  qp.n = s.N;
  qp.np = nt * kTile;
  qp.kbar = w.kbar;
  qp.mu = w.mu;
  if (opt.smooth_k) {  // K mean: partial sums over up to 16 row ranges per head
    const SageKMeanPartsLayout kl = SageKMeanParts(s.N);
    qp.kparts = kl.parts;
    if (k_parts != nullptr) {  // the caller's (made where K was produced)
      qp.kpart = k_parts;
    } else {
      qp.kpart = w.kpart;
      KMeanPartKernel<D><<<dim3(qp.kparts, bh), D / 2 * kKMeanLanes, 0, stream>>>(
          k, s.N, kl.rows_per_part, w.kpart);
      ABLATE_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "SageBwd KMeanPartKernel launch");
    }
  } else {
    ABLATE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.kbar, 0, sizeof(float) * bh * D, stream),
                                "SageBwd kbar memset");
  }
  // K (minus its mean), V (V^ only with int8_dp; V^T in the v5+ forwards' permuted key order),
  // Q (minus its tile means with smooth_q) in one launch. K first: its tiles then read K from L2
  // right after KMeanPartKernel. (Measured and dropped: K last and this launch a programmatic
  // dependent of KMeanPartKernel's, with smaller K-mean blocks, so that V and Q run beside the
  // mean: both launches are bandwidth-bound and the forward did not move.)
  qp.job[0] = {k, w.kh, w.kht, w.sk, opt.smooth_k ? 1 : 0, true, false};
  qp.job[1] = {v, opt.int8_dp ? w.vh : nullptr, w.vht, w.sv, 0, true, false};
  qp.job[2] = {q, w.qh, w.qht, w.sq, opt.smooth_q ? 2 : 0, false, true};
  const bool fuse_q = FwdFusesQ(FwdFlagsOf(fvar).wg, opt.smooth_q);
  if (k128) {  // K and V in 128-key groups, Q (not smoothed: refused) fused at d128
    if (opt.smooth_q) return InvalidArgument("SageBwd CUDA: kv_group 128 without smooth_q");
    if (Status st = LaunchQuantize<D, false, 2>(s, qp, 2, stream); !st.ok()) return st;
    if (!fuse_q) {
      QuantParams qq = qp;
      qq.job[0] = qp.job[2];
      if (Status st = LaunchQuantize<D, false>(s, qq, 1, stream); !st.ok()) return st;
    }
  } else if (Status st = LaunchQuantize<D, false>(s, qp, fuse_q ? 2 : 3, stream); !st.ok()) {
    return st;
  }

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
  p.lpt_heads = opt.lpt_heads;  // (0: LptGrid picks it at the launch)
  p.smooth_q = opt.smooth_q;
  p.tau = 1.0f / std::sqrt(static_cast<float>(D));
  return LaunchFwdVariantIn<D>(fvar, s, w, p, opt.smooth_q, stream, FwdCompiled{});
}

// Backward variants compiled in (SageCudaOptions::bwd_variant; measured: kernels/bench/README.md,
// Variants, where the removed steps v4 (24) to v8 (110520) and their lab neighbours are too):
//   2207672 / 2338744  sagebwd v8 (110520 = kBwdBase) + kBwdTma (2097152: the Q side of each Q
//            tile by TMA; 1.05-1.08x at d64) / + kBwdLpt (131072: grid (BH, K
//            tiles), so causal CTAs run longest-first across every head: causal 1.07-1.16x):
//            production at d64
//   372664 / 503736  110520 / 241592 + kBwdWs (262144: warp-specialized, a producer warpgroup
//            filling a two-stage ring of Q-side tiles for two consumer warpgroups of 64 keys
//            each, one CTA per SM): d128 non-causal 1.17x of 44984 (1.05x of 110520), causal
//            1.02x of 241592; production at d128 with 64-key K / V groups (Q-smoothing), where
//            the TMA Q side measured 0.96-0.97x (52 bytes of spills causal)
//   3518392 / 3649464  372664 / 503736 + kBwdDqPair (1048576: the two consumers share dQ over 128
//            keys, dS^ row scales over 128 keys = the emulator's bkv 128; 128-key K / V groups
//            only: 1.02-1.03x non-causal, 1.05-1.09x causal) + kBwdTma (1.02-1.04x,
//            an earlier run): production at d128 with int8_dp
//   7712696 / 7843768  3518392 / 3649464 + kBwdEarlyP1 (4194304: the next Q tile's S and dP
//            issued during this tile's last two epilogues; 1.000-1.024x causal;
//            non-causal 1.021-1.022x after an earlier column scales over the whole
//            warpgroup): 7712696 production at d128 non-causal with 128-key K / V groups
//            (7843768 causal earlier)
//   16101304 / 16232376  7712696 / 7843768 + kBwdSwap (8388608: S^T / dP^T, keys as rows;
//            9% fewer instructions, latency-bound as before: non-causal 0.986-1.002x, causal
//            1.000-1.021x earlier): 16232376 production at d128 causal with
//            128-key K / V groups
// (Measured and not kept: the consumers' two rendezvous per Q tile split into
// arrivals and later waits, 0.995-1.010x; with consumer 1's phase 1 issued after consumer 0's
// on top, 0.980-0.992x. Measured: FlashAttention-3's ping-pong on the decoupled consumers of
// 2469816 / 2600888 (= 372664 / 503736 + kBwdTma), the two taking turns at the element-wise part
// (P / dS, statistics, codes) or at the products and folds: 0.94-1.01x (d64 0.85-0.88x) resp.
// 0.97-1.03x of the same variant without turns;)
// (Measured, not kept: dK computed by the producer warpgroup, 0.92-0.98x;
// 2026-11-28-h200-s26.)
// BwdProductionFor is what production calls (bwd_variant = -1) run (sagebwd v12; causal d128:
// keys as rows).
constexpr int BwdProductionFor(int d, bool causal, bool dq_pair) {
  const int v = causal ? kBwdBase + kBwdLpt : kBwdBase;
  if (d != 128) return v + kBwdTma;
  if (!dq_pair) return v + kBwdWs;
  const int early = v + kBwdWs + kBwdDqPair + kBwdTma + kBwdEarlyP1;
  return causal ? early + kBwdSwap : early;
}
using BwdKernel = void (*)(BwdParams);
struct BwdLaunch {
  BwdKernel kernel = nullptr;
  int smem = 0;
  bool lpt = false;  // grid (BH, K tiles) instead of (K tiles, BH)
  int threads = kThreads;
  int keys = kTile;  // keys per CTA
};
template <int D, bool kCausal, int kVar>
BwdLaunch BwdLaunchOf() {
  if constexpr ((kVar & kBwdDqPair) != 0 && D != 128) {
    return {};  // D = 128 only
  } else {
    constexpr bool kWs = (kVar & kBwdWs) != 0;
    constexpr int kSmem = kWs ? BwdWsLayout<D>::kBytes : BwdLayout<D>::kBytes;
    return {SageBackwardKernel<D, kCausal, kVar>, kSmem, (kVar & kBwdLpt) != 0,
            BwdThreads<D, kVar>(), kWs ? kWsConsumers * kTile : kTile};
  }
}
// The backward variants compiled in (the list above), one instantiation per head dim and mask.
template <int... V>
struct BwdVariantList {};
using BwdCompiled =
    BwdVariantList<kBwdBase + kBwdTma, kBwdBase + kBwdLpt + kBwdTma, kBwdBase + kBwdWs,
                   kBwdBase + kBwdLpt + kBwdWs, kBwdBase + kBwdWs + kBwdDqPair + kBwdTma,
                   kBwdBase + kBwdLpt + kBwdWs + kBwdDqPair + kBwdTma,
                   kBwdBase + kBwdWs + kBwdDqPair + kBwdTma + kBwdEarlyP1,
                   kBwdBase + kBwdLpt + kBwdWs + kBwdDqPair + kBwdTma + kBwdEarlyP1,
                   kBwdBase + kBwdWs + kBwdDqPair + kBwdTma + kBwdEarlyP1 + kBwdSwap,
                   kBwdBase + kBwdLpt + kBwdWs + kBwdDqPair + kBwdTma + kBwdEarlyP1 + kBwdSwap>;
template <int D, bool kCausal, int... V>
BwdLaunch BwdLaunchIn(int var, BwdVariantList<V...>) {
  BwdLaunch r{};
  (void)((var == V ? (r = BwdLaunchOf<D, kCausal, V>(), true) : false) || ...);
  return r;
}
template <int D, bool kCausal>
BwdLaunch BwdLaunchFor(int var) {
  return BwdLaunchIn<D, kCausal>(var, BwdCompiled{});
}

template <int D>
Status BackwardImpl(const AttnShape& s, const SageCudaOptions& opt, const __nv_bfloat16* k,
                    const __nv_bfloat16* v, const __nv_bfloat16* o, const __nv_bfloat16* do_,
                    const float* lse, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv,
                    const Workspace& w, cudaStream_t stream) {
  const int bh = s.B * s.H, nt = CeilDiv(s.N, kTile);
  const int kvg = SageKvGroup(opt, D);
  if (kvg != kTile && kvg != 2 * kTile) {
    return InvalidArgument("SageBwd CUDA: kv_group " + std::to_string(kvg) + " (64 or 128)");
  }
  ABLATE_RETURN_IF_ERROR(cuda::CheckLptHeads(opt.lpt_heads, "SageBwd CUDA"));
  // Whether the consumers share dQ (dS^ row scales over 128 keys): SageBwdKeyBlock decides, for
  // the emulator's options too; an explicit variant must agree with it.
  const bool dq_pair = SageBwdKeyBlock(opt, D) == 2 * kTile;
  int var = opt.bwd_variant < 0 ? BwdProductionFor(D, s.causal, dq_pair) : opt.bwd_variant;
  // (Their early dP issue is the bf16 product's.)
  if (opt.int8_dp) var &= ~(kBwdEarlyP1 | kBwdSwap);
  if (((var & kBwdDqPair) != 0) != dq_pair) {
    return InvalidArgument("SageBwd CUDA: backward variant " + std::to_string(var) +
                           " shares dQ over 128 keys, which needs d128 and 128-key K / V "
                           "groups (d " + std::to_string(D) + ", kv_group " + std::to_string(kvg) +
                           ")");
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
  if (Status st = LaunchQuantize<D, true>(s, qp, 1, stream); !st.ok()) return st;

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
  p.dsrow = w.dsrow;
  p.dqacc = w.dqacc;
  p.dk = dk;
  p.dv = dv;
  p.n = s.N;
  p.np = nt * kTile;
  p.ntq = nt;
  p.ntk = nt;
  p.kv_shift = KvShift(kvg);
  p.lpt_heads = opt.lpt_heads;  // (0: LptGrid picks it at the launch)
  p.smooth_q = opt.smooth_q;
  p.int8_dp = opt.int8_dp;
  p.tau = 1.0f / std::sqrt(static_cast<float>(D));
  if ((var & kBwdTma) != 0) {  // the Q side's tensor maps (the tiles of BwdLayout / BwdWsLayout)
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
  const BwdLaunch L = s.causal ? BwdLaunchFor<D, true>(var) : BwdLaunchFor<D, false>(var);
  if (L.kernel == nullptr) {
    return InvalidArgument("SageBwd CUDA: backward variant " + std::to_string(var) +
                           " is not compiled in");
  }
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
  return CudaStatus(
      cuda::LaunchKernel(DqFinalizeKernel<D>,
                         dim3(static_cast<unsigned>(
                                  CeilDiv(DqFinRuns<D>(s.N, nt * kTile), per_block)),
                              bh),
                         dim3(kDqFinThreads), 0, stream, /*pdl=*/true, w.dqacc, w.dsrow, w.kbar,
                         s.N, nt * kTile, opt.smooth_k && opt.dq_kmean_correction, p.tau, dq,
                         w.armed),
      "SageBwd DqFinalizeKernel launch");
}

}  // namespace

#ifdef ABLATE_SAGE_TRACE
Status SageTraceSet(void* buf) {
  return CudaStatus(cudaMemcpyToSymbol(g_sage_trace, &buf, sizeof(buf)), "SageTraceSet");
}
#endif

size_t SageWorkspaceBytes(const AttnShape& shape, const SageCudaOptions& /*opt*/) {
  if (shape.B < 1 || shape.H < 1 || shape.N < 1 || shape.D < 1) return 0;
  return CarveWorkspace(shape, nullptr).bytes;
}

Status SageForwardCuda(const AttnShape& shape, const SageCudaOptions& opt, const __nv_bfloat16* q,
                       const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o,
                       float* lse, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                       const double* k_parts) {
  Status st = CheckArgs(shape, workspace, workspace_bytes, {q, k, v, o, lse});
  if (!st.ok()) return st;
  const Workspace w = CarveWorkspace(shape, static_cast<char*>(workspace));
  return shape.D == 64 ? ForwardImpl<64>(shape, opt, q, k, v, o, lse, w, k_parts, stream)
                       : ForwardImpl<128>(shape, opt, q, k, v, o, lse, w, k_parts, stream);
}

SageKMeanPartsLayout SageKMeanParts(int n) {
  const int parts = std::max(1, std::min(kKMeanMaxParts, CeilDiv(n, 256)));
  return {parts, CeilDiv(n, parts)};
}

Status SageBackwardCuda(const AttnShape& shape, const SageCudaOptions& opt,
                        const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const __nv_bfloat16* o, const __nv_bfloat16* do_, const float* lse,
                        __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  Status st =
      CheckArgs(shape, workspace, workspace_bytes, {q, k, v, o, do_, lse, dq, dk, dv});
  if (!st.ok()) return st;
  const Workspace w = CarveWorkspace(shape, static_cast<char*>(workspace));
  return shape.D == 64 ? BackwardImpl<64>(shape, opt, k, v, o, do_, lse, dq, dk, dv, w, stream)
                       : BackwardImpl<128>(shape, opt, k, v, o, do_, lse, dq, dk, dv, w, stream);
}

}  // namespace ablate::kernels
