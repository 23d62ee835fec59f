// Shared device pieces of the attention kernels (fpa_*.cu, sage_*.cu), sm_80+ instructions
// (cp.async, ldmatrix, mma.sync) plus sm_90's griddepcontrol; built for sm_90a.
//
// Contents (namespace ablate::kernels::cuda):
//   host:    CudaStatus(err, what)        cudaError_t -> Status, once, at the launcher's edge
//   pdl:     LaunchKernel(..., pdl), GridDepWait / GridDepLaunchDependents (programmatic
//            dependent launch: a kernel's blocks start during its predecessor's tail)
//   smem:    SwizzledTile<ROWS, ROW_BYTES> byte offsets of a row-major tile in shared memory whose
//                                          16-byte chunks are XOR-swizzled (bank-conflict-free
//                                          ldmatrix and 16-byte cp.async; see below)
//   copy:    CpAsync16 / CpAsyncCommit / CpAsyncWait<N>, LoadTileAsync<...> (global -> smem tile
//            with zero-fill of rows past the end: tails need no separate path)
//   ldmatrix: LdMatrixX4 / LdMatrixX4Trans / LdMatrixX2(.Trans) on shared addresses (and
//            StMatrixX4 / StMatrixX4Trans, sm_90, the other way), plus
//            fragment loaders for the m16n8k16 operands from swizzled tiles
//   mma:     MmaBf16 (m16n8k16, bf16 x bf16 -> fp32), MmaS8 (m16n8k32, s8 x s8 -> s32)
//   regs:    PackBf16x2, AccToBf16A (fp32 accumulator tile -> bf16 A fragments, no smem trip),
//            StageAccBf16 / StoreTileRows (accumulator -> swizzled smem tile -> 16-byte row stores)
//   softmax: QuadMax / QuadSum (reduce over the 4 threads that share an accumulator row),
//            ApplyMask (a predicate on (row, col) sets masked accumulator entries to -inf)
//   grids:   LptBlock (causal grids longest-first in groups of heads), LptGrid / LptHeadsAuto /
//            ResidentCtas (host: a launch's grid and group size, the CTAs resident at a time),
//            CheckGridLimits (B * H, N)
//
// Fragment layouts (PTX ISA "Matrix Fragments for mma.m16n8k16 / m16n8k32"). Throughout,
//   g = lane / 4 (the "group", 0..7), t = lane % 4 (thread in group, 0..3).
//   Accumulator C/D of m16n8 (fp32 or s32), 4 values per thread:
//     c[0], c[1]: row g,     cols 2t, 2t+1
//     c[2], c[3]: row g + 8, cols 2t, 2t+1
//   bf16 A (16 x 16, row-major), 4 x b32 registers, each two bf16 along k:
//     a[0]: row g, k 2t..2t+1     a[1]: row g+8, k 2t..2t+1
//     a[2]: row g, k 2t+8..+9     a[3]: row g+8, k 2t+8..+9
//   bf16 B (16 x 8, k x n), 2 x b32:  b[0]: k 2t..2t+1, col g     b[1]: k 2t+8..+9, col g
//   s8 A (16 x 32): same as bf16 A with "two bf16" read as "four int8" (k 4t..4t+3, +16 for a[2],
//     a[3]); s8 B (32 x 8): b[0]: k 4t..4t+3, col g; b[1]: k 4t+16..+19, col g. So an int8 tile
//     stored row-major with 16-byte chunks is read with the same (non-transposing) ldmatrix
//     addressing as bf16, counting columns in bytes: a 16 x 32 int8 A block is the 16 x 16 "b16"
//     block at byte column 0..31. ldmatrix .trans transposes 16-bit elements and cannot transpose
//     int8: an int8 operand needed in both orientations must be stored twice (or transposed with
//     shuffles/prmt).
//
// Which loader for which operand (all tiles row-major in smem, as they come from (B,H,N,D)):
//   A = X[m][k] stored as X (e.g. Q for S = Q K^T):           LoadAFrag        (ldmatrix)
//   A = X[m][k] stored as X^T[k][m] (e.g. dS for dQ from dS^T): LoadAFragTrans  (ldmatrix.trans)
//   B = Y[k][n] stored as Y^T[n][k] (e.g. K for S = Q K^T):   LoadBFrag2       (ldmatrix)
//   B = Y[k][n] stored as Y[k][n]   (e.g. V for O = P V):     LoadBFrag2Trans  (ldmatrix.trans)
//   The B loaders return two adjacent n-blocks of 8 (16 columns) at once.
//
// Swizzle: a row holds ROW_BYTES / 16 chunks of 16 bytes. Chunk c of row r is stored at chunk
//   c ^ (r & 7)            when the row has >= 8 chunks (128 B+: bf16 D=64/128, int8 D=128)
//   c ^ ((r >> 1) & 3)     when it has 4 chunks (64 B: int8 D=64, bf16 32 columns)
// so the 8 rows that one ldmatrix 8x8 matrix (or 8 lanes of a cp.async) touch at one logical chunk
// land in 8 different 16-byte bank groups. Element offsets inside a chunk are not permuted, so
// 4-byte accumulator stores (row g, col 2t) are conflict-free too.
//
// Every device helper is __forceinline__; nothing here allocates or synchronizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ablate/cuda_status.h"
#include "ablate/status.h"

