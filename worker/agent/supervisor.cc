#include "agent/supervisor.h"

#include <csignal>
#include <ctime>
#include <chrono>
#include <optional>
#include <thread>

#include "agent/trainer_output.h"
#include "agent/util.h"

namespace ablate::agent {

Supervisor::Supervisor(SpawnSpec spec, ProcessSpawner* spawner, const Clock* clock, SupervisorSink* sink,
                       SupervisorOptions options)
    : spec_(std::move(spec)), spawner_(spawner), clock_(clock), sink_(sink), options_(options) {}

void Supervisor::Cancel(const std::string& reason, bool checkpoint) {
  std::lock_guard<std::mutex> l(mu_);
  if (cancel_requested_) return;
  cancel_requested_ = true;
  cancel_checkpoint_ = checkpoint;
  cancel_reason_ = reason;
  cancel_at_ms_ = clock_->MonotonicMs();
  if (child_ && !exited_) {
    child_->SignalGroup(checkpoint ? SIGUSR1 : SIGTERM);
    if (checkpoint) {
      usr1_sent_ = true;
    } else {
      term_sent_ = true;
    }
  }
}

void Supervisor::Kill() {
  std::lock_guard<std::mutex> l(mu_);
  killed_by_worker_ = true;
  if (child_ && !exited_) {
    child_->SignalGroup(SIGKILL);
    kill_sent_ = true;
  }
}

void Supervisor::Preempt() {
  std::lock_guard<std::mutex> l(mu_);
  if (preempt_requested_) return;
  preempt_requested_ = true;
  preempt_at_ms_ = clock_->MonotonicMs();
  if (child_ && !exited_) {
    child_->SignalGroup(SIGUSR1);
    usr1_sent_ = true;
  }
}

// Called on Run()'s thread between reads: sends the signal that Cancel() could not send yet (the
// child was not spawned) and escalates to SIGKILL after the grace period.
void Supervisor::CheckCancel() {
  std::lock_guard<std::mutex> l(mu_);
  if (!child_ || exited_) return;
  if (killed_by_worker_ && !kill_sent_) {
    child_->SignalGroup(SIGKILL);
    kill_sent_ = true;
  }
  if (preempt_requested_ && !cancel_requested_) {
    if (!usr1_sent_) {
      child_->SignalGroup(SIGUSR1);
      usr1_sent_ = true;
    }
    if (!kill_sent_ && clock_->MonotonicMs() - preempt_at_ms_ >= options_.preempt_grace_ms) {
      child_->SignalGroup(SIGKILL);
      kill_sent_ = true;
    }
  }
  if (!cancel_requested_) return;
  if (cancel_checkpoint_) {
    if (!usr1_sent_) {
      child_->SignalGroup(SIGUSR1);
      usr1_sent_ = true;
    }
    if (!kill_sent_ && clock_->MonotonicMs() - cancel_at_ms_ >= options_.preempt_grace_ms) {
      child_->SignalGroup(SIGKILL);
      kill_sent_ = true;
    }
    return;
  }
  if (!term_sent_) {
    child_->SignalGroup(SIGTERM);
    term_sent_ = true;
  }
  if (!kill_sent_ && clock_->MonotonicMs() - cancel_at_ms_ >= options_.cancel_grace_ms) {
    child_->SignalGroup(SIGKILL);
    kill_sent_ = true;
  }
}

void Supervisor::HandleLine(std::string_view line) {
  TrainerLine t = ParseTrainerLine(line);
  if (!t.is_json) {
    // Blank lines are not worth counting; anything else is a stray print.
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) ++non_json_lines_;
    return;
  }
  ++json_lines_;
  if (t.type == "step") {
    const int64_t now = clock_->MonotonicMs();
    if (first_step_ms_ < 0) first_step_ms_ = now, first_step_ = t.step;
    last_step_ms_ = now;
    last_step_line_ = t.step;
  }
  if (t.step > last_step_ || t.type == "step") last_step_ = std::max(last_step_, t.step);
  if (!t.points.empty()) sink_->OnPoints(std::move(t.points));
  if (t.build) {
    v1::TrialEvent e;
    e.set_kind(v1::TrialEvent::BUILD);
    *e.mutable_build() = std::move(*t.build);
    sink_->OnEvent(std::move(e));
  }
  if (t.checkpoint_path) {
    v1::TrialEvent e;
    e.set_kind(v1::TrialEvent::CHECKPOINTED);
    e.set_step(t.step);
    e.set_checkpoint_path(*t.checkpoint_path);
    sink_->OnEvent(std::move(e));
  }
  if (t.final_status) {
    have_final_ = true;
    final_status_ = *t.final_status;
    final_reason_ = t.final_reason;
    if (t.step > 0) last_step_ = t.step;
  }
}

