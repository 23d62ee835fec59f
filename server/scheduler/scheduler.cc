#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

namespace ablate::server {

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
  bool requeue_after_cancel = false;  // retried while its canceled attempt was still stopping
  bool assignment_sent = false;
};

struct Scheduler::WorkerState {
  std::string id;
  std::string hostname;
  std::vector<v1::GpuInfo> gpus;
  int cpu_slots = 0;
  std::set<int> free_gpus;
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
  t->config_json = r.config_json;
  t->checkpoint_path = r.checkpoint_path;
  t->checkpoint_step = r.checkpoint_step;
  t->started_at = r.started_at;
  return t;
}

Scheduler::Scheduler(Store* store, const Clock* clock, SchedulerOptions options)
    : store_(store), clock_(clock), opt_(options) {}

Scheduler::~Scheduler() = default;

Status Scheduler::Recover() {
  ABLATE_ASSIGN_OR_RETURN(LoadedState st, store_->LoadState());
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->UnixSeconds();
  for (const auto& s : st.sweeps) {
    auto sw = std::make_unique<SweepState>();
    sw->id = s.id;
    sw->name = s.name;
    sw->priority = s.priority;
    sw->max_attempts = s.max_attempts;
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
      AttemptUpdate au;
      au.trial_id = a.trial_id;
      au.attempt = a.attempt;
      au.state = it == trials_.end() ? "canceled" : "lost";
      au.ended_at = now;
      au.reason = it == trials_.end()
                      ? "canceled by user; the coordinator restarted before its worker stopped it"
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
  return Status::Ok();
}

StatusOr<SubmitOutcome> Scheduler::Submit(SweepRecord sweep, std::vector<TrialRecord> trials) {
  const int total = int(trials.size());
  // Synchronous store call: never under mu_ (the writer thread's callbacks take mu_).
  ABLATE_ASSIGN_OR_RETURN(Store::SubmitResult res, store_->SubmitSweep(sweep, std::move(trials)));
  std::lock_guard<std::mutex> lock(mu_);
  auto& sw = sweeps_[res.sweep_id];
  if (!sw) sw = std::make_unique<SweepState>();
  sw->id = res.sweep_id;
  sw->name = sweep.name;
  sw->priority = sweep.priority;
  sw->max_attempts = sweep.max_attempts;
  for (const auto& r : res.inserted) {
    auto t = TrialFromRecord(r);
    t->sweep_id = res.sweep_id;
    t->state = v1::QUEUED;
    sw->queue.insert({t->order_key, t->id});
    trials_[r.id] = std::move(t);
  }
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
      if (w->free_gpus.empty() && w->free_slots <= 0) continue;
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
      bool fits = t.gpus > 0 ? int(w.free_gpus.size()) >= t.gpus
                             : (w.gpus.empty() || w.cpu_slots > 0) && w.free_slots >= std::max(1, t.cpu_slots);
      if (!fits) break;  // a sweep's trials share their resources: the rest will not fit either
      std::vector<int> gpus;
      if (t.gpus > 0) {
        auto g = w.free_gpus.begin();
        for (int k = 0; k < t.gpus; ++k) gpus.push_back(*g++);
      }
      s->queue.erase(it);
      StartAttemptLocked(t, w, gpus);
      return true;
    }
  }
  return false;
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
  for (int g : gpus) w.free_gpus.erase(g);
  if (t.gpus == 0) w.free_slots -= std::max(1, t.cpu_slots);
  w.running.insert(t.id);
  sweeps_[t.sweep_id]->running++;
  counters_.assignments++;

  AttemptRecord a;
  a.trial_id = t.id;
  a.attempt = t.attempts;
  a.worker_id = w.id;
  a.gpu_indices = gpus;
  a.cpu_slots = t.gpus == 0 ? std::max(1, t.cpu_slots) : 0;
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
    auto sw = sweeps_.find(t.sweep_id);
    if (sw != sweeps_.end()) as->set_sweep_name(sw->second->name);
    SendLocked(t.worker_id, m);
  });
}

void Scheduler::ReleaseLocked(TrialState& t) {
  auto w = workers_.find(t.worker_id);
  if (w != workers_.end()) {
    for (int g : t.gpu_indices) {
      bool exists = std::any_of(w->second->gpus.begin(), w->second->gpus.end(),
                                [g](const v1::GpuInfo& i) { return i.index() == g; });
      if (exists) w->second->free_gpus.insert(g);
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
  au.state = t.cancel_requested ? "canceled" : attempt_state;
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
    trials_.erase(t.id);  // already stored as canceled
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
    trials_.erase(t.id);
  }
  ScheduleLocked();
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
    if (it == trials_.end()) continue;
    for (int g : it->second->gpu_indices) w.free_gpus.erase(g);
    if (it->second->gpus == 0) w.free_slots -= std::max(1, it->second->cpu_slots);
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
  for (const auto& p : batch.points()) points.push_back({p.step(), p.name(), p.value()});
  lock.unlock();
  const int64_t trial_id = batch.trial_id();
  const int attempt = batch.attempt();
  const int64_t seq = batch.seq();
  const size_t n = points.size();
  store_->AppendMetrics(trial_id, attempt, seq, std::move(points),
                        [this, worker_id, trial_id, attempt, seq, n](const Status& st, bool dup) {
                          if (!st.ok()) return;  // not acknowledged: the worker resends
                          std::lock_guard<std::mutex> lock(mu_);
                          if (dup) {
                            counters_.duplicate_reports++;
                          } else {
                            counters_.points_ingested += int64_t(n);
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
      // Exit code 2 is ablate-train's "bad config": deterministic, so neither retried nor held
      // against the worker.
      const bool config_error = ev.exit_code() == 2;
      EndAttemptLocked(t, "failed", v1::FAILED, ev.reason(), ev.exit_code(), ev.log_tail(),
                       !config_error, !config_error);
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

StatusOr<int> Scheduler::Retry(int64_t sweep_id, bool failed_only) {
  // For order only (the trials' states below include every change queued before): Flush's error
  // is the first of any earlier operation (a worker's bad metrics batch), nothing of this retry's.
  (void)store_->Flush();
  ABLATE_ASSIGN_OR_RETURN(std::vector<TrialStatus> all, store_->GetTrials(sweep_id));
  std::lock_guard<std::mutex> lock(mu_);
  auto sw = sweeps_.find(sweep_id);
  if (sw == sweeps_.end()) return NotFound("sweep " + std::to_string(sweep_id));
  int n = 0;
  for (const auto& ts : all) {
    const TrialRecord& r = ts.trial;
    bool eligible = r.state == v1::FAILED || (!failed_only && r.state == v1::CANCELED);
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
    for (int64_t tid : w->running) {
      auto it = trials_.find(tid);
      auto* ref = info.add_running();
      ref->set_trial_id(tid);
      if (it != trials_.end()) ref->set_attempt(it->second->attempts);
      if (it != trials_.end()) {
        for (int g : it->second->gpu_indices) info.add_busy_gpus(g);
      }
    }
    info.set_busy_cpu_slots(w->cpu_slots - w->free_slots);
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
