#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ablate/memory_estimate.h"

namespace ablate::server {

namespace {

// The memory left free beside the trials packed onto a GPU: max(512 MiB, 5% of it).
int64_t GpuMargin(int64_t total) { return std::max<int64_t>(int64_t(512) << 20, total / 20); }

// The trainer's report of its device memory peak (bytes; worker/trainer/cuda).
constexpr const char* kPeakMetric = "gpu_mem_peak_bytes";

}  // namespace

bool IsPreemption(const v1::TrialEvent& ev) {
  return ev.kind() == v1::TrialEvent::FAILED &&
         (ev.status() == "preempted" || ev.exit_code() == kTrainerExitPreempted);
}

struct Scheduler::SweepState {
  int64_t id = 0;
  std::string name;
  int priority = 0;
  int max_attempts = 3;
  int running = 0;
  std::set<std::pair<int64_t, int64_t>> queue;  // (order_key, trial id) of queued trials
  std::unique_ptr<EarlyStopper> stopper;         // with an early_stop rule
};

struct Scheduler::TrialState {
  int64_t id = 0;
  int64_t sweep_id = 0;
  v1::TrialState state = v1::QUEUED;  // QUEUED | RUNNING
  int attempts = 0;   // attempts made; the current/latest attempt number
  int max_attempts = 3;
  int64_t order_key = 0;
  int gpus = 0;
  int cpu_slots = 0;
  int gpu_share = 1;          // k > 1: 1/k of one GPU
  int next_gpu_share = 0;     // > 0: the share from the next attempt on (isolated after a fault)
  int64_t memory_bytes = 0;   // estimate from the config (0: not computed yet)
  int64_t peak_bytes = 0;     // the trainer's reported peak (0: none yet)
  bool early_stop_exempt = false;
  std::string config_json;
  std::string checkpoint_path;
  int64_t checkpoint_step = 0;
  double started_at = 0;
  double not_before = 0;  // retry backoff: not placed before this time
  // While running:
  std::string worker_id;
  std::vector<int> gpu_indices;
  double lease_expiry = 0;
  bool cancel_requested = false;
  bool stop_requested = false;  // with cancel_requested: early stopping ended it (state stopped)
  bool requeue_after_cancel = false;  // retried while its canceled attempt was still stopping
  bool assignment_sent = false;
};

struct Scheduler::WorkerState {
  std::string id;
  std::string hostname;
  std::vector<v1::GpuInfo> gpus;
  int cpu_slots = 0;
  std::set<int> free_gpus;  // GPUs with no trial at all
  // The trials on each GPU (whole or shared), their shares and memory, and NVML's last reading.
  struct GpuUse {
    std::set<int64_t> trials;
    double share = 0;     // given out: 1 for a whole-GPU trial, the sum of 1/k for shared ones
    int64_t bytes = 0;    // the sum of the shared trials' memory (TrialBytesLocked)
    int64_t used_bytes = 0;  // NVML, from the last heartbeat
  };
  std::map<int, GpuUse> gpu_use;
  int free_slots = 0;
  std::shared_ptr<WorkerLink> link;  // null while disconnected
  bool draining = false;
  double quarantined_until = 0;
  int failures = 0;  // consecutive failed attempts
  std::set<int64_t> failed_trials;  // the trials of those failures
  double last_seen = 0;
  // One of its attempts' leases expired since it was last heard from: cut off, although its stream
  // may look open (a partition drops packets; nothing closes the connection). No new trials until
  // a heartbeat or a new registration shows it is back: placing the requeued trials on it again
  // would only burn their attempts.
  bool silent = false;
  double registered_at = 0;
  double last_stored = 0;
  std::set<int64_t> running;  // trial ids
};

std::unique_ptr<Scheduler::TrialState> Scheduler::TrialFromRecord(const TrialRecord& r) {
  auto t = std::make_unique<TrialState>();
  t->id = r.id;
  t->sweep_id = r.sweep_id;
  t->state = r.state;
  t->attempts = r.attempts;
  t->max_attempts = r.max_attempts;
  t->order_key = r.order_key;
  t->gpus = r.gpus;
  t->cpu_slots = r.cpu_slots;
  t->gpu_share = std::max(1, r.gpu_share);
  t->early_stop_exempt = r.early_stop_exempt;
  t->config_json = r.config_json;
  t->checkpoint_path = r.checkpoint_path;
  t->checkpoint_step = r.checkpoint_step;
  t->started_at = r.started_at;
  return t;
}

Scheduler::Scheduler(Store* store, const Clock* clock, SchedulerOptions options)
    : store_(store), clock_(clock), opt_(options) {}

Scheduler::~Scheduler() {
  // The store's callbacks refer to this scheduler: let the ones queued run first (twice: a
  // callback may queue another operation, such as an early-stopping judgment, with its own).
  (void)store_->Flush();
  (void)store_->Flush();
}

StatusOr<std::unique_ptr<EarlyStopper>> Scheduler::LoadStopper(
    int64_t sweep_id, const std::string& json, std::vector<StopDecisionRecord>* due) {
  ABLATE_ASSIGN_OR_RETURN(EarlyStopRule rule, EarlyStopRuleFromJson(json));
  auto stopper = std::make_unique<EarlyStopper>(sweep_id, rule);
  TrialsRead read;
  read.progress = false;
  read.config_json = false;
  ABLATE_ASSIGN_OR_RETURN(std::vector<TrialStatus> trials, store_->GetTrials(sweep_id, read));
  for (const auto& t : trials) {
    stopper->AddTrial(t.trial.id, t.trial.axes, !IsActive(t.trial.state),
                      t.trial.early_stop_exempt);
  }
  ABLATE_ASSIGN_OR_RETURN(std::vector<StopDecisionRecord> decisions,
                          store_->GetStopDecisions(sweep_id));
  for (const auto& d : decisions) stopper->Restore(d);
  // The stored points, trial by trial: a judgment that was due when the coordinator stopped (its
  // points committed, the judgment not) is taken now.
  for (const auto& t : trials) {
    if (stopper->Stopped(t.trial.id)) continue;
    ABLATE_ASSIGN_OR_RETURN(std::vector<Point> points, store_->GetSeries(t.trial.id, rule.metric));
    for (const Point& p : points) {
      for (auto& d : stopper->OnPoint(t.trial.id, p.step, p.name.empty() ? rule.metric : p.name,
                                      p.value)) {
        due->push_back(std::move(d));
      }
    }
  }
  return stopper;
}

Status Scheduler::Recover() {
  ABLATE_ASSIGN_OR_RETURN(LoadedState st, store_->LoadState());
  // Early stopping: the sweeps with a rule and work left.
  std::map<int64_t, std::unique_ptr<EarlyStopper>> stoppers;
  std::vector<StopDecisionRecord> due;
  {
    std::set<int64_t> active;
    for (const auto& r : st.trials) active.insert(r.sweep_id);
    for (const auto& s : st.sweeps) {
      if (s.early_stop_json.empty() || !active.count(s.id)) continue;
      ABLATE_ASSIGN_OR_RETURN(stoppers[s.id], LoadStopper(s.id, s.early_stop_json, &due));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->UnixSeconds();
  for (const auto& s : st.sweeps) {
    auto sw = std::make_unique<SweepState>();
    sw->id = s.id;
    sw->name = s.name;
    sw->priority = s.priority;
    sw->max_attempts = s.max_attempts;
    if (auto it = stoppers.find(s.id); it != stoppers.end()) sw->stopper = std::move(it->second);
    sweeps_[s.id] = std::move(sw);
  }
  for (const auto& w : st.workers) {
    auto ws = std::make_unique<WorkerState>();
    ws->id = w.id;
    ws->hostname = w.hostname;
    ws->cpu_slots = w.cpu_slots;
    ws->last_seen = w.last_seen_at;
    ws->registered_at = w.registered_at;
    ws->failures = w.failures;
    ws->draining = w.draining;
    try {
      for (const auto& g : nlohmann::json::parse(w.gpus_json.empty() ? "[]" : w.gpus_json)) {
        v1::GpuInfo info;
        info.set_index(g.value("index", 0));
        info.set_uuid(g.value("uuid", ""));
        info.set_name(g.value("name", ""));
        info.set_memory_bytes(g.value("memory_bytes", int64_t(0)));
        ws->gpus.push_back(info);
      }
    } catch (const std::exception&) {
    }
    workers_[w.id] = std::move(ws);
  }
  for (const auto& r : st.trials) {
    auto t = TrialFromRecord(r);
    auto sw = sweeps_.find(r.sweep_id);
    if (sw == sweeps_.end()) continue;
    if (t->state == v1::QUEUED) sw->second->queue.insert({t->order_key, t->id});
    trials_[r.id] = std::move(t);
  }
  for (const auto& a : st.running) {
    auto it = trials_.find(a.trial_id);
    if (it == trials_.end() || it->second->state != v1::RUNNING || it->second->attempts != a.attempt) {
      // Not the trial's current attempt: it can never be adopted (a worker still running it is
      // told to stop when it registers), so it ends now instead of staying "running" for good.
      // A trial that ended while this attempt ran was canceled (cancel records the trial first).
      // A trial that ended while this attempt ran was canceled or stopped early (both record the
      // trial first).
      auto stored = st.running_trial_state.find(a.trial_id);
      const bool stopped = stored != st.running_trial_state.end() && stored->second == v1::STOPPED;
      AttemptUpdate au;
      au.trial_id = a.trial_id;
      au.attempt = a.attempt;
      au.state = it == trials_.end() ? (stopped ? "stopped" : "canceled") : "lost";
      au.ended_at = now;
      au.reason = it == trials_.end()
                      ? (stopped ? "stopped early; the coordinator restarted before its worker "
                                   "stopped it"
                                 : "canceled by user; the coordinator restarted before its worker "
                                   "stopped it")
                      : "not the trial's current attempt when the coordinator restarted";
      store_->UpdateAttempt(au);
      continue;
    }
    TrialState& t = *it->second;
    t.worker_id = a.worker_id;
    t.gpu_indices = a.gpu_indices;
    t.lease_expiry = now + opt_.lease_s;  // its worker gets one lease to reconnect and re-adopt it
    t.assignment_sent = true;
    sweeps_[t.sweep_id]->running++;
    auto w = workers_.find(a.worker_id);
    if (w != workers_.end()) w->second->running.insert(t.id);
  }
  // A running trial whose attempt record is missing cannot be adopted: requeue it.
  for (auto& [id, t] : trials_) {
    if (t->state == v1::RUNNING && t->worker_id.empty()) {
      t->state = v1::QUEUED;
      sweeps_[t->sweep_id]->queue.insert({t->order_key, t->id});
      TrialUpdate u;
      u.trial_id = id;
      u.state = v1::QUEUED;
      store_->UpdateTrial(u);
    }
  }
  ApplyDecisionsLocked(std::move(due));
  return Status::Ok();
}

StatusOr<SubmitOutcome> Scheduler::Submit(SweepRecord sweep, std::vector<TrialRecord> trials) {
  const int total = int(trials.size());
  // Synchronous store call: never under mu_ (the writer thread's callbacks take mu_).
  ABLATE_ASSIGN_OR_RETURN(Store::SubmitResult res, store_->SubmitSweep(sweep, std::move(trials)));
  // Early stopping: a sweep without a stopper in memory (new, or with no work left when the
  // coordinator started) gets one built from the store, its new trials included.
  std::unique_ptr<EarlyStopper> loaded;
  std::vector<StopDecisionRecord> due;
  if (!sweep.early_stop_json.empty()) {
    bool have = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sweeps_.find(res.sweep_id);
      have = it != sweeps_.end() && it->second->stopper;
    }
    if (!have) {
      ABLATE_ASSIGN_OR_RETURN(loaded, LoadStopper(res.sweep_id, sweep.early_stop_json, &due));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& sw = sweeps_[res.sweep_id];
  if (!sw) sw = std::make_unique<SweepState>();
  sw->id = res.sweep_id;
  sw->name = sweep.name;
  sw->priority = sweep.priority;
  sw->max_attempts = sweep.max_attempts;
  // A resubmitted spec may change the GPU share (how the trials run, not what they compute); the
  // store changed the queued trials too.
  for (const auto& [order, id] : sw->queue) trials_.at(id)->gpu_share = std::max(1, sweep.gpu_share);
  if (loaded) {
    sw->stopper = std::move(loaded);
  } else if (sw->stopper) {
    for (const auto& r : res.inserted) sw->stopper->AddTrial(r.id, r.axes, false, false);
  }
  for (const auto& r : res.inserted) {
    auto t = TrialFromRecord(r);
    t->sweep_id = res.sweep_id;
    t->state = v1::QUEUED;
    sw->queue.insert({t->order_key, t->id});
    trials_[r.id] = std::move(t);
  }
  ApplyDecisionsLocked(std::move(due));
  store_->AddEvent("submit", res.sweep_id, 0, 0, "",
                   std::to_string(res.inserted.size()) + " new trials of " + std::to_string(total));
  ScheduleLocked();
  SubmitOutcome out;
  out.sweep_id = res.sweep_id;
  out.total = total;
  out.added = int(res.inserted.size());
  return out;
}

// ---- Placement -----------------------------------------------------------------------------------

void Scheduler::ScheduleLocked() {
  const double now = clock_->UnixSeconds();
  bool placed = true;
  // Round-robin over workers, one trial per worker per pass, so a burst spreads across workers.
  while (placed) {
    placed = false;
    for (auto& [id, w] : workers_) {
      if (!w->link || w->silent || w->draining || w->quarantined_until > now) continue;
      const bool shared_room =
          std::any_of(w->gpu_use.begin(), w->gpu_use.end(), [](const auto& g) {
            return !g.second.trials.empty() && g.second.share < 1 - 1e-9;
          });
      if (w->free_gpus.empty() && w->free_slots <= 0 && !shared_room) continue;
      if (TryPlaceLocked(*w)) placed = true;
    }
  }
}

bool Scheduler::TryPlaceLocked(WorkerState& w) {
  // Sweeps with queued work, best first: priority desc, running asc, id asc.
  std::vector<SweepState*> order;
  for (auto& [id, s] : sweeps_) {
    if (!s->queue.empty()) order.push_back(s.get());
  }
  std::sort(order.begin(), order.end(), [](const SweepState* a, const SweepState* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    if (a->running != b->running) return a->running < b->running;
    return a->id < b->id;
  });
  for (SweepState* s : order) {
    for (auto it = s->queue.begin(); it != s->queue.end(); ++it) {
      TrialState& t = *trials_.at(it->second);
      if (t.not_before > clock_->UnixSeconds()) continue;  // backing off after a failed attempt
      std::vector<int> gpus;
      if (t.gpu_share > 1) {
        const int g = PickSharedGpuLocked(t, w);
        // The rest of the sweep waits too: trials start in the sweep's order.
        if (g < 0) break;
        gpus.push_back(g);
      } else {
        bool fits = t.gpus > 0 ? int(w.free_gpus.size()) >= t.gpus
                               : (w.gpus.empty() || w.cpu_slots > 0) &&
                                     w.free_slots >= std::max(1, t.cpu_slots);
        if (!fits) break;  // a sweep's trials share their resources: the rest will not fit either
        if (t.gpus > 0) {
          auto g = w.free_gpus.begin();
          for (int k = 0; k < t.gpus; ++k) gpus.push_back(*g++);
        }
      }
      s->queue.erase(it);
      StartAttemptLocked(t, w, gpus);
      return true;
    }
  }
  return false;
}

int64_t Scheduler::TrialBytesLocked(TrialState& t) {
  if (t.peak_bytes > 0) return t.peak_bytes;
  if (t.memory_bytes == 0) {
    // Computed once, when the trial is first placed (parsing every config at submit would cost
    // the large sweeps that never share a GPU).
    auto c = config::ParseTrialConfig(t.config_json, "trial " + std::to_string(t.id));
    t.memory_bytes = c.ok() ? config::EstimateDeviceBytes(*c) : config::kContextBytes;
  }
  return t.memory_bytes;
}

int Scheduler::PickSharedGpuLocked(TrialState& t, WorkerState& w) {
  const double share = 1.0 / t.gpu_share;
  const int64_t need = TrialBytesLocked(t);
  int best = -1;
  size_t best_trials = 0;
  for (const v1::GpuInfo& info : w.gpus) {
    const WorkerState::GpuUse& u = w.gpu_use[info.index()];
    if (u.share + share > 1 + 1e-9) continue;  // full, or held by a whole-GPU trial
    if (info.memory_bytes() > 0) {
      const int64_t in_use = std::max(u.bytes, u.used_bytes);
      if (in_use + need + GpuMargin(info.memory_bytes()) > info.memory_bytes()) continue;
    }
    if (best < 0 || u.trials.size() < best_trials) {
      best = info.index();
      best_trials = u.trials.size();
    }
  }
  return best;
}

void Scheduler::HoldLocked(TrialState& t, WorkerState& w) {
  for (int g : t.gpu_indices) {
    w.free_gpus.erase(g);
    auto& u = w.gpu_use[g];
    u.trials.insert(t.id);
    u.share += t.gpu_share > 1 ? 1.0 / t.gpu_share : 1.0;
    if (t.gpu_share > 1) u.bytes += TrialBytesLocked(t);
  }
  if (t.gpus == 0) w.free_slots -= std::max(1, t.cpu_slots);
}

void Scheduler::StartAttemptLocked(TrialState& t, WorkerState& w, const std::vector<int>& gpus) {
  const double now = clock_->UnixSeconds();
  t.attempts++;
  t.state = v1::RUNNING;
  t.worker_id = w.id;
  t.gpu_indices = gpus;
  t.lease_expiry = now + opt_.lease_s;
  t.cancel_requested = false;
  t.assignment_sent = false;
  if (t.started_at == 0) t.started_at = now;
  HoldLocked(t, w);
  w.running.insert(t.id);
  sweeps_[t.sweep_id]->running++;
  counters_.assignments++;

  AttemptRecord a;
  a.trial_id = t.id;
  a.attempt = t.attempts;
  a.worker_id = w.id;
  a.gpu_indices = gpus;
  a.cpu_slots = t.gpus == 0 ? std::max(1, t.cpu_slots) : 0;
  a.gpu_share = t.gpu_share;
  a.state = "running";
  a.started_at = now;
  TrialUpdate u;
  u.trial_id = t.id;
  u.state = v1::RUNNING;
  u.attempts = t.attempts;
  u.started_at = t.started_at;
  const int64_t trial_id = t.id;
  const int attempt = t.attempts;
  // Send only once the attempt is durable (the attempt and the trial's update in one transaction).
  store_->StartAttempt(a, u, [this, trial_id, attempt](const Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = trials_.find(trial_id);
    if (it == trials_.end()) return;
    TrialState& t = *it->second;
    if (!st.ok() || t.state != v1::RUNNING || t.attempts != attempt || t.assignment_sent) return;
    t.assignment_sent = true;
    v1::CoordinatorMessage m;
    auto* as = m.mutable_assign();
    as->set_trial_id(trial_id);
    as->set_attempt(attempt);
    as->set_config_json(t.config_json);
    for (int g : t.gpu_indices) as->add_gpu_indices(g);
    as->set_cpu_slots(t.gpus == 0 ? std::max(1, t.cpu_slots) : 0);
    as->set_resume_checkpoint(t.checkpoint_path);
    if (t.gpu_share > 1) {
      as->set_gpu_share(t.gpu_share);
      as->set_memory_bytes(TrialBytesLocked(t));
    }
    auto sw = sweeps_.find(t.sweep_id);
    if (sw != sweeps_.end()) as->set_sweep_name(sw->second->name);
    SendLocked(t.worker_id, m);
  });
}

void Scheduler::ReleaseLocked(TrialState& t) {
  auto w = workers_.find(t.worker_id);
  if (w != workers_.end()) {
    for (int g : t.gpu_indices) {
      auto& u = w->second->gpu_use[g];
      if (u.trials.erase(t.id)) {
        u.share -= t.gpu_share > 1 ? 1.0 / t.gpu_share : 1.0;
        if (t.gpu_share > 1) u.bytes -= TrialBytesLocked(t);
      }
      if (u.trials.empty()) u.share = 0, u.bytes = 0;
      bool exists = std::any_of(w->second->gpus.begin(), w->second->gpus.end(),
                                [g](const v1::GpuInfo& i) { return i.index() == g; });
      if (exists && u.trials.empty()) w->second->free_gpus.insert(g);
    }
    if (t.gpus == 0) w->second->free_slots += std::max(1, t.cpu_slots);
    w->second->running.erase(t.id);
  }
  auto sw = sweeps_.find(t.sweep_id);
  if (sw != sweeps_.end() && t.state == v1::RUNNING) sw->second->running--;
  t.worker_id.clear();
  t.gpu_indices.clear();
}

void Scheduler::EndAttemptLocked(TrialState& t, const std::string& attempt_state,
                                 v1::TrialState trial_state, const std::string& reason,
                                 int exit_code, const std::string& log_tail,
                                 bool requeue_if_possible, bool count_failure) {
  const double now = clock_->UnixSeconds();
  AttemptUpdate au;
  au.trial_id = t.id;
  au.attempt = t.attempts;
  au.state = t.cancel_requested ? (t.stop_requested ? "stopped" : "canceled") : attempt_state;
  au.ended_at = now;
  au.exit_code = exit_code;
  au.reason = reason;
  au.log_tail = log_tail;
  store_->UpdateAttempt(au);
  const std::string worker_id = t.worker_id;
  auto w = workers_.find(worker_id);
  if (w != workers_.end()) {
    if (count_failure) {
      w->second->failures++;
      w->second->failed_trials.insert(t.id);
      // Quarantine when the failures span several trials: one broken trial failing repeatedly on
      // the same worker says nothing about the worker.
      if (w->second->failures >= opt_.quarantine_after && w->second->failed_trials.size() >= 2) {
        w->second->quarantined_until = now + opt_.quarantine_s;
        store_->AddEvent("worker_quarantined", t.sweep_id, t.id, t.attempts, worker_id,
                         std::to_string(w->second->failures) + " consecutive failed attempts");
      }
    } else if (attempt_state == "succeeded" || attempt_state == "diverged") {
      w->second->failures = 0;
      w->second->failed_trials.clear();
    }
  }
  ReleaseLocked(t);
  if (t.next_gpu_share > 0) {  // after the release, which gives back the share it held
    t.gpu_share = t.next_gpu_share;
    t.next_gpu_share = 0;
  }
  if (w != workers_.end()) WorkerStoreLocked(*w->second);

  TrialUpdate tu;
  tu.trial_id = t.id;
  if (t.cancel_requested && t.requeue_after_cancel) {
    t.cancel_requested = false;
    t.requeue_after_cancel = false;
    t.state = v1::QUEUED;
    sweeps_[t.sweep_id]->queue.insert({t.order_key, t.id});
    tu.state = v1::QUEUED;
    tu.reason = "retried";
    store_->UpdateTrial(tu);
  } else if (t.cancel_requested) {
    const int64_t sweep_id = t.sweep_id, trial_id = t.id;
    trials_.erase(t.id);  // already stored as canceled (or stopped)
    TrialEndedLocked(sweep_id, trial_id);
  } else if (requeue_if_possible && t.attempts < t.max_attempts) {
    t.state = v1::QUEUED;
    // A failed trainer backs off exponentially, so a trial that keeps failing does not spin
    // through its attempts; a lost attempt (infrastructure) is retried at once.
    if (count_failure) {
      double backoff = opt_.retry_backoff_s;
      for (int k = 1; k < t.attempts && backoff < opt_.retry_backoff_max_s; ++k) backoff *= 2;
      t.not_before = now + std::min(backoff, opt_.retry_backoff_max_s);
    }
    sweeps_[t.sweep_id]->queue.insert({t.order_key, t.id});
    counters_.retries++;
    tu.state = v1::QUEUED;
    tu.reason = "attempt " + std::to_string(t.attempts) + " " + attempt_state + ": " + reason;
    store_->UpdateTrial(tu);
  } else {
    tu.state = trial_state;
    tu.finished_at = now;
    tu.reason = trial_state == v1::SUCCEEDED ? "" : reason;
    if (requeue_if_possible) {
      tu.reason = "gave up after " + std::to_string(t.attempts) + " attempts; last: " + reason;
    }
    store_->UpdateTrial(tu);
    store_->AddEvent("trial_" + std::string(TrialStateName(trial_state)), t.sweep_id, t.id, t.attempts, worker_id, *tu.reason);
    const int64_t sweep_id = t.sweep_id, trial_id = t.id;
    trials_.erase(t.id);
    TrialEndedLocked(sweep_id, trial_id);
  }
  ScheduleLocked();
}

void Scheduler::TrialEndedLocked(int64_t sweep_id, int64_t trial_id) {
  auto sw = sweeps_.find(sweep_id);
  if (sw == sweeps_.end() || !sw->second->stopper) return;
  // After the trial's last metrics: their batches were queued to the store before the event that
  // ended it, so their callbacks (which feed the stopper) run before this barrier's. Judging at
  // once could take a seed as ended without the values still being committed.
  store_->Barrier([this, sweep_id, trial_id](const Status&) {
    std::lock_guard<std::mutex> lock(mu_);
    auto sw = sweeps_.find(sweep_id);
    if (sw == sweeps_.end() || !sw->second->stopper) return;
    ApplyDecisionsLocked(sw->second->stopper->OnTrialEnded(trial_id));
  });
}

void Scheduler::ApplyDecisionsLocked(std::vector<StopDecisionRecord> decisions) {
  const double now = clock_->UnixSeconds();
  for (StopDecisionRecord& d : decisions) {
    counters_.stop_decisions++;
    d.decided_at = now;
    std::vector<TrialUpdate> updates;
    std::vector<int64_t> running, queued;
    if (d.decision == "stop") {
      std::ostringstream why;
      why.precision(6);
      why << "stopped early by " << d.rule << " at step " << d.step << " (rung " << d.rung
          << "): " << d.metric << " " << d.value << " is worse than the threshold " << d.threshold;
      for (int64_t id : d.trial_ids) {
        auto it = trials_.find(id);
        if (it == trials_.end() || it->second->cancel_requested) continue;  // ended already
        TrialState& t = *it->second;
        TrialUpdate u;
        u.trial_id = id;
        u.state = v1::STOPPED;
        u.finished_at = now;
        u.reason = why.str();
        updates.push_back(u);
        // Marked now, so that nothing starts or adopts it while the judgment commits.
        t.cancel_requested = true;
        t.stop_requested = true;
        if (t.state == v1::QUEUED) {
          sweeps_[t.sweep_id]->queue.erase({t.order_key, t.id});
          queued.push_back(id);
        } else {
          running.push_back(id);
        }
      }
    }
    const int64_t sweep_id = d.sweep_id;
    const std::string summary = d.config + " at step " + std::to_string(d.step) + ": " +
                                d.decision;
    store_->RecordStopDecision(
        d, std::move(updates), [this, running, queued, sweep_id, summary](const Status& st) {
          std::lock_guard<std::mutex> lock(mu_);
          if (!st.ok()) {
            // Nothing of the judgment was stored: the trials go on (the judgment is retaken
            // from the stored metrics after a restart).
            for (int64_t id : running) {
              if (auto it = trials_.find(id); it != trials_.end()) {
                it->second->cancel_requested = it->second->stop_requested = false;
              }
            }
            for (int64_t id : queued) {
              if (auto it = trials_.find(id); it != trials_.end()) {
                it->second->cancel_requested = it->second->stop_requested = false;
                sweeps_[it->second->sweep_id]->queue.insert({it->second->order_key, id});
              }
            }
            store_->AddEvent("stop_decision_failed", sweep_id, 0, 0, "",
                             summary + ": " + st.ToString());
            ScheduleLocked();
            return;
          }
          for (int64_t id : queued) trials_.erase(id);
          for (int64_t id : running) {
            auto it = trials_.find(id);
            if (it == trials_.end()) continue;
            v1::CoordinatorMessage m;
            m.mutable_cancel()->set_trial_id(id);
            m.mutable_cancel()->set_attempt(it->second->attempts);
            m.mutable_cancel()->set_reason("stopped early");
            m.mutable_cancel()->set_checkpoint(true);
            SendLocked(it->second->worker_id, m);
          }
        });
    if (d.decision == "stop") store_->AddEvent("early_stop", sweep_id, 0, 0, "", summary);
  }
}

void Scheduler::SendLocked(const std::string& worker_id, const v1::CoordinatorMessage& msg) {
  auto w = workers_.find(worker_id);
  if (w != workers_.end() && w->second->link) w->second->link->Send(msg);
}

void Scheduler::SendAckLocked(const std::string& worker_id, int64_t trial_id, int attempt,
                               int64_t seq) {
  v1::CoordinatorMessage m;
  m.mutable_ack()->set_trial_id(trial_id);
  m.mutable_ack()->set_attempt(attempt);
  m.mutable_ack()->set_seq(seq);
  SendLocked(worker_id, m);
}

std::string Scheduler::WorkerStateNameLocked(const WorkerState& w) const {
  if (w.quarantined_until > clock_->UnixSeconds()) return "quarantined";
  if (!w.link || w.silent) return "lost";
  if (w.draining) return "draining";
  return w.running.empty() ? "idle" : "busy";
}

void Scheduler::WorkerStoreLocked(const WorkerState& w) {
  WorkerRecord r;
  r.id = w.id;
  r.hostname = w.hostname;
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : w.gpus) {
    gpus.push_back({{"index", g.index()},
                    {"uuid", g.uuid()},
                    {"name", g.name()},
                    {"memory_bytes", g.memory_bytes()}});
  }
  r.gpus_json = gpus.dump();
  r.cpu_slots = w.cpu_slots;
  r.state = WorkerStateNameLocked(w);
  r.registered_at = w.registered_at;
  r.last_seen_at = w.last_seen;
  r.failures = w.failures;
  r.quarantined = w.quarantined_until > clock_->UnixSeconds();
  r.draining = w.draining;
  store_->UpsertWorker(r);
}

// ---- Worker stream --------------------------------------------------------------------------------

v1::Registered Scheduler::Register(const v1::Register& reg, std::shared_ptr<WorkerLink> link) {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->UnixSeconds();
  auto& slot = workers_[reg.worker_id()];
  if (!slot) {
    slot = std::make_unique<WorkerState>();
    slot->id = reg.worker_id();
  }
  WorkerState& w = *slot;
  w.hostname = reg.hostname();
  w.gpus.assign(reg.gpus().begin(), reg.gpus().end());
  w.cpu_slots = reg.gpus_size() > 0 ? reg.cpu_slots() : std::max(1, reg.cpu_slots());
  w.link = std::move(link);
  w.draining = reg.draining();
  w.last_seen = now;
  w.silent = false;
  w.registered_at = now;
  w.free_gpus.clear();
  w.gpu_use.clear();
  for (const auto& g : w.gpus) w.free_gpus.insert(g.index());
  w.free_slots = w.cpu_slots;

  v1::Registered out;
  out.set_lease_ms(int64_t(opt_.lease_s * 1000));
  out.set_heartbeat_ms(int64_t(opt_.heartbeat_s * 1000));
  std::set<std::pair<int64_t, int>> reported;  // (trial, attempt): a stale attempt is not current
  for (const auto& ref : reg.running()) {
    reported.insert({ref.trial_id(), ref.attempt()});
    auto it = trials_.find(ref.trial_id());
    bool adopt = it != trials_.end() && it->second->state == v1::RUNNING &&
                 it->second->attempts == ref.attempt() && !it->second->cancel_requested;
    if (adopt) {
      TrialState& t = *it->second;
      if (t.worker_id != w.id) {  // it moved (same worker under a new link, or recovered state)
        ReleaseLocked(t);
        t.state = v1::RUNNING;
        sweeps_[t.sweep_id]->running++;
        t.worker_id = w.id;
      }
      t.lease_expiry = now + opt_.lease_s;
      t.assignment_sent = true;
      w.running.insert(t.id);
      *out.add_adopted() = ref;
    } else {
      *out.add_stop() = ref;
      counters_.fenced_reports++;
    }
  }
  // Resources held by the adopted attempts.
  for (int64_t id : w.running) {
    auto it = trials_.find(id);
    if (it != trials_.end()) HoldLocked(*it->second, w);
  }
  // Attempts this worker held whose assignment was sent but which it no longer runs: lost.
  std::vector<int64_t> gone;
  for (int64_t id : w.running) {
    auto it = trials_.find(id);
    if (it != trials_.end() && !reported.count({id, it->second->attempts})) gone.push_back(id);
  }
  for (int64_t id : gone) {
    auto it = trials_.find(id);
    if (it == trials_.end()) continue;
    TrialState& t = *it->second;
    if (!t.assignment_sent) {
      // Not sent yet (its commit is pending): it will be sent on this new link.
      continue;
    }
    counters_.lost_attempts++;
    EndAttemptLocked(t, "lost", v1::FAILED, "the worker no longer runs it (worker restarted)", 0, "",
                     true, false);
  }
  store_->AddEvent("worker_registered", 0, 0, 0, w.id,
                   std::to_string(w.gpus.size()) + " GPUs, " + std::to_string(w.cpu_slots) +
                       " CPU slots, " + std::to_string(out.adopted_size()) + " adopted");
  WorkerStoreLocked(w);
  v1::CoordinatorMessage m;
  *m.mutable_registered() = out;
  w.link->Send(m);
  ScheduleLocked();
  return out;
}

void Scheduler::Disconnect(const std::string& worker_id, const WorkerLink* link) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second->link.get() != link) return;  // replaced by a newer link
  it->second->link.reset();
  store_->AddEvent("worker_disconnected", 0, 0, 0, worker_id, "");
  WorkerStoreLocked(*it->second);
}

void Scheduler::OnHeartbeat(const std::string& worker_id, const v1::Heartbeat& hb) {
  std::lock_guard<std::mutex> lock(mu_);
  auto wit = workers_.find(worker_id);
  if (wit == workers_.end()) return;
  WorkerState& w = *wit->second;
  const double now = clock_->UnixSeconds();
  w.last_seen = now;
  w.silent = false;
  bool was_draining = w.draining;
  w.draining = hb.draining();
  for (const auto& m : hb.gpu_memory()) w.gpu_use[m.index()].used_bytes = m.used_bytes();
  for (const auto& ref : hb.running()) {
    auto it = trials_.find(ref.trial_id());
    if (it != trials_.end() && it->second->state == v1::RUNNING &&
        it->second->attempts == ref.attempt() && it->second->worker_id == worker_id) {
      it->second->lease_expiry = now + opt_.lease_s;
    } else if (it == trials_.end() || it->second->attempts != ref.attempt() ||
               it->second->worker_id != worker_id) {
      // Fenced: an attempt this worker should not be running.
      v1::CoordinatorMessage m;
      m.mutable_cancel()->set_trial_id(ref.trial_id());
      m.mutable_cancel()->set_attempt(ref.attempt());
      m.mutable_cancel()->set_reason("fenced: not this trial's current attempt");
      SendLocked(worker_id, m);
    }
  }
  if (now - w.last_stored > 10 || was_draining != w.draining) {
    w.last_stored = now;
    WorkerStoreLocked(w);
  }
  if (was_draining && !w.draining) ScheduleLocked();
}

void Scheduler::OnMetrics(const std::string& worker_id, const v1::MetricBatch& batch) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = trials_.find(batch.trial_id());
  const bool current = it != trials_.end() && batch.attempt() == it->second->attempts &&
                       it->second->state == v1::RUNNING;
  if (!current) {
    // Fenced (an older attempt) or a replay for a trial that already ended: its reports up to
    // the end were committed before the end was (one writer, in order), so nothing is lost.
    counters_.fenced_reports++;
    SendAckLocked(worker_id, batch.trial_id(), batch.attempt(), batch.seq());
    return;
  }
  std::vector<Point> points;
  points.reserve(batch.points_size());
  // The points the scheduler itself reads once they are stored: the trainer's memory peak, and
  // the early-stopping metric of the trial's sweep.
  const SweepState* sweep = nullptr;
  if (auto sw = sweeps_.find(it->second->sweep_id); sw != sweeps_.end()) sweep = sw->second.get();
  const std::string* stop_metric =
      sweep && sweep->stopper ? &sweep->stopper->rule().metric : nullptr;
  std::vector<Point> watched;
  for (const auto& p : batch.points()) {
    points.push_back({p.step(), p.name(), p.value()});
    if (p.name() == kPeakMetric || (stop_metric && p.name() == *stop_metric)) {
      watched.push_back(points.back());
    }
  }
  const int64_t sweep_id = it->second->sweep_id;
  lock.unlock();
  const int64_t trial_id = batch.trial_id();
  const int attempt = batch.attempt();
  const int64_t seq = batch.seq();
  const size_t n = points.size();
  store_->AppendMetrics(
      trial_id, attempt, seq, std::move(points),
      [this, worker_id, trial_id, sweep_id, attempt, seq, n,
       watched = std::move(watched)](const Status& st, bool dup) {
        if (!st.ok()) return;  // not acknowledged: the worker resends
        std::lock_guard<std::mutex> lock(mu_);
        if (dup) {
          counters_.duplicate_reports++;
        } else {
          counters_.points_ingested += int64_t(n);
          for (const Point& p : watched) {
            if (p.name == kPeakMetric) {
              auto t = trials_.find(trial_id);
              if (t == trials_.end() || t->second->attempts != attempt) continue;
              TrialState& tr = *t->second;
              const int64_t before = TrialBytesLocked(tr);
              tr.peak_bytes = std::max<int64_t>(tr.peak_bytes, int64_t(p.value));
              auto w = workers_.find(tr.worker_id);
              if (tr.gpu_share > 1 && w != workers_.end()) {
                for (int g : tr.gpu_indices) {
                  auto& u = w->second->gpu_use[g];
                  if (u.trials.count(tr.id)) u.bytes += TrialBytesLocked(tr) - before;
                }
                // Smaller than its estimate: another trial may fit beside it now.
                if (TrialBytesLocked(tr) < before) ScheduleLocked();
              }
              continue;
            }
            auto sw = sweeps_.find(sweep_id);
            if (sw == sweeps_.end() || !sw->second->stopper) continue;
            ApplyDecisionsLocked(sw->second->stopper->OnPoint(trial_id, p.step, p.name, p.value));
          }
        }
        SendAckLocked(worker_id, trial_id, attempt, seq);
      });
}