v1::TrialEvent Supervisor::FinalEvent(const ExitStatus& status) const {
  v1::TrialEvent e;
  e.set_step(last_step_);
  e.set_log_tail(ReadLogTail(spec_.stderr_path, options_.log_tail_bytes, options_.log_tail_lines));
  e.set_exit_code(status.signaled ? -status.signal : status.code);
  bool canceled, killed_by_worker, preempted;
  std::string cancel_reason;
  {
    std::lock_guard<std::mutex> l(mu_);
    canceled = cancel_requested_;
    killed_by_worker = killed_by_worker_;
    cancel_reason = cancel_reason_;
    preempted = preempt_requested_;
  }
  const bool clean = !status.signaled && status.code == 0;
  if (clean && have_final_ && (final_status_ == "ok" || final_status_ == "diverged")) {
    // A run that completed is reported as such even if a cancel raced with its end.
    e.set_kind(v1::TrialEvent::FINISHED);
    e.set_status(final_status_);
    e.set_reason(final_reason_);
    return e;
  }
  std::string what;
  if (status.signaled) {
    what = "killed by signal " + std::to_string(status.signal) + " (" + SignalName(status.signal) +
           ")";
  } else if (status.code != 0) {
    what = "exit code " + std::to_string(status.code);
  } else if (have_final_) {
    what = "exited 0 with an unknown final status '" + SanitizeUtf8(final_status_) + "'";
  } else {
    what = "exited 0 without a final line";
  }
  if (canceled) {
    e.set_kind(v1::TrialEvent::CANCELED);
    e.set_reason(cancel_reason.empty() ? "canceled (" + what + ")"
                                       : cancel_reason + " (" + what + ")");
    return e;
  }
  if (!status.signaled && status.code == 76) {
    e.set_kind(v1::TrialEvent::FAILED);
    e.set_status("gpu_fault");
    e.set_reason("a fatal device error (" + what + ")");
    return e;
  }
  // 75: ablate-train checkpointed and stopped on SIGUSR1 (ours, or sent by someone else).
  if (preempted || (!status.signaled && status.code == 75)) {
    e.set_kind(v1::TrialEvent::FAILED);
    e.set_status("preempted");
    const bool own = have_final_ && final_status_ == "preempted" && !final_reason_.empty();
    e.set_reason(own ? final_reason_ + " (" + what + ")" : "preempted: " + what);
    return e;
  }
  e.set_kind(v1::TrialEvent::FAILED);
  e.set_reason(killed_by_worker ? "worker stopped: " + what : what);
  return e;
}

