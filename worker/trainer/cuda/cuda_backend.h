// The CUDA backend of RunTrial (device: cuda): GptCuda + the device optimizer behind the
// TrainBackend interface (loop/backend.h), so a GPU trial emits the same JSON lines, schedule,
// clipping, accumulation, divergence, evaluation, diagnostics and checkpoints as a CPU trial.
// Checkpoints hold the fp32 weights in the Gpt layout and the optimizer blob of trainer::Optimizer:
// they resume on either backend.
// gpus: 1 runs on the first visible GPU (the worker pins trials with CUDA_VISIBLE_DEVICES);
// gpus: k > 1 runs data parallel over the first k visible GPUs (data_parallel.h, NCCL).
#pragma once

#include <memory>

#include "ablate/status.h"
#include "layers/cuda/gemm_cuda.h"
#include "trainer/loop/backend.h"

namespace ablate::trainer::cuda {

// The peak dense bf16 tensor FLOP/s of the current device, for MFU, and where the figure comes
// from (a table of known parts, else SMs x clock x 4096 FLOP/cycle/SM, Hopper's dense bf16 rate).
std::pair<double, std::string> GpuPeakFlops();

// TrainBackend::GemmTuningUse's keys for one LtGemm's counts.
nlohmann::json GemmUseJson(const kernels::cuda::LtGemm::Use& use);

StatusOr<std::unique_ptr<TrainBackend>> CreateCudaBackend(const config::TrialConfig& config,
                                                          Gpt<float> model);

// RegisterTrainBackend("cuda", CreateCudaBackend).
void RegisterCudaBackend();

}  // namespace ablate::trainer::cuda
