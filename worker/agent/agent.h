// Agent: ablate-worker's core. Holds one WorkerService.Connect stream to the coordinator, runs each
// assigned attempt as a supervised ablate-train child, and delivers every report at least once
// (the coordinator deduplicates; proto/ablate.proto states the contract).
//
// Lifecycle of a connection: Connect → Register (GPUs, CPU slots, the attempts still running,
// draining) → Registered (heartbeat period; `stop` lists attempts to kill) → every unacknowledged
// report is resent in seq order → heartbeats every heartbeat_ms with the running attempts, new
// reports as they are produced. When the stream breaks or the coordinator is unreachable the agent
// reconnects with exponential backoff (backoff_initial_ms doubling to backoff_max_ms, each wait
// randomized to 50–100 %), while the trainers keep running and their reports pile up in the spools.
//
// Attempts: an Assignment runs `<trainer> --config <dir>/config.yaml --out <dir> [--resume <ckpt>]`
// in <work_dir>/trials/<trial_id>/attempt-<n>/ (stderr → stderr.log, reports → spool) with
// CUDA_VISIBLE_DEVICES set to the assigned GPUs ("" for CPU trials) and ABLATE_CPU_THREADS to the
// attempt's share of the cores. Cancel (or Registered.stop) → SIGTERM, SIGKILL after the grace;
// a Cancel that asks for a checkpoint (an early stop) → SIGUSR1, as for a preemption, and the
// attempt ends CANCELED once the trainer has checkpointed.
// Shared GPUs (Assignment.gpu_share > 1): the trainer gets the MPS client environment (agent/
// mps.h) and starts only once its GPU has room for its memory (Assignment.memory_bytes): the GPU's
// memory less the larger of NVML's used bytes and the memory of the shared trials already placed
// there, less a margin of max(512 MiB, 5%); until then it waits (logged once). A trainer that exits
// 76 (a fatal device error) ends FAILED with status "gpu_fault".
// An attempt is listed as running (Register, Heartbeat) until its final event is acknowledged, so a
// coordinator that reconnects between the trainer's exit and that ack keeps the attempt instead of
// declaring it lost.
//
// Restart: Run() first reads every spool under <work_dir>/trials. Attempts whose final event is in
// the spool are resent as they are; attempts that were still running when the previous worker
// process died cannot be re-attached (their stdout pipe died with it): what is left of their
// process group is killed and a FAILED event ("trainer lost ...") is added, so the coordinator can
// retry them from their last checkpoint at once.
//
// Shutdown: Drain() (first SIGINT/SIGTERM, or --drain) stops taking assignments (an assignment that
// still arrives is answered with FAILED "worker is draining"), tells the coordinator, waits for the
// running trainers, gives the coordinator up to drain_ack_wait_ms to acknowledge the last reports
// and returns. Stop() (a second signal) kills the trainers (FAILED "worker stopped: killed by
// signal 9 (SIGKILL)"), waits up to shutdown_ack_wait_ms for acks and returns. Unacknowledged
// reports stay in the spools for the next start.
// Preempt() (SIGUSR1, or SIGINT/SIGTERM with --preempt-on-term: a batch scheduler is taking the host
// back) drains as above but also sends SIGUSR1 to every running trainer, which checkpoints its
// current step and exits 75; each attempt ends FAILED with status "preempted" (however its trainer
// ends, unless it finished), the coordinator requeues it from that checkpoint without counting the
// attempt, and Run() returns once those reports are acknowledged.
//
// Thread safety: Run() is called once; Drain(), Stop(), Preempt(), stats() and metrics_snapshot()
// from any thread (signal handling thread included, but not from a signal handler).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ablate/status.h"
#include "ablate/clock.h"
#include "agent/gpus.h"
#include "agent/mps.h"
#include "agent/outbox.h"
#include "agent/process.h"
#include "agent/spool.h"
#include "agent/supervisor.h"
#include "agent/transport.h"
#include "proto/ablate.pb.h"

namespace ablate::agent {

struct AgentOptions {
  std::string worker_id;
  std::string hostname;
  std::vector<v1::GpuInfo> gpus;  // empty: a CPU worker
  int cpu_slots = 0;
  std::string work_dir;      // absolute; attempts live in <work_dir>/trials
  std::string trainer_path;  // the ablate-train executable
  std::string version;
  bool start_draining = false;  // --drain: resend what the spools hold, run nothing, exit
  // Where a trial's data.corpus may read from (canonical absolute folders). A config naming any
  // other file (after symlinks and "..") is refused as a config error before a trainer starts, so a
  // sweep cannot read files outside them. The built-in corpora (brown, nlp) are always allowed.
  std::vector<std::string> data_roots;
  // --gemm-tuning: a GEMM tuning table (ablate/gemm_tuning.h, checked at start; canonical absolute
  // path) that every trial given a GPU replays (ablate-train --gemm-tuning); empty: none.
  std::string gemm_tuning;
  int nproc = 0;                // cores to share among attempts (0: hardware_concurrency)

