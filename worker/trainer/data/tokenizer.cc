#include "trainer/data/tokenizer.h"

namespace ablate::trainer {

std::vector<int32_t> EncodeBytes(std::string_view text) {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string DecodeBytes(std::span<const int32_t> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t >= 0 && t < kByteVocabSize) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else {
      text.push_back('<');
      text += std::to_string(t);
      text.push_back('>');
    }
  }
  return text;
}

}  // namespace ablate::trainer
