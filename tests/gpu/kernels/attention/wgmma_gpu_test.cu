// kernels/attention/cuda/wgmma.cuh on the GPU against a CPU GEMM (label gpu; skips without a GPU):
// one warpgroup loads A (64 x K) and B (64 x K), both K-major, into GmmaTiles by cp.async, runs
// the K slices through wgmma (MmaS8: m64n64k32 s8; MmaBf16: m64n64k16 bf16), twice (the second
// pass accumulates: 2 A B, which checks the scale-d predicate), and writes the accumulator
// fragments out by the documented mapping; MmaS8RS takes A from registers in the mma.sync
// fragment layout instead, and the MN-major B forms (MmaBf16RSTransB, MmaBf16TransB) read B
// stored [K][N]. int8 must match exactly; bf16 within fp32 summation error. Tiles: int8 K = 64
// (64B swizzle), int8 K = 128 (128B), bf16 K = 64 (128B), bf16 K = 128 (two 128B column chunks).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "ablate/bf16.h"
#include "attention/cuda/wgmma.cuh"
#include "gpu/hopper_test.h"

namespace ablate::kernels::cuda::wgmma {
namespace {

constexpr int kM = 64, kN = 64, kThreads = 128;

// Element type -> (tile, K per instruction, instruction).
template <typename T, int K>
struct Gemm;
template <int K>
struct Gemm<int8_t, K> {
  using Tile = GmmaTile<64, K>;
  using Acc = int32_t;
  static constexpr int kSliceBytes = 32;  // k32
  __device__ static void Mma(Acc (&d)[32], uint64_t da, uint64_t db, bool acc) {
    MmaS8(d, da, db, acc);
  }
};
template <int K>
struct Gemm<__nv_bfloat16, K> {
  using Tile = GmmaTile<64, 2 * K>;
  using Acc = float;
  static constexpr int kSliceBytes = 32;  // k16
  __device__ static void Mma(Acc (&d)[32], uint64_t da, uint64_t db, bool acc) {
    MmaBf16(d, da, db, acc);
  }
};

// The dynamic shared-memory base aligned to 1024 bytes: the swizzle phase is taken from address
// bits, so the tests align it as the kernels do (+1 KB of launch slack).
__device__ char* AlignedSmem(char* raw) {
  return raw + ((1024 - (SmemAddr(raw) & 1023)) & 1023);
}
// Waits for this thread's tile copies and makes them visible to wgmma (async proxy) block-wide.
__device__ void WaitStagedTiles() {
  CpAsyncCommit();
  CpAsyncWait<0>();
  FenceProxyAsync();
  __syncthreads();
}
// The register-A operand of a warpgroup wgmma from a row-major 64-row matrix in global memory
// (row_bytes per row), as S slices of 32 bytes (s8 k32 / bf16 k16): per warp, the mma.sync A
// fragment of its 16 rows (the same byte layout for both element types).
template <int S>
__device__ void LoadAFragments(const void* a, int row_bytes, uint32_t (&frag)[S][4]) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const char* base = static_cast<const char*>(a);
  auto word = [&](int row, int byte) {
    uint32_t v;
    memcpy(&v, base + row * row_bytes + byte, 4);
    return v;
  };
  for (int s = 0; s < S; ++s) {
    frag[s][0] = word(16 * w + g, 32 * s + 4 * t);
    frag[s][1] = word(16 * w + g + 8, 32 * s + 4 * t);
    frag[s][2] = word(16 * w + g, 32 * s + 16 + 4 * t);
    frag[s][3] = word(16 * w + g + 8, 32 * s + 16 + 4 * t);
  }
}
// Writes a 64 x 64 accumulator (m64nNk layout: warp w holds rows 16w..16w+15) to c, row-major.
template <typename Acc>
__device__ void StoreAcc(const Acc (&d)[32], Acc* c) {
  const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < 8; ++j) {
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * w + g + 8 * (e / 2), col = 8 * j + 2 * t + (e % 2);
      c[row * kN + col] = d[4 * j + e];
    }
  }
}

