// CUDA runtime errors as a Status: the one converter of every CUDA host path (kernels' launchers,
// the GPU trainer, the device optimizers). Include only from code built with the CUDA toolkit.
#pragma once

#include <cuda_runtime.h>

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

}  // namespace ablate