namespace ablate::kernels::cuda {

// ----------------------------------------------------------------------------------------------
// Host: CUDA errors -> Status.
// ----------------------------------------------------------------------------------------------

// Returns from the enclosing Status function when a CUDA call fails.
#define ABLATE_CUDA_RETURN_IF_ERROR(expr, what)                          \
  do {                                                                   \
    ::ablate::Status _st = ::ablate::CudaStatus((expr), (what)); \
    if (!_st.ok()) return _st;                                           \
  } while (0)

// ----------------------------------------------------------------------------------------------
// Programmatic dependent launch (sm_90). A kernel launched by LaunchKernel(..., pdl = true) may
// start while the kernel before it on the stream is still running (from the moment every block of
// that kernel has run GridDepLaunchDependents(), or exited): its blocks fill the SMs the earlier
// kernel's tail leaves idle and run their independent prologue. It must call GridDepWait() before
// it reads anything the earlier kernel writes or writes anything that kernel reads; GridDepWait
// returns once the earlier kernel has completed and its writes are visible. Both are no-ops in a
// kernel launched without the attribute. A kernel launched with pdl = true that never waits would
// race: only kernels that wait are launched that way.
// ----------------------------------------------------------------------------------------------
__device__ __forceinline__ void GridDepWait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void GridDepLaunchDependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// cudaLaunchKernelEx with the programmatic-stream-serialization attribute when `pdl`.
template <typename... KernelArgs, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Rounds x up to a multiple of a (a > 0).
constexpr int64_t RoundUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
constexpr int CeilDiv(int x, int a) { return (x + a - 1) / a; }

// ----------------------------------------------------------------------------------------------
// Shared-memory tiles.
// ----------------------------------------------------------------------------------------------

// A ROWS x ROW_BYTES row-major tile whose 16-byte chunks are swizzled (see the file comment).
template <int ROWS, int ROW_BYTES>
struct SwizzledTile {
  static constexpr int kRows = ROWS;
  static constexpr int kRowBytes = ROW_BYTES;
  static constexpr int kChunks = ROW_BYTES / 16;  // 16-byte chunks per row
  static constexpr int kBytes = ROWS * ROW_BYTES;
  static_assert(ROW_BYTES % 16 == 0, "rows are whole 16-byte chunks");
  static_assert(kChunks == 4 || kChunks % 8 == 0, "swizzle defined for 4 or 8k chunks per row");