template <typename T, int K>
__global__ void __launch_bounds__(kThreads) GemmKernel(const T* a, const T* b,
                                                       typename Gemm<T, K>::Acc* c) {
  using G = Gemm<T, K>;
  using Tile = typename G::Tile;
  extern __shared__ __align__(16) char smem_raw[];
  char* const sa = AlignedSmem(smem_raw);
  char* const sb = sa + Tile::kBytes;  // kBytes is a multiple of 1024
  LoadGmmaTileAsync<Tile, kThreads>(sa, a, 0, kM, threadIdx.x);
  LoadGmmaTileAsync<Tile, kThreads>(sb, b, 0, kN, threadIdx.x);
  WaitStagedTiles();

  typename G::Acc d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0;
  const uint32_t ba = SmemAddr(sa), bb = SmemAddr(sb);
  Fence();
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int k = 0; k < Tile::kRowBytes; k += G::kSliceBytes) {
      G::Mma(d, Desc<Tile>(ba, k), Desc<Tile>(bb, k), pass > 0 || k > 0);
    }
  }
  Commit();
  Wait<0>();
  StoreAcc(d, c);
}

// MmaS8RS: A from registers in the documented fragment layout (per warp, the mma.sync m16n8k32
// A fragment of its 16 rows), B from a GmmaTile; two passes as above, the first slice by
// MmaS8RSFirst into poisoned accumulators.
template <int K>
__global__ void __launch_bounds__(kThreads) RsGemmKernel(const int8_t* a, const int8_t* b,
                                                         int32_t* c) {
  using Tile = GmmaTile<64, K>;
  extern __shared__ __align__(16) char smem_raw[];
  char* const sb = AlignedSmem(smem_raw);
  LoadGmmaTileAsync<Tile, kThreads>(sb, b, 0, kN, threadIdx.x);
  WaitStagedTiles();
  uint32_t frag[K / 32][4];
  LoadAFragments(a, K, frag);
  int32_t d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0x1234567;  // MmaS8RSFirst must overwrite, not add
  const uint32_t bb = SmemAddr(sb);
  Fence();
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int s = 0; s < K / 32; ++s) {
      if (pass == 0 && s == 0) {
        MmaS8RSFirst(d, frag[s], Desc<Tile>(bb, 0));
      } else {
        MmaS8RS(d, frag[s], Desc<Tile>(bb, 32 * s));
      }
    }
  }
  Commit();
  Wait<0>();
  StoreAcc(d, c);
}

// MmaBf16RSTransB: A (64 x 64 bf16, row-major in global) from registers, B stored [K][N] (N
// contiguous) in a GmmaTile whose rows are K, read MN-major through DescMN; two passes.
__global__ void __launch_bounds__(kThreads) RsBf16MnKernel(const __nv_bfloat16* a,
                                                           const __nv_bfloat16* b_kn, float* c) {
  constexpr int K = 64;
  using Tile = GmmaTile<K, 2 * kN>;  // K rows of N bf16 (128 bytes)
  extern __shared__ __align__(16) char smem_raw[];
  char* const sb = AlignedSmem(smem_raw);
  LoadGmmaTileAsync<Tile, kThreads>(sb, b_kn, 0, K, threadIdx.x);
  WaitStagedTiles();
  uint32_t frag[K / 16][4];
  LoadAFragments(a, 2 * K, frag);
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  const uint32_t bb = SmemAddr(sb);
  Fence();
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int s = 0; s < K / 16; ++s) {
      MmaBf16RSTransB(d, frag[s], DescMN<Tile>(bb, 16 * s), pass > 0 || s > 0);
    }
  }
  Commit();
  Wait<0>();
  StoreAcc(d, c);
}

