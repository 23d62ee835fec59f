// See step_profile_cuda.h.
#include "trainer/cuda/step_profile_cuda.h"

#include "ablate/cuda_status.h"

namespace ablate::trainer::cuda {

CudaStepProfiler::~CudaStepProfiler() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  for (const auto& [p, e] : marks_) cudaEventDestroy(e);
  if (last_ != nullptr) cudaEventDestroy(last_);
}

void CudaStepProfiler::Record(StepPhase p) {
  if (!status_.ok()) return;
  cudaEvent_t e = nullptr;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else if (Status st = CudaStatus(cudaEventCreate(&e), "profile event"); !st.ok()) {
    status_ = st;
    return;
  }
  if (Status st = CudaStatus(cudaEventRecord(e, stream_), "profile event"); !st.ok()) {
    status_ = st;
    free_.push_back(e);
    return;
  }
  marks_.push_back({p, e});
}

Status CudaStepProfiler::EndStep() {
  Record(StepPhase::kHost);
  ABLATE_RETURN_IF_ERROR(status_);
  ABLATE_RETURN_IF_ERROR(
      CudaStatus(cudaEventSynchronize(marks_.back().second), "profile: wait for the step"));
  for (const auto& [phase, e] : marks_) {
    if (last_ != nullptr) {
      float ms = 0;
      ABLATE_RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, last_, e), "profile: elapsed"));
      t_ += 1e-3 * double(ms);
      free_.push_back(last_);
    }
    if (e == marks_.back().second) {
      ledger_.EndStep(t_);
    } else {
      ledger_.Mark(phase, t_);
    }
    last_ = e;
  }
  marks_.clear();
  return Status::Ok();
}

}  // namespace ablate::trainer::cuda