  int64_t default_heartbeat_ms = 5000;  // until Registered says otherwise
  int64_t register_timeout_ms = 10000;  // no Registered within this: reconnect
  int64_t backoff_initial_ms = 200;
  int64_t backoff_max_ms = 5000;
  int64_t drain_ack_wait_ms = 10000;
  int64_t shutdown_ack_wait_ms = 2000;
  SupervisorOptions supervisor;
  OutboxOptions outbox;
  SpoolOptions spool;
  // Where log lines go (one line per call, without a newline). Default: stderr with a timestamp.
  std::function<void(const std::string&)> log;
};

// The environment the agent runs in; not owned, must outlive the Agent.
struct AgentEnv {
  CoordinatorConnector* connector = nullptr;
  ProcessSpawner* spawner = nullptr;
  const Clock* clock = nullptr;
  // Optional. The GPUs' memory readings (heartbeats, and the memory check before a shared trial
  // starts); null: none (a shared trial then starts at once).
  GpuProber* gpu_prober = nullptr;
  // Optional. MPS for the shared trials (agent/mps.h); null: they run without it.
  MpsControl* mps = nullptr;
};

class Agent {
 public:
  Agent(AgentOptions options, AgentEnv env);
  ~Agent();  // kills and reaps trainers still running (only when Run() did not finish)
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs until drained or stopped. Errors: only setup failures (the work dir cannot be used).
  Status Run();
  void Drain();
  void Stop();
  void Preempt();

  struct Stats {
    int64_t connects = 0;       // streams opened
    int64_t registrations = 0;  // Registered received
    int64_t reports_sent = 0;   // MetricBatch/TrialEvent writes (resends included)
    int64_t acks = 0;
    int64_t heartbeats = 0;
    int64_t assignments = 0;
    int64_t non_json_lines = 0;  // over finished attempts
    int64_t spool_errors = 0;
    int running = 0;  // attempts not yet finished and acknowledged
  };
  Stats stats() const;

  // What ablate-worker --metrics exports (agent/metrics.h), taken under one lock so it is
  // consistent. Counters are monotonic over the life of the Agent.
  struct MetricsSnapshot {
    bool connected = false;  // registered over a live stream
    bool draining = false;
    int64_t registrations = 0;
    int64_t trials_started = 0;               // trainers spawned (STARTED events)
    std::map<std::string, int64_t> finished;  // outcome (Outcomes()) → attempts ended
    OutboxCounters batches;
    int64_t unacked_reports = 0;  // over every attempt still held
    int cpu_slots_busy = 0;
    struct Running {
      int64_t trial_id = 0;
      int32_t attempt = 0;
      std::vector<int> gpus;       // GPU indices (the assignment's)
      std::vector<int> cpu_slots;  // this worker's CPU slot numbers, 0-based
      double tokens_per_s = -1;    // the last "tokens_per_s" the trainer printed; < 0: none yet
    };
    std::vector<Running> running;  // attempts whose trainer has not ended, by (trial, attempt)
  };
  MetricsSnapshot metrics_snapshot() const;
  // The outcomes of MetricsSnapshot::finished.
  static const std::vector<std::string>& Outcomes();

 private:
  struct Key {
    int64_t trial_id;
    int32_t attempt;
    bool operator<(const Key& o) const {
      return trial_id != o.trial_id ? trial_id < o.trial_id : attempt < o.attempt;
    }
  };
  struct Attempt;
  class Sink;
  struct Session;

  void Log(const std::string& line);
  std::string AttemptDir(const Key& k) const;
  void Recover();
  bool RunSession(CoordinatorStream* stream);
  void ReaderLoop(std::shared_ptr<Session> session, CoordinatorStream* stream);
  void HandleMessage(const v1::CoordinatorMessage& m, Session* session);
  void StartAttempt(const v1::Assignment& a);
  void CancelAttempt(const Key& k, const std::string& reason, bool checkpoint = false);
  // Whether the shared trial `k` fits on its GPU now ("" yes, else why not); marks it placed.
  std::string SharedGpuRoom(const Key& k);
  void SampleGpuMemory();
  void OnPoints(const Key& k, std::vector<v1::MetricPoint> points);
  void OnEvent(const Key& k, v1::TrialEvent event);
  v1::WorkerMessage MakeRegister();
  void FillRunning(google::protobuf::RepeatedPtrField<v1::AttemptRef>* out);
  bool ExitDue(int64_t now);
  void ReapDone(std::vector<std::unique_ptr<Attempt>>* done);
  int CpuThreads(const v1::Assignment& a) const;
  void CountFinal(const v1::TrialEvent& e, Attempt* a);

  const AgentOptions options_;
  const AgentEnv env_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::unique_ptr<Attempt>> attempts_;  // GUARDED_BY(mu_)
  bool draining_ = false;                             // GUARDED_BY(mu_)
  bool stop_ = false;                                 // GUARDED_BY(mu_)
  bool preempting_ = false;                           // GUARDED_BY(mu_)
  bool connected_ = false;                            // GUARDED_BY(mu_): registered stream up
  bool tried_connect_ = false;                        // GUARDED_BY(mu_): Connect() was tried once
  int64_t heartbeat_ms_;                              // GUARDED_BY(mu_)
  int64_t quiet_since_ms_ = 0;                        // GUARDED_BY(mu_): draining, no trainer left
  bool heartbeat_now_ = false;                        // GUARDED_BY(mu_)
  Stats stats_;                                       // GUARDED_BY(mu_)
  // For metrics_snapshot(), all GUARDED_BY(mu_).
  std::vector<bool> cpu_slot_busy_;  // by CPU slot number
  int64_t trials_started_ = 0;
  std::map<std::string, int64_t> finished_;
  OutboxCounters batch_counters_;
  std::vector<v1::GpuMemory> gpu_memory_;  // GUARDED_BY(mu_): the last NVML reading
  int64_t gpu_memory_at_ms_ = -1;          // GUARDED_BY(mu_)
  std::mt19937_64 rng_;                               // Run()'s thread only
};

}  // namespace ablate::agent