// MmaBf16TransB: A (64 x 64 bf16, row-major in global) from a K-major GmmaTile, B stored [K][N]
// as above, read MN-major; two passes, the first slice by MmaBf16TransB<true> into poisoned
// accumulators (it must overwrite them, not add).
__global__ void __launch_bounds__(kThreads)
    SsBf16MnKernel(const __nv_bfloat16* a, const __nv_bfloat16* b_kn, float* c) {
  constexpr int K = 64;
  using TileA = GmmaTile<kM, 2 * K>;
  using TileB = GmmaTile<K, 2 * kN>;
  extern __shared__ __align__(16) char smem_raw[];
  char* const sa = AlignedSmem(smem_raw);
  char* const sb = sa + TileA::kBytes;  // kBytes is a multiple of 1024
  LoadGmmaTileAsync<TileA, kThreads>(sa, a, 0, kM, threadIdx.x);
  LoadGmmaTileAsync<TileB, kThreads>(sb, b_kn, 0, K, threadIdx.x);
  WaitStagedTiles();
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 1e30f;
  const uint32_t ba = SmemAddr(sa), bb = SmemAddr(sb);
  Fence();
  for (int pass = 0; pass < 2; ++pass) {
#pragma unroll
    for (int s = 0; s < K / 16; ++s) {
      if (pass == 0 && s == 0) {
        MmaBf16TransB<true>(d, Desc<TileA>(ba, 0), DescMN<TileB>(bb, 0));
      } else {
        MmaBf16TransB<false>(d, Desc<TileA>(ba, 32 * s), DescMN<TileB>(bb, 16 * s));
      }
    }
  }
  Commit();
  Wait<0>();
  StoreAcc(d, c);
}

template <typename T>
void Check(const char* what, const std::vector<T>& a, const std::vector<T>& b, int k,
           const std::vector<double>& got) {
  // The CPU twin: 2 A B^T in double (exact for int8).
  double worst = 0.0;
  int bad = 0;
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < kN; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int q = 0; q < k; ++q) {
        double x, y;
        if constexpr (std::is_same_v<T, int8_t>) {
          x = a[i * k + q];
          y = b[j * k + q];
        } else {
          x = Bf16Value(a[i * k + q]);
          y = Bf16Value(b[j * k + q]);
        }
        ref += 2.0 * x * y;
        mag += 2.0 * std::fabs(x * y);
      }
      const double err = std::fabs(got[i * kN + j] - ref);
      // int8: exact. bf16: products are exact in fp32, 2K fp32 additions of partial sums <= mag
      // (floored at 1e-5 mag in case the tensor cores add with fewer bits); a layout error is
      // O(mag).
      const double tol =
          std::is_same_v<T, int8_t> ? 0.0 : std::max(2.0 * k * 6e-8, 1e-5) * mag;
      worst = std::max(worst, mag > 0 ? err / mag : err);
      if (!(err <= tol) && bad++ < 5) {  // NaN (the poison) fails too
        ADD_FAILURE() << what << ": D[" << i << "][" << j << "] = " << got[i * kN + j]
                      << ", CPU " << ref;
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
  std::printf("[wgmma] %s: %d of %d elements off, worst |err| / sum|terms| %.3g\n", what, bad,
              kM * kN, worst);
}