void Scheduler::OnEvent(const std::string& worker_id, const v1::TrialEvent& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = trials_.find(ev.trial_id());
  const bool current =
      it != trials_.end() && ev.attempt() == it->second->attempts && it->second->state == v1::RUNNING;
  auto record_and_ack = [&]() {
    const int64_t trial_id = ev.trial_id();
    const int attempt = ev.attempt();
    const int64_t seq = ev.seq();
    store_->RecordSeq(trial_id, attempt, seq,
                      [this, worker_id, trial_id, attempt, seq](const Status& st, bool dup) {
                        if (!st.ok()) return;
                        std::lock_guard<std::mutex> lock(mu_);
                        if (dup) counters_.duplicate_reports++;
                        SendAckLocked(worker_id, trial_id, attempt, seq);
                      });
  };
  if (!current) {
    counters_.fenced_reports++;
    SendAckLocked(worker_id, ev.trial_id(), ev.attempt(), ev.seq());
    return;
  }
  TrialState& t = *it->second;
  t.lease_expiry = clock_->UnixSeconds() + opt_.lease_s;
  switch (ev.kind()) {
    case v1::TrialEvent::STARTED:
      store_->AddEvent("attempt_started", t.sweep_id, t.id, ev.attempt(), worker_id, "");
      break;
    case v1::TrialEvent::BUILD: {
      AttemptUpdate a;
      a.trial_id = t.id;
      a.attempt = ev.attempt();
      a.build_version = ev.build().version();
      a.build_commit = ev.build().commit();
      a.numerics_version = ev.build().numerics();
      store_->UpdateAttempt(a);
      break;
    }
    case v1::TrialEvent::CHECKPOINTED: {
      t.checkpoint_path = ev.checkpoint_path();
      t.checkpoint_step = ev.step();
      TrialUpdate u;
      u.trial_id = t.id;
      u.checkpoint_path = t.checkpoint_path;
      u.checkpoint_step = t.checkpoint_step;
      store_->UpdateTrial(u);
      AttemptUpdate a;
      a.trial_id = t.id;
      a.attempt = ev.attempt();
      a.checkpoint_path = t.checkpoint_path;
      a.checkpoint_step = t.checkpoint_step;
      store_->UpdateAttempt(a);
      break;
    }
    case v1::TrialEvent::FINISHED: {
      const bool diverged = ev.status() == "diverged";
      EndAttemptLocked(t, diverged ? "diverged" : "succeeded", diverged ? v1::DIVERGED : v1::SUCCEEDED,
                       ev.reason(), ev.exit_code(), ev.log_tail(), false, false);
      record_and_ack();  // after the state change, so its commit is not later than the ack's
      return;
    }
    case v1::TrialEvent::FAILED: {
      if (IsPreemption(ev)) {
        // The worker's host is being taken away (Slurm preemption or time limit, a node drain) and
        // the trainer checkpointed on request: neither the trial's fault nor the worker's. Requeue
        // at once from that checkpoint, with the attempt given back (a durable max_attempts + 1,
        // so a restart keeps it).
        if (!t.cancel_requested) {
          t.max_attempts++;
          TrialUpdate u;
          u.trial_id = t.id;
          u.max_attempts = t.max_attempts;
          store_->UpdateTrial(u);
          store_->AddEvent("attempt_preempted", t.sweep_id, t.id, ev.attempt(), worker_id,
                           ev.reason());
        }
        // Stored as a lost attempt (the infrastructure took it away; attempts.state has no
        // "preempted"), its reason starting with "preempted".
        const std::string reason =
            ev.reason().rfind("preempted", 0) == 0 ? ev.reason() : "preempted: " + ev.reason();
        EndAttemptLocked(t, "lost", v1::FAILED, reason, ev.exit_code(), ev.log_tail(), true, false);
        record_and_ack();
        return;
      }
      if (t.gpu_share > 1 && ev.exit_code() == kTrainerExitDeviceFault && !t.cancel_requested) {
        // A fatal device error on a shared GPU: this trial's own, or (under MPS) a neighbour's
        // that ended every client there. Requeued with the attempt given back, to run alone from
        // now on, where a fault is its own and counts.
        t.max_attempts++;
        t.next_gpu_share = 1;
        counters_.shared_gpu_faults++;
        TrialUpdate u;
        u.trial_id = t.id;
        u.max_attempts = t.max_attempts;
        u.gpu_share = 1;
        store_->UpdateTrial(u);
        store_->AddEvent("attempt_shared_gpu_fault", t.sweep_id, t.id, ev.attempt(), worker_id,
                         ev.reason());
        EndAttemptLocked(t, "lost", v1::FAILED,
                         "a fatal device error on its shared GPU, its own or a neighbour's; it "
                         "runs alone next (" + ev.reason() + ")",
                         ev.exit_code(), ev.log_tail(), true, false);
        record_and_ack();
        return;
      }
      // Exit code 2 is ablate-train's "bad config": deterministic, so neither retried nor held
      // against the worker.
      // A trial canceled or stopped early is over whatever its trainer did on the way out (the
      // worker restarted and lost it, say): nothing to retry, nothing against the worker.
      const bool config_error = ev.exit_code() == 2;
      const bool counts = !config_error && !t.cancel_requested;
      EndAttemptLocked(t, "failed", v1::FAILED, ev.reason(), ev.exit_code(), ev.log_tail(), counts,
                       counts);
      record_and_ack();
      return;
    }
    case v1::TrialEvent::CANCELED:
      // Canceled by us: final. Killed for another reason (worker shutting down): requeue.
      EndAttemptLocked(t, "canceled", v1::CANCELED, ev.reason().empty() ? "canceled" : ev.reason(),
                       ev.exit_code(), ev.log_tail(), !t.cancel_requested, false);
      record_and_ack();
      return;
    default:
      break;
  }
  record_and_ack();
}

