// Supervisor: runs one attempt's trainer process from spawn to its final event.
//
// Run() spawns the trainer, reports STARTED, turns every stdout line into metric points
// (trainer_output.h) and CHECKPOINTED events, waits for the exit and reports exactly one final
// event, then returns:
//   exit 0 with a final line  → FINISHED, status "ok"/"diverged" (and the final line's reason);
//   exit 0 without one        → FAILED "exited 0 without a final line";
//   exit N                    → FAILED "exit code N", exit_code N;
//   killed by signal S        → FAILED "killed by signal S (SIGNAME)", exit_code -S;
//   cancelled (Cancel())      → CANCELED with the cancel reason (unless the run had finished
//   anyway); cannot be started         → FAILED with the spawn error ("exec /x: No such file or
//   directory"),
//                               exit_code 127.
//   exit 76 (its CUDA context died of a fatal device error)
//                             → FAILED status "gpu_fault", exit_code 76;
//   preempted (Preempt(), or the trainer exited 75 on its own SIGUSR1)
//                             → FAILED with status "preempted" (unless the run had finished anyway
//                               or was cancelled), reason "preempted: ..." or the trainer's own
//                               ("preempted: checkpointed at step N (exit code 75)").
// Final events carry the last reported step and the tail of the trainer's stderr log. Once the
// trainer has exited, whatever is left of its process group (grandchildren holding the stdout pipe
// or a GPU) is killed, so a finished trial leaves nothing behind.
//
// Thread safety: Run() is called once, on the supervisor's own thread; the sink is called on that
// thread only. Cancel(), Kill(), pid() and the counters may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "ablate/clock.h"
#include "agent/process.h"
#include "proto/ablate.pb.h"

namespace ablate::agent {

class SupervisorSink {
 public:
  virtual ~SupervisorSink() = default;
  virtual void OnPoints(std::vector<v1::MetricPoint> points) = 0;
  // STARTED, CHECKPOINTED..., then one final event (FINISHED, FAILED or CANCELED), then no more
  // calls.
  virtual void OnEvent(v1::TrialEvent event) = 0;
};

struct SupervisorOptions {
  int64_t cancel_grace_ms = 5000;   // SIGTERM → SIGKILL
  int64_t preempt_grace_ms = 120000;  // SIGUSR1 (checkpoint and exit) → SIGKILL
  int poll_ms = 100;                // how often exits and the cancel deadline are checked
  size_t max_line_bytes = 4 << 20;  // a longer stdout line is dropped (counted as not JSON)
  size_t log_tail_bytes = 64 * 1024;
  size_t log_tail_lines = 200;
};

class Supervisor {
 public:
  // Not owned: spawner, clock and sink must outlive Run().
  Supervisor(SpawnSpec spec, ProcessSpawner* spawner, const Clock* clock, SupervisorSink* sink,
             SupervisorOptions options = {});

  void Run();

  // SIGTERM to the trainer's process group now, SIGKILL after cancel_grace_ms; the final event is
  // CANCELED with `reason`. Repeated calls do nothing more. Before Run(): the trainer never starts.
  // With `checkpoint`: SIGUSR1 instead (the trainer checkpoints its step and exits 75), SIGKILL
  // after preempt_grace_ms; the final event is CANCELED all the same (an early stop).
  void Cancel(const std::string& reason, bool checkpoint = false);
  // Before Run(): the trainer is spawned only once `gate` returns "" (polled every poll_ms; a
  // Cancel, Kill or Preempt meanwhile ends the attempt without spawning it).
  void set_start_gate(std::function<std::string()> gate) { gate_ = std::move(gate); }
  // SIGKILL to the process group now (the worker is going away); the final event is FAILED
  // "worker stopped: killed by signal 9 (SIGKILL)".
  void Kill();
  // Preemption (the host is being taken away): SIGUSR1 to the process group now, so ablate-train
  // finishes its step, checkpoints and exits 75; SIGKILL after preempt_grace_ms. The final event
  // is FAILED with status "preempted" however the trainer ends, unless it finished or was
  // cancelled. Repeated calls do nothing more. Before Run(): the trainer never starts.
  void Preempt();

  int pid() const { return pid_.load(); }  // 0 until spawned
  bool exited() const { return exited_.load(); }
  int64_t non_json_lines() const { return non_json_lines_.load(); }
  int64_t json_lines() const { return json_lines_.load(); }

 private:
  void HandleLine(std::string_view line);
  void CheckCancel();
  v1::TrialEvent FinalEvent(const ExitStatus& status) const;

  const SpawnSpec spec_;
  ProcessSpawner* const spawner_;
  const Clock* const clock_;
  SupervisorSink* const sink_;
  const SupervisorOptions options_;
  std::function<std::string()> gate_;

  mutable std::mutex mu_;
  std::unique_ptr<ChildProcess> child_;  // GUARDED_BY(mu_) for SignalGroup from other threads
  bool cancel_requested_ = false;        // GUARDED_BY(mu_)
  bool cancel_checkpoint_ = false;       // GUARDED_BY(mu_): the cancel asked for a checkpoint
  std::string cancel_reason_;            // GUARDED_BY(mu_)
  int64_t cancel_at_ms_ = 0;             // GUARDED_BY(mu_)
  bool term_sent_ = false;               // GUARDED_BY(mu_)
  bool kill_sent_ = false;               // GUARDED_BY(mu_)
  bool killed_by_worker_ = false;        // GUARDED_BY(mu_)
  bool preempt_requested_ = false;       // GUARDED_BY(mu_)
  int64_t preempt_at_ms_ = 0;            // GUARDED_BY(mu_)
  bool usr1_sent_ = false;               // GUARDED_BY(mu_)

  // Only Run()'s thread touches these.
  int64_t last_step_ = 0;
  // The trial's overhead outside its steps (monotonic ms): from Run() (just after the assignment)
  // to the first step line, and from the last step line to the trainer's exit; reported as the
  // points startup_s (at the first step) and teardown_s (at the last step) before the final event.
  int64_t run_start_ms_ = 0, first_step_ms_ = -1, last_step_ms_ = -1, first_step_ = 0;
  int64_t last_step_line_ = 0;
  bool have_final_ = false;
  std::string final_status_;
  std::string final_reason_;

  std::atomic<int> pid_{0};
  std::atomic<bool> exited_{false};
  std::atomic<int64_t> non_json_lines_{0};
  std::atomic<int64_t> json_lines_{0};
};

}  // namespace ablate::agent
