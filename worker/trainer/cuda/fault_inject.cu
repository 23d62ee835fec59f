#include "trainer/cuda/fault_inject.h"

#include <cstdlib>
#include <cstring>

#include "ablate/cuda_status.h"

namespace ablate::trainer::cuda {

namespace {

__global__ void WriteUnmapped(int* p) { *p = 1; }

}  // namespace

int64_t InjectedFaultStep() {
  static const int64_t step = []() -> int64_t {
    const char* v = std::getenv("ABLATE_INJECT_DEVICE_FAULT_AT_STEP");
    if (!v) return 0;
    const char* only = std::getenv("ABLATE_INJECT_DEVICE_FAULT_TRIAL");
    const char* self = std::getenv("ABLATE_TRIAL_ID");
    if (only && *only && (!self || std::strcmp(only, self) != 0)) return 0;
    return std::strtoll(v, nullptr, 10);
  }();
  return step;
}

Status InjectDeviceFault() {
  // Address 16 is never mapped on the device.
  WriteUnmapped<<<1, 1>>>(reinterpret_cast<int*>(16));
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "injected device fault: launch"));
  return CudaStatus(cudaDeviceSynchronize(), "injected device fault");
}

}  // namespace ablate::trainer::cuda
