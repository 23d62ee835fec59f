// The CUDA backend's step profiler (trainer/model/step_profile.h): each mark records a CUDA event
// on the model's stream, so a phase lasts from the device reaching its mark to the device reaching
// the next one (the device's timeline, launch waits included). EndStep waits for the step's last
// event and folds the step's intervals into the ledger; events are reused from step to step.
#pragma once

#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "trainer/model/step_profile.h"

namespace ablate::trainer::cuda {

class CudaStepProfiler final : public StepProfiler {
 public:
  explicit CudaStepProfiler(cudaStream_t stream) : stream_(stream) {}
  ~CudaStepProfiler() override;
  CudaStepProfiler(const CudaStepProfiler&) = delete;
  CudaStepProfiler& operator=(const CudaStepProfiler&) = delete;

  Status EndStep() override;

 private:
  void Record(StepPhase p) override;

  cudaStream_t stream_;
  std::vector<cudaEvent_t> free_;                         // recorded and folded: reusable
  std::vector<std::pair<StepPhase, cudaEvent_t>> marks_;  // this step's, in order
  cudaEvent_t last_ = nullptr;  // the previous step's last mark (its host phase's start)
  double t_ = 0;                // seconds from the first mark to last_
  Status status_;               // the first CUDA error, returned by EndStep
};

}  // namespace ablate::trainer::cuda
