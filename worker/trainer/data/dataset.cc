#include "trainer/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <utility>

#include "trainer/data/corpora.h"
#include "ablate/files.h"
#include "trainer/data/shards.h"
#include "trainer/data/tokenizer.h"

namespace ablate::trainer {
namespace {

// llm.c pads the vocabulary to a multiple of 128 so the logit GEMMs tile evenly.
constexpr int kVocabPadding = 128;

std::string Percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g%%", 100.0 * f);
  return buf;
}

std::string Join(const std::vector<std::string>& items, size_t max_items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > max_items) out += ", ... (" + std::to_string(items.size()) + " files)";
  return out;
}

}  // namespace

Status ValidateDataConfig(const DataConfig& cfg) {
  if (cfg.corpus.empty()) {
    return InvalidArgument(
        "data.corpus: empty (expected brown, nlp, a text file or a glob of llm.c .bin shards)");
  }
  if (!(cfg.val_fraction >= 0.0 && cfg.val_fraction <= 0.5)) {
    return InvalidArgument("data.val_fraction: expected a number in (0, 0.5] (or 0: the held-out "
                           "_val_ shards of a _train_ shard pattern), got " +
                           std::to_string(cfg.val_fraction));
  }
  if (cfg.vocab_size < 0) {
    return InvalidArgument("data.vocab_size: expected 0 (infer) or a positive size, got " +
                           std::to_string(cfg.vocab_size));
  }
  return Status::Ok();
}

StatusOr<Dataset> SplitDataset(std::vector<int32_t> tokens, int vocab_size, double val_fraction,
                               bool byte_level, const std::string& source) {
  if (!(val_fraction > 0.0 && val_fraction <= 0.5)) {
    return InvalidArgument("data.val_fraction: expected a number in (0, 0.5], got " +
                           std::to_string(val_fraction));
  }
  if (vocab_size < 1) return InvalidArgument("vocab size " + std::to_string(vocab_size) + " < 1");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return InvalidArgument(source + ": token " + std::to_string(tokens[i]) + " at position " +
                             std::to_string(i) + " is outside the vocabulary [0, " +
                             std::to_string(vocab_size) + ")");
    }
  }
  const size_t n = tokens.size();
  const auto n_val = static_cast<size_t>(std::floor(static_cast<double>(n) * val_fraction));
  if (n_val == 0 || n_val >= n) {
    return InvalidArgument(source + ": " + std::to_string(n) + " tokens are too few to hold out " +
                           Percent(val_fraction) + " for validation");
  }
  Dataset ds;
  ds.vocab_size = vocab_size;
  ds.byte_level = byte_level;
  ds.val.assign(tokens.begin() + static_cast<std::ptrdiff_t>(n - n_val), tokens.end());
  tokens.resize(n - n_val);
  ds.train = std::move(tokens);
  ds.description = source + ": " + std::to_string(n) + " tokens, " +
                   (byte_level ? "byte-level" : "llm.c token ids") + ", vocab " +
                   std::to_string(vocab_size) + "; train " + std::to_string(ds.train.size()) +
                   ", val " + std::to_string(ds.val.size()) + " (last " + Percent(val_fraction) +
                   ")";
  return ds;
}