  // Byte offset of chunk `chunk` (logical) of row `row`.
  __device__ __forceinline__ static int ChunkOffset(int row, int chunk) {
    const int phys = kChunks >= 8 ? (chunk ^ (row & 7)) : (chunk ^ ((row >> 1) & 3));
    return row * ROW_BYTES + phys * 16;
  }
  // Byte offset of byte `col_byte` of row `row` (any byte, not only chunk starts).
  __device__ __forceinline__ static int ByteOffset(int row, int col_byte) {
    return ChunkOffset(row, col_byte >> 4) + (col_byte & 15);
  }
};

// A bf16 tile of ROWS x COLS elements.
template <int ROWS, int COLS>
using Bf16Tile = SwizzledTile<ROWS, COLS * 2>;

// Shared-memory address (32-bit, state space .shared) of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ----------------------------------------------------------------------------------------------
// cp.async (16 bytes, L2-only .cg) with zero fill.
// ----------------------------------------------------------------------------------------------

// Copies 16 bytes from global `src` to shared `dst`; when !valid copies nothing and writes 16 zero
// bytes (src-size 0; src must still be a mapped address: pass the tensor's base).
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_size));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups are still pending (N = 0: all done). The caller still
// needs __syncthreads() before other threads read the data. The memory clobber keeps the
// compiler from moving the thread's own reads of its copies above the wait (the quantize
// kernel's staged paths read them without a barrier; every other caller's barrier was one
// already: the attention kernels' PTX is the same with or without it).
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Issues (does not commit) the cp.async copies of rows [row0, row0 + TILE::kRows) of a row-major
// global matrix with `row_bytes_global` bytes per row (== TILE::kRowBytes, the whole row) into the
// swizzled tile at `smem`. Rows >= n_rows are zero-filled. All THREADS threads of the block call
// it with their thread index `tid`.
template <typename TILE, int THREADS>
__device__ __forceinline__ void LoadTileAsync(void* smem, const void* gmem_base, int row0,
                                              int n_rows, int tid) {
  constexpr int kTotal = TILE::kRows * TILE::kChunks;
  static_assert(kTotal % THREADS == 0, "tile chunks must split evenly over the threads");
  const char* base = static_cast<const char*>(gmem_base);
  const uint32_t s = SmemAddr(smem);
#pragma unroll
  for (int i = 0; i < kTotal / THREADS; ++i) {
    const int idx = i * THREADS + tid;
    const int r = idx / TILE::kChunks, c = idx % TILE::kChunks;
    const bool valid = row0 + r < n_rows;
    const char* src =
        valid ? base + (int64_t(row0 + r) * TILE::kRowBytes + c * 16) : base;
    CpAsync16(s + TILE::ChunkOffset(r, c), src, valid);
  }
}