void Supervisor::Run() {
  std::optional<v1::TrialEvent> early;  // cancelled or killed before the spawn
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cancel_requested_ || killed_by_worker_) {
      exited_ = true;
      early.emplace();
      early->set_kind(cancel_requested_ ? v1::TrialEvent::CANCELED : v1::TrialEvent::FAILED);
      early->set_reason(cancel_requested_ ? cancel_reason_ + " (before the trainer started)"
                                          : "worker stopped before the trainer started");
    } else if (preempt_requested_) {
      exited_ = true;
      early.emplace();
      early->set_kind(v1::TrialEvent::FAILED);
      early->set_status("preempted");
      early->set_reason("preempted before the trainer started");
    }
  }
  if (early) {  // the sink is never called under mu_: it takes the agent's lock
    sink_->OnEvent(std::move(*early));
    return;
  }
  run_start_ms_ = clock_->MonotonicMs();
  // A shared GPU: wait until it has room (the wait counts as start-up time).
  while (gate_ && !gate_().empty()) {
    bool ended = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cancel_requested_ || killed_by_worker_ || preempt_requested_) {
        ended = true;
        exited_ = true;
        early.emplace();
        early->set_kind(cancel_requested_ ? v1::TrialEvent::CANCELED : v1::TrialEvent::FAILED);
        if (preempt_requested_ && !cancel_requested_) early->set_status("preempted");
        early->set_reason(cancel_requested_ ? cancel_reason_ + " (while waiting for GPU memory)"
                          : killed_by_worker_ ? "worker stopped while waiting for GPU memory"
                                              : "preempted while waiting for GPU memory");
      }
    }
    if (ended) {
      sink_->OnEvent(std::move(*early));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_ms));
  }
  auto spawned = spawner_->Spawn(spec_);
  if (!spawned.ok()) {
    exited_ = true;
    v1::TrialEvent e;
    e.set_kind(v1::TrialEvent::FAILED);
    e.set_reason("cannot start the trainer: " + spawned.status().message());
    e.set_exit_code(127);
    sink_->OnEvent(std::move(e));
    return;
  }
  ChildProcess* child = spawned->get();
  {
    std::lock_guard<std::mutex> l(mu_);
    child_ = std::move(*spawned);
    pid_ = child->pid();
  }
  {
    v1::TrialEvent e;
    e.set_kind(v1::TrialEvent::STARTED);
    sink_->OnEvent(std::move(e));
  }

  std::string buf;
  bool discarding = false;  // inside an over-long line: drop bytes until its newline
  auto consume = [&](bool at_end) {
    size_t start = 0;
    for (;;) {
      const size_t nl = buf.find('\n', start);
      if (nl == std::string::npos) break;
      if (!discarding) HandleLine(std::string_view(buf).substr(start, nl - start));
      discarding = false;
      start = nl + 1;
    }
    buf.erase(0, start);
    if (buf.size() > options_.max_line_bytes) {
      if (!discarding) ++non_json_lines_;
      discarding = true;
      buf.clear();
    }
    if (at_end && !buf.empty()) {  // a last line without its newline
      if (!discarding) HandleLine(buf);
      buf.clear();
    }
  };

  std::optional<ExitStatus> status;
  bool eof = false;
  while (!status) {
    CheckCancel();
    if (!eof) {
      const auto r = child->ReadStdout(&buf, options_.poll_ms);
      if (r == ChildProcess::ReadResult::kEof) eof = true;
      consume(false);
    }
    {
      std::lock_guard<std::mutex> l(mu_);  // TryWait and SignalGroup (Cancel, Kill) are serialized
      status = child->TryWait();
      if (status) exited_ = true;
    }
    if (eof && !status) {
      // Stdout closed but the process lives on: wait for it without spinning.
      struct timespec ts {
        0, long(options_.poll_ms) * 1000000L
      };
      nanosleep(&ts, nullptr);
    }
  }
  // The trainer exited and TryWait killed the rest of its group. Collect what is still in the pipe
  // (bounded, in case a grandchild that inherited stdout escaped the group and writes forever).
  for (int i = 0; !eof && i < 64; ++i) {
    const auto r = child->ReadStdout(&buf, 0);
    if (r == ChildProcess::ReadResult::kEof) eof = true;
    if (r == ChildProcess::ReadResult::kTimeout) break;
    consume(false);
  }
  consume(true);
  if (first_step_ms_ >= 0) {
    std::vector<v1::MetricPoint> overhead(2);
    overhead[0].set_step(first_step_);
    overhead[0].set_name("startup_s");
    overhead[0].set_value(double(first_step_ms_ - run_start_ms_) / 1000);
    overhead[1].set_step(last_step_line_);
    overhead[1].set_name("teardown_s");
    overhead[1].set_value(double(clock_->MonotonicMs() - last_step_ms_) / 1000);
    sink_->OnPoints(std::move(overhead));
  }
  sink_->OnEvent(FinalEvent(*status));
}

}  // namespace ablate::agent
