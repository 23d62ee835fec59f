// llm.c token shards (kernels/ALGORITHMS.md §4): the format of llm.c's and modded-nanogpt's FineWeb data.
//
// Layout of one .bin file, little-endian:
//   header: (256,) int32 — header[0] = 20240520 (magic), header[1] = 1 (version),
//           header[2] = token count n, the rest unused (zero);
//   tokens: (n,) uint16, so the file is exactly 1024 + 2*n bytes.
// Every reader checks magic, version and size, and a bad file is a DATA_LOSS Status whose message
// names the file and what is wrong ("x.bin: bad magic 123 (expected 20240520, an llm.c token
// shard)").
//
// Thread safety: pure functions over the filesystem.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ablate/status.h"

namespace ablate::trainer {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

// Appends the tokens of the shard at `path` to *tokens (as int32 in [0, 65535]). On error *tokens
// is left as it was. Errors: NOT_FOUND / PERMISSION_DENIED when it cannot be opened, DATA_LOSS for
// an empty file, a short header, a bad magic or version, a negative count, or a size that is not
// 1024 + 2*count ("x.bin: truncated: header says 1000 tokens, file holds 10 ...").
Status AppendShard(const std::string& path, std::vector<int32_t>* tokens);

// The paths matching a glob(3) pattern, sorted bytewise (so fineweb_train_000001.bin precedes
// _000002). A pattern without wildcards matches itself when the file exists. NOT_FOUND when nothing
// matches.
StatusOr<std::vector<std::string>> GlobFiles(const std::string& pattern);

// Every shard matching `pattern` (see GlobFiles), concatenated in sorted order.
struct ShardSet {
  std::vector<std::string> files;  // the shards read, in the order concatenated
  std::vector<int32_t> tokens;     // (total,) int32 token ids in [0, 65535]
  int32_t max_token = -1;          // largest id present; -1 when there are no tokens
};
StatusOr<ShardSet> ReadShards(const std::string& pattern);

// Writes `tokens` as one shard (for tests, and for turning text into shards llm.c can read).
// INVALID_ARGUMENT when an id is outside [0, 65535] or there are more than INT32_MAX tokens.
// Written to a temporary file and renamed, so a reader never sees half a shard.
Status WriteShard(const std::string& path, std::span<const int32_t> tokens);

}  // namespace ablate::trainer
