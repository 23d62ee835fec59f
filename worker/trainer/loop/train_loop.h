// The training loop of ablate-train (CPU backend): data → model → optimizer, metrics as JSON lines,
// evaluation, attention diagnostics, divergence detection, atomic checkpoints and bit-identical
// resume.
//
// Every line emitted is one JSON object with a "type":
//   start       once: config hash, parameter count, vocabulary, tokens per split, unigram entropy,
//               accumulation steps, optimizer state bytes, threads, the peak FLOP/s used for MFU
//   step        every step: loss, lr, p, grad_norm (before clipping), tokens_per_s, mfu, update RMS
//   eval        every eval_every steps and at the end: val_loss (and val_bpb for byte vocabularies)
//   diagnostics every diagnostics_every steps: per-layer SageBwd-vs-FPA errors and max logits,
//               flattened as attn.<layer>.<tensor>.<cos|rel_l2> and attn.<layer>.max_logit
//   checkpoint  after each checkpoint is durable: step and path
//   profile     with train.profile_steps: where the profiled steps' time went, by kind of work
//               (step_profile.h: profile.<kind>_ms per step), and their median tokens_per_s; steps
//               with an evaluation, diagnostics or a checkpoint leave that work out
//   final       once: status "ok" or "diverged", the last losses, timing; "preempted" when the run
//               stopped early on RunOptions::preempt (after a checkpoint of the last step); with
//               RunOptions::gemm_tuning, how many GEMM problems used it
// Errors (bad data path, unreadable checkpoint, ...) are returned as Status, not emitted.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ablate/gemm_tuning.h"
#include "ablate/status.h"
#include "ablate/trial_config.h"
#include "trainer/model/gpt.h"

namespace ablate::trainer {

struct RunOptions {
  std::string out_dir;      // checkpoints go to <out_dir>/checkpoints/; empty: no checkpoints
  std::string resume_path;  // a checkpoint to continue from; empty: start fresh
  std::function<void(const nlohmann::json&)> emit;  // receives every metrics line
  // Preemption (the job is being taken away): when this becomes true the loop finishes the step it
  // is in, writes a checkpoint of it (unless that step just wrote one) and returns with status
  // "preempted"; a later --resume continues bit-identically. Read once per step; may be set from a
  // signal handler. Null: never preempted.
  const std::atomic<bool>* preempt = nullptr;
  // Where the start-up time goes, for the start line's start_*_s fields (seconds): the time from
  // main to RunTrial, and the CUDA context's creation (started beside the corpus load by
  // ablate-train; < 0 when not measured). Set by the caller; 0 / null when unknown.
  double before_run_s = 0;
  const std::atomic<double>* device_context_s = nullptr;
  // The GEMM tuning table to replay (ablate-train --gemm-tuning; common/ablate/gemm_tuning.h), or
  // null. The start line's "gemm_tuning" names it (digest, entries, device) and, where the backend
  // cannot use it (another device or cuBLASLt, or the CPU backend), why not; a table in use joins
  // the numerics version ("<version>+gemm.<digest>", for the provenance: another table may give
  // other bits). The final line's gemm_problems / gemm_tuned / gemm_rejected count the GEMM
  // problems the run set up, those that used the table, and those whose entry cuBLASLt refused.
  std::shared_ptr<const GemmTuning> gemm_tuning;
};

struct RunResult {
  std::string status;  // "ok", "diverged" or "preempted"
  int steps_done = 0;
  double final_train_loss = 0;
  double final_val_loss = 0;
};

StatusOr<RunResult> RunTrial(const config::TrialConfig& config, const RunOptions& options);

// ablate-train --tune-gemm: builds the trial's model on its device, runs one training micro-batch
// and one evaluation batch of its data (which sets up every GEMM problem of a step and an
// evaluation), then times cuBLASLt's first `candidates` algorithms for each (TrainBackend::
// TuneGemms) and returns the table. Trains nothing and writes nothing. FailedPrecondition where
// the config does not run on the CUDA backend.
struct GemmTuneOptions {
  int candidates = kGemmTuneCandidates;
  int reps = kGemmTuneReps;
  double min_gain =
      kGemmTuneMinGain;  // keep the heuristic's choice unless another is this much faster
};
StatusOr<GemmTuning> TuneTrialGemms(const config::TrialConfig& config,
                                    const GemmTuneOptions& options);

// The model a trial trains (its attention at the GPU kernels' tiles on either backend).
ModelConfig ToModelConfig(const config::TrialConfig& c, int vocab);

}  // namespace ablate::trainer
