#include "trainer/data/prepare.h"

#include <cstdio>
#include <unordered_set>

#include "ablate/hash.h"
#include "trainer/data/shards.h"

namespace ablate::trainer {

namespace {

std::string ShardName(const std::string& prefix, const char* split, int index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "_%s_%06d.bin", split, index);
  return prefix + buf;
}

}  // namespace

StatusOr<PrepareStats> PrepareShards(const std::vector<std::string>& documents,
                                     const Gpt2Tokenizer& tokenizer, const PrepareOptions& opt) {
  if (opt.prefix.empty()) return InvalidArgument("prepare: no output prefix");
  if (!(opt.val_fraction >= 0 && opt.val_fraction <= 0.5)) {
    return InvalidArgument("prepare: val_fraction " + std::to_string(opt.val_fraction) +
                           " is outside [0, 0.5]");
  }
  if (opt.shard_tokens < 1024) return InvalidArgument("prepare: shard_tokens below 1024");
  const int32_t eot = tokenizer.end_of_text();
  if (eot < 0) return InvalidArgument("prepare: the vocabulary has no <|endoftext|>");
  PrepareStats st;
  std::unordered_set<uint64_t> seen;
  std::vector<int32_t> val, train;
  int train_index = 0;
  auto flush_train = [&](bool last) -> Status {
    while (int64_t(train.size()) >= opt.shard_tokens || (last && !train.empty())) {
      const size_t n = std::min<size_t>(train.size(), size_t(opt.shard_tokens));
      const std::string path = ShardName(opt.prefix, "train", train_index++);
      ABLATE_RETURN_IF_ERROR(WriteShard(path, std::span<const int32_t>(train.data(), n)));
      st.files.push_back(path);
      train.erase(train.begin(), train.begin() + long(n));
    }
    return Status::Ok();
  };
  const uint64_t val_cut = uint64_t(opt.val_fraction * 1000 + 0.5);
  for (const std::string& doc : documents) {
    if (doc.empty()) continue;
    const uint64_t h = Fnv1a64(doc);
    if (!seen.insert(h).second) {
      ++st.duplicates;
      continue;
    }
    ++st.documents;
    const bool is_val = h % 1000 < val_cut;
    std::vector<int32_t>& dst = is_val ? val : train;
    dst.push_back(eot);
    const std::vector<int32_t> ids = tokenizer.Encode(doc);
    dst.insert(dst.end(), ids.begin(), ids.end());
    if (is_val) {
      ++st.val_documents;
      st.val_tokens += int64_t(ids.size()) + 1;
    } else {
      st.train_tokens += int64_t(ids.size()) + 1;
      ABLATE_RETURN_IF_ERROR(flush_train(false));
    }
  }
  const std::string val_path = ShardName(opt.prefix, "val", 0);
  ABLATE_RETURN_IF_ERROR(WriteShard(val_path, val));
  st.files.insert(st.files.begin(), val_path);
  ABLATE_RETURN_IF_ERROR(flush_train(true));
  return st;
}

}  // namespace ablate::trainer
