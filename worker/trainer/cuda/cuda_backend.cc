// See cuda_backend.h.
#include "trainer/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ablate/cuda_status.h"
#include "ablate/memory_estimate.h"
#include "trainer/cuda/data_parallel.h"
#include "trainer/cuda/device_optimizer.h"
#include "trainer/cuda/fault_inject.h"
#include "trainer/cuda/gpt_cuda.h"
#include "trainer/cuda/step_profile_cuda.h"

namespace ablate::trainer::cuda {
namespace {

class CudaBackend : public TrainBackend {
 public:
  CudaBackend(std::unique_ptr<GptCuda> model, std::unique_ptr<DeviceOptimizer> opt,
              std::string device_name)
      : model_(std::move(model)), opt_(std::move(opt)), device_name_(std::move(device_name)) {
    // The optimizer writes the bf16 weight mirror in its update kernels (saves a full pass).
    opt_->SetBf16Mirror(model_->bf16_weights());
    mirror_by_opt_ = model_->bf16_weights() != nullptr;
  }

  size_t num_params() const override { return model_->num_params(); }
  double FlopsPerToken() const override { return model_->FlopsPerToken(); }
  std::pair<double, std::string> PeakFlops() const override { return GpuPeakFlops(); }
  int64_t DeviceMemoryBytes() const override {
    return DeviceBytesAllocated().load() + config::kContextBytes;
  }
  nlohmann::json StartInfo() const override {
    return {{"backend", "cuda"},
            {"device", device_name_},
            {"gpus", 1},
            {"precision", "bf16 GEMM operands and activations, fp32 master weights, grads, "
                          "residual stream and reductions"},
            {"optimizer_device", "cuda"}};
  }
  size_t optimizer_state_bytes() const override { return opt_->state_bytes(); }
  size_t optimizer_state_bytes_fp32() const override { return opt_->state_bytes_fp32(); }
  int spectral_tensors() const override { return opt_->spectral_tensors(); }

  Status ZeroGrad() override { return model_->ZeroGrad(); }
  StatusOr<StepProfiler*> StepProfile() override {
    if (!profiler_) {
      profiler_ = std::make_unique<CudaStepProfiler>(model_->stream());
      model_->set_profiler(profiler_.get());
    }
    return profiler_.get();
  }
  Status TrainMicroStep(const int32_t* inputs, const int32_t* targets, int mb,
                        float grad_scale) override {
    ABLATE_RETURN_IF_ERROR(model_->Forward(inputs, targets, mb));
    return model_->Backward(grad_scale);
  }
  StatusOr<double> TakeTrainLoss() override { return model_->TakeLoss(); }
  StatusOr<double> GradNormAndClip(double max_norm) override {
    return model_->GradNormAndClip(max_norm);
  }
  Status OptimizerStep(int64_t step, double lr_scale, double p, OptimizerStats* stats) override {
    if (InjectedFaultStep() == step) ABLATE_RETURN_IF_ERROR(InjectDeviceFault());
    ProfileMark(profiler_.get(), StepPhase::kOptimizer);
    ABLATE_RETURN_IF_ERROR(
        opt_->Step(model_->weights(), model_->grads(), step, lr_scale, p, stats));
    return model_->WeightsUpdated(mirror_by_opt_);
  }
  StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int mb) override {
    return model_->Loss(inputs, targets, mb);
  }
  StatusOr<std::vector<Gpt<float>::LayerDiagnostics>> Diagnostics() override {
    return model_->AttentionDiagnostics(1);
  }
  StatusOr<std::string> SaveWeights() override {
    std::string bytes(model_->num_params() * sizeof(float), '\0');
    ABLATE_RETURN_IF_ERROR(model_->GetWeights(reinterpret_cast<float*>(bytes.data())));
    return bytes;
  }
  StatusOr<std::string> SaveOptimizer() override { return opt_->Save(); }
  Status LoadWeights(const std::string& bytes) override {
    if (bytes.size() != model_->num_params() * sizeof(float)) {
      return DataLoss("checkpoint weights do not match the model");
    }
    // Copied out first: the string's buffer may not be suitably aligned for float.
    std::vector<float> w(model_->num_params());
    std::memcpy(w.data(), bytes.data(), bytes.size());
    return model_->SetWeights(w.data());
  }
  Status LoadOptimizer(const std::string& blob) override { return opt_->Load(blob); }
  Status SetGemmTuning(std::shared_ptr<const GemmTuning> tuning) override {
    tuned_ = tuning != nullptr;
    Status st = model_->SetGemmTuning(std::move(tuning));
    if (!st.ok()) tuned_ = false;
    return st;
  }
  StatusOr<GemmTuning> TuneGemms(int candidates, int reps, double min_gain) override {
    return model_->TuneGemms(candidates, reps, min_gain);
  }
  nlohmann::json GemmTuningUse() const override {
    return tuned_ ? GemmUseJson(model_->GemmUse()) : nlohmann::json();
  }

 private:
  std::unique_ptr<GptCuda> model_;
  std::unique_ptr<DeviceOptimizer> opt_;
  std::string device_name_;
  bool mirror_by_opt_ = false;
  bool tuned_ = false;                          // a GEMM tuning table is in use
  std::unique_ptr<CudaStepProfiler> profiler_;  // declared last: destroyed before the model
};

}  // namespace

nlohmann::json GemmUseJson(const kernels::cuda::LtGemm::Use& use) {
  return {
      {"gemm_problems", use.problems}, {"gemm_tuned", use.tuned}, {"gemm_rejected", use.rejected}};
}

std::pair<double, std::string> GpuPeakFlops() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    return {989.4e12, "assumed H100 SXM dense bf16 (device query failed)"};
  }
  const std::string name = prop.name;
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H100") && (has("PCIe") || has("PCIE"))) return {756.0e12, name + ": dense bf16 756 TFLOP/s"};
  if (has("H100") || has("H200") || has("H800") || has("GH200")) {
    return {989.4e12, name + ": dense bf16 989 TFLOP/s (datasheet)"};
  }
  if (has("A100")) return {312.0e12, name + ": dense bf16 312 TFLOP/s (datasheet)"};
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
  const double peak = double(prop.multiProcessorCount) * clock_khz * 1e3 * 4096.0;
  std::ostringstream os;
  os << name << ": estimate " << prop.multiProcessorCount << " SMs x " << clock_khz / 1e6
     << " GHz x 4096 bf16 FLOP/cycle";
  return {peak, os.str()};
}

StatusOr<std::unique_ptr<TrainBackend>> CreateCudaBackend(const config::TrialConfig& config,
                                                          Gpt<float> model) {
  if (config.gpus > 1) return CreateDataParallelBackend(config, std::move(model));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return FailedPrecondition("device: cuda: no CUDA device is visible to this process");
  }
  if (cudaSetDevice(0) != cudaSuccess) return Internal("device: cuda: cudaSetDevice(0) failed");
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  ABLATE_ASSIGN_OR_RETURN(std::unique_ptr<GptCuda> gpu, GptCuda::Create(model));
  ABLATE_ASSIGN_OR_RETURN(std::unique_ptr<DeviceOptimizer> opt,
                          DeviceOptimizer::Create(config.optimizer, gpu->params(),
                                                  gpu->num_params(), gpu->stream()));
  return std::unique_ptr<TrainBackend>(
      new CudaBackend(std::move(gpu), std::move(opt), std::string(prop.name)));
}

void RegisterCudaBackend() { RegisterTrainBackend("cuda", &CreateCudaBackend); }

}  // namespace ablate::trainer::cuda