// ---- Control --------------------------------------------------------------------------------------

StatusOr<int> Scheduler::CancelTrial(int64_t trial_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = trials_.find(trial_id);
  if (it == trials_.end() || it->second->cancel_requested) return 0;  // already ended
  TrialState& t = *it->second;
  const double now = clock_->UnixSeconds();
  TrialUpdate u;
  u.trial_id = t.id;
  u.state = v1::CANCELED;
  u.finished_at = now;
  u.reason = "canceled by user";
  store_->UpdateTrial(u);
  store_->AddEvent("trial_canceled", t.sweep_id, t.id, t.attempts, t.worker_id, "canceled by user");
  if (t.state == v1::QUEUED) {
    sweeps_[t.sweep_id]->queue.erase({t.order_key, t.id});
    trials_.erase(it);
    return 1;
  }
  t.cancel_requested = true;
  v1::CoordinatorMessage m;
  m.mutable_cancel()->set_trial_id(t.id);
  m.mutable_cancel()->set_attempt(t.attempts);
  m.mutable_cancel()->set_reason("canceled by user");
  SendLocked(t.worker_id, m);
  return 1;
}

StatusOr<int> Scheduler::CancelSweep(int64_t sweep_id) {
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, t] : trials_) {
      if (t->sweep_id == sweep_id && !t->cancel_requested) ids.push_back(id);
    }
  }
  int n = 0;
  for (int64_t id : ids) {
    ABLATE_ASSIGN_OR_RETURN(int k, CancelTrial(id));
    n += k;
  }
  return n;
}

