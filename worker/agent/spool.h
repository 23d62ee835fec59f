// Spool: the durable copy of one attempt's unacknowledged reports (docs/design.md, "nothing lost when a
// worker ... is killed").
//
// Every MetricBatch and TrialEvent is appended here before it is sent, and stays until the
// coordinator acknowledges its seq; after a reconnect or a restart of the worker, Unacked() is what
// must be resent, in seq order.
//
// File format (<attempt dir>/spool), append-only, little-endian:
//   record := u32 body_length, u32 crc32(body), body
//   body   := u8 kind, payload
//     kind 1 (report): a serialized v1::WorkerMessage holding `metrics` or `event` (with its seq)
//     kind 2 (ack):    i64 seq
//     kind 3 (meta):   i64 last_seq, u8 finished   (first record of a compacted file)
// A record that is cut short or fails its checksum ends the file: a crash in the middle of an
// append loses only that record (which was never sent, so nothing acknowledged is lost); Open()
// truncates it away so later appends follow valid data. Compaction rewrites the live records with
// WriteFileAtomic (a temporary beside "spool", fsync, rename), so a crash leaves the old or the new
// file; Open() removes a temporary left by a crash.
//
// Errors: file errors come back as Status; the in-memory state is updated anyway, so the agent
// keeps running (and resending from memory) on a full or read-only disk. Thread safety: not
// thread-safe; the owner serializes calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ablate/status.h"
#include "proto/ablate.pb.h"

namespace ablate::agent {

struct SpoolOptions {
  // write() alone already survives the death of any process; fdatasync only matters for a power
  // loss or kernel crash, which also kills the trainer, whose next attempt recomputes the steps
  // after its last checkpoint. So metric batches are not synced (they come several times a second
  // per attempt); events (checkpoints, the final result) are. Acks never are: a lost ack only
  // causes a resend, which the coordinator deduplicates.
  bool sync_metrics = false;
  bool sync_events = true;
  size_t compact_min_acked = 256;  // compact once this many acks were appended and the acked
                                   // records take more than half of the file
};

class Spool {
 public:
  // Opens the spool at `path`, creating an empty one if missing, and reads what it holds.
  static StatusOr<std::unique_ptr<Spool>> Open(const std::string& path, SpoolOptions options = {});
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Appends a report (a WorkerMessage with `metrics` or `event`, seq > 0). InvalidArgument for
  // anything else; a repeated seq replaces the kept copy.
  Status Append(const v1::WorkerMessage& report);
  // Records that `seq` was acknowledged (unknown seqs are ignored) and compacts when due.
  Status Ack(int64_t seq);
  // Rewrites the file with only the unacknowledged reports.
  Status Compact();
  // Deletes the file (once the attempt's final event is acknowledged). The object is unusable
  // after.
  Status Remove();

  // Unacknowledged reports, in seq order.
  const std::map<int64_t, v1::WorkerMessage>& Unacked() const { return unacked_; }
  int64_t last_seq() const { return last_seq_; }  // highest seq ever appended (0: none)
  bool finished() const { return finished_; }     // a FINISHED/FAILED/CANCELED event was appended
  size_t torn_bytes() const { return torn_bytes_; }  // dropped at Open(): a torn or corrupt tail
  uint64_t file_bytes() const { return file_bytes_; }
  const std::string& path() const { return path_; }

  // Seq of a report (metrics.seq or event.seq), 0 for anything else.
  static int64_t SeqOf(const v1::WorkerMessage& m);
  // True for an event that ends an attempt (FINISHED, FAILED, CANCELED).
  static bool IsFinal(const v1::WorkerMessage& m);

 private:
  Spool(std::string path, SpoolOptions options) : path_(std::move(path)), options_(options) {}
  Status Load();
  Status AppendRecord(const std::string& body, bool sync);

  const std::string path_;
  const SpoolOptions options_;
  int fd_ = -1;
  uint64_t file_bytes_ = 0;
  uint64_t live_bytes_ = 0;  // bytes of the records of unacked reports
  size_t acks_since_compaction_ = 0;
  std::map<int64_t, v1::WorkerMessage> unacked_;
  std::map<int64_t, uint64_t> record_bytes_;  // seq → size of its record in the file
  int64_t last_seq_ = 0;
  bool finished_ = false;
  size_t torn_bytes_ = 0;
  bool broken_ = false;  // a failed append could not be rolled back: stop writing
};

// CRC-32 (IEEE 802.3, the zlib polynomial).
uint32_t Crc32(const void* data, size_t n);

}  // namespace ablate::agent
