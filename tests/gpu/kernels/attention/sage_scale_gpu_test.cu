// The branch-free group scale and reciprocal of the SageBwd backward (sage_scale.cuh) against the
// IEEE operations they replace, on every float they can meet: GroupScaleBranchless(x) ==
// GroupScale(x) for every finite x >= 0 (2^31 - 2^23 inputs), RcpNewton(s) == 1.0f / s for every
// s where RcpFastPath(s) holds (both signs), and RcpFastPath false exactly outside
// 2^-126 <= |s| < 2^126. Mismatches are counted on the device and the first one reported.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "attention/cuda/sage_scale.cuh"
#include "gpu/hopper_test.h"

namespace ablate::kernels::cuda {
namespace {

struct Result {
  unsigned long long mismatches;
  unsigned int first;  // bits of the first mismatching input found (any order)
  unsigned int got, want;
};

__device__ void Record(Result* r, uint32_t in, float got, float want) {
  if (atomicAdd(&r->mismatches, 1ull) == 0) {
    r->first = in;
    r->got = __float_as_uint(got);
    r->want = __float_as_uint(want);
  }
}

// Inputs: the bits [lo, hi) (64-bit bounds so that hi may be 2^32).
__global__ void GroupScaleKernel(uint64_t lo, uint64_t hi, Result* r) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t b = lo + uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < hi; b += stride) {
    const float x = __uint_as_float(uint32_t(b));
    const float got = GroupScaleBranchless(x), want = GroupScale(x);
    if (__float_as_uint(got) != __float_as_uint(want)) Record(r, uint32_t(b), got, want);
  }
}

__global__ void RcpKernel(uint64_t lo, uint64_t hi, Result* r) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t b = lo + uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < hi; b += stride) {
    const uint32_t bits = uint32_t(b);
    const float s = __uint_as_float(bits);
    const uint32_t e = (bits >> 23) & 0xFF;
    const bool fast = e >= 1 && e <= 252;  // 2^-126 <= |s| < 2^126
    if (RcpFastPath(s) != fast) {
      Record(r, bits, RcpFastPath(s) ? 1.0f : 0.0f, fast ? 1.0f : 0.0f);
    } else if (fast) {
      const float got = RcpNewton(s), want = 1.0f / s;
      if (__float_as_uint(got) != __float_as_uint(want)) Record(r, bits, got, want);
    }
  }
}

Result RunCheck(void (*launch)(Result*)) {
  Result* d = nullptr;
  Result h{};
  EXPECT_EQ(cudaMalloc(&d, sizeof(Result)), cudaSuccess);
  EXPECT_EQ(cudaMemset(d, 0, sizeof(Result)), cudaSuccess);
  launch(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  return h;
}

TEST(SageScaleGpu, GroupScaleBranchlessEqualsDivisionForEveryFiniteNonNegativeInput) {
  SKIP_WITHOUT_HOPPER();
  const Result r = RunCheck([](Result* d) {
    GroupScaleKernel<<<1024, 256>>>(0, 0x7F800000ull, d);  // +0 .. the largest finite float
  });
  EXPECT_EQ(r.mismatches, 0u) << "first input bits 0x" << std::hex << r.first << ": got 0x"
                              << r.got << ", division 0x" << r.want;
}

TEST(SageScaleGpu, RcpNewtonEqualsIeeeReciprocalOnItsFastPath) {
  SKIP_WITHOUT_HOPPER();
  const Result r = RunCheck([](Result* d) {
    RcpKernel<<<1024, 256>>>(0, 0x100000000ull, d);  // every 32-bit pattern
  });
  EXPECT_EQ(r.mismatches, 0u) << "first input bits 0x" << std::hex << r.first << ": got 0x"
                              << r.got << ", want 0x" << r.want;
}

// The checks above can fail: a scale one ulp off (x RN(1/127) without the correction) and a
// reciprocal without its Newton step differ from the IEEE results on many inputs.
__global__ void BrokenKernel(Result* r) {
  const uint32_t b = 0x3F000000u + blockIdx.x * blockDim.x + threadIdx.x;  // [0.5, 1)
  const float x = __uint_as_float(b);
  const float naive = x * (1.0f / 127.0f);
  if (__float_as_uint(naive) != __float_as_uint(GroupScale(x))) atomicAdd(&r->mismatches, 1ull);
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  if (__float_as_uint(y) != __float_as_uint(1.0f / x)) atomicAdd(&r[1].mismatches, 1ull);
}

TEST(SageScaleGpu, TheComparisonsSeeOneUlp) {
  SKIP_WITHOUT_HOPPER();
  Result* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 2 * sizeof(Result)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0, 2 * sizeof(Result)), cudaSuccess);
  BrokenKernel<<<4096, 256>>>(d);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Result h[2];
  ASSERT_EQ(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  EXPECT_GT(h[0].mismatches, 0u);
  EXPECT_GT(h[1].mismatches, 0u);
}

}  // namespace
}  // namespace ablate::kernels::cuda
