#include "agent/spool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "agent/util.h"

namespace ablate::agent {
namespace {

constexpr uint8_t kReport = 1;
constexpr uint8_t kAck = 2;
constexpr uint8_t kMeta = 3;
constexpr size_t kHeaderBytes = 8;
// A sane upper bound on one record; a larger length field means a corrupt header, not a record.
constexpr uint32_t kMaxRecordBytes = 256u << 20;

void PutU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(char((v >> (8 * i)) & 0xFF));
}
void PutI64(std::string* s, int64_t v) {
  const uint64_t u = uint64_t(v);
  for (int i = 0; i < 8; ++i) s->push_back(char((u >> (8 * i)) & 0xFF));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
int64_t GetI64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return int64_t(v);
}

std::string Frame(const std::string& body) {
  std::string rec;
  rec.reserve(kHeaderBytes + body.size());
  PutU32(&rec, uint32_t(body.size()));
  PutU32(&rec, Crc32(body.data(), body.size()));
  rec += body;
  return rec;
}

std::string MetaBody(int64_t last_seq, bool finished) {
  std::string b(1, char(kMeta));
  PutI64(&b, last_seq);
  b.push_back(finished ? 1 : 0);
  return b;
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "write " + path);
    done += size_t(n);
  }
  return Status::Ok();
}

}  // namespace

uint32_t Crc32(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

int64_t Spool::SeqOf(const v1::WorkerMessage& m) {
  if (m.has_metrics()) return m.metrics().seq();
  if (m.has_event()) return m.event().seq();
  return 0;
}

bool Spool::IsFinal(const v1::WorkerMessage& m) {
  if (!m.has_event()) return false;
  const auto k = m.event().kind();
  return k == v1::TrialEvent::FINISHED || k == v1::TrialEvent::FAILED ||
         k == v1::TrialEvent::CANCELED;
}

namespace {

// Unlinks the temporaries WriteFileAtomic leaves when killed mid-write: "<name>.tmp..." beside it.
void RemoveTemporaries(const std::string& path) {
  const std::string dir = DirName(path);
  const std::string prefix = path.substr(path.rfind('/') + 1) + ".tmp";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) ::unlink(e.path().c_str());
  }
}

}  // namespace

StatusOr<std::unique_ptr<Spool>> Spool::Open(const std::string& path, SpoolOptions options) {
  std::unique_ptr<Spool> s(new Spool(path, options));
  // A leftover temporary (spool.tmp...) is an interrupted compaction; the spool itself is intact.
  RemoveTemporaries(path);
  ABLATE_RETURN_IF_ERROR(s->Load());
  return s;
}

Spool::~Spool() {
  if (fd_ >= 0) ::close(fd_);
}

Status Spool::Load() {
  const bool existed = FileExists(path_);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return ErrnoToStatus(errno, "open " + path_);
  // A new spool's directory entry is made durable once, so the records fsynced into it later
  // cannot be lost with the entry in a power cut.
  if (!existed) ABLATE_RETURN_IF_ERROR(FsyncDir(DirName(path_)));
  auto content = ReadFile(path_);
  if (!content.ok()) return content.status();
  const std::string& d = *content;
  size_t pos = 0;
  while (pos + kHeaderBytes <= d.size()) {
    const uint32_t len = GetU32(d.data() + pos);
    const uint32_t crc = GetU32(d.data() + pos + 4);
    if (len == 0 || len > kMaxRecordBytes || pos + kHeaderBytes + len > d.size()) break;
    const char* body = d.data() + pos + kHeaderBytes;
    if (Crc32(body, len) != crc) break;
    const uint8_t kind = uint8_t(body[0]);
    bool valid = true;
    if (kind == kReport) {
      v1::WorkerMessage m;
      if (!m.ParseFromArray(body + 1, int(len - 1)) || SeqOf(m) <= 0) {
        valid = false;
      } else {
        const int64_t seq = SeqOf(m);
        if (IsFinal(m)) finished_ = true;
        last_seq_ = std::max(last_seq_, seq);
        if (auto old = record_bytes_.find(seq); old != record_bytes_.end()) {
          live_bytes_ -= old->second;
        }
        record_bytes_[seq] = kHeaderBytes + len;
        live_bytes_ += kHeaderBytes + len;
        unacked_[seq] = std::move(m);
      }
    } else if (kind == kAck && len == 9) {
      const int64_t seq = GetI64(body + 1);
      if (auto it = record_bytes_.find(seq); it != record_bytes_.end()) {
        live_bytes_ -= it->second;
        record_bytes_.erase(it);
      }
      unacked_.erase(seq);
      last_seq_ = std::max(last_seq_, seq);
    } else if (kind == kMeta && len == 10) {
      last_seq_ = std::max(last_seq_, GetI64(body + 1));
      if (body[9] != 0) finished_ = true;
    } else {
      valid = false;
    }
    if (!valid) break;
    pos += kHeaderBytes + len;
  }
  file_bytes_ = pos;
  torn_bytes_ = d.size() - pos;
  if (torn_bytes_ > 0) {
    if (::ftruncate(fd_, off_t(pos)) != 0) return ErrnoToStatus(errno, "truncate " + path_);
    if (::fdatasync(fd_) != 0) return ErrnoToStatus(errno, "fdatasync " + path_);
  }
  return Status::Ok();
}

