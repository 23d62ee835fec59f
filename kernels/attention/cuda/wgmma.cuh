// Hopper warpgroup MMA (wgmma, sm_90a) building blocks for the attention kernels: operand tiles in
// shared memory in the layout the hardware reads, their matrix descriptors, and the m64n64 int8 /
// bf16 instructions with the fences they need, used by the SageBwd v6 forward and v7 backward
// (sage_*.cu) and the FPA forward and d128 backward (fpa_forward.cu, fpa_backward_ws.cuh);
// tests/gpu/kernels/attention/wgmma_gpu_test checks every piece against a CPU GEMM.
//
// Contents (namespace ablate::kernels::cuda::wgmma):
//   GmmaTile<ROWS, ROW_BYTES>  byte offsets of a K-major operand tile (each of ROWS rows holds
//                              ROW_BYTES contiguous bytes along K) in the swizzled layout below
//   LoadGmmaTileAsync          global row-major -> GmmaTile by 16-byte cp.async, zero-filled tail
//   Desc<TILE>(base, k_byte)   the 64-bit matrix descriptor of TILE's rows x the 32-byte K slice
//                              starting at byte k_byte (one k32 int8 / k16 bf16 instruction)
//   FenceProxyAsync, Fence, Commit, Wait<N>
//   MmaS8(d, da, db, acc)      wgmma m64n64k32 s32 += s8 x s8 (both operands from shared memory)
//   MmaBf16(d, da, db, acc)    wgmma m64n64k16 f32 += bf16 x bf16
//   MmaS8First / MmaBf16First  the same for the first K slice, d write-only (no zeroing needed)
//   MmaS8RS(d, a, db)          d += A B with A from registers (the mma.sync A fragment per warp)
//   MmaS8RSFirst(d, a, db)     d = A B, the same for the first K slice (d write-only)
//   MmaBf16RSTransB, DescMN    bf16 with A from registers and B MN-major (stored [K][N])
//   MmaBf16TransB<kFirst>      bf16 with both from shared memory, B MN-major
//   DescStep<TILE>(k_byte)     what Desc<TILE>(base, k_byte) adds to Desc<TILE>(base, 0)
//   DescLo / DescFromLo<TILE>  the descriptor's address word and the tile type's fixed word
//   TileDesc<TILE>(dlo, off, k) a tile's descriptor from its buffer's DescLo and byte offset
//   BulkReduceAddF32, BulkCommit, BulkWaitRead<N>, BulkWait<N>  shared -> global fp32 bulk adds
//   MbarInit / MbarArrive / MbarWait, MbarRing<S>  mbarriers and an S-stage producer / consumer
//                              ring of them (warp-specialized kernels)
//   NamedBarSync / NamedBarArrive(id, threads), SetMaxNRegDec / SetMaxNRegInc<N>  a named
//                              barrier (sync, or arrive without waiting), the
//                              register hand-over between warpgroups
//   GmmaTileTensorMap<TILE, E> (host) the TMA tensor map of a (mats, rows, row elements) global
//                              tensor whose boxes land as TILE's column chunks;
//   LoadGmmaTileTma<TILE, E>   one thread fills a GmmaTile by TMA, completing on an mbarrier;
//   MbarArriveExpectTx         the arrival that announces those bytes; FenceMbarInit
//   FenceOperands(r), PinDesc  keep an in-flight wgmma's A registers live until after its Wait;
//                              form a descriptor before the fence of the wgmmas that read it
//
// Operands (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"): D (64 x 64) =
// A (64 x K) B (K x 64) where A is stored as rows of K (K-major) and B as its transpose, 64 rows
// of K (K-major too): S = Q K^T takes A = Q tile, B = K tile, both as they come from (B, H, N, D).
// int8 wgmma reads only K-major operands, so this is the one layout needed here.
//
// Shared-memory layout ("128B / 64B / 32B swizzle", W = the swizzle width in bytes): a tile is
// ROW_BYTES / W column chunks, each a contiguous [ROWS][W] block; inside a chunk, byte c of row r
// sits at Swizzle(r * W + c), where Swizzle XORs address bits [4, 4 + log2(W / 16)) with bits
// [7, 7 + log2(W / 16)): the 16-byte unit u of row r moves to u ^ ((r * W / 128) % (W / 16)).
// W is 128 when a row has 128 bytes or more (int8 D = 128, bf16 D = 64 / 128), else the row
// length (64: int8 D = 64). Eight rows form one 8 x W "core" block of 8W bytes; the descriptor's
// stride byte offset (SBO) is that, and its leading byte offset is unused for swizzled K-major
// operands (encoded 1, as CUTLASS does). A chunk must start on an 8W-byte boundary (1024 for
// W = 128) so that the swizzle phase the hardware computes from the address matches the one the
// stores used: tiles are placed at multiples of 1024 bytes in a 1024-byte-aligned buffer.
// Advancing K inside a chunk moves the descriptor's start address by the slice's byte offset
// (32 bytes per instruction); the hardware applies the swizzle to the resulting addresses.
//
// Accumulator fragment (m64nN, 4 warps = one warpgroup, N / 2 registers per thread): with
// w = warp % 4, g = lane / 4, t = lane % 4, register d[4j + e] holds
//   row 16 w + g + 8 (e / 2), column 8 j + 2 t + (e % 2)
// i.e. each warp owns 16 rows and, per block of 8 columns, the m16n8 mma.sync accumulator layout
// (attention_common.cuh): the existing epilogues read wgmma results unchanged.
#pragma once

