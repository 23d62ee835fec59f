#include "trainer/data/shards.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "ablate/files.h"

namespace ablate::trainer {
namespace {

// The format is little-endian and the readers copy raw bytes.
static_assert(std::endian::native == std::endian::little, "llm.c shards need a little-endian host");

// Owns a file descriptor; closes it on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `n` bytes unless the file ends first; returns the count read, or -1 with errno.
int64_t ReadFull(int fd, void* buf, int64_t n) {
  auto* p = static_cast<char*>(buf);
  int64_t done = 0;
  while (done < n) {
    ssize_t r = ::read(fd, p + done, static_cast<size_t>(n - done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    done += r;
  }
  return done;
}

}  // namespace

Status AppendShard(const std::string& path, std::vector<int32_t>* tokens) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  if (S_ISDIR(st.st_mode)) {
    return InvalidArgument(path + ": is a directory (expected an llm.c token shard)");
  }
  const int64_t size = st.st_size;
  if (size == 0) {
    return DataLoss(path +
                    ": empty file (expected an llm.c token shard: a 1024-byte header, then "
                    "uint16 tokens)");
  }
  int32_t header[kShardHeaderInts] = {};
  const int64_t got = ReadFull(fd.get(), header, kShardHeaderBytes);
  if (got < 0) return ErrnoToStatus(errno, "read " + path);
  // Check the magic first: a short file that is not a shard at all should say so.
  if (got >= 4 && header[0] != kShardMagic) {
    return DataLoss(path + ": bad magic " + std::to_string(header[0]) + " (expected " +
                    std::to_string(kShardMagic) + ", an llm.c token shard)");
  }
  if (got < kShardHeaderBytes) {
    return DataLoss(path + ": truncated header: file holds " + std::to_string(size) +
                    " bytes, an llm.c token shard starts with a 1024-byte header");
  }
  if (header[1] != kShardVersion) {
    return DataLoss(path + ": unsupported version " + std::to_string(header[1]) + " (expected " +
                    std::to_string(kShardVersion) + "; version 2 shards hold uint32 tokens)");
  }
  const int64_t count = header[2];
  if (count < 0) return DataLoss(path + ": bad token count " + std::to_string(count));
  const int64_t expected = kShardHeaderBytes + 2 * count;
  if (size < expected) {
    return DataLoss(path + ": truncated: header says " + std::to_string(count) +
                    " tokens, file holds " + std::to_string((size - kShardHeaderBytes) / 2) + " (" +
                    std::to_string(size) + " bytes, expected " + std::to_string(expected) + ")");
  }
  if (size > expected) {
    return DataLoss(path + ": " + std::to_string(size - expected) +
                    " trailing bytes: header says " + std::to_string(count) + " tokens (" +
                    std::to_string(expected) + " bytes), file holds " + std::to_string(size) +
                    " bytes");
  }

  const size_t old_size = tokens->size();
  tokens->resize(old_size + static_cast<size_t>(count));
  // Chunked so a 100M-token shard does not need a second full-size uint16 buffer.
  constexpr int64_t kChunk = 1 << 20;
  std::vector<uint16_t> buf(static_cast<size_t>(std::min(count, kChunk)));
  int32_t* out = tokens->data() + old_size;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kChunk, count - done);
    const int64_t r = ReadFull(fd.get(), buf.data(), 2 * n);
    if (r != 2 * n) {
      const int err = errno;
      tokens->resize(old_size);
      if (r < 0) return ErrnoToStatus(err, "read " + path);
      return DataLoss(path + ": file shrank while being read");
    }
    std::copy(buf.begin(), buf.begin() + n, out + done);
    done += n;
  }
  return Status::Ok();
}

StatusOr<std::vector<std::string>> GlobFiles(const std::string& pattern) {
  glob_t g = {};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0) files.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH) return NotFound(pattern + ": no file matches");
  if (rc == GLOB_NOSPACE)
    return Status(StatusCode::kResourceExhausted, pattern + ": glob: no memory");
  if (rc != 0) return Internal(pattern + ": glob: read error");
  // glob(3) sorts by the locale's collation; bytewise order does not depend on the environment.
  std::sort(files.begin(), files.end());
  return files;
}

StatusOr<ShardSet> ReadShards(const std::string& pattern) {
  ShardSet set;
  ABLATE_ASSIGN_OR_RETURN(set.files, GlobFiles(pattern));
  for (const std::string& f : set.files) ABLATE_RETURN_IF_ERROR(AppendShard(f, &set.tokens));
  for (int32_t t : set.tokens) set.max_token = std::max(set.max_token, t);
  return set;
}

Status WriteShard(const std::string& path, std::span<const int32_t> tokens) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument(path + ": " + std::to_string(tokens.size()) +
                           " tokens do not fit one shard (at most 2^31-1)");
  }
  std::vector<uint16_t> body(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535) {
      return InvalidArgument(path + ": token " + std::to_string(tokens[i]) + " at position " +
                             std::to_string(i) + " does not fit uint16");
    }
    body[i] = static_cast<uint16_t>(tokens[i]);
  }
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(sizeof(header) + 2 * body.size(), '\0');
  std::memcpy(bytes.data(), header, sizeof(header));
  std::memcpy(bytes.data() + sizeof(header), body.data(), 2 * body.size());
  ABLATE_RETURN_IF_ERROR(MakeDirs(DirName(path)));
  return WriteFileAtomic(path, bytes);
}

}  // namespace ablate::trainer
