// The optimizer of the CUDA backend: trainer::cuda::DeviceOptimizer (device_optimizer.h) when it
// is built, else the CPU trainer::Optimizer driven through host copies of the weights and
// gradients (correct and format-compatible, but it moves 2 x 4 bytes per parameter over PCIe each
// step). uses_device() says which one runs; the start line reports it.
// Thread safety: not thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "ablate/status.h"
#include "ablate/trial_config.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/optimizer.h"

namespace ablate::trainer::cuda {

class DeviceOptimizer;

class OptimizerBridge {
 public:
  static StatusOr<std::unique_ptr<OptimizerBridge>> Create(const config::OptimizerSection& cfg,
                                                           const std::vector<ParamTensor>& params,
                                                           size_t num_params, cudaStream_t stream);
  ~OptimizerBridge();
  // d_weights updated in place from d_grads (device pointers, the flat layout); see Optimizer::Step.
  Status Step(float* d_weights, const float* d_grads, int64_t step, double lr_scale, double p,
              OptimizerStats* stats);
  size_t state_bytes() const;
  size_t state_bytes_fp32() const;
  int spectral_tensors() const;
  StatusOr<std::string> Save();
  Status Load(const std::string& blob);
  bool uses_device() const;
  // Lets the device optimizer write the model's bf16 weight mirror in its update kernels
  // (DeviceOptimizer::SetBf16Mirror). True when it will (then skip GptCuda's own refresh after a
  // Step: WeightsUpdated(true)); false on the host path, which leaves d_mirror alone.
  bool SetBf16Mirror(void* d_mirror);

 private:
  OptimizerBridge() = default;
  cudaStream_t stream_ = nullptr;
  size_t n_ = 0;
  std::unique_ptr<DeviceOptimizer> device_;
  std::unique_ptr<Optimizer> host_;
  std::vector<float> hw_, hg_;
};

}  // namespace ablate::trainer::cuda
