#include "trainer/data/sampler.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <string>

namespace ablate::trainer {
namespace {

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// SplitMix64 (Steele, Lea, Flood 2014): small, fast, and fully specified, unlike the distributions
// of <random>, whose outputs differ between standard libraries.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() { return Mix64(state_ += 0x9E3779B97F4A7C15ULL); }
  // Uniform in [0, m), m >= 1, by rejection (no modulo bias).
  uint64_t Below(uint64_t m) {
    const uint64_t threshold = (0 - m) % m;  // 2^64 mod m
    for (;;) {
      const uint64_t r = Next();
      if (r >= threshold) return r % m;
    }
  }

 private:
  uint64_t state_;
};

void CopyWindow(const int32_t* src, int seq_len, int32_t* inputs, int32_t* targets) {
  std::copy(src, src + seq_len, inputs);
  std::copy(src + 1, src + 1 + seq_len, targets);
}

}  // namespace

StatusOr<BatchSampler> BatchSampler::Create(const std::vector<int32_t>* tokens, int seq_len,
                                            uint64_t seed) {
  if (tokens == nullptr) return InvalidArgument("BatchSampler: no tokens");
  if (seq_len < 1)
    return InvalidArgument("BatchSampler: seq_len " + std::to_string(seq_len) + " < 1");
  if (tokens->size() < static_cast<size_t>(seq_len) + 1) {
    return InvalidArgument(
        "the training split holds " + std::to_string(tokens->size()) +
        " tokens, too few for one window of seq_len + 1 = " + std::to_string(seq_len + 1) +
        " tokens (use a larger corpus, a smaller data.val_fraction or a "
        "smaller model.seq_len)");
  }
  return BatchSampler(tokens, seq_len, seed);
}

BatchSampler::BatchSampler(const std::vector<int32_t>* tokens, int seq_len, uint64_t seed)
    : tokens_(tokens),
      seq_len_(seq_len),
      seed_(seed),
      num_windows_((tokens->size() - 1) / static_cast<uint64_t>(seq_len)) {}

void BatchSampler::PrepareEpoch(uint64_t epoch) {
  if (prepared_epoch_ == epoch) return;
  SplitMix64 rng(Mix64(seed_) ^ Mix64(epoch + 0x9E3779B97F4A7C15ULL));
  const uint64_t slack = (tokens_->size() - 1) - num_windows_ * seq_len_;
  offset_ = rng.Below(slack + 1);
  order_.resize(num_windows_);
  std::iota(order_.begin(), order_.end(), uint64_t{0});
  for (uint64_t i = num_windows_ - 1; i > 0; --i) std::swap(order_[i], order_[rng.Below(i + 1)]);
  prepared_epoch_ = epoch;
}

void BatchSampler::Next(int B, int32_t* inputs, int32_t* targets) {
  assert(B >= 1 && inputs != nullptr && targets != nullptr);
  for (int b = 0; b < B; ++b) {
    PrepareEpoch(state_.epoch);
    const uint64_t start = offset_ + order_[state_.index] * seq_len_;
    CopyWindow(tokens_->data() + start, seq_len_, inputs + static_cast<size_t>(b) * seq_len_,
               targets + static_cast<size_t>(b) * seq_len_);
    if (++state_.index == num_windows_) {
      ++state_.epoch;
      state_.index = 0;
    }
  }
}

Status BatchSampler::set_state(State state) {
  if (state.index > num_windows_) {
    return InvalidArgument("sampler state index " + std::to_string(state.index) + " is past the " +
                           std::to_string(num_windows_) +
                           " windows of an epoch: the checkpoint was made with other data or "
                           "another seq_len");
  }
  state_ = state;
  if (state_.index == num_windows_) {  // the end of an epoch is the start of the next
    ++state_.epoch;
    state_.index = 0;
  }
  return Status::Ok();
}

StatusOr<EvalBatches> EvalBatches::Create(const std::vector<int32_t>* tokens, int seq_len, int B,
                                          int max_batches) {
  if (tokens == nullptr) return InvalidArgument("EvalBatches: no tokens");
  if (seq_len < 1)
    return InvalidArgument("EvalBatches: seq_len " + std::to_string(seq_len) + " < 1");
  if (B < 1) return InvalidArgument("EvalBatches: batch size " + std::to_string(B) + " < 1");
  const uint64_t windows = tokens->size() < 1 ? 0 : (tokens->size() - 1) / seq_len;
  const uint64_t full = windows / static_cast<uint64_t>(B);
  if (full == 0) {
    return InvalidArgument(
        "the validation split holds " + std::to_string(tokens->size()) +
        " tokens, too few for one "
        "batch of " +
        std::to_string(B) + " windows of seq_len + 1 = " + std::to_string(seq_len + 1) +
        " tokens (needs " + std::to_string(static_cast<uint64_t>(B) * seq_len + 1) +
        "; raise data.val_fraction or lower the micro-batch or model.seq_len)");
  }
  uint64_t n = full;
  if (max_batches > 0) n = std::min<uint64_t>(n, static_cast<uint64_t>(max_batches));
  n = std::min<uint64_t>(n, INT32_MAX);
  return EvalBatches(tokens, seq_len, B, static_cast<int>(n));
}

void EvalBatches::Get(int i, int32_t* inputs, int32_t* targets) const {
  assert(i >= 0 && i < num_batches_ && inputs != nullptr && targets != nullptr);
  for (int b = 0; b < batch_size_; ++b) {
    const uint64_t window = static_cast<uint64_t>(i) * batch_size_ + b;
    CopyWindow(tokens_->data() + window * seq_len_, seq_len_,
               inputs + static_cast<size_t>(b) * seq_len_,
               targets + static_cast<size_t>(b) * seq_len_);
  }
}

}  // namespace ablate::trainer
