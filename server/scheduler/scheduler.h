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
// GPU sharing: a trial with a share 1/k (resources.gpus: 1/k) goes to a GPU that holds no
// whole-GPU trial, whose shares given out stay at most 1 with it, and whose memory fits it: the
// memory estimates (or reported peaks) of the trials on the GPU, or NVML's reading of its used
// memory when that is higher (another process), plus this trial's, plus a margin (max(512 MiB,
// 5% of the GPU)), at most the GPU's memory. Among those GPUs, the one with the fewest trials (so
// trials spread before they pack). A trial's memory is config::EstimateDeviceBytes until its
// trainer reports gpu_mem_peak_bytes. A queued trial that fits nowhere waits (and so do the trials
// after it in its sweep: trials start in the sweep's order). Under CUDA MPS one client's fatal
// device fault ends every client on that GPU with the same error, and nothing says whose fault it
// was. So a shared trial whose trainer reports a fatal device error (exit code
// kTrainerExitDeviceFault) is requeued with the attempt given back and runs alone from then on
// (its trial row's gpu_share becomes 1): run alone, the trial that faulted faults again and fails
// as usual; a neighbour it took down runs to its end.
//
// Early stopping (early_stop.h): the sweep's EarlyStopper sees every stored point of its metric
// (after the commit); a judgment is stored with the state changes it implies in one transaction
// (the trials of a stopped configuration become `stopped`: queued ones never start, running ones
// are told to checkpoint and end), and only then sent to the workers. After a restart the judgments
// are restored from the store and the pending ones recomputed from the stored metrics.
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
#include "scheduler/early_stop.h"
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
// ablate-train's exit code when its CUDA context died of a fatal device error (an illegal address,
// a launch failure, an MPS error, ...): its own fault, or on a shared GPU under MPS possibly a
// neighbour's.
inline constexpr int kTrainerExitDeviceFault = 76;

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
  // Waits for the store operations it queued (their callbacks call it). The store must outlive it.
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
  // Requeues trials of a sweep with fresh attempts: failed ones (kFailed), failed and canceled
  // ones (kFailedAndCanceled), or the ones early stopping stopped (kStopped: they resume from
  // their checkpoints, and early stopping leaves them alone from then on).
  enum class RetryWhich { kFailed, kFailedAndCanceled, kStopped };
  StatusOr<int> Retry(int64_t sweep_id, RetryWhich which);

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
    int64_t stop_decisions = 0;  // early-stopping judgments taken (continue and stop)
    int64_t shared_gpu_faults = 0;  // shared trials isolated after a fatal device error
  };
  Counters counters() const;

 private:
  struct TrialState;
  struct WorkerState;
  struct SweepState;

  static std::unique_ptr<TrialState> TrialFromRecord(const TrialRecord& r);
  // Builds the sweep's EarlyStopper from the store: its trials, stored judgments and the stored
  // points of its metric (judgments that were due when the coordinator stopped are taken now).
  // Not under mu_ (store reads).
  StatusOr<std::unique_ptr<EarlyStopper>> LoadStopper(int64_t sweep_id, const std::string& json,
                                                      std::vector<StopDecisionRecord>* due);
  void ApplyDecisionsLocked(std::vector<StopDecisionRecord> decisions);
  // Tells the sweep's stopper the trial reports no more, once its last metrics are in.
  void TrialEndedLocked(int64_t sweep_id, int64_t trial_id);
  void ScheduleLocked();
  bool TryPlaceLocked(WorkerState& w);
  // The GPU of `w` that a shared trial fits on, or -1.
  int PickSharedGpuLocked(TrialState& t, WorkerState& w);
  int64_t TrialBytesLocked(TrialState& t);
  // Counts the resources of t's attempt (its gpu_indices or CPU slots) as held on w; ReleaseLocked
  // gives them back.
  void HoldLocked(TrialState& t, WorkerState& w);
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
