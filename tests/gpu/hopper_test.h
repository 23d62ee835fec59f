// Shared by the GPU tests that run sm_90a instructions directly (wgmma_gpu_test,
// sage_scale_gpu_test): whether a Hopper-class device is present, and the skip otherwise.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace ablate::gputest {

inline bool HaveHopperGpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
}

}  // namespace ablate::gputest

#define SKIP_WITHOUT_HOPPER() \
  if (!::ablate::gputest::HaveHopperGpu()) GTEST_SKIP() << "no sm_90 CUDA device"