#include <cuda.h>  // CUtensorMap (the encoder is reached through the runtime's driver entry point)
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "attention/cuda/attention_common.cuh"

namespace ablate::kernels::cuda::wgmma {

template <int ROWS, int ROW_BYTES>
struct GmmaTile {
  static constexpr int kRows = ROWS;
  static constexpr int kRowBytes = ROW_BYTES;
  static constexpr int kW = ROW_BYTES >= 128 ? 128 : ROW_BYTES;  // swizzle width
  static constexpr int kChunkCols = ROW_BYTES / kW;               // column chunks
  static constexpr int kChunkBytes = ROWS * kW;
  static constexpr int kBytes = ROWS * ROW_BYTES;
  static constexpr int kUnitMask = kW / 16 - 1;  // 16-byte units per row, minus 1
  static_assert(kW == 128 || kW == 64 || kW == 32, "rows of 32, 64 or a multiple of 128 bytes");
  static_assert(ROW_BYTES % kW == 0, "rows are whole swizzle widths");
  static_assert(ROWS % 8 == 0, "whole 8-row core blocks");
  static_assert(kChunkBytes % 1024 == 0 || kChunkCols == 1,
                "column chunks must stay 1024-byte aligned");
  // Swizzle mode field of the descriptor (bits 62-63): 1 = 128B, 2 = 64B, 3 = 32B.
  static constexpr uint64_t kMode = kW == 128 ? 1 : kW == 64 ? 2 : 3;