Status Spool::AppendRecord(const std::string& body, bool sync) {
  if (broken_) return Internal(path_ + ": spool disabled after an earlier write error");
  if (fd_ < 0) return FailedPrecondition(path_ + ": spool was removed");
  const std::string rec = Frame(body);
  Status st = WriteAll(fd_, rec, path_);
  if (st.ok() && sync && ::fdatasync(fd_) != 0) st = ErrnoToStatus(errno, "fdatasync " + path_);
  if (!st.ok()) {
    // Roll a partial record back so later appends stay readable; if even that fails, stop writing
    // (records after garbage would be invisible to Load()).
    if (::ftruncate(fd_, off_t(file_bytes_)) != 0) broken_ = true;
    return st;
  }
  file_bytes_ += rec.size();
  return Status::Ok();
}

Status Spool::Append(const v1::WorkerMessage& report) {
  const int64_t seq = SeqOf(report);
  if (seq <= 0) return InvalidArgument("spool: a report needs metrics or an event with seq > 0");
  std::string body(1, char(kReport));
  if (!report.AppendToString(&body)) return Internal("spool: cannot serialize a report");
  if (auto old = record_bytes_.find(seq); old != record_bytes_.end()) live_bytes_ -= old->second;
  record_bytes_[seq] = kHeaderBytes + body.size();
  live_bytes_ += kHeaderBytes + body.size();
  unacked_[seq] = report;
  last_seq_ = std::max(last_seq_, seq);
  if (IsFinal(report)) finished_ = true;
  return AppendRecord(body, report.has_event() ? options_.sync_events : options_.sync_metrics);
}

Status Spool::Ack(int64_t seq) {
  auto it = unacked_.find(seq);
  if (it == unacked_.end()) return Status::Ok();
  unacked_.erase(it);
  if (auto rb = record_bytes_.find(seq); rb != record_bytes_.end()) {
    live_bytes_ -= rb->second;
    record_bytes_.erase(rb);
  }
  std::string body(1, char(kAck));
  PutI64(&body, seq);
  ABLATE_RETURN_IF_ERROR(AppendRecord(body, /*sync=*/false));
  ++acks_since_compaction_;
  if (acks_since_compaction_ >= options_.compact_min_acked && file_bytes_ > 2 * live_bytes_) {
    return Compact();
  }
  return Status::Ok();
}

Status Spool::Compact() {
  if (fd_ < 0) return FailedPrecondition(path_ + ": spool was removed");
  std::string data = Frame(MetaBody(last_seq_, finished_));
  for (const auto& [seq, m] : unacked_) {
    std::string body(1, char(kReport));
    m.AppendToString(&body);
    data += Frame(body);
  }
  ABLATE_RETURN_IF_ERROR(WriteFileAtomic(path_, data));
  const int nfd = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (nfd < 0) {
    broken_ = true;
    return ErrnoToStatus(errno, "open " + path_);
  }
  ::close(fd_);
  fd_ = nfd;
  file_bytes_ = data.size();
  live_bytes_ = data.size() - kHeaderBytes - 10;
  acks_since_compaction_ = 0;
  broken_ = false;
  return Status::Ok();
}

Status Spool::Remove() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  unacked_.clear();
  record_bytes_.clear();
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT)
    return ErrnoToStatus(errno, "unlink " + path_);
  return FsyncDir(DirName(path_));
}

}  // namespace ablate::agent
