// Data parallel training over NCCL (device: cuda, gpus: k > 1): one ablate-train process drives
// its first k visible GPUs (the worker pins the trial's GPUs with CUDA_VISIBLE_DEVICES), one host
// thread per GPU, each owning a GptCuda replica, its stream and a replica of the optimizer.
//
// The contract with RunTrial (loop/backend.h): per optimizer step the loop draws the global batch
// the 1-GPU run would draw, accumulation_steps() x gpus micro-batches from the one sampler, and
// calls TrainMicroStep once per micro-batch with grad_scale 1 / (that count); call i goes to rank
// i / accumulation_steps(), so rank r takes the r-th contiguous slice of the sampler's sequence.
// Micro-batches are queued on the rank threads, so the ranks compute concurrently.
//   * gradients: each rank accumulates its already-scaled micro-batch gradients in fp32; then
//     GradNormAndClip all-reduces them (ncclAllReduce, fp32 sum) so every rank holds the 1-GPU
//     gradient up to summation order, then computes the global norm and clips (identical on every
//     rank: NCCL delivers the same reduced bytes to all ranks).
//   * optimizer: the step is replicated on every rank (AdamW or spectral, all state replicated), so
//     the weights stay bitwise identical without a broadcast. SaveWeights checks that (Internal
//     error naming the first differing rank otherwise).
//   * loss: TakeTrainLoss sums every rank's micro-batch losses, so the loop's mean is over all
//     ranks' tokens. EvalLoss runs on rank 0; Diagnostics on the last rank, which holds the global
//     batch's last micro-batch (what the 1-GPU run's diagnostics look at).
//   * checkpoints: rank 0's weights and optimizer blob, the format of the 1-GPU backend; Load*
//     loads every rank, so a checkpoint resumes with any k (and on the CPU).
//
// Errors: FailedPrecondition when fewer than k CUDA devices are visible; Internal for CUDA or NCCL
// failures (the NCCL message included); a rank's error is returned by the next call that waits for
// that rank (at the latest TakeTrainLoss), and the rank skips its queued work after an error.
// Thread safety: the TrainBackend contract (one calling thread); the rank threads are internal.
#pragma once

#include <memory>

#include "ablate/status.h"
#include "trainer/loop/backend.h"

namespace ablate::trainer::cuda {

// A backend over config.gpus (>= 2) GPUs: devices 0 .. gpus-1 of this process. `model` holds the
// seed's initialization (copied to every GPU).
StatusOr<std::unique_ptr<TrainBackend>> CreateDataParallelBackend(const config::TrialConfig& config,
                                                                  Gpt<float> model);

// Whether this build has NCCL (else gpus > 1 is refused with FailedPrecondition).
bool HaveNccl();

}  // namespace ablate::trainer::cuda