// ----------------------------------------------------------------------------------------------
// ldmatrix.
// ----------------------------------------------------------------------------------------------

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// stmatrix (sm_90): lane 8i + k gives the address of row k of matrix i, which receives the
// fragment r[i] (lane l holds row l / 4, the 32 bits at byte 4 (l % 4) of the row's 16).
__device__ __forceinline__ void StMatrixX4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                           uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
// stmatrix (sm_90): the inverse of LdMatrixX4Trans; lane 8i + k gives the address of row k of
// matrix i, which receives column k of the fragment r[i] (lane l holds row l / 4, columns
// 2 (l % 4), +1, the lower column in the low 16 bits).
__device__ __forceinline__ void StMatrixX4Trans(uint32_t addr, uint32_t r0, uint32_t r1,
                                                uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ void LdMatrixX2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX2Trans(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// Fragment loaders from a swizzled bf16 tile (TILE = Bf16Tile<R, C>) at shared address `base`.
// Coordinates are in elements; row0 multiple of 8 (16 for A), col0 multiple of 8 (16 for k).
// For int8 tiles (m16n8k32) call them with the tile viewed as b16: col0 in units of 2 bytes.

// A (16 x 16) = X[row0 .. row0+15][col0 .. col0+15] with X stored row-major (m along rows).
template <typename TILE>
__device__ __forceinline__ void LoadAFrag(uint32_t (&a)[4], uint32_t base, int row0, int col0,
                                          int lane) {
  const int r = row0 + (lane & 15);
  const int c = col0 + ((lane >> 4) << 3);
  LdMatrixX4(a, base + TILE::ChunkOffset(r, c >> 3));
}

// A (16 x 16) with m = stored column, k = stored row: A[m][k] = X[k0 + k][m0 + m] (X^T stored).
template <typename TILE>
__device__ __forceinline__ void LoadAFragTrans(uint32_t (&a)[4], uint32_t base, int k0, int m0,
                                               int lane) {
  const int r = k0 + (lane & 7) + ((lane >> 4) << 3);
  const int c = m0 + (((lane >> 3) & 1) << 3);
  LdMatrixX4Trans(a, base + TILE::ChunkOffset(r, c >> 3));
}

// Two B fragments (k 16 x n 8 each, n-blocks n0..n0+7 -> b[0..1], n0+8..n0+15 -> b[2..3]) of
// B[k][n] = Y[n0 + n][k0 + k], i.e. the tile stores B^T row-major (n along rows): K for S = Q K^T.
template <typename TILE>
__device__ __forceinline__ void LoadBFrag2(uint32_t (&b)[4], uint32_t base, int n0, int k0,
                                           int lane) {
  const int r = n0 + (lane & 7) + ((lane >> 4) << 3);
  const int c = k0 + (((lane >> 3) & 1) << 3);
  LdMatrixX4(b, base + TILE::ChunkOffset(r, c >> 3));
}

// Two B fragments of B[k][n] = Y[k0 + k][n0 + n], the tile stores B row-major (k along rows):
// V for O = P V. n-block n0 -> b[0..1], n0+8 -> b[2..3].
template <typename TILE>
__device__ __forceinline__ void LoadBFrag2Trans(uint32_t (&b)[4], uint32_t base, int k0, int n0,
                                                int lane) {
  const int r = k0 + (lane & 7) + (((lane >> 3) & 1) << 3);
  const int c = n0 + ((lane >> 4) << 3);
  LdMatrixX4Trans(b, base + TILE::ChunkOffset(r, c >> 3));
}

// ----------------------------------------------------------------------------------------------
// Tensor-core MMA.
// ----------------------------------------------------------------------------------------------

// d += a (16x16 bf16) * b (16x8 bf16), fp32 accumulate (in place).
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The two 8-column halves of one ldmatrix.x4 B fragment (16 columns, LoadBFrag2 /
// LoadBFrag2Trans): d0 += a * b[0..1], d1 += a * b[2..3].
__device__ __forceinline__ void MmaBf16x2(float (&d0)[4], float (&d1)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[4]) {
  MmaBf16(d0, a, b[0], b[1]);
  MmaBf16(d1, a, b[2], b[3]);
}

// d += a (16x32 s8) * b (32x8 s8), s32 accumulate (in place). Exact (no saturation in practice:
// |sum| <= 32 * 127^2 per instruction).
__device__ __forceinline__ void MmaS8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                      uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ----------------------------------------------------------------------------------------------
// Register helpers.
// ----------------------------------------------------------------------------------------------

// Two floats -> one b32 of two bf16 (lo = first, round to nearest even).
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The fp32 accumulator of a 16 x (8*NT) tile (NT n-blocks of m16n8, acc[nb][0..3]) as bf16 A
// fragments for the next MMA, which contracts over those 8*NT columns: a[kk] covers columns
// 16kk .. 16kk+15 (n-blocks 2kk, 2kk+1). Used for P in O = P V, P^T in dV = P^T dO, etc.
template <int NT>
__device__ __forceinline__ void AccToBf16A(uint32_t (&a)[NT / 2][4], const float (&acc)[NT][4]) {
  static_assert(NT % 2 == 0, "need an even number of n-blocks");
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    a[kk][0] = PackBf16x2(acc[2 * kk][0], acc[2 * kk][1]);
    a[kk][1] = PackBf16x2(acc[2 * kk][2], acc[2 * kk][3]);
    a[kk][2] = PackBf16x2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[kk][3] = PackBf16x2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  }
}

// Accumulator -> global in 16-byte row pieces, through a swizzled bf16 tile TILE (Bf16Tile) in
// shared memory: StageAccBf16 writes a warp's 16 x 8NT fp32 fragment (rows row0 + g, + 8 of the
// tile; columns col0 + 8nb + 2t, + 1), times mul0 / mul1 for its two rows, as bf16 (conflict-free
// 4-byte writes when row0 % 8 == 0); after a barrier over the writers, StoreTileRows copies rows
// 0 .. nrows - 1 to dst (row stride ld elements) with 16-byte loads and stores, a warp covering
// whole rows. The accumulator layout's own 4-byte stores write 16 bytes of each of eight rows
// per warp instruction: ~5 us per CTA for SageBwd's d128 dK / dV (lab timeline, sage_*.cu).
template <typename TILE, int NT>
__device__ __forceinline__ void StageAccBf16(char* s, int row0, int col0, int lane,
                                             const float (&acc)[NT][4], float mul0, float mul1) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    const float mul = h ? mul1 : mul0;
#pragma unroll
    for (int nb = 0; nb < NT; ++nb) {
      *reinterpret_cast<uint32_t*>(s + TILE::ByteOffset(row, 2 * (col0 + 8 * nb + 2 * t))) =
          PackBf16x2(acc[nb][2 * h] * mul, acc[nb][2 * h + 1] * mul);
    }
  }
}
template <typename TILE>
__device__ __forceinline__ void StoreTileRows(const char* s, __nv_bfloat16* dst, int64_t ld,
                                              int nrows, int tid, int nthreads) {
  constexpr int kChunks = TILE::kChunks;
  for (int q = tid; q < nrows * kChunks; q += nthreads) {
    const int row = q / kChunks, c = q % kChunks;
    const int4 v = *reinterpret_cast<const int4*>(s + TILE::ChunkOffset(row, c));
    *reinterpret_cast<int4*>(reinterpret_cast<char*>(dst + row * ld) + 16 * c) = v;
  }
}