// register_a: int8 only, RsGemmKernel (A from registers) instead of GemmKernel.
template <typename T, int K>
void RunGemm(const char* what, uint32_t seed, bool register_a = false) {
  using G = Gemm<T, K>;
  using Acc = typename G::Acc;
  // Host copies: int8 values, or bf16 bit patterns (uint16_t) for __nv_bfloat16.
  using H = std::conditional_t<std::is_same_v<T, int8_t>, int8_t, uint16_t>;
  static_assert(sizeof(H) == sizeof(T));
  std::mt19937 rng(seed);
  std::vector<H> ha(kM * K), hb(kN * K);
  if constexpr (std::is_same_v<T, int8_t>) {
    std::uniform_int_distribution<int> u(-127, 127);
    for (auto& x : ha) x = static_cast<int8_t>(u(rng));
    for (auto& x : hb) x = static_cast<int8_t>(u(rng));
  } else {
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : ha) x = Bf16Bits(nd(rng));
    for (auto& x : hb) x = Bf16Bits(nd(rng));
  }
  T *da = nullptr, *db = nullptr;
  Acc* dc = nullptr;
  ASSERT_EQ(cudaMalloc(&da, sizeof(T) * ha.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, sizeof(T) * hb.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, sizeof(Acc) * kM * kN), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, ha.data(), sizeof(T) * ha.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, hb.data(), sizeof(T) * hb.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dc, 0xFF, sizeof(Acc) * kM * kN), cudaSuccess);  // poison
  const int smem = 2 * G::Tile::kBytes + 1024;
  auto kernel = GemmKernel<T, K>;
  if constexpr (std::is_same_v<T, int8_t>) {
    if (register_a) kernel = RsGemmKernel<K>;
  }
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            cudaSuccess);
  kernel<<<1, kThreads, smem>>>(da, db, dc);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<Acc> hc(kM * kN);
  ASSERT_EQ(cudaMemcpy(hc.data(), dc, sizeof(Acc) * hc.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  Check(what, ha, hb, K, std::vector<double>(hc.begin(), hc.end()));
}

TEST(WgmmaGpu, S8K64Swizzle64) {
  SKIP_WITHOUT_HOPPER();
  RunGemm<int8_t, 64>("s8 K=64 (64B swizzle)", 1);
}
TEST(WgmmaGpu, S8K128Swizzle128) {
  SKIP_WITHOUT_HOPPER();
  RunGemm<int8_t, 128>("s8 K=128 (128B swizzle)", 2);
}
TEST(WgmmaGpu, S8RegisterAK64) {
  SKIP_WITHOUT_HOPPER();
  RunGemm<int8_t, 64>("s8 A from registers, K=64", 5, true);
}
TEST(WgmmaGpu, S8RegisterAK128) {
  SKIP_WITHOUT_HOPPER();
  RunGemm<int8_t, 128>("s8 A from registers, K=128", 6, true);
}
// A (64 x 64) times B given as [K][N] bf16 by KERNEL(a, b_kn, c), twice, against the CPU twin.
void RunMnMajorB(void (*kernel)(const __nv_bfloat16*, const __nv_bfloat16*, float*), int smem,
                 const char* what) {
  constexpr int K = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> ha(kM * K), hb_kn(K * kN), hb_nk(kN * K);
  for (auto& x : ha) x = Bf16Bits(nd(rng));
  for (int k = 0; k < K; ++k) {
    for (int n = 0; n < kN; ++n) {
      hb_kn[k * kN + n] = Bf16Bits(nd(rng));
      hb_nk[n * K + k] = hb_kn[k * kN + n];  // the [N][K] form Check multiplies
    }
  }
  __nv_bfloat16 *da = nullptr, *db = nullptr;
  float* dc = nullptr;
  ASSERT_EQ(cudaMalloc(&da, 2 * ha.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, 2 * hb_kn.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, sizeof(float) * kM * kN), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(da, ha.data(), 2 * ha.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, hb_kn.data(), 2 * hb_kn.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dc, 0xFF, sizeof(float) * kM * kN), cudaSuccess);  // poison
  ASSERT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            cudaSuccess);
  kernel<<<1, kThreads, smem>>>(da, db, dc);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> hc(kM * kN);
  ASSERT_EQ(cudaMemcpy(hc.data(), dc, sizeof(float) * hc.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  Check(what, ha, hb_nk, K, std::vector<double>(hc.begin(), hc.end()));
}
TEST(WgmmaGpu, Bf16RegisterAMnMajorB) {
  SKIP_WITHOUT_HOPPER();
  RunMnMajorB(RsBf16MnKernel, GmmaTile<64, 2 * kN>::kBytes + 1024,
              "bf16 A from registers, B MN-major, K=64");
}
TEST(WgmmaGpu, Bf16SharedAMnMajorB) {
  SKIP_WITHOUT_HOPPER();
  RunMnMajorB(SsBf16MnKernel, GmmaTile<kM, 128>::kBytes + GmmaTile<64, 2 * kN>::kBytes + 1024,
              "bf16 A from shared memory, B MN-major, K=64");
}
TEST(WgmmaGpu, Bf16K64Swizzle128) {
  SKIP_WITHOUT_HOPPER();
  RunGemm<__nv_bfloat16, 64>("bf16 K=64 (128B swizzle)", 3);
}
TEST(WgmmaGpu, Bf16K128TwoChunks) {
  SKIP_WITHOUT_HOPPER();
  RunGemm<__nv_bfloat16, 128>("bf16 K=128 (two 128B column chunks)", 4);
}

// The layout arithmetic itself, on the host: every byte of a tile lands once, inside the tile,
// and 16-byte units stay whole (what cp.async and the hardware rely on).
template <int ROWS, int ROW_BYTES>
void ExpectBijective() {
  using Tile = GmmaTile<ROWS, ROW_BYTES>;
  std::vector<int> seen(Tile::kBytes, 0);
  for (int r = 0; r < ROWS; ++r) {
    for (int c = 0; c < ROW_BYTES; ++c) {
      const int off = Tile::ByteOffset(r, c);
      ASSERT_GE(off, 0);
      ASSERT_LT(off, Tile::kBytes);
      ++seen[off];
      // Same 16-byte unit as the unit's first byte, at the same distance; inside its chunk.
      ASSERT_EQ(off - Tile::ByteOffset(r, c - c % 16), c % 16);
      ASSERT_EQ(off / Tile::kChunkBytes, c / Tile::kW);
    }
  }
  for (int v : seen) ASSERT_EQ(v, 1);
}

// What the hardware reads for a descriptor, from the PTX ISA's canonical K-major layouts
// (Swizzle<B,4,3> o ((8, m), (T, 2k)) : ((W / elem, SBO), (1, T)) in bytes): row r of the
// instruction's 64 at start + (r % 8) W + (r / 8) SBO + kk for byte kk < 32 of its K slice, then
// address bits [4, 4 + B) XORed with bits [7, 7 + B) of the shared address. Decodes the
// descriptor's fields and checks every byte against GmmaTile::ByteOffset for each K slice.
template <int ROWS, int ROW_BYTES>
void ExpectDescriptorsMatchLayout() {
  using Tile = GmmaTile<ROWS, ROW_BYTES>;
  const uint32_t base = 0x4000;  // any 1024-byte-aligned shared address
  for (int k0 = 0; k0 < ROW_BYTES; k0 += 32) {
    const uint64_t d = Desc<Tile>(base, k0);
    const uint32_t start = uint32_t(d & 0x3FFF) << 4;
    const uint32_t sbo = uint32_t((d >> 32) & 0x3FFF) << 4;
    const int mode = int(d >> 62);
    ASSERT_EQ((d >> 49) & 7, 0u) << "base offset";
    ASSERT_EQ(mode, int(Tile::kMode));
    const int bits = mode == 1 ? 3 : mode == 2 ? 2 : 1;  // 128B, 64B, 32B
    const int w = 16 << bits;
    for (int r = 0; r < ROWS; ++r) {
      for (int kk = 0; kk < 32; ++kk) {
        uint32_t a = start + (r % 8) * w + (r / 8) * sbo + kk;
        a ^= ((a >> 7) & ((1u << bits) - 1)) << 4;
        ASSERT_EQ(int(a - base), Tile::ByteOffset(r, k0 + kk))
            << "tile " << ROWS << "x" << ROW_BYTES << " slice " << k0 << " row " << r;
      }
    }
  }
}

TEST(WgmmaLayout, DescriptorsAddressTheStoredLayout) {
  ExpectDescriptorsMatchLayout<64, 64>();   // int8 D = 64
  ExpectDescriptorsMatchLayout<64, 128>();  // int8 D = 128, bf16 D = 64
  ExpectDescriptorsMatchLayout<64, 256>();  // bf16 D = 128
}

TEST(WgmmaLayout, SwizzleIsABijectionOnWholeUnits) {
  ExpectBijective<64, 64>();
  ExpectBijective<64, 128>();
  ExpectBijective<64, 256>();
  ExpectBijective<128, 128>();
  EXPECT_EQ((GmmaTile<64, 64>::kMode), 2u);
  EXPECT_EQ((GmmaTile<64, 256>::kMode), 1u);
  EXPECT_EQ((GmmaTile<64, 256>::kChunkCols), 2);
}

}  // namespace
}  // namespace ablate::kernels::cuda::wgmma
