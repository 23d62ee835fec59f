// AttemptOutbox: everything one attempt reports to the coordinator, from the trainer's line to the
// coordinator's Ack.
//
// - Metric points are batched: a batch is closed when it reaches `max_points` points, when its
//   oldest point is `flush_ms` old (the owner calls Flush(now) when NextFlushMs() is due), and
//   always before an event, so the coordinator sees points and events in the order they happened.
// - MetricBatch and TrialEvent share one seq counter, from 1 per attempt; a spool that already
// holds
//   reports (a restarted worker) continues after its last seq.
// - Every closed report is appended to the spool first, then becomes sendable. TakeUnsent() hands
//   out each report once per connection, in seq order; RewindForReconnect() makes every
//   unacknowledged report sendable again. Ack(seq) forgets it (and deletes the spool once the final
//   event is acknowledged).
//
// Errors: spool write failures are counted and kept in last_spool_error(); the report is still kept
// in memory and sent, so a full disk degrades durability but not delivery.
// Thread safety: not thread-safe; the agent calls it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/spool.h"
#include "proto/ablate.pb.h"

namespace ablate::agent {

struct OutboxOptions {
  int64_t flush_ms = 200;
  size_t max_points = 2000;
};

// Metric batches through an outbox's life, for ablate-worker --metrics (agent/metrics.h). Several
// outboxes may add to one instance; it is guarded by whatever serializes their calls.
struct OutboxCounters {
  int64_t batches_spooled = 0;   // closed and kept (spool, or memory without one)
  int64_t batches_acked = 0;     // acknowledged for the first time
  int64_t batches_replayed = 0;  // handed out again: after a reconnect, or found in a spool
};

class AttemptOutbox {
 public:
  // `spool` may be null (reports then live in memory only).
  AttemptOutbox(int64_t trial_id, int32_t attempt, std::unique_ptr<Spool> spool,
                OutboxOptions options = {});

  int64_t trial_id() const { return trial_id_; }
  int32_t attempt() const { return attempt_; }
  // Where to count batches from now on (not owned; null: nowhere). A spool that already held
  // reports (a restarted worker) counts them as replayed when they are handed out.
  void set_counters(OutboxCounters* counters) { counters_ = counters; }

  // Adds points to the open batch (closing it first at max_points).
  void AddPoints(std::vector<v1::MetricPoint> points, int64_t now_ms);
  // Closes the open batch, then adds `event` with the next seq (trial_id, attempt and seq are set
  // here). Returns the seq given to the event.
  int64_t AddEvent(v1::TrialEvent event);
  // Closes the open batch if its oldest point is at least flush_ms old (force: if it has any
  // point).
  void Flush(int64_t now_ms, bool force = false);
  // When the open batch must be closed; INT64_MAX when it is empty.
  int64_t NextFlushMs() const;

  // Appends the reports not yet handed out on this connection, in seq order.
  void TakeUnsent(std::vector<v1::WorkerMessage>* out);
  bool HasUnsent() const;
  // A new connection: every unacknowledged report will be handed out again.
  void RewindForReconnect() { sent_upto_ = 0; }
  // The coordinator committed `seq`. Unknown seqs are ignored.
  void Ack(int64_t seq);

  // A final event was added (here or in an earlier life of the worker, found in the spool).
  bool finished() const { return finished_; }
  // The final event and every report before it were acknowledged: the spool is gone.
  bool done() const { return done_; }
  size_t unacked() const;
  int64_t last_seq() const { return next_seq_ - 1; }
  size_t spool_errors() const { return spool_errors_; }
  const std::string& last_spool_error() const { return last_spool_error_; }

 private:
  void CloseBatch();
  void Keep(v1::WorkerMessage m);
  void NoteSpool(const Status& st);
  bool IsBatch(int64_t seq) const;

  const int64_t trial_id_;
  const int32_t attempt_;
  const OutboxOptions options_;
  std::unique_ptr<Spool> spool_;
  std::map<int64_t, v1::WorkerMessage> memory_;  // unacked reports when there is no spool
  int64_t next_seq_ = 1;
  int64_t sent_upto_ = 0;
  int64_t handed_max_ = 0;  // highest seq ever handed out (or found in the spool at start)
  OutboxCounters* counters_ = nullptr;
  v1::MetricBatch open_;
  int64_t open_since_ms_ = 0;
  bool finished_ = false;
  bool done_ = false;
  size_t spool_errors_ = 0;
  std::string last_spool_error_;
};

}  // namespace ablate::agent