  // Byte offset of byte `col_byte` of row `row`.
  __host__ __device__ __forceinline__ static int ByteOffset(int row, int col_byte) {
    const int chunk = col_byte / kW, c = col_byte % kW;
    const int linear = row * kW + c;
    return chunk * kChunkBytes + (linear ^ (((linear >> 7) & kUnitMask) << 4));
  }
};

// Issues (does not commit) the 16-byte cp.async copies of rows [row0, row0 + TILE::kRows) of a
// row-major global matrix whose rows start `src_stride` bytes apart (default: TILE::kRowBytes,
// whole rows) into the tile at `smem`; rows >= n_rows are zero-filled. All THREADS threads call
// it with their index `tid`. Thread tid copies 16-byte unit tid % U of rows tid / U + i R
// (U units per row, R = THREADS / U rows per pass): R is a multiple of the 8-row swizzle period,
// so pass i is pass 0 moved by i R rows in both memories, and the per-copy address work is two
// adds (the swizzle is computed once).
// kGuard false: the caller guarantees rows [row0, row0 + ROWS) all exist (n_rows is ignored), and
// no bounds test is compiled.
template <typename TILE, int THREADS, bool kGuard = true>
__device__ __forceinline__ void LoadGmmaTileAsync(void* smem, const void* gmem_base, int row0,
                                                  int n_rows, int tid,
                                                  int64_t src_stride = TILE::kRowBytes) {
  constexpr int kUnits = TILE::kRowBytes / 16;
  constexpr int kPassRows = THREADS / kUnits;
  static_assert(THREADS % kUnits == 0 && kPassRows % 8 == 0 && TILE::kRows % kPassRows == 0,
                "whole rows per pass, a whole number of swizzle periods per pass");
  const int rt = tid / kUnits, u = tid % kUnits;
  const char* base = static_cast<const char*>(gmem_base);
  const char* src = base + (int64_t(row0 + rt) * src_stride + u * 16);
  const int64_t step = int64_t(kPassRows) * src_stride;
  const uint32_t s = SmemAddr(smem) + TILE::ByteOffset(rt, u * 16);
#pragma unroll
  for (int i = 0; i < TILE::kRows / kPassRows; ++i) {
    if constexpr (kGuard) {
      const bool valid = row0 + rt + i * kPassRows < n_rows;
      CpAsync16(s + i * kPassRows * TILE::kW, valid ? src + i * step : base, valid);
    } else {
      CpAsync16(s + i * kPassRows * TILE::kW, src + i * step, true);
    }
  }
}

// Descriptor words (PTX ISA "Matrix Descriptor Format"): the low word holds the start address / 16
// (bits 0-13) and the leading byte offset (bits 16-29, unused for swizzled K-major operands:
// encoded 1, as CUTLASS does); the high word the stride byte offset / 16 (bits 32-45: one 8-row
// core block, 8 W bytes) and the swizzle mode (bits 62-63), fixed per tile type. Shared addresses
// are below 2^18, so the start field of DescLo(base) + offset / 16 is that of base + offset for
// any 16-byte multiple `offset` inside shared memory: a kernel keeps one DescLo of its buffer and
// builds every tile's descriptor with one add.
__host__ __device__ __forceinline__ uint32_t DescLo(uint32_t base) {
  return ((base & 0x3FFFF) >> 4) | (1u << 16);
}
template <typename TILE>
__host__ __device__ __forceinline__ uint64_t DescFromLo(uint32_t lo) {
  constexpr uint32_t kHi = ((8 * TILE::kW) >> 4) | (uint32_t(TILE::kMode) << 30);
  return (uint64_t(kHi) << 32) | lo;
}

// Descriptor of the TILE at shared address `base` (1024-byte aligned), rows 0..ROWS-1, K bytes
// [k_byte, k_byte + 32) (k_byte a multiple of 32).
template <typename TILE>
__host__ __device__ __forceinline__ uint64_t Desc(uint32_t base, int k_byte) {
  const uint32_t start = base + (k_byte / TILE::kW) * TILE::kChunkBytes + (k_byte % TILE::kW);
  return DescFromLo<TILE>(DescLo(start));
}

// Desc<TILE>(base, k_byte) - Desc<TILE>(base, 0): descriptors of one tile differ only in the start
// address field, so a kernel builds each tile's descriptor once and adds this constant per K slice
// (or per column chunk: Desc(base + bytes, 0) = Desc(base, 0) + bytes / 16 for a 16-byte multiple
// that keeps the 1024-byte alignment).
template <typename TILE>
__host__ __device__ constexpr uint64_t DescStep(int k_byte) {
  return uint64_t(((k_byte / TILE::kW) * TILE::kChunkBytes + k_byte % TILE::kW) >> 4);
}

// Descriptor of the TILE that starts `tile_byte` bytes into a kernel's 1024-byte-aligned shared
// buffer whose DescLo is `dlo`, K slice at byte k_byte: one add (the kernels keep only dlo).
template <typename TILE>
__device__ __forceinline__ uint64_t TileDesc(uint32_t dlo, int tile_byte, int k_byte = 0) {
  return DescFromLo<TILE>(dlo + uint32_t((tile_byte >> 4) + int(DescStep<TILE>(k_byte))));
}

// Makes this thread's generic-proxy writes to shared memory (st.shared, cp.async) visible to the
// async proxy that wgmma reads through; every writing thread runs it before the barrier that
// precedes the wgmma.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Bulk (TMA-engine) element-wise fp32 add of `bytes` (a multiple of 16; both addresses 16-byte
// aligned) from shared memory into global memory, tracked by this thread's bulk async-group: the
// caller runs FenceProxyAsync after writing the source, BulkCommit after issuing, and
// BulkWaitRead<0> before overwriting the source (BulkWait<0> for the global writes themselves).
__device__ __forceinline__ void BulkReduceAddF32(float* gdst, uint32_t ssrc, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(
                   gdst),
               "r"(ssrc), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void BulkCommit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void BulkWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void BulkWait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Orders earlier register and shared-memory accesses of the warpgroup before the next wgmma.
__device__ __forceinline__ void Fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void Commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N committed wgmma groups are pending; their accumulators are then valid.
template <int N>
__device__ __forceinline__ void Wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps registers live (and their values pinned) up to this point: after the Wait that retires
// a wgmma reading them as its A operand, so that the compiler cannot give a value defined while
// the wgmma was in flight the same registers (ptxas would serialize the wgmmas, C7513).
template <int N>
__device__ __forceinline__ void FenceOperands(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Makes a descriptor's value available at this point (its computation cannot sink below it).
__device__ __forceinline__ void PinDesc(uint64_t& d) { asm volatile("" : "+l"(d)); }

// d (+)= A B for one K slice: m64n64k32, s8 x s8 -> s32. `accumulate` false: d = A B.
__device__ __forceinline__ void MmaS8(int32_t (&d)[32], uint64_t da, uint64_t db,
                                      bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
        "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
        "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]),
        "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]),
        "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
      : "l"(da), "l"(db), "r"(int(accumulate)));
}

// d += A B for one K slice with A from registers: m64n64k32 s8, a[0..3] this thread's A
// fragment, which per warp is the mma.sync m16n8k32 A fragment of rows 16 w .. 16 w + 15
// (attention_common.cuh): a[0] = row 16 w + g, bytes 4 t .. 4 t + 3; a[1] = row + 8, same bytes;
// a[2] / a[3] = the same rows, bytes 16 + 4 t .. (w = warp % 4, g = lane / 4, t = lane % 4).
__device__ __forceinline__ void MmaS8RS(int32_t (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1;\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
        "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
        "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]),
        "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]),
        "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// d = A B with A from registers for the first K slice, d write-only (MmaS8First of MmaS8RS).
__device__ __forceinline__ void MmaS8RSFirst(int32_t (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 0;\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]),
        "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]),
        "=r"(d[14]), "=r"(d[15]), "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]),
        "=r"(d[20]), "=r"(d[21]), "=r"(d[22]), "=r"(d[23]), "=r"(d[24]), "=r"(d[25]),
        "=r"(d[26]), "=r"(d[27]), "=r"(d[28]), "=r"(d[29]), "=r"(d[30]), "=r"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// Descriptor of an MN-major B operand (bf16 only: stored [K][N], N contiguous, as a GmmaTile
// whose rows are K) for an N of one swizzle width (64 bf16 = 128 bytes), rows [k_row, k_row + 16)
// of the tile at `base`: the 8-row core groups along K are 8 W bytes apart; that stride goes into
// both offset fields, so the descriptor holds whichever of the two the hardware reads for
// MN-major operands (with a single swizzle atom along N the other is not used).
template <typename TILE>
__host__ __device__ __forceinline__ uint64_t DescMN(uint32_t base, int k_row) {
  static_assert(TILE::kW == 128, "128-byte swizzle");
  constexpr uint32_t kGroup = (8 * TILE::kW) >> 4;
  return DescFromLo<TILE>(((((base + k_row * TILE::kW) & 0x3FFFF) >> 4)) | (kGroup << 16));
}

// d (+)= A B, bf16 m64n64k16, A (64 x 16) from registers (per warp the mma.sync m16n8k16 A
// fragment of rows 16 w .. 16 w + 15), B MN-major (imm-trans-b 1; DescMN).
__device__ __forceinline__ void MmaBf16RSTransB(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t db, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(int(accumulate)));
}

// d = A B for the first K slice (scale-d 0): d is write-only, so the caller does not zero it.
__device__ __forceinline__ void MmaS8First(int32_t (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, 0;\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]),
        "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]),
        "=r"(d[14]), "=r"(d[15]), "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]),
        "=r"(d[20]), "=r"(d[21]), "=r"(d[22]), "=r"(d[23]), "=r"(d[24]), "=r"(d[25]),
        "=r"(d[26]), "=r"(d[27]), "=r"(d[28]), "=r"(d[29]), "=r"(d[30]), "=r"(d[31])
      : "l"(da), "l"(db));
}

// d (+)= A B for one K slice: m64n64k16, bf16 x bf16 -> f32 (no negation, no transposition).
__device__ __forceinline__ void MmaBf16(float (&d)[32], uint64_t da, uint64_t db,
                                        bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(int(accumulate)));
}

