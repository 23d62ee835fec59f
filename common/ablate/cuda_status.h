// CUDA runtime errors as a Status: the one converter of every CUDA host path (kernels' launchers,
// the GPU trainer, the device optimizers), and a device allocation whose failure names its size.
// Include only from code built with the CUDA toolkit.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
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

// cudaMalloc of `bytes` into *p (*p null, and OK, for 0 bytes). On failure the CUDA error is
// cleared and the Status is Internal("<what>: cudaMalloc of <bytes> bytes failed: <error>").
inline Status DeviceAlloc(void** p, size_t bytes, const char* what) {
  *p = nullptr;
  if (bytes == 0) return Status::Ok();
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Internal(std::string(what) + ": cudaMalloc of " + std::to_string(bytes) +
                    " bytes failed: " + cudaGetErrorString(e));
  }
  return Status::Ok();
}

}  // namespace ablate
