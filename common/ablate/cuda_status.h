// CUDA runtime errors as a Status: the one converter of every CUDA host path (kernels' launchers,
// the GPU trainer, the device optimizers), and a device allocation whose failure names its size.
// Include only from code built with the CUDA toolkit.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ablate/status.h"

namespace ablate {

// OK for cudaSuccess; otherwise Internal("<what>: <cudaGetErrorName>: <cudaGetErrorString>").
inline Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorName(err) + ": " +
                  cudaGetErrorString(err));
}

// Every byte DeviceAlloc handed out in this process, never decreased (the trainer allocates at
// start and frees at exit, so this is its allocation peak): the gpu_mem_peak_bytes it reports for
// the GPU-sharing placement (ablate/memory_estimate.h).
inline std::atomic<int64_t>& DeviceBytesAllocated() {
  static std::atomic<int64_t> bytes{0};
  return bytes;
}

// cudaMalloc of `bytes` into *p (*p null, and OK, for 0 bytes). On failure the CUDA error is
// cleared and the Status is Internal("<what>: cudaMalloc of <bytes> bytes failed: <error>").
inline Status DeviceAlloc(void** p, size_t bytes, const char* what) {
  *p = nullptr;
  if (bytes == 0) return Status::Ok();
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status(e == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted
                                                 : StatusCode::kInternal,
                  std::string(what) + ": cudaMalloc of " + std::to_string(bytes) +
                      " bytes failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
  DeviceBytesAllocated() += int64_t(bytes);
  return Status::Ok();
}
template <typename T>
Status DeviceAlloc(T** p, size_t bytes, const char* what) {
  void* v = nullptr;
  Status s = DeviceAlloc(&v, bytes, what);
  *p = static_cast<T*>(v);
  return s;
}

}  // namespace ablate
