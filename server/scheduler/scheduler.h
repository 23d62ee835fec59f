// The coordinator's core: trial lifecycle, placement, leases, retries, fencing (docs/design.md,
// "Protocol and state"). It knows nothing of the network: the gRPC adapter (server/rpc) feeds it the
// workers' messages and hands it a WorkerLink per connected worker to send through; tests drive it
// directly with a fake clock.
//
// State lives in memory for speed and in the Store for durability; every change is written to the
// store, and anything sent to a worker because of a change (an assignment, an ack) is sent only after
// the change committed, so a coordinator crash can never leave a worker running an attempt the
// database does not know about, or acknowledge a report that was not stored. After a restart,
// Recover() rebuilds the memory from the store; running attempts get a fresh lease so their workers
// can reconnect and re-adopt them.
//
// Placement: the queue is ordered by sweep priority (higher first), then fairness across sweeps of
// equal priority (the sweep with the fewest running trials goes first), then the sweep's order. A
// trial asking for k GPUs goes to one connected, non-draining, non-quarantined worker with k free
// GPUs; a CPU trial (0 GPUs) to a worker with enough free CPU slots.
//
// Attempts: a trial runs as attempts 1, 2, ...; an attempt that fails (infrastructure failure, trainer
// crash) or is lost (lease expired: worker died or was cut off) requeues the trial until max_attempts
// attempts were made, then the trial fails. A preempted attempt (IsPreemption: the worker was told
// to give its host back and the trainer checkpointed) is requeued at once from its checkpoint and
// does not count: the trial's max_attempts grows by one. Diverged is a result, not retried.
// Reports that carry an older attempt number than the trial's latest are fenced: acknowledged, not
// stored, and the worker is told to stop that attempt. A worker whose attempts fail
// `quarantine_after` times in a row is quarantined (no new assignments, shown as such) for
// `quarantine_s`, then given another chance.
//
// Thread safety: all public methods are thread-safe (one mutex). WorkerLink::Send must not block.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ablate/clock.h"
#include "ablate/status.h"
#include "proto/ablate.pb.h"
#include "store/store.h"

namespace ablate::server {

// The way to one connected worker. Send queues the message; it never blocks.
class WorkerLink {
 public:
  virtual ~WorkerLink() = default;
  virtual void Send(const v1::CoordinatorMessage& msg) = 0;
};

// ablate-train's exit code after SIGUSR1: it checkpointed the current step and stopped.
inline constexpr int kTrainerExitPreempted = 75;

// A FAILED event that reports a preemption: the worker marks it with status "preempted" (it asked
// its trainers to checkpoint and stop), or the trainer exited kTrainerExitPreempted.
bool IsPreemption(const v1::TrialEvent& ev);

struct SchedulerOptions {
  double lease_s = 30;         // an attempt's lease, renewed by heartbeats
  double heartbeat_s = 5;      // asked of the workers
  double retry_backoff_s = 1;  // a requeued trial waits this long, doubled per failed attempt
  double retry_backoff_max_s = 30;
  int quarantine_after = 3;    // consecutive failed attempts on one worker
  double quarantine_s = 600;
};

struct SubmitOutcome {
  int64_t sweep_id = 0;
  int total = 0;
  int added = 0;
};

class Scheduler {
 public:
  Scheduler(Store* store, const Clock* clock, SchedulerOptions options);
  ~Scheduler();

  // Rebuilds the in-memory state from the store (call once, before serving).
  Status Recover();

  // A sweep already expanded and validated. Stores it (synchronously) and queues the new trials.
  StatusOr<SubmitOutcome> Submit(SweepRecord sweep, std::vector<TrialRecord> trials);

  // ---- Worker stream (called by the rpc adapter) ----
  // A worker connected (or reconnected). Returns the Registered answer; assignments follow on `link`.
  v1::Registered Register(const v1::Register& reg, std::shared_ptr<WorkerLink> link);
  // The worker's stream ended. Its attempts keep their leases (it may reconnect in time).
  void Disconnect(const std::string& worker_id, const WorkerLink* link);
  void OnHeartbeat(const std::string& worker_id, const v1::Heartbeat& hb);
  void OnMetrics(const std::string& worker_id, const v1::MetricBatch& batch);
  void OnEvent(const std::string& worker_id, const v1::TrialEvent& event);

  // ---- Control ----
  // Cancels every queued or running trial of a sweep. Returns how many were canceled.
  StatusOr<int> CancelSweep(int64_t sweep_id);
  StatusOr<int> CancelTrial(int64_t trial_id);
  // Requeues failed (and, unless failed_only, canceled) trials of a sweep with fresh attempts.
  StatusOr<int> Retry(int64_t sweep_id, bool failed_only);

  // Expires leases; the rpc layer calls it every second (tests call it with a manual clock).
  void Tick();

  // Snapshot of the workers for ListWorkers (memory is fresher than the store for liveness).
  std::vector<v1::WorkerInfo> Workers() const;

  // Why no connected worker can take the sweep's queued trials, or "" when nothing is queued or
  // some worker that takes new trials has the capacity for them (free or not): no worker is
  // connected; every connected one is draining or quarantined; the trials need GPUs and the
  // workers have only CPU slots, or fewer GPUs than a trial needs; CPU trials and the workers have
  // no CPU slots, or fewer than a trial needs. For SweepInfo.waiting_reason (CLI, dashboard).
  std::string WaitingReason(int64_t sweep_id) const;

  struct Counters {
    int64_t assignments = 0;
    int64_t retries = 0;
    int64_t lost_attempts = 0;
    int64_t fenced_reports = 0;
    int64_t points_ingested = 0;
    int64_t duplicate_reports = 0;
  };
  Counters counters() const;

 private:
  struct TrialState;
  struct WorkerState;
  struct SweepState;

  static std::unique_ptr<TrialState> TrialFromRecord(const TrialRecord& r);
  void ScheduleLocked();
  bool TryPlaceLocked(WorkerState& w);
  void StartAttemptLocked(TrialState& t, WorkerState& w, const std::vector<int>& gpus);
  void EndAttemptLocked(TrialState& t, const std::string& attempt_state, v1::TrialState trial_state,
                        const std::string& reason, int exit_code, const std::string& log_tail,
                        bool requeue_if_possible, bool count_failure);
  void ReleaseLocked(TrialState& t);
  void SendLocked(const std::string& worker_id, const v1::CoordinatorMessage& msg);
  // Acks (trial, attempt, seq): from a store callback after its commit, or at once for a fenced
  // report that is not stored.
  void SendAckLocked(const std::string& worker_id, int64_t trial_id, int attempt, int64_t seq);
  void WorkerStoreLocked(const WorkerState& w);
  std::string WorkerStateNameLocked(const WorkerState& w) const;

  Store* store_;
  const Clock* clock_;
  SchedulerOptions opt_;

  mutable std::mutex mu_;
  std::map<int64_t, std::unique_ptr<SweepState>> sweeps_;   // GUARDED_BY(mu_)
  std::map<int64_t, std::unique_ptr<TrialState>> trials_;   // GUARDED_BY(mu_): queued/running
  std::map<std::string, std::unique_ptr<WorkerState>> workers_;  // GUARDED_BY(mu_)
  Counters counters_;                                       // GUARDED_BY(mu_)
};

}  // namespace ablate::server
