// Mechanism probes of SageBwd's INT8 attention: `ablate-train --probe WHAT` (docs/probes.md).
// They test, in minutes and on one machine, the mechanisms behind the SageBwd paper's training
// findings that full pre-training runs here cannot afford. All of them run the CPU emulator
// (kernels/attention/attention_cpu.h, in double, at the GPU kernels' tiles: it computes what the
// kernels do up to the order of fp32 sums) against exact attention in double.
//
//   sigma      the paper's Table 1: the error of O, dQ, dK, dV over sigma_Q = sigma_K on synthetic
//              bf16 inputs (V, dO standard normal), and the error of dS itself (before and after
//              its own INT8 rounding); with a checkpoint also on each layer's live q, k, v, dO of
//              one training batch, as they are and with q, k scaled up.
//   decompose  the paper's Table 2: one product in INT8 at a time (the others exact), each
//              output's error, at sigma 1 and 8 (and live, with a checkpoint): which product's
//              quantization dominates dQ's and dK's error.
//   granularity the backward's INT8 scale groups made finer (dS row scales per 32 / 16 keys for
//              dQ, dS and P column scales per 32 / 16 rows for dK and dV), each output's error
//              at sigma 1, 3, 8 against the kernels' groups: what a kernel redesign would gain
//              before it is written.
//   smoothing  keys that carry a shared offset (one vector per head added to every key, 0-10
//              sigma per channel) at sigma 1 and 3, under no smoothing, K-smoothing (with and
//              without its dQ correction) and Q+K-smoothing: exact attention is blind to the
//              offset, INT8 K is not (the paper's case for K-smoothing).
//   bias-noise (needs a checkpoint) the gradient's quantization bias against its minibatch noise
//              as a function of tokens per step: M micro-batches of the trial's training data,
//              the gradient of each with exact attention (fpa) and with SageBwd from the same
//              weights. Bias = the mean of their difference (its squared norm corrected for its
//              own sampling noise), noise = the fpa gradients' spread scaled to a step of T
//              tokens (sd / sqrt(T / tokens per micro-batch)); the crossover T* where the noise
//              falls to the bias is the tokens per step beyond which the bias steers the
//              optimizer (the paper's explanation of its 2.1M-vs-260K finding).
//   all        every probe that the inputs allow.
//
// Output: markdown tables on `tables`, and the same figures as JSON (the return value).
// Thread safety: uses the process's OpenMP threads; one call at a time.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "ablate/status.h"
#include "ablate/trial_config.h"

namespace ablate::trainer::probe {

struct ProbeOptions {
  std::string what = "all";  // sigma | decompose | granularity | smoothing | bias-noise | all
  std::string checkpoint;    // a trial's checkpoint (live tensors, bias-noise); may be empty
  int batches = 32;          // bias-noise: micro-batches sampled (M >= 4)
  uint64_t seed = 1;         // synthetic inputs and the batches' sampler
};

// config: the trial's (from the checkpoint's header when one is given: the caller reads it with
// ConfigOfCheckpoint). InvalidArgument for an unknown probe, bias-noise without a checkpoint, or a
// checkpoint that does not fit the config.
StatusOr<nlohmann::json> RunProbes(const config::TrialConfig& config, const ProbeOptions& options,
                                   std::ostream& tables);

// The trial config stored in a checkpoint's header.
StatusOr<config::TrialConfig> ConfigOfCheckpoint(const std::string& path);

}  // namespace ablate::trainer::probe
