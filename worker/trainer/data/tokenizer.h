// Byte-level tokenizer: the honest offline default (kernels/ALGORITHMS.md §4). Every byte of the text is
// one token, so the vocabulary is 256 and nothing is learned or stored. Losses measured with it are
// in nats per byte and are not comparable with losses of a subword tokenizer (llm.c shards).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ablate::trainer {

inline constexpr int kByteVocabSize = 256;

// text bytes -> tokens: (text.size(),) int32, token i = (unsigned char)text[i], in [0, 256).
std::vector<int32_t> EncodeBytes(std::string_view text);

// tokens -> text, the inverse of EncodeBytes (for printing samples). An id outside [0, 256) (a
// token of an llm.c shard, which this tokenizer cannot spell) is written as "<id>" so a sample
// still prints; the output is raw bytes and may hold invalid UTF-8 where the model emits it.
std::string DecodeBytes(std::span<const int32_t> tokens);

}  // namespace ablate::trainer
