// Text documents to llm.c token shards with GPT-2's BPE (bpe.h): the corpus preparation behind
// `ablate-tokenize`. Each document's tokens are preceded by <|endoftext|> (GPT-2's and llm.c's
// separator); a document goes to the validation split when the FNV-1a hash of its text, modulo
// 1000, is below val_fraction x 1000 (held-out documents of the same mix, stable whatever the
// order or number of documents); exact duplicate documents are kept once. The validation split is
// one shard <prefix>_val_000000.bin; the training split is <prefix>_train_NNNNNN.bin shards of at
// most shard_tokens tokens (llm.c's naming, so data.corpus: "<prefix>_train_*.bin" reads them).
//
// Thread safety: pure functions over the filesystem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ablate/status.h"
#include "trainer/data/bpe.h"

namespace ablate::trainer {

struct PrepareOptions {
  std::string prefix;            // output path prefix ("data/corpus" -> data/corpus_train_000000.bin)
  double val_fraction = 0.05;    // of the documents, by hash
  int64_t shard_tokens = 100'000'000;
};

struct PrepareStats {
  int64_t documents = 0, duplicates = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> files;  // written, val first
};

// INVALID_ARGUMENT for a bad option (val_fraction outside [0, 0.5], shard_tokens < 1024, an empty
// prefix); errors of WriteShard.
StatusOr<PrepareStats> PrepareShards(const std::vector<std::string>& documents,
                                     const Gpt2Tokenizer& tokenizer, const PrepareOptions& options);

}  // namespace ablate::trainer