// d = A B for the first K slice, bf16 (the MmaS8First of MmaBf16).
__device__ __forceinline__ void MmaBf16First(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, 0, 1, 1, 0, 0;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
        "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]),
        "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]),
        "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
      : "l"(da), "l"(db));
}

// d (+)= A B, bf16 m64n64k16, both from shared memory, A K-major (Desc / TileDesc) and B MN-major
// (stored [K][N]: DescMN, imm-trans-b 1). kFirst: d = A B, d write-only.
template <bool kFirst>
__device__ __forceinline__ void MmaBf16TransB(float (&d)[32], uint64_t da, uint64_t db) {
  if constexpr (kFirst) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, 0, 1, 1, 0, 1;\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
          "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]),
          "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]),
          "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]),
          "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
        : "l"(da), "l"(db));
  } else {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, 1, 1, 1, 0, 1;\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db));
  }
}

// ----------------------------------------------------------------------------------------------
// Warp specialization (sm_90): shared-memory mbarriers between a producer warpgroup and consumer
// warpgroups, named barriers for one warpgroup, and the register hand-over between them.
// ----------------------------------------------------------------------------------------------

// One thread initializes the barrier at shared address `bar` (8 bytes, 8-byte aligned) for
// `count` arrivals per phase; the CTA syncs before anyone else uses it.
__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrives (release, CTA scope): this thread's earlier memory accesses happen before whatever
// follows a wait that sees the phase complete.
__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits (acquire, CTA scope) until the phase with parity `parity` has completed.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// MbarWait for a warp that has nothing else to do and slack before it must run (a producer
// waiting for an empty stage): sleeps ~kSleepNs between tries. Spinning, the producer of the
// warp-specialized backward re-issued try_wait often enough to take ~12% of the issue slots its
// SM sub-partitions share with the consumers (ncu source counters; a try_wait suspend-time hint
// did not stop it).
__device__ __forceinline__ void MbarWaitSleep(uint32_t bar, uint32_t parity) {
  constexpr uint32_t kSleepNs = 256;
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@done bra WAIT_DONE;\n"
      "nanosleep.u32 %2;\n"
      "bra WAIT_LOOP;\n"
      "WAIT_DONE:\n"
      "}\n" ::"r"(bar),
      "r"(parity), "n"(kSleepNs)
      : "memory");
}
// An S-stage ring of shared buffers between one producer warpgroup and its consumers, at 2 S
// mbarriers from shared address bar0 (full[S], then empty[S]). Use n (0, 1, ... in the order both
// sides walk it) takes stage n % S in its phase n / S: the producer acquires it (waits until the
// consumers released use n - S), fills it and commits (arrives on full); each consumer waits for
// the commit, reads, releases (arrives on empty). Arrivals are release, waits acquire (CTA scope).
template <int S>
struct MbarRing {
  uint32_t bar0;
  __device__ __forceinline__ uint32_t Full(int st) const { return bar0 + 8 * st; }
  __device__ __forceinline__ uint32_t Empty(int st) const { return bar0 + 8 * (S + st); }
  // One thread, before the CTA barrier that precedes every other use.
  __device__ __forceinline__ void Init(int producers, int consumers) const {
    for (int st = 0; st < S; ++st) {
      MbarInit(Full(st), producers);
      MbarInit(Empty(st), consumers);
    }
  }
  __device__ __forceinline__ void ProducerAcquire(int n) const {
    if (n >= S) MbarWaitSleep(Empty(n % S), (n / S + 1) & 1);
  }
  __device__ __forceinline__ void ProducerCommit(int n) const { MbarArrive(Full(n % S)); }
  __device__ __forceinline__ void ConsumerWait(int n) const { MbarWait(Full(n % S), (n / S) & 1); }
  __device__ __forceinline__ void ConsumerRelease(int n) const { MbarArrive(Empty(n % S)); }
};
// Barrier `id` (1..15; 0 is __syncthreads') over `threads` threads (a multiple of 32).
__device__ __forceinline__ void NamedBarSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrival at barrier `id` without waiting (the other side of a NamedBarSync over `threads`).
__device__ __forceinline__ void NamedBarArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The warpgroup's per-thread register budget: lowered by a producer, raised by consumers (the
// CTA's pool must hold what the raise asks for; every warp of the warpgroup runs the same one).
template <int N>
__device__ __forceinline__ void SetMaxNRegDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void SetMaxNRegInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ----------------------------------------------------------------------------------------------
// Tensor memory access (TMA, sm_90): one thread copies a whole GmmaTile from global memory with a
// few cp.async.bulk.tensor instructions instead of every thread issuing 16-byte cp.async copies
// with their address and swizzle arithmetic; the copy engine writes the tile in the swizzled
// layout (its 128B / 64B / 32B modes XOR the same address bits as GmmaTile: bits [4, 4 + log2(W /
// 16)) with [7, ...), from the absolute shared address, hence the tiles' 1024-byte alignment),
// zero-fills what lies outside the tensor and completes on an mbarrier by its byte count.
// ----------------------------------------------------------------------------------------------

