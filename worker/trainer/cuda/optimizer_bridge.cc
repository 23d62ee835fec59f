// See optimizer_bridge.h.
#include "trainer/cuda/optimizer_bridge.h"

#include <string>

#include "ablate/cuda_status.h"

#if ABLATE_HAVE_DEVICE_OPTIMIZER
#include "trainer/cuda/device_optimizer.h"
#else
namespace ablate::trainer::cuda {
class DeviceOptimizer {};  // not built: the host path runs
}  // namespace ablate::trainer::cuda
#endif

namespace ablate::trainer::cuda {
OptimizerBridge::~OptimizerBridge() = default;

StatusOr<std::unique_ptr<OptimizerBridge>> OptimizerBridge::Create(
    const config::OptimizerSection& cfg, const std::vector<ParamTensor>& params, size_t num_params,
    cudaStream_t stream) {
  std::unique_ptr<OptimizerBridge> b(new OptimizerBridge());
  b->stream_ = stream;
  b->n_ = num_params;
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  ABLATE_ASSIGN_OR_RETURN(b->device_, DeviceOptimizer::Create(cfg, params, num_params, stream));
#else
  ABLATE_ASSIGN_OR_RETURN(b->host_, Optimizer::Create(cfg, params, num_params));
  b->hw_.resize(num_params);
  b->hg_.resize(num_params);
#endif
  return b;
}

bool OptimizerBridge::uses_device() const { return device_ != nullptr; }

bool OptimizerBridge::SetBf16Mirror(void* d_mirror) {
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  device_->SetBf16Mirror(d_mirror);
  return d_mirror != nullptr;
#else
  (void)d_mirror;
  return false;
#endif
}

Status OptimizerBridge::Step(float* d_weights, const float* d_grads, int64_t step,
                             double lr_scale, double p, OptimizerStats* stats) {
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  return device_->Step(d_weights, d_grads, step, lr_scale, p, stats);
#else
  const size_t bytes = n_ * sizeof(float);
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(hw_.data(), d_weights, bytes, cudaMemcpyDeviceToHost, stream_), "copy"));
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(hg_.data(), d_grads, bytes, cudaMemcpyDeviceToHost, stream_), "copy"));
  ABLATE_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "optimizer copies"));
  ABLATE_RETURN_IF_ERROR(host_->Step(hw_.data(), hg_.data(), step, lr_scale, p, stats));
  ABLATE_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(d_weights, hw_.data(), bytes, cudaMemcpyHostToDevice, stream_), "copy"));
  return CudaStatus(cudaStreamSynchronize(stream_), "optimizer copies");
#endif
}

size_t OptimizerBridge::state_bytes() const {
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  return device_->state_bytes();
#else
  return host_->state_bytes();
#endif
}

size_t OptimizerBridge::state_bytes_fp32() const {
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  return device_->state_bytes_fp32();
#else
  return host_->state_bytes_fp32();
#endif
}

int OptimizerBridge::spectral_tensors() const {
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  return device_->spectral_tensors();
#else
  return host_->spectral_tensors();
#endif
}

StatusOr<std::string> OptimizerBridge::Save() {
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  return device_->Save();
#else
  return host_->Save();
#endif
}

Status OptimizerBridge::Load(const std::string& blob) {
#if ABLATE_HAVE_DEVICE_OPTIMIZER
  return device_->Load(blob);
#else
  return host_->Load(blob);
#endif
}

}  // namespace ablate::trainer::cuda