template <int NT>
__device__ __forceinline__ void ZeroAcc(float (&acc)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}

// f(std::integral_constant<int, I>{}) for I = 0..N-1, in order: a loop whose index is a constant
// expression in the body (register-array indices, `if constexpr` on the step).
template <int N, int I = 0, typename F>
__device__ __forceinline__ void StaticFor(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    StaticFor<N, I + 1>(f);
  }
}

// ----------------------------------------------------------------------------------------------
// Online softmax pieces.
// ----------------------------------------------------------------------------------------------

// Max / sum over the 4 threads (t = 0..3) of a group: the threads that hold one accumulator row.
__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}
__device__ __forceinline__ int QuadMax(int x) {
  x = max(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = max(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

// exp2 via the SFU (ex2.approx.ftz): exp2(-inf) = 0.
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// SageBwd's softmax scale a = tau sq sk log2e (the forward's; the backwards' a2, formed in the
// same order) with its two lowest mantissa bits cleared (a relative change below 2.4e-7, the same
// in every pass, far inside the ex2.approx error): then 1.5 * 2^23 a is exact, and the forward's
// interior tiles form a (S - rowmax) by one FMA on the magic-form sum (SageForwardKernelV5).
__device__ __forceinline__ float SoftmaxScale(float a) {
  return __uint_as_float(__float_as_uint(a) & ~3u);
}

// Longest-first grids of the causal kernels (SageBwd's forward kLptF and backward kBwdLpt, FPA's
// production forward and backward): grid (BH, blocks per head), block rb = 0 the heaviest. The
// CTA at dispatch position x + y BH runs block rb of head bh, in groups of `group` heads (the
// last group also takes the BH % group heads left over; group >= BH: one group, (rb, bh) = (y,
// x), SageBwd's order earlier; group = 1: head by head, FPA's earlier):
// inside a group the blocks go longest-first across its heads, and the groups follow each other.
// The hardware dispatches CTAs in about that order, so the CTAs in flight together span about
// `group` heads, which share their operands in L2 (a forward's K / V; a backward's Q side and
// dQ accumulator); longest-first across all heads, the heaviest blocks of every head ran
// together and read their operands from DRAM each (SageBwd causal, same binary: B8
// H16 N2048 d128 backward 1.19x faster in groups, the GPT-2 small shape B16 H12 N1024 d64 1.08x,
// the others 1.00-1.02x). Each group ends with its lightest blocks, so the balance holds where
// the last group carries enough work (LptHeadsAuto). (SageBwd's d64 backward, at its 168-register
// bound, spills 20 bytes for the mapping's values: measured with them.)
__device__ __forceinline__ void LptBlock(int group, int& rb, int& bh) {
  const int nh = int(gridDim.x), nb = int(gridDim.y);
  const int pos = int(blockIdx.x) + int(blockIdx.y) * nh;
  const int ng = max(nh / group, 1);                     // groups
  const int gi = min(pos / (group * nb), ng - 1);        // this CTA's
  const int g0 = gi * group;                             // its first head
  const int gh = gi == ng - 1 ? nh - g0 : group;         // its heads
  const int r = pos - g0 * nb;                           // the position inside it
  rb = r / gh;
  bh = g0 + (r - rb * gh);
}

// The CTAs of `kernel` (launched with threads x smem) resident at a time on the current device:
// the SM count times the occupancy, queried once per (kernel, device, launch size) and cached,
// since every causal launch asks (each training step, twice per layer).
template <typename Kernel>
StatusOr<int64_t> ResidentCtas(Kernel kernel, int threads, size_t smem) {
  int dev = 0;
  ABLATE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev), "attention: cudaGetDevice");
  using Key = std::tuple<const void*, int, int, size_t>;
  static std::mutex mu;
  static std::map<Key, int64_t> cache;
  const Key key{reinterpret_cast<const void*>(kernel), dev, threads, smem};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  int sms = 0, per_sm = 0;
  ABLATE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                              "attention: SM count");
  ABLATE_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
      "attention: occupancy");
  const int64_t resident = int64_t(std::max(per_sm, 1)) * sms;
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, resident);
  return resident;
}
// LptBlock's group size in production (the kernels' lpt_heads parameter 0)
// for a causal grid of nb blocks per head whose kernel runs `resident` CTAs at a time on the GPU:
// 16 heads, or more where the last group would not carry two waves of its heaviest block's work
// (a causal head's nb blocks carry ~nb^2 / 2 block units against its heaviest block's nb, so a
// group of g heads fills the GPU for g nb / (2 resident) of them). Measured (H200, SageBwd,
// same binary): groups of 8-32 heads within 1% of each other at B8 H16 N2048 and B2 H16 N8192
// d128 causal, all heads in one group up to 1.19x slower, 1-2 heads up to 1.06x slower; a last
// group short of that work (B8 H16 N1024 d64, 3 CTAs per SM, groups of 44 heads from an L2-size
// rule) 1.06x slower, as were the L2 rule's 50 + 14 heads in the B4 H16 N2048 forward.
template <typename Kernel>
StatusOr<int> LptHeadsAuto(Kernel kernel, int threads, size_t smem, int nb) {
  ABLATE_ASSIGN_OR_RETURN(const int64_t resident, ResidentCtas(kernel, threads, smem));
  return static_cast<int>(
      std::clamp<int64_t>((2 * resident + nb - 1) / std::max(nb, 1), 16, 1 << 20));
}
// The grid of a launch of nb blocks per head over bh heads. lpt: (bh, nb), the kernel mapping
// it through LptBlock with *lpt_heads heads per group, where a 0 (production's choice) becomes
// LptHeadsAuto's; else (nb, bh), *lpt_heads unread and left as it is.
template <typename Kernel>
StatusOr<dim3> LptGrid(bool lpt, int bh, int nb, Kernel kernel, int threads, size_t smem,
                       int* lpt_heads) {
  if (!lpt) return dim3(nb, bh);
  if (*lpt_heads == 0) {
    ABLATE_ASSIGN_OR_RETURN(*lpt_heads, LptHeadsAuto(kernel, threads, smem, nb));
  }
  return dim3(bh, nb);
}

