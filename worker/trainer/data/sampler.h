// Batches for the training loop: seeded, reproducible, checkpointable.
//
// A window is seq_len + 1 consecutive tokens: inputs are its first seq_len, targets the same
// shifted by one (targets[t] = the token after inputs[t]).
//
// Training (BatchSampler). With n tokens and T = seq_len there are W = (n - 1) / T non-overlapping
// windows per epoch, starting at  offset + k*T  for k in [0, W). Epoch e visits them in a seeded
// permutation, and its offset in [0, (n - 1) - W*T] is seeded too, so the tokens a whole number of
// windows leave over are not the same ones in every epoch. The state is (epoch, index): the index
// of the next window within the epoch's permutation, so a run resumed from a saved state continues
// with exactly the windows it would have drawn.
//   Randomness (fixed here so a reimplementation draws the same windows): a SplitMix64 generator
//   whose state starts at Mix64(seed) ^ Mix64(epoch + 0x9E3779B97F4A7C15), where Mix64 is the
//   SplitMix64 finaliser. It first draws the offset, then shuffles [0, W) by Fisher-Yates
//   (i = W-1 down to 1, swap i with Below(i + 1)). Below(m) draws r until r >= (2^64 - m) mod m
//   and returns r mod m (unbiased).
//
// Validation (EvalBatches). The first min(max_batches * B, W_val / B * B) windows of the validation
// split, starting at 0, T, 2T, ..., in order: the same tokens at every evaluation.
//
// Thread safety: a BatchSampler is not thread-safe (Next mutates it); EvalBatches is immutable.
// Both hold a pointer to the tokens, which must outlive them and not change.
#pragma once

#include <cstdint>
#include <vector>

#include "ablate/status.h"

namespace ablate::trainer {

class BatchSampler {
 public:
  struct State {
    uint64_t epoch = 0;  // epochs completed
    uint64_t index = 0;  // windows of this epoch already drawn, in [0, num_windows())
    bool operator==(const State&) const = default;
  };

  // tokens: (n,) int32, not owned. INVALID_ARGUMENT when seq_len < 1 or when n < seq_len + 1 (not
  // even one window), naming the sizes.
  static StatusOr<BatchSampler> Create(const std::vector<int32_t>* tokens, int seq_len,
                                       uint64_t seed);

  // Fills inputs and targets, each (B, seq_len) int32 row-major, with the next B windows; an epoch
  // boundary may fall inside the batch. B >= 1.
  void Next(int B, int32_t* inputs, int32_t* targets);

  // The position to save in a checkpoint.
  State state() const { return state_; }
  // Resumes at a saved position; {e, num_windows()} is taken as {e + 1, 0}. INVALID_ARGUMENT when
  // state.index > num_windows() (a checkpoint of another dataset or seq_len).
  Status set_state(State state);

  uint64_t num_windows() const { return num_windows_; }  // W, windows per epoch
  int seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }

 private:
  BatchSampler(const std::vector<int32_t>* tokens, int seq_len, uint64_t seed);
  // Makes order_ and offset_ those of `epoch`.
  void PrepareEpoch(uint64_t epoch);

  const std::vector<int32_t>* tokens_;
  int seq_len_;
  uint64_t seed_;
  uint64_t num_windows_;
  State state_;
  uint64_t prepared_epoch_ = UINT64_MAX;  // the epoch order_ and offset_ belong to
  uint64_t offset_ = 0;
  std::vector<uint64_t> order_;  // (W,) window indices k, a permutation of [0, W)
};

class EvalBatches {
 public:
  // tokens: (n,) int32 validation split, not owned. max_batches <= 0 means every full batch.
  // INVALID_ARGUMENT when seq_len < 1, B < 1, or the split holds fewer than B windows (n < B*T +
  // 1), naming the sizes and what to change.
  static StatusOr<EvalBatches> Create(const std::vector<int32_t>* tokens, int seq_len, int B,
                                      int max_batches);

  // Fills inputs and targets, each (B, seq_len) int32, with batch i in [0, num_batches()).
  void Get(int i, int32_t* inputs, int32_t* targets) const;

  int num_batches() const { return num_batches_; }
  int batch_size() const { return batch_size_; }
  int seq_len() const { return seq_len_; }
  // Tokens predicted by one pass over all batches: num_batches * B * seq_len.
  uint64_t num_targets() const {
    return static_cast<uint64_t>(num_batches_) * batch_size_ * seq_len_;
  }

 private:
  EvalBatches(const std::vector<int32_t>* tokens, int seq_len, int B, int num_batches)
      : tokens_(tokens), seq_len_(seq_len), batch_size_(B), num_batches_(num_batches) {}

  const std::vector<int32_t>* tokens_;
  int seq_len_;
  int batch_size_;
  int num_batches_;
};

}  // namespace ablate::trainer