StatusOr<int> Scheduler::Retry(int64_t sweep_id, RetryWhich which) {
  // For order only (the trials' states below include every change queued before): Flush's error
  // is the first of any earlier operation (a worker's bad metrics batch), nothing of this retry's.
  (void)store_->Flush();
  ABLATE_ASSIGN_OR_RETURN(std::vector<TrialStatus> all, store_->GetTrials(sweep_id));
  std::lock_guard<std::mutex> lock(mu_);
  auto sw = sweeps_.find(sweep_id);
  if (sw == sweeps_.end()) return NotFound("sweep " + std::to_string(sweep_id));
  // A stopped trial retried runs to its end: exempt from early stopping, on record.
  const auto ResumeAfterStop = [&](TrialState& t, TrialUpdate* u) {
    t.early_stop_exempt = true;
    u->early_stop_exempt = true;
    u->reason = "resumed after an early stop";
    if (sw->second->stopper) sw->second->stopper->SetExempt(t.id);
  };
  int n = 0;
  for (const auto& ts : all) {
    const TrialRecord& r = ts.trial;
    const bool stopped = which == RetryWhich::kStopped;
    bool eligible = stopped ? r.state == v1::STOPPED
                            : r.state == v1::FAILED ||
                                  (which == RetryWhich::kFailedAndCanceled && r.state == v1::CANCELED);
    if (!eligible) continue;
    if (auto live = trials_.find(r.id); live != trials_.end()) {
      // Canceled, but its attempt is still stopping: requeue it once the attempt has ended.
      if (live->second->cancel_requested && !live->second->requeue_after_cancel) {
        live->second->requeue_after_cancel = true;
        live->second->max_attempts = live->second->attempts + sw->second->max_attempts;
        TrialUpdate u;
        u.trial_id = r.id;
        u.state = v1::QUEUED;
        u.reason = "retried";
        u.finished_at = 0;
        u.max_attempts = live->second->max_attempts;
        // (Resumed from the checkpoint its stop is writing, once its attempt has ended.)
        if (stopped) ResumeAfterStop(*live->second, &u);
        store_->UpdateTrial(u);
        ++n;
      }
      continue;
    }
    auto t = TrialFromRecord(r);
    t->state = v1::QUEUED;
    t->max_attempts = r.attempts + sw->second->max_attempts;  // a fresh budget of attempts
    sw->second->queue.insert({t->order_key, t->id});
    TrialUpdate u;
    u.trial_id = r.id;
    u.state = v1::QUEUED;
    u.reason = "retried";
    u.finished_at = 0;
    u.max_attempts = t->max_attempts;  // durable, so a restart keeps the fresh budget
    // Resumed from its checkpoint (the trial keeps its checkpoint_path) and run to the end.
    if (stopped) ResumeAfterStop(*t, &u);
    store_->UpdateTrial(u);
    trials_[r.id] = std::move(t);
    ++n;
  }
  if (n) store_->AddEvent("retry", sweep_id, 0, 0, "", std::to_string(n) + " trials requeued");
  ScheduleLocked();
  return n;
}