// The launch grids' limits on a shape (InvalidArgument naming `who`, before any launch): B * H
// and the number of 64-row tiles each sit in a grid dimension of at most 65535 blocks in some
// launch (gridDim.y: the non-causal grids (tiles, B * H), the causal longest-first grids (B * H,
// tiles), the quantize / K-mean launches), so B * H <= 65535 and N <= 65535 * 64.
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxN = kMaxGridY * 64;
inline Status CheckGridLimits(int64_t bh, int64_t n, const std::string& who) {
  if (bh > kMaxGridY) {
    return InvalidArgument(who + ": B*H must be <= " + std::to_string(kMaxGridY) + ", got " +
                           std::to_string(bh));
  }
  if (n > kMaxN) {
    return InvalidArgument(who + ": N must be <= " + std::to_string(kMaxN) +
                           " (65535 tiles of 64 rows), got " + std::to_string(n));
  }
  return Status::Ok();
}

// Sets acc entries to -inf where masked(row, col) is true, for a 16 x (8*NT) accumulator tile
// whose top-left element is at (row0, col0) in the caller's coordinates (a warp's 16 rows).
// Use as: ApplyMask(s, q0, k0, lane, [&](int r, int c) { return c >= n || (kCausal && c > r); });
// Call it only on tiles that can contain masked entries (diagonal / tail): callers choose with a
// compile-time flag so full tiles pay nothing.
template <int NT, typename Pred>
__device__ __forceinline__ void ApplyMask(float (&acc)[NT][4], int row0, int col0, int lane,
                                          Pred masked) {
  const int r = row0 + (lane >> 2);
  const int c = col0 + 2 * (lane & 3);
#pragma unroll
  for (int nb = 0; nb < NT; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int rr = r + ((e >> 1) << 3);
      const int cc = c + nb * 8 + (e & 1);
      if (masked(rr, cc)) acc[nb][e] = -INFINITY;
    }
  }
}

}  // namespace ablate::kernels::cuda