// Host: the tensor map of a global tensor of `mats` matrices of `rows` rows of `row_elems`
// elements of E bytes (E = 1: int8, 2: bf16), rows `row_stride` bytes apart, matrices
// `mat_stride` bytes apart, whose box is one column chunk of TILE (TILE::kW bytes x TILE::kRows
// rows of one matrix), so LoadGmmaTileTma fills a TILE with TILE::kChunkCols boxes. Rows past
// `rows` (a matrix's tail) read as zeros. `what` names the tensor in the error.
// The driver's cuTensorMapEncodeTiled, looked up once through the runtime (so nothing links
// libcuda); nullptr when the driver has none.
using TensorMapEncoder = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                      const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                      const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                      CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline TensorMapEncoder TensorMapEncodeTiled() {
  static const TensorMapEncoder encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<TensorMapEncoder>(fn);
  }();
  return encode;
}

template <typename TILE, int E>
Status GmmaTileTensorMap(CUtensorMap* map, const void* base, uint64_t row_elems, uint64_t rows,
                         uint64_t mats, uint64_t row_stride, uint64_t mat_stride,
                         const char* what) {
  static_assert(E == 1 || E == 2, "int8 or bf16 elements");
  const TensorMapEncoder encode = TensorMapEncodeTiled();
  if (encode == nullptr) {
    return Status(StatusCode::kInternal,
                  "TMA: the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)");
  }
  const cuuint64_t dims[3] = {row_elems, rows, mats};
  const cuuint64_t strides[2] = {row_stride, mat_stride};
  const cuuint32_t box[3] = {uint32_t(TILE::kW / E), uint32_t(TILE::kRows), 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUtensorMapSwizzle swizzle = TILE::kW == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : TILE::kW == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                      : CU_TENSOR_MAP_SWIZZLE_32B;
  const CUtensorMapDataType type =
      E == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUresult r = encode(map, type, 3, const_cast<void*>(base), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status(StatusCode::kInternal, std::string("TMA: cuTensorMapEncodeTiled failed for ") +
                                             what + " (CUresult " + std::to_string(int(r)) + ")");
  }
  return Status::Ok();
}

// After MbarInit of barriers that TMA copies complete on (the copy engine's async proxy must see
// the initialized state): the initializing thread runs it before the CTA barrier.
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives on the mbarrier at `bar` (release, CTA scope) and adds `bytes` to the transaction count
// its current phase waits for (the TMA copies that complete on it).
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

// One thread: TILE at `smem` (1024-byte aligned) <- the tile of matrix `mat` whose first row is
// `row0` and first element `x0`, through `map` (GmmaTileTensorMap<TILE, E>; a __grid_constant__
// kernel parameter), completing TILE::kBytes on the mbarrier at `bar`.
template <typename TILE, int E>
__device__ __forceinline__ void LoadGmmaTileTma(uint32_t smem, const CUtensorMap* map, int x0,
                                                int row0, int mat, uint32_t bar) {
#pragma unroll
  for (int c = 0; c < TILE::kChunkCols; ++c) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem + c * TILE::kChunkBytes),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(x0 + c * (TILE::kW / E)), "r"(row0), "r"(mat),
        "r"(bar)
        : "memory");
  }
}

}  // namespace ablate::kernels::cuda::wgmma