void Scheduler::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->UnixSeconds();
  std::vector<int64_t> expired;
  for (const auto& [id, t] : trials_) {
    if (t->state == v1::RUNNING && t->lease_expiry < now) expired.push_back(id);
  }
  for (int64_t id : expired) {
    auto it = trials_.find(id);
    if (it == trials_.end()) continue;
    TrialState& t = *it->second;
    counters_.lost_attempts++;
    // Fence the attempt in case its worker is alive but cut off.
    v1::CoordinatorMessage m;
    m.mutable_cancel()->set_trial_id(t.id);
    m.mutable_cancel()->set_attempt(t.attempts);
    m.mutable_cancel()->set_reason("lease expired");
    SendLocked(t.worker_id, m);
    if (auto w = workers_.find(t.worker_id); w != workers_.end()) w->second->silent = true;
    store_->AddEvent("attempt_lost", t.sweep_id, t.id, t.attempts, t.worker_id, "lease expired");
    EndAttemptLocked(t, "lost", v1::FAILED, "lease expired (worker died or was cut off)", 0, "", true,
                     false);
  }
  // Workers whose quarantine ended, or that came back: give them work.
  ScheduleLocked();
}

std::vector<v1::WorkerInfo> Scheduler::Workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerInfo> out;
  for (const auto& [id, w] : workers_) {
    v1::WorkerInfo info;
    info.set_worker_id(w->id);
    info.set_hostname(w->hostname);
    info.set_state(WorkerStateNameLocked(*w));
    for (const auto& g : w->gpus) *info.add_gpus() = g;
    info.set_cpu_slots(w->cpu_slots);
    std::set<int> busy;
    for (int64_t tid : w->running) {
      auto it = trials_.find(tid);
      auto* ref = info.add_running();
      ref->set_trial_id(tid);
      if (it != trials_.end()) ref->set_attempt(it->second->attempts);
      if (it != trials_.end()) busy.insert(it->second->gpu_indices.begin(), it->second->gpu_indices.end());
    }
    for (int g : busy) info.add_busy_gpus(g);
    info.set_busy_cpu_slots(w->cpu_slots - w->free_slots);
    for (const auto& g : w->gpus) {
      auto* load = info.add_gpu_load();
      load->set_index(g.index());
      load->set_total_bytes(g.memory_bytes());
      auto u = w->gpu_use.find(g.index());
      if (u == w->gpu_use.end()) continue;
      for (int64_t id : u->second.trials) load->add_trial_ids(id);
      load->set_share(u->second.share);
      int64_t bytes = 0;
      for (int64_t id : u->second.trials) {
        auto t = trials_.find(id);
        if (t == trials_.end()) continue;
        // Whole-GPU trials hold the GPU whatever their size: their estimate is shown too.
        bytes += t->second->peak_bytes > 0 ? t->second->peak_bytes : t->second->memory_bytes;
      }
      load->set_estimated_bytes(bytes);
      load->set_used_bytes(u->second.used_bytes);
    }
    info.set_last_seen_at(w->last_seen);
    info.set_failures(w->failures);
    out.push_back(std::move(info));
  }
  return out;
}

