// SageBwd on the GPU: what the quantization, forward and backward kernels share (internal to
// kernels/attention/cuda). Tile constants, the scale and code arithmetic, the key and query slot
// orders of the transposed codes, the dQ accumulator's layout, the warp-specialized register
// budgets; and, for the host side of the three launch files, the workspace carve-up, the
// quantization launches' parameters and the TMA maps of the codes. The contract is
// attention_cuda.h's; the numerics are kernels/ALGORITHMS.md §1.2.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "ablate/status.h"
#include "attention/cuda/attention_common.cuh"
#include "attention/cuda/sage_scale.cuh"
#include "attention/cuda/attention_cuda.h"
#include "attention/cuda/wgmma.cuh"

namespace ablate::kernels::sage {
namespace {

using cuda::wgmma::TileDesc;

using cuda::CeilDiv;
using ::ablate::CudaStatus;
using cuda::LptBlock;  // (attention_common.cuh, with LptGrid: shared with the FPA kernels)
using cuda::LptGrid;
using cuda::GroupScale;
using cuda::GroupScaleBranchless;
using cuda::QuadMax;
using cuda::QuadSum;
using cuda::RcpFastPath;
using cuda::RcpNewton;

constexpr int kTile = 64;  // Bq == Bkv
static_assert(kSageBq == kTile && kSageBkv == kTile, "kernels assume Bq == Bkv == 64");
constexpr int kThreads = 128;


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

// BwdPlan::ws: consumer warpgroups per CTA (one K tile each) and the register budgets after the
// hand-over: the producer warpgroup keeps 24 per thread, the consumers share the rest of the
// SM's 64 K (setmaxnreg takes multiples of 8): 240 for two consumer warpgroups (the backward, the
// two-group forward), 160 for three (the forward's three groups). (Measured and dropped: three backward
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
// (backward, the fast codes): round_half_even(x * inv_s) formed by one FMA into the mantissa of 1.5 *
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

using cuda::SoftmaxScale;  // (attention_common.cuh)

// Waits for this thread's cp.async copies (the caller then syncs the block).
__device__ __forceinline__ void CopyWait() {
  cuda::CpAsyncCommit();
  cuda::CpAsyncWait<0>();
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



// *armed == kDqArmed <=> dsrow and dqacc are zero: set by a v5+ forward after zeroing them, read
// by the backward's prep launch, cleared by the dQ conversion after the backward kernel added into
// them (clearing it in the backward kernel itself cost that kernel 3-4%: its code changed).
constexpr int kDqArmed = 0x5A6E4451;



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


// The scale (sk or sv) of K tile j's K / V group: per-group scales with the per-tile row stride
// ntk, one group per 64 << kv_shift keys (FwdParams, BwdParams).
template <typename P>
__device__ __forceinline__ float KvGroupScale(const float* scale, const P& p, int64_t bh, int j) {
  return scale[bh * p.ntk + (j >> p.kv_shift)];
}
// kv_shift of a K / V group of kvg keys (64 or 128).
constexpr int KvShift(int kvg) { return kvg == 2 * kTile ? 1 : 0; }


}  // namespace

// ----------------------------------------------------------------------------------------------
// Host side shared by the launch files (sage_quant.cu defines these).
// ----------------------------------------------------------------------------------------------

// Partial K sums of the K mean (KMeanPartKernel): at most this many row ranges per head.
constexpr int kKMeanMaxParts = 16;

// Workspace carve-up (see attention_cuda.h).
struct Workspace {
  int8_t *qh, *qht, *kh, *kht, *vh, *vht, *doh, *doht;
  float *sq, *sk, *sv, *sdo, *kbar, *mu, *drow, *dsrow, *dqacc;
  double* kpart;
  int* armed;  // kDqArmed: dsrow and dqacc are zero (the forward kernel zeroed them)
  size_t bytes;
};

// The workspace's regions at `base` (nullptr: only the byte count, Workspace::bytes).
Workspace CarveWorkspace(const AttnShape& s, char* base);

// The launchers' argument checks: the shape, the workspace (size, 256-byte alignment) and the
// tensors (non-null, 16-byte aligned).
// InvalidArgument for the emulator-only options (ds_bf16, int8_products other than all).
Status CheckOptions(const AttnOptions& opt);
Status CheckArgs(const AttnShape& s, void* workspace, size_t workspace_bytes,
                 std::initializer_list<const void*> ptrs);

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
  // Deterministic backward (det_slices > 0): the scratch's dQ and rowsum(dS) slices (DetSlices),
  // of which the prep zeroes, always, those each row receives.
  float *det_dq, *det_dsrow;
  int det_slices, det_keys;
  bool det_causal;
};

// The deterministic backward's slices (BwdParams::det_heads): one per CTA of `keys` keys, slice s
// holding the sums over keys s keys .. (s + 1) keys - 1, as dqacc (BH, np, D) in DqAccIndex blocks
// and dsrow (BH, n), slice after slice. Row `row` of a head receives slices 0 ..
// DetSlicesOfRow - 1 (causal: those with a key at or before the row's Q tile's last row; keys is a
// multiple of the 64-row Q tile): the prep zeroes exactly those rows, the conversion sums exactly
// those, in slice order, so a slice row that a CTA never adds into is neither read nor needed.
__host__ __device__ __forceinline__ int DetSlicesOfRow(int row, int slices, int keys, bool causal) {
  return causal ? min(slices, row / keys + 1) : slices;
}


// QuantizeKernel over `jobs` tensors of qp (grid: tiles, BH, jobs): kPrep = the backward's dO
// launch (with D_i), kG = 64-row tiles per block (2: the 128-key K / V groups).
template <int D, bool kPrep, int kG>
Status LaunchQuantize(const AttnShape& s, const QuantParams& qp, int jobs, cudaStream_t stream);

// KMeanPartKernel: the K mean's partial sums of k over SageKMeanParts(n) row ranges into kpart.
template <int D>
Status LaunchKMeanParts(const AttnShape& s, const __nv_bfloat16* k, double* kpart,
                        cudaStream_t stream);

// TMA tensor maps (BwdPlan::tma, kTmaF) of the workspace's int8 codes as the kernels' GmmaTiles
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

}  // namespace ablate::kernels::sage
