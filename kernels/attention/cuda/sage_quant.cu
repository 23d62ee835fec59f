// SageBwd on the GPU: the quantization launches and the workspace. KMeanPartKernel sums K's rows
// over up to 16 row ranges per head (the K mean of K-smoothing); QuantizeKernel writes the int8
// codes, their transposes and scales of K (minus its mean), V, Q (minus its tile means with
// Q-smoothing, when the forward does not quantize Q itself) and, for the backward, dO with D_i =
// rowsum(dO o O). Quantization (kernels/ALGORITHMS.md §1.2, the emulator's: s = max|X| / 127 over
// the group, all-zero group: s = 1; X^ = round_half_even(X / s) clamped to [-127, 127]; the
// kernels multiply by 1/s, taken once per group, which can differ from the emulator's division by
// one step at exact ties):
//   K^  per (b,h, K / V group) after K-smoothing (K - kbar, kbar = mean of K over all N tokens)
//   V^  per (b,h, K / V group);  Q^ per (b,h, Q tile) after optional Q-smoothing (Q - tile mean)
//       (K / V group = SageKvGroup: 128 keys = two K tiles at d128 without Q-smoothing, else one)
//   dO^ per (b,h, Q tile)
// Every int8 product is an s8 wgmma ("TN": both operands stored with the contraction index
// contiguous), so each quantized tensor is stored in the orientation(s) its products need:
//   S = Q^ K^T      A = Q^ [q][d]      B = K^ [key][d]
//   O += P^ V^      A = P^ [q][key]    B = V^T [d][key]
//   dV += P^T dO^   A = P^T [key][q]   B = dO^T [d][q]
//   dK += dS^T Q^   A = dS^T [key][q]  B = Q^T [d][q]
//   dQ += dS^ K^    A = dS^ [q][key]   B = K^T [d][key]
//   dP = dO V^T     bf16 (A = dO [q][d], B = V [key][d]), or s8 (dO^, V^) with int8_dp
// The codes are padded to 64 rows (zero padding). The query index of Q^T and dO^T (and of the
// P^T / dS^T tiles they meet) runs in BwdQueryOfSlot order within each 16; the key index of V^T
// and K^T in FwdKeyOfSlot order (sage_common.cuh).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include "attention/cuda/sage_common.cuh"

namespace ablate::kernels::sage {
namespace {


// Partial K sums for the K mean: kpart[bh][part][d] = sum of k[bh][r][d] over the rows of part
// `part` (rows_per_part consecutive rows; double sums). grid: (parts, BH), block: D/2 x 16: thread
// (cp, lane16) sums columns 2cp, 2cp+1 over rows lane16, lane16 + 16, ... of the part; the 16 are
// combined in shared memory. QuantizeKernel's K tiles add the parts up (kbar = sum / N). Parts
// rather than one block per head: BH blocks alone filled a third of the SMs.
constexpr int kKMeanLanes = 16;
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
// kG = 2 (K / V quantization groups of 128 keys, AttnOptions::kv_group; modes 0 and 1):
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
    if (p.det_slices > 0) {
      const int ns = DetSlicesOfRow(r0, p.det_slices, p.det_keys, p.det_causal);
      for (int sl = 0; sl < ns; ++sl) {
        ZeroDqRows<D>(p.det_dsrow, p.det_dq, int64_t(sl) * gridDim.y + bh, p.n, p.np, r0, kTile,
                      threadIdx.x, blockDim.x);
      }
    }
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


}  // namespace

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

Status CheckOptions(const AttnOptions& opt) {
  if (opt.ds_bf16 && (opt.smooth_q || opt.dq_kmean_correction)) {
    return InvalidArgument(
        "SageBwd CUDA: ds_bf16 (the dS products in bf16) runs without "
        "smooth_q and dq_kmean_correction on the GPU; the CPU emulator runs "
        "every combination");
  }
  if (opt.ds_row_keys != 0 || opt.ds_col_rows != 0 || opt.p_col_rows != 0) {
    return InvalidArgument("SageBwd CUDA: finer dS / P scale groups (AttnOptions::ds_row_keys, "
                           "ds_col_rows, p_col_rows) are the CPU emulator's");
  }
  if (opt.int8_products != kSageAllProducts) {
    return InvalidArgument("SageBwd CUDA: the kernels run every product in INT8 "
                           "(AttnOptions::int8_products is the CPU emulator's)");
  }
  return Status::Ok();
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

template <int D, bool kPrep, int kG>
Status LaunchQuantize(const AttnShape& s, const QuantParams& qp, int jobs, cudaStream_t stream) {
  QuantizeKernel<D, kPrep, kG>
      <<<dim3(CeilDiv(s.N, kTile * kG), s.B * s.H, jobs), 256 * kG, 0, stream>>>(qp);
  return CudaStatus(cudaGetLastError(), "SageBwd QuantizeKernel launch");
}
// The launches the forward (K, V, Q; 128-key groups at d128) and the backward (dO) make.
template Status LaunchQuantize<64, false, 1>(const AttnShape&, const QuantParams&, int, cudaStream_t);
template Status LaunchQuantize<128, false, 1>(const AttnShape&, const QuantParams&, int,
                                              cudaStream_t);
template Status LaunchQuantize<128, false, 2>(const AttnShape&, const QuantParams&, int,
                                              cudaStream_t);
template Status LaunchQuantize<64, true, 1>(const AttnShape&, const QuantParams&, int, cudaStream_t);
template Status LaunchQuantize<128, true, 1>(const AttnShape&, const QuantParams&, int, cudaStream_t);

template <int D>
Status LaunchKMeanParts(const AttnShape& s, const __nv_bfloat16* k, double* kpart,
                        cudaStream_t stream) {
  const SageKMeanPartsLayout kl = SageKMeanParts(s.N);
  KMeanPartKernel<D><<<dim3(kl.parts, s.B * s.H), D / 2 * kKMeanLanes, 0, stream>>>(
      k, s.N, kl.rows_per_part, kpart);
  return CudaStatus(cudaGetLastError(), "SageBwd KMeanPartKernel launch");
}
template Status LaunchKMeanParts<64>(const AttnShape&, const __nv_bfloat16*, double*, cudaStream_t);
template Status LaunchKMeanParts<128>(const AttnShape&, const __nv_bfloat16*, double*,
                                      cudaStream_t);

}  // namespace ablate::kernels::sage

namespace ablate::kernels {

size_t SageWorkspaceBytes(const AttnShape& shape) {
  if (shape.B < 1 || shape.H < 1 || shape.N < 1 || shape.D < 1) return 0;
  return sage::CarveWorkspace(shape, nullptr).bytes;
}

SageKMeanPartsLayout SageKMeanParts(int n) {
  const int parts = std::max(1, std::min(sage::kKMeanMaxParts, cuda::CeilDiv(n, 256)));
  return {parts, cuda::CeilDiv(n, parts)};
}

}  // namespace ablate::kernels