std::string Scheduler::WaitingReason(int64_t sweep_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto sw = sweeps_.find(sweep_id);
  if (sw == sweeps_.end() || sw->second->queue.empty()) return "";
  // A sweep's trials share their resources (resources: in the spec): the first one speaks for all.
  auto first = trials_.find(sw->second->queue.begin()->second);
  if (first == trials_.end()) return "";
  const TrialState& t = *first->second;
  const double now = clock_->UnixSeconds();
  int connected = 0, max_gpus = 0, max_slots = 0;
  std::vector<const WorkerState*> taking;
  for (const auto& [id, w] : workers_) {
    if (!w->link || w->silent) continue;
    ++connected;
    if (w->draining || w->quarantined_until > now) continue;
    max_gpus = std::max(max_gpus, int(w->gpus.size()));
    // As TryPlaceLocked: a worker with GPUs takes CPU trials only with --cpu-slots.
    if (w->gpus.empty() || w->cpu_slots > 0) max_slots = std::max(max_slots, w->cpu_slots);
    taking.push_back(w.get());
  }
  if (connected == 0) return "no worker is connected; start an ablate-worker";
  if (taking.empty()) {
    return "no connected worker takes new trials (" + std::to_string(connected) +
           (connected == 1 ? " is" : " are") + " draining or quarantined)";
  }
  if (t.gpus > 0) {
    const std::string need = "the queued trials need " + std::to_string(t.gpus) +
                             (t.gpus == 1 ? " GPU" : " GPUs") + " each";
    if (max_gpus == 0) return need + "; the connected workers have only CPU slots";
    if (max_gpus < t.gpus) {
      return need + "; the connected workers have at most " + std::to_string(max_gpus);
    }
    if (t.gpu_share > 1) {
      // A shared trial that no GPU could hold even empty: its memory (the reported peak, or the
      // config's estimate) plus the margin exceeds every GPU's memory, so it would wait forever.
      int64_t bytes = t.peak_bytes > 0 ? t.peak_bytes : t.memory_bytes;
      if (bytes == 0) {
        auto c = config::ParseTrialConfig(t.config_json, "trial " + std::to_string(t.id));
        bytes = c.ok() ? config::EstimateDeviceBytes(*c) : config::kContextBytes;
      }
      int64_t largest = 0;
      bool fits = false;
      for (const WorkerState* w : taking) {
        for (const v1::GpuInfo& g : w->gpus) {
          largest = std::max(largest, int64_t(g.memory_bytes()));
          fits |= g.memory_bytes() == 0 || bytes + GpuMargin(g.memory_bytes()) <= g.memory_bytes();
        }
      }
      if (!fits) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "the queued trials need about %.1f GiB of GPU memory each (%s) and the "
                      "margin; the connected GPUs have at most %.1f GiB",
                      double(bytes) / double(int64_t(1) << 30),
                      t.peak_bytes > 0 ? "their reported peak" : "the config's estimate",
                      double(largest) / double(int64_t(1) << 30));
        return buf;
      }
    }
    return "";
  }
  const int slots = std::max(1, t.cpu_slots);
  if (max_slots == 0) {
    return "the queued trials run on CPU slots; the connected workers have only GPUs (start one "
           "with --cpu-slots N)";
  }
  if (max_slots < slots) {
    return "the queued trials need " + std::to_string(slots) +
           " CPU slots each; the connected workers have at most " + std::to_string(max_slots);
  }
  return "";
}

Scheduler::Counters Scheduler::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace ablate::server