StatusOr<Dataset> LoadDataset(const DataConfig& cfg) {
  ABLATE_RETURN_IF_ERROR(ValidateDataConfig(cfg));

  if (std::optional<std::string> package = BuiltinCorpusPackage(cfg.corpus)) {
    StatusOr<std::string> text = LoadBuiltinCorpus(cfg.corpus, cfg.cache_dir);
    if (!text.ok()) return text.status();
    const int vocab = cfg.vocab_size > 0 ? cfg.vocab_size : kByteVocabSize;
    return SplitDataset(EncodeBytes(*text), vocab, cfg.val_fraction, /*byte_level=*/true,
                        cfg.corpus + " (npm " + *package + ")");
  }

  StatusOr<std::vector<std::string>> files = GlobFiles(cfg.corpus);
  if (!files.ok()) {
    return NotFound("data.corpus '" + cfg.corpus +
                    "': no file matches (expected brown, nlp, a text file or a glob of llm.c "
                    ".bin shards)");
  }
  const size_t num_bin = static_cast<size_t>(std::count_if(
      files->begin(), files->end(), [](const std::string& f) { return f.ends_with(".bin"); }));

  if (num_bin == 0) {
    std::string text;
    for (const std::string& f : *files) {
      ABLATE_ASSIGN_OR_RETURN(std::string part, ReadFile(f));
      text += part;
    }
    const int vocab = cfg.vocab_size > 0 ? cfg.vocab_size : kByteVocabSize;
    return SplitDataset(EncodeBytes(text), vocab, cfg.val_fraction, /*byte_level=*/true,
                        "text " + Join(*files, 3));
  }
  if (num_bin != files->size()) {
    return InvalidArgument("data.corpus '" + cfg.corpus + "' matches " + std::to_string(num_bin) +
                           " .bin shards and " + std::to_string(files->size() - num_bin) +
                           " other files; use a pattern that matches only one kind");
  }

  StatusOr<ShardSet> shards = ReadShards(cfg.corpus);
  if (!shards.ok()) return shards.status();
  // val_fraction 0: the validation split is the held-out shards beside the training ones
  // (PREFIX_val_*.bin for PREFIX_train_*.bin, as llm.c and ablate-tokenize write them).
  std::optional<ShardSet> held_out;
  if (cfg.val_fraction == 0) {
    const size_t at = cfg.corpus.rfind("_train_");
    if (at == std::string::npos) {
      return InvalidArgument("data.val_fraction 0 reads the validation split from the _val_ "
                             "shards of a _train_ pattern; data.corpus '" + cfg.corpus +
                             "' has no _train_");
    }
    const std::string val_pattern = cfg.corpus.substr(0, at) + "_val_" + cfg.corpus.substr(at + 7);
    StatusOr<ShardSet> val = ReadShards(val_pattern);
    if (!val.ok()) {
      return val.status().code() == StatusCode::kNotFound
                 ? NotFound("data.val_fraction 0: no held-out shards match '" + val_pattern + "'")
                 : val.status();
    }
    held_out = std::move(*val);
  }
  const int needed = std::max(shards->max_token, held_out ? held_out->max_token : -1) + 1;
  std::string source = "llm.c shards " + Join(shards->files, 3);
  int vocab = cfg.vocab_size;
  if (vocab == 0) {
    vocab = std::max(1, (needed + kVocabPadding - 1) / kVocabPadding * kVocabPadding);
    source += " (vocab inferred: largest id " + std::to_string(shards->max_token) +
              " + 1 rounded up to a multiple of " + std::to_string(kVocabPadding) +
              "; set data.vocab_size for the tokenizer's own, e.g. 50257 for GPT-2)";
  } else if (vocab < needed) {
    return InvalidArgument("data.vocab_size " + std::to_string(vocab) +
                           " is below the largest token id + 1 = " + std::to_string(needed) +
                           " in " + cfg.corpus);
  }
  if (!held_out) {
    return SplitDataset(std::move(shards->tokens), vocab, cfg.val_fraction, /*byte_level=*/false,
                        source);
  }
  if (shards->tokens.empty() || held_out->tokens.empty()) {
    return InvalidArgument(source + ": the training or the held-out shards hold no token");
  }
  Dataset ds;
  ds.vocab_size = vocab;
  ds.train = std::move(shards->tokens);
  ds.val = std::move(held_out->tokens);
  ds.description = source + ": llm.c token ids, vocab " + std::to_string(vocab) + "; train " +
                   std::to_string(ds.train.size()) + ", val " + std::to_string(ds.val.size()) +
                   " (held-out shards " + Join(held_out->files, 3) + ")";
  return ds;
}

double UnigramEntropyNats(std::span<const int32_t> tokens, int vocab) {
  if (tokens.empty() || vocab < 1) return std::numeric_limits<double>::quiet_NaN();
  std::vector<uint64_t> counts(static_cast<size_t>(vocab), 0);
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab) return std::numeric_limits<double>::quiet_NaN();
    ++counts[static_cast<size_t>(t)];
  }
  // H = -sum p log p = log n - (1/n) sum c log c: one log per distinct token, no division inside.
  const double n = static_cast<double>(tokens.size());
  double sum_clogc = 0.0;
  for (uint64_t c : counts) {
    if (c > 0) sum_clogc += static_cast<double>(c) * std::log(static_cast<double>(c));
  }
  return std::log(n) - sum_clogc / n;
}

}  // namespace ablate::trainer
