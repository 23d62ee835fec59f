#include "trainer/loop/checkpoint.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ablate/files.h"
#include "ablate/hash.h"

namespace ablate::trainer {
namespace {

constexpr char kMagic[8] = {'A', 'B', 'L', 'A', 'T', 'E', 'C', 'K'};
constexpr uint32_t kVersion = 1;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

class Reader {
 public:
  Reader(const std::string& data, const std::string& path) : d_(data), path_(path) {}
  template <typename T>
  Status Get(T* v, const char* what) {
    if (pos_ + sizeof(T) > d_.size()) return Truncated(what);
    std::memcpy(v, d_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }
  Status Bytes(uint64_t n, std::string* out, const char* what) {
    if (n > d_.size() - pos_) return Truncated(what);
    out->assign(d_.data() + pos_, n);
    pos_ += n;
    return Status::Ok();
  }
  size_t pos() const { return pos_; }

 private:
  Status Truncated(const char* what) {
    return DataLoss(path_ + ": truncated checkpoint (ends inside the " + what + ")");
  }
  const std::string& d_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

Status WriteCheckpointAtomic(const std::string& path, const Checkpoint& ckpt) {
  std::string data(kMagic, sizeof kMagic);
  Put<uint32_t>(&data, kVersion);
  std::string header = ckpt.header.dump();
  Put<uint64_t>(&data, header.size());
  data += header;
  Put<uint64_t>(&data, ckpt.sections.size());
  for (const auto& s : ckpt.sections) {
    Put<uint64_t>(&data, s.size());
    data += s;
  }
  Put<uint64_t>(&data, Fnv1a64(data));

  return WriteFileAtomic(path, data);
}

StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, "cannot open checkpoint " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  if (data.size() < sizeof kMagic + 8 || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0) {
    return DataLoss(path + ": not an ablate checkpoint (bad magic)");
  }
  uint64_t stored_sum;
  std::memcpy(&stored_sum, data.data() + data.size() - 8, 8);
  if (Fnv1a64(data.substr(0, data.size() - 8)) != stored_sum) {
    return DataLoss(path + ": checkpoint checksum mismatch (file corrupt or truncated)");
  }
  Reader r(data, path);
  std::string magic;
  ABLATE_RETURN_IF_ERROR(r.Bytes(sizeof kMagic, &magic, "magic"));
  uint32_t version = 0;
  ABLATE_RETURN_IF_ERROR(r.Get(&version, "version"));
  if (version != kVersion) {
    return DataLoss(path + ": checkpoint version " + std::to_string(version) +
                    " is not supported (expected " + std::to_string(kVersion) + ")");
  }
  uint64_t header_len = 0;
  ABLATE_RETURN_IF_ERROR(r.Get(&header_len, "header length"));
  std::string header;
  ABLATE_RETURN_IF_ERROR(r.Bytes(header_len, &header, "header"));
  Checkpoint ckpt;
  try {
    ckpt.header = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    return DataLoss(path + ": checkpoint header is not valid JSON: " + e.what());
  }
  uint64_t count = 0;
  ABLATE_RETURN_IF_ERROR(r.Get(&count, "section count"));
  if (count > 1024) return DataLoss(path + ": implausible section count " + std::to_string(count));
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t len = 0;
    ABLATE_RETURN_IF_ERROR(r.Get(&len, "section length"));
    std::string s;
    ABLATE_RETURN_IF_ERROR(r.Bytes(len, &s, "section payload"));
    ckpt.sections.push_back(std::move(s));
  }
  if (r.pos() + 8 != data.size()) return DataLoss(path + ": trailing bytes after the sections");
  return ckpt;
}

nlohmann::json StateHeader(const Checkpoint& ckpt) {
  nlohmann::json h = ckpt.header;
  if (h.contains("loop") && h["loop"].is_object()) h["loop"].erase("train_time_s");
  return h;
}

bool SameState(const Checkpoint& a, const Checkpoint& b) {
  return a.sections == b.sections && StateHeader(a) == StateHeader(b);
}

}  // namespace ablate::trainer
