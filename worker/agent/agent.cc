#include "agent/agent.h"

#include <glob.h>
#include <limits.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <ctime>

#include "agent/util.h"

namespace ablate::agent {

struct Agent::Session {
  bool registered = false;  // GUARDED_BY(Agent::mu_)
  bool broken = false;      // GUARDED_BY(Agent::mu_)
};

class Agent::Sink : public SupervisorSink {
 public:
  Sink(Agent* agent, Key key) : agent_(agent), key_(key) {}
  void OnPoints(std::vector<v1::MetricPoint> points) override {
    agent_->OnPoints(key_, std::move(points));
  }
  void OnEvent(v1::TrialEvent event) override { agent_->OnEvent(key_, std::move(event)); }

 private:
  Agent* const agent_;
  const Key key_;
};

struct Agent::Attempt {
  Key key{};
  std::string dir;
  std::unique_ptr<AttemptOutbox> outbox;
  std::unique_ptr<Sink> sink;
  std::unique_ptr<Supervisor> supervisor;  // null when there is nothing to run (recovered, refused)
  std::thread thread;                      // runs supervisor->Run()
  bool child_done = false;                 // the final event has been added to the outbox
  std::vector<int> gpus;                   // the assignment's GPU indices
  std::vector<int> cpu_slots;              // CPU slot numbers held while the trainer runs
  double tokens_per_s = -1;                // last reported; < 0 before the first step line
  int gpu_share = 1;                       // k > 1: a shared GPU (1/k of gpus[0])
  int64_t memory_bytes = 0;                // the coordinator's memory figure for it
  bool placed = false;                     // shared: its memory is counted on its GPU
  bool waiting_logged = false;
};

namespace {

std::string Describe(int64_t trial, int32_t attempt) {
  return "trial " + std::to_string(trial) + " attempt " + std::to_string(attempt);
}

void StderrLog(const std::string& line) {
  char ts[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s ablate-worker: %s\n", ts, line.c_str());
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  *out = std::stoll(s);
  return true;
}

const char* KindName(v1::TrialEvent::Kind k) {
  switch (k) {
    case v1::TrialEvent::STARTED:
      return "STARTED";
    case v1::TrialEvent::CHECKPOINTED:
      return "CHECKPOINTED";
    case v1::TrialEvent::FINISHED:
      return "FINISHED";
    case v1::TrialEvent::FAILED:
      return "FAILED";
    case v1::TrialEvent::CANCELED:
      return "CANCELED";
    default:
      return "UNSPECIFIED";
  }
}

// A trainer left running by a previous worker process: kill its process group, but only when the
// pid recorded at spawn still runs the trainer of this attempt folder and leads its own group.
bool KillOrphan(const std::string& dir) {
  auto pid_text = ReadFile(dir + "/trainer.pid");
  if (!pid_text.ok()) return false;
  int64_t pid = 0;
  std::string s = *pid_text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (!ParseInt(s, &pid) || pid <= 1 || pid > INT_MAX) return false;
  auto cmdline = ReadFile("/proc/" + s + "/cmdline");
  if (!cmdline.ok()) return false;
  const std::string needle = std::string("--out") + '\0' + dir;
  if (cmdline->find(needle) == std::string::npos) return false;
  if (::getpgid(pid_t(pid)) != pid_t(pid)) return false;
  return ::kill(-pid_t(pid), SIGKILL) == 0;
}

}  // namespace

Agent::Agent(AgentOptions options, AgentEnv env)
    : options_(std::move(options)),
      env_(env),
      heartbeat_ms_(options_.default_heartbeat_ms),
      rng_(std::random_device{}()) {
  draining_ = options_.start_draining;
  cpu_slot_busy_.assign(size_t(std::max(0, options_.cpu_slots)), false);
  for (const auto& o : Outcomes()) finished_[o] = 0;
}

Agent::~Agent() {
  std::map<Key, std::unique_ptr<Attempt>> left;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    for (auto& [k, a] : attempts_) {
      if (a->supervisor && !a->child_done) a->supervisor->Kill();
    }
  }
  // Join without the lock: the supervisors' last callbacks take it.
  for (;;) {
    std::unique_ptr<Attempt> a;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (attempts_.empty()) break;
      a = std::move(attempts_.begin()->second);
      attempts_.erase(attempts_.begin());
    }
    if (a->thread.joinable()) a->thread.join();
  }
}

void Agent::Log(const std::string& line) {
  if (options_.log) {
    options_.log(line);
  } else {
    StderrLog(line);
  }
}

std::string Agent::AttemptDir(const Key& k) const {
  return options_.work_dir + "/trials/" + std::to_string(k.trial_id) + "/attempt-" +
         std::to_string(k.attempt);
}

Agent::Stats Agent::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  Stats s = stats_;
  s.running = int(attempts_.size());
  for (const auto& [k, a] : attempts_) s.spool_errors += int64_t(a->outbox->spool_errors());
  return s;
}

const std::vector<std::string>& Agent::Outcomes() {
  static const std::vector<std::string> kOutcomes = {
      "succeeded", "diverged", "failed", "canceled", "preempted", "refused", "lost"};
  return kOutcomes;
}

Agent::MetricsSnapshot Agent::metrics_snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  MetricsSnapshot s;
  s.connected = connected_;
  s.draining = draining_;
  s.registrations = stats_.registrations;
  s.trials_started = trials_started_;
  s.finished = finished_;
  s.batches = batch_counters_;
  for (bool b : cpu_slot_busy_) s.cpu_slots_busy += b ? 1 : 0;
  for (const auto& [k, a] : attempts_) {
    s.unacked_reports += int64_t(a->outbox->unacked());
    if (!a->supervisor || a->child_done) continue;
    MetricsSnapshot::Running r;
    r.trial_id = k.trial_id;
    r.attempt = k.attempt;
    r.gpus = a->gpus;
    r.cpu_slots = a->cpu_slots;
    r.tokens_per_s = a->tokens_per_s;
    s.running.push_back(std::move(r));
  }
  return s;
}

void Agent::CountFinal(const v1::TrialEvent& e, Attempt* a) {
  std::string outcome = "failed";
  if (e.kind() == v1::TrialEvent::FINISHED) {
    outcome = e.status() == "ok" ? "succeeded" : e.status() == "diverged" ? "diverged" : "failed";
  } else if (e.kind() == v1::TrialEvent::CANCELED) {
    outcome = "canceled";
  } else if (e.status() == "preempted") {
    outcome = "preempted";  // requeued from its checkpoint, not held against the trial
  }
  ++finished_[outcome];
  for (int slot : a->cpu_slots) cpu_slot_busy_[size_t(slot)] = false;
  a->cpu_slots.clear();
}

void Agent::Drain() {
  std::lock_guard<std::mutex> l(mu_);
  if (draining_) return;
  draining_ = true;
  heartbeat_now_ = true;
  Log("draining: no new trials; waiting for " + std::to_string(attempts_.size()) +
      " attempt(s) to finish");
  cv_.notify_all();
}

void Agent::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return;
  stop_ = true;
  draining_ = true;
  heartbeat_now_ = true;
  int killed = 0;
  for (auto& [k, a] : attempts_) {
    if (a->supervisor && !a->child_done) {
      a->supervisor->Kill();
      ++killed;
    }
  }
  Log("stopping: killed " + std::to_string(killed) + " trainer(s)");
  cv_.notify_all();
}

void Agent::Preempt() {
  std::lock_guard<std::mutex> l(mu_);
  if (preempting_) return;
  preempting_ = true;
  draining_ = true;
  heartbeat_now_ = true;
  int asked = 0;
  for (auto& [k, a] : attempts_) {
    if (a->supervisor && !a->child_done) {
      a->supervisor->Preempt();
      ++asked;
    }
  }
  Log("preempted: no new trials; asked " + std::to_string(asked) +
      " trainer(s) to checkpoint and stop");
  cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Restart recovery
// ---------------------------------------------------------------------------------------------

void Agent::Recover() {
  const std::string root = options_.work_dir + "/trials";
  DIR* d = ::opendir(root.c_str());
  if (!d) return;
  std::vector<Key> keys;
  while (dirent* e = ::readdir(d)) {
    int64_t trial = 0;
    if (!ParseInt(e->d_name, &trial)) continue;
    const std::string tdir = root + "/" + e->d_name;
    DIR* td = ::opendir(tdir.c_str());
    if (!td) continue;
    while (dirent* ae = ::readdir(td)) {
      const std::string name = ae->d_name;
      int64_t attempt = 0;
      if (name.rfind("attempt-", 0) != 0 || !ParseInt(name.substr(8), &attempt)) continue;
      if (attempt > INT32_MAX) continue;
      if (FileExists(tdir + "/" + name + "/spool")) keys.push_back({trial, int32_t(attempt)});
    }
    ::closedir(td);
  }
  ::closedir(d);
  std::sort(keys.begin(), keys.end());

  int recovered = 0, lost = 0;
  size_t reports = 0;
  for (const Key& k : keys) {
    const std::string dir = AttemptDir(k);
    auto spool = Spool::Open(dir + "/spool", options_.spool);
    if (!spool.ok()) {
      Log("cannot read the spool of " + Describe(k.trial_id, k.attempt) + ": " +
          spool.status().ToString());
      continue;
    }
    if ((*spool)->torn_bytes() > 0) {
      Log(dir + "/spool: dropped a torn last record (" + std::to_string((*spool)->torn_bytes()) +
          " bytes)");
    }
    auto att = std::make_unique<Attempt>();
    att->key = k;
    att->dir = dir;
    att->outbox =
        std::make_unique<AttemptOutbox>(k.trial_id, k.attempt, std::move(*spool), options_.outbox);
    if (att->outbox->done()) continue;  // finished and acknowledged; the spool is gone now
    const bool lost_here = !att->outbox->finished();
    if (lost_here) {
      const bool killed = KillOrphan(dir);
      v1::TrialEvent e;
      e.set_kind(v1::TrialEvent::FAILED);
      e.set_reason(std::string("trainer lost: the worker restarted while it ran") +
                   (killed ? " (its leftover processes were killed)" : ""));
      e.set_exit_code(killed ? -SIGKILL : 0);
      e.set_log_tail(ReadLogTail(dir + "/stderr.log", options_.supervisor.log_tail_bytes,
                                 options_.supervisor.log_tail_lines));
      att->outbox->AddEvent(std::move(e));
      ++lost;
    }
    att->child_done = true;
    reports += att->outbox->unacked();
    std::lock_guard<std::mutex> l(mu_);
    if (lost_here) ++finished_["lost"];
    att->outbox->set_counters(&batch_counters_);
    attempts_[k] = std::move(att);
    ++recovered;
  }
  if (recovered > 0) {
    Log("recovered " + std::to_string(recovered) + " attempt(s) from the spools (" +
        std::to_string(reports) + " unacknowledged report(s); " + std::to_string(lost) +
        " trainer(s) lost with the previous worker process)");
  }
}

// ---------------------------------------------------------------------------------------------
// Attempts
// ---------------------------------------------------------------------------------------------

int Agent::CpuThreads(const v1::Assignment& a) const {
  const int nproc =
      options_.nproc > 0 ? options_.nproc : std::max(1, int(std::thread::hardware_concurrency()));
  if (a.gpu_indices_size() > 0) {
    // A GPU's share of the cores, split again among the k trials sharing it.
    const int total = std::max(1, int(options_.gpus.size())) * std::max(1, a.gpu_share());
    return std::max(1, nproc / total) * a.gpu_indices_size();
  }
  const int total = std::max(1, options_.cpu_slots);
  const int taken = std::max(1, a.cpu_slots());
  return std::max(1, nproc / total) * taken;
}

namespace {

// OK when the trial config's data.corpus is a built-in corpus or every file it names resolves
// (symlinks followed) inside one of `roots`. The pattern may be a glob; ".." is refused outright
// because glob(3) would expand it after a wildcard.
Status CheckCorpus(const std::string& config_json, const std::vector<std::string>& roots) {
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(config_json);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("the trial config is not valid JSON: ") + e.what());
  }
  std::string corpus = "brown";
  if (cfg.contains("data") && cfg["data"].is_object() && cfg["data"].contains("corpus") &&
      cfg["data"]["corpus"].is_string()) {
    corpus = cfg["data"]["corpus"].get<std::string>();
  }
  if (corpus == "brown" || corpus == "nlp") return Status::Ok();
  const std::string allowed =
      roots.empty() ? "this worker allows only the built-in corpora (start it with --data-root DIR)"
                    : "this worker's --data-root folders";
  if (corpus.empty() || corpus[0] != '/' || ("/" + corpus + "/").find("/../") != std::string::npos) {
    return InvalidArgument("data.corpus '" + corpus +
                           "' must be an absolute path without '..' (or brown / nlp)");
  }
  glob_t g{};
  int rc = ::glob(corpus.c_str(), 0, nullptr, &g);
  std::vector<std::string> matches;
  if (rc == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) matches.push_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (matches.empty()) return Status::Ok();  // the trainer reports the missing file
  for (const auto& m : matches) {
    char buf[PATH_MAX];
    if (!::realpath(m.c_str(), buf)) continue;
    std::string real = buf;
    bool inside = false;
    for (const auto& r : roots) {
      inside = inside || real.rfind(r.back() == '/' ? r : r + "/", 0) == 0;  // r may be "/"
    }
    if (!inside) {
      return InvalidArgument("data.corpus: " + m + " (" + real + ") is outside " + allowed);
    }
  }
  return Status::Ok();
}

}  // namespace

void Agent::StartAttempt(const v1::Assignment& a) {
  const Key k{a.trial_id(), a.attempt()};
  const std::string what = Describe(k.trial_id, k.attempt);
  bool refuse, preempting;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.assignments;
    if (attempts_.count(k)) {
      Log("ignoring a repeated assignment of " + what);
      return;
    }
    refuse = draining_;
    preempting = preempting_;
  }
  if (k.trial_id <= 0 || k.attempt <= 0) {
    Log("ignoring an assignment with trial " + std::to_string(k.trial_id) + " attempt " +
        std::to_string(k.attempt));
    return;
  }
  auto att = std::make_unique<Attempt>();
  att->key = k;
  att->dir = AttemptDir(k);
  Status st = MakeDirs(att->dir);
  std::unique_ptr<Spool> spool;
  if (st.ok()) {
    auto sp = Spool::Open(att->dir + "/spool", options_.spool);
    if (sp.ok()) {
      spool = std::move(*sp);
    } else {
      Log(what + ": no spool, reports are kept in memory only: " + sp.status().ToString());
    }
  }
  att->outbox =
      std::make_unique<AttemptOutbox>(k.trial_id, k.attempt, std::move(spool), options_.outbox);
  att->outbox->set_counters(&batch_counters_);  // used under mu_ only, like the outbox itself
  att->sink = std::make_unique<Sink>(this, k);
  att->gpus.assign(a.gpu_indices().begin(), a.gpu_indices().end());

  att->gpu_share = std::max(1, a.gpu_share());
  att->memory_bytes = a.memory_bytes();
  std::string refusal;
  int refusal_exit_code = 0;
  Status corpus_ok = CheckCorpus(a.config_json(), options_.data_roots);
  MpsControl::Env mps_env;
  if (att->gpu_share > 1 && env_.mps && !refuse) {
    auto e = env_.mps->ClientEnv();
    if (e.ok()) {
      mps_env = std::move(*e);
    } else {
      refusal = e.status().message();
    }
  }
  if (!refusal.empty()) {
    // (MPS could not be started: an infrastructure failure of this worker.)
  } else if (refuse) {
    refusal = "worker is draining";
  } else if (!corpus_ok.ok()) {
    refusal = "config refused: " + corpus_ok.message();
    refusal_exit_code = 2;  // a config error: final, not held against this worker
  } else if (!st.ok()) {
    refusal = "cannot create the attempt folder: " + st.message();
  } else if (Status w = WriteFileAtomic(att->dir + "/config.yaml", a.config_json()); !w.ok()) {
    refusal = "cannot write the trial config: " + w.message();
  }
  if (!refusal.empty()) {
    Log(what + ": not started: " + refusal);
    v1::TrialEvent e;
    e.set_kind(v1::TrialEvent::FAILED);
    e.set_reason(refusal);
    e.set_exit_code(refusal_exit_code);
    // Refused because this host is being taken away: requeued without counting the attempt.
    if (refuse && preempting) e.set_status("preempted");
    std::lock_guard<std::mutex> l(mu_);
    att->outbox->AddEvent(std::move(e));
    att->child_done = true;
    ++finished_["refused"];
    attempts_[k] = std::move(att);
    cv_.notify_all();
    return;
  }

  SpawnSpec spec;
  spec.program = options_.trainer_path;
  spec.args = {"--config", att->dir + "/config.yaml", "--out", att->dir};
  if (!a.resume_checkpoint().empty()) {
    if (FileExists(a.resume_checkpoint())) {
      spec.args.push_back("--resume");
      spec.args.push_back(a.resume_checkpoint());
    } else {
      Log(what + ": checkpoint " + a.resume_checkpoint() +
          " is not on this worker; starting from scratch");
    }
  }
  std::string devices;
  for (int g : a.gpu_indices()) devices += (devices.empty() ? "" : ",") + std::to_string(g);
  if (!devices.empty() && !options_.gemm_tuning.empty()) {
    spec.args.push_back("--gemm-tuning");
    spec.args.push_back(options_.gemm_tuning);
  }
  // The indices are NVML's (PCI bus order); CUDA's default order (fastest first) may number the
  // GPUs of a mixed host differently, so the trainer is told to number them as NVML does.
  spec.env = {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
              {"CUDA_VISIBLE_DEVICES", devices},
              {"ABLATE_CPU_THREADS", std::to_string(CpuThreads(a))},
              {"ABLATE_TRIAL_ID", std::to_string(k.trial_id)},
              {"ABLATE_ATTEMPT", std::to_string(k.attempt)}};
  for (const auto& kv : mps_env) spec.env.push_back(kv);
  spec.cwd = att->dir;
  spec.stderr_path = att->dir + "/stderr.log";
  att->supervisor = std::make_unique<Supervisor>(spec, env_.spawner, env_.clock, att->sink.get(),
                                                 options_.supervisor);
  if (att->gpu_share > 1) {
    att->supervisor->set_start_gate([this, k] { return SharedGpuRoom(k); });
  }
  Log(what + ": starting" + (a.sweep_name().empty() ? "" : " (sweep " + a.sweep_name() + ")") +
      (devices.empty() ? " on the CPU" : " on GPU " + devices) +
      (att->gpu_share > 1 ? " (1/" + std::to_string(att->gpu_share) + " of it" +
                                (mps_env.empty() ? "" : ", MPS") + ")"
                          : "") +
      " in " + att->dir);
  std::lock_guard<std::mutex> l(mu_);
  if (att->gpus.empty()) {
    // Number the CPU slots this trial takes, for the per-slot series of --metrics. The coordinator
    // never assigns more than the free slots; should it, the extra ones go unnumbered.
    int want = std::max(1, a.cpu_slots());
    for (size_t i = 0; i < cpu_slot_busy_.size() && want > 0; ++i) {
      if (cpu_slot_busy_[i]) continue;
      cpu_slot_busy_[i] = true;
      att->cpu_slots.push_back(int(i));
      --want;
    }
  }
  Attempt* raw = att.get();
  attempts_[k] = std::move(att);
  raw->thread = std::thread([raw] { raw->supervisor->Run(); });
}

void Agent::CancelAttempt(const Key& k, const std::string& reason, bool checkpoint) {
  auto it = attempts_.find(k);
  if (it == attempts_.end()) {
    Log("cancel of " + Describe(k.trial_id, k.attempt) + ": not running here");
    return;
  }
  Attempt& a = *it->second;
  if (a.supervisor && !a.child_done) {
    Log(Describe(k.trial_id, k.attempt) + ": " +
        (checkpoint ? "checkpointing and stopping (" : "canceling (") + reason + ")");
    a.supervisor->Cancel(reason, checkpoint);
  }
}

void Agent::SampleGpuMemory() {
  if (!env_.gpu_prober || options_.gpus.empty()) return;
  std::vector<v1::GpuMemory> m = env_.gpu_prober->ReadMemory();  // not under mu_: NVML
  std::lock_guard<std::mutex> l(mu_);
  gpu_memory_ = std::move(m);
  gpu_memory_at_ms_ = env_.clock->MonotonicMs();
}

std::string Agent::SharedGpuRoom(const Key& k) {
  bool stale = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    stale = gpu_memory_at_ms_ < 0 || env_.clock->MonotonicMs() - gpu_memory_at_ms_ > 500;
  }
  if (stale) SampleGpuMemory();
  std::lock_guard<std::mutex> l(mu_);
  auto it = attempts_.find(k);
  if (it == attempts_.end() || it->second->gpus.empty()) return "";
  Attempt& a = *it->second;
  const int g = a.gpus[0];
  const v1::GpuMemory* reading = nullptr;
  for (const auto& m : gpu_memory_) {
    if (m.index() == g) reading = &m;
  }
  if (!reading || reading->total_bytes() <= 0 || a.memory_bytes <= 0) {
    a.placed = true;  // nothing to check against
    return "";
  }
  int64_t reserved = 0;
  for (const auto& [key, other] : attempts_) {
    if (other.get() == &a || !other->placed || other->child_done || other->gpus.empty() ||
        other->gpus[0] != g) {
      continue;
    }
    reserved += other->memory_bytes;
  }
  const int64_t total = reading->total_bytes();
  const int64_t margin = std::max<int64_t>(int64_t(512) << 20, total / 20);
  const int64_t room = total - std::max(reading->used_bytes(), reserved) - margin;
  if (room >= a.memory_bytes) {
    a.placed = true;
    return "";
  }
  const std::string why = "GPU " + std::to_string(g) + " has " +
                          std::to_string(std::max<int64_t>(0, room) >> 20) + " MiB free beside its margin, " +
                          std::to_string(a.memory_bytes >> 20) + " MiB needed";
  if (!a.waiting_logged) {
    a.waiting_logged = true;
    Log(Describe(k.trial_id, k.attempt) + ": waiting for memory: " + why);
  }
  return why;
}

void Agent::OnPoints(const Key& k, std::vector<v1::MetricPoint> points) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = attempts_.find(k);
  if (it == attempts_.end()) return;
  for (const auto& p : points) {
    if (p.name() == "tokens_per_s") it->second->tokens_per_s = p.value();
  }
  AttemptOutbox& ob = *it->second->outbox;
  ob.AddPoints(std::move(points), env_.clock->MonotonicMs());
  if (ob.HasUnsent()) cv_.notify_all();
}

void Agent::OnEvent(const Key& k, v1::TrialEvent event) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = attempts_.find(k);
  if (it == attempts_.end()) return;
  Attempt& a = *it->second;
  const std::string what = Describe(k.trial_id, k.attempt);
  if (event.kind() == v1::TrialEvent::STARTED && a.supervisor) {
    // Lets a restarted worker find and kill a trainer it can no longer supervise.
    const std::string pid = std::to_string(a.supervisor->pid()) + "\n";
    if (Status st = WriteFileAtomic(a.dir + "/trainer.pid", pid); !st.ok()) {
      Log(what + ": " + st.ToString());
    }
  }
  const auto kind = event.kind();
  if (kind == v1::TrialEvent::STARTED) ++trials_started_;
  if (kind == v1::TrialEvent::FINISHED || kind == v1::TrialEvent::FAILED ||
      kind == v1::TrialEvent::CANCELED) {
    CountFinal(event, &a);
  }
  std::string line = what + ": " + KindName(kind);
  if (kind == v1::TrialEvent::STARTED) line += " (pid " + std::to_string(a.supervisor->pid()) + ")";
  if (kind == v1::TrialEvent::CHECKPOINTED) {
    line += " step " + std::to_string(event.step()) + " " + event.checkpoint_path();
  }
  if (!event.status().empty()) line += " " + event.status();
  if (!event.reason().empty()) line += ": " + event.reason();
  a.outbox->AddEvent(std::move(event));
  if (kind == v1::TrialEvent::FINISHED || kind == v1::TrialEvent::FAILED ||
      kind == v1::TrialEvent::CANCELED) {
    a.child_done = true;
    if (a.supervisor) {
      stats_.non_json_lines += a.supervisor->non_json_lines();
      if (a.supervisor->non_json_lines() > 0) {
        line += " (" + std::to_string(a.supervisor->non_json_lines()) +
                " stdout line(s) were not JSON)";
      }
    }
    if (a.outbox->spool_errors() > 0) line += " [spool: " + a.outbox->last_spool_error() + "]";
  }
  Log(line);
  cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// Connection
// ---------------------------------------------------------------------------------------------

void Agent::FillRunning(google::protobuf::RepeatedPtrField<v1::AttemptRef>* out) {
  for (const auto& [k, a] : attempts_) {
    if (a->outbox->done()) continue;
    auto* r = out->Add();
    r->set_trial_id(k.trial_id);
    r->set_attempt(k.attempt);
  }
}

v1::WorkerMessage Agent::MakeRegister() {
  v1::WorkerMessage m;
  auto* r = m.mutable_register_();
  r->set_worker_id(options_.worker_id);
  r->set_hostname(options_.hostname);
  for (const auto& g : options_.gpus) *r->add_gpus() = g;
  r->set_cpu_slots(options_.cpu_slots);
  FillRunning(r->mutable_running());
  r->set_version(options_.version);
  r->set_draining(draining_);
  return m;
}

void Agent::HandleMessage(const v1::CoordinatorMessage& m, Session* session) {
  switch (m.msg_case()) {
    case v1::CoordinatorMessage::kRegistered: {
      const auto& r = m.registered();
      std::lock_guard<std::mutex> l(mu_);
      if (r.heartbeat_ms() > 0) heartbeat_ms_ = r.heartbeat_ms();
      session->registered = true;
      ++stats_.registrations;
      Log("registered as " + options_.worker_id + " (heartbeat " + std::to_string(heartbeat_ms_) +
          " ms, lease " + std::to_string(r.lease_ms()) + " ms, " +
          std::to_string(r.adopted_size()) + " attempt(s) adopted, " +
          std::to_string(r.stop_size()) + " to stop)");
      for (const auto& s : r.stop()) {
        CancelAttempt({s.trial_id(), s.attempt()}, "stopped by the coordinator");
      }
      cv_.notify_all();
      break;
    }
    case v1::CoordinatorMessage::kAssign:
      StartAttempt(m.assign());
      break;
    case v1::CoordinatorMessage::kCancel: {
      const auto& c = m.cancel();
      std::lock_guard<std::mutex> l(mu_);
      CancelAttempt({c.trial_id(), c.attempt()},
                    c.reason().empty() ? "canceled by the coordinator" : c.reason(),
                    c.checkpoint());
      break;
    }
    case v1::CoordinatorMessage::kAck: {
      const auto& a = m.ack();
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.acks;
      auto it = attempts_.find({a.trial_id(), a.attempt()});
      if (it == attempts_.end()) break;
      it->second->outbox->Ack(a.seq());
      if (it->second->outbox->done()) cv_.notify_all();
      break;
    }
    default:
      break;
  }
}

void Agent::ReaderLoop(std::shared_ptr<Session> session, CoordinatorStream* stream) {
  v1::CoordinatorMessage m;
  while (stream->Read(&m)) {
    HandleMessage(m, session.get());
    m.Clear();
  }
  std::lock_guard<std::mutex> l(mu_);
  session->broken = true;
  cv_.notify_all();
}

void Agent::ReapDone(std::vector<std::unique_ptr<Attempt>>* done) {
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    if (it->second->child_done && it->second->outbox->done()) {
      done->push_back(std::move(it->second));
      it = attempts_.erase(it);
    } else {
      ++it;
    }
  }
}

bool Agent::ExitDue(int64_t now) {
  if (!draining_) return false;
  bool pending = false;
  for (const auto& [k, a] : attempts_) {
    if (!a->child_done) {
      quiet_since_ms_ = 0;
      return false;
    }
    if (!a->outbox->done()) pending = true;
  }
  if (!pending) return true;
  // Reports are left: they stay in the spools for the next start. Without a coordinator (after at
  // least one try) there is no point waiting; with one, wait a while for its acks.
  if (!connected_) return tried_connect_;
  if (quiet_since_ms_ == 0) quiet_since_ms_ = now;
  return now - quiet_since_ms_ >=
         (stop_ ? options_.shutdown_ack_wait_ms : options_.drain_ack_wait_ms);
}

bool Agent::RunSession(CoordinatorStream* stream) {
  auto session = std::make_shared<Session>();
  v1::WorkerMessage reg;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.connects;
    for (auto& [k, a] : attempts_) a->outbox->RewindForReconnect();
    reg = MakeRegister();
  }
  if (!stream->Write(reg)) {
    stream->Cancel();
    Status st = stream->Finish();
    Log("the coordinator closed the stream during registration: " + st.ToString());
    return false;
  }
  std::thread reader([this, session, stream] { ReaderLoop(session, stream); });

  bool registered = false;
  {
    std::unique_lock<std::mutex> l(mu_);
    const int64_t deadline = env_.clock->MonotonicMs() + options_.register_timeout_ms;
    while (!session->registered && !session->broken && !stop_ && env_.clock->MonotonicMs() < deadline) {
      cv_.wait_for(l, std::chrono::milliseconds(50));
    }
    registered = session->registered;
    if (!registered && !session->broken && !stop_) {
      Log("no Registered from the coordinator within " +
          std::to_string(options_.register_timeout_ms) + " ms; reconnecting");
    }
    if (registered) connected_ = true;
  }

  bool broken = false;  // the coordinator ended the stream, or a write failed
  if (registered) {
    int64_t next_heartbeat = env_.clock->MonotonicMs();  // the first one right away: it carries draining
    for (;;) {
      std::vector<v1::WorkerMessage> out;
      std::vector<std::unique_ptr<Attempt>> done;
      bool leave = false;
      {
        std::unique_lock<std::mutex> l(mu_);
        for (;;) {
          const int64_t now = env_.clock->MonotonicMs();
          if (session->broken) {
            broken = leave = true;
            break;
          }
          ReapDone(&done);
          if (ExitDue(now)) {
            leave = true;
            break;
          }
          int64_t wake = next_heartbeat;
          for (auto& [k, a] : attempts_) {
            a->outbox->Flush(now, /*force=*/stop_);
            a->outbox->TakeUnsent(&out);
            wake = std::min(wake, a->outbox->NextFlushMs());
          }
          if (heartbeat_now_ || now >= next_heartbeat) {
            v1::WorkerMessage hb;
            FillRunning(hb.mutable_heartbeat()->mutable_running());
            hb.mutable_heartbeat()->set_draining(draining_);
            for (const auto& m : gpu_memory_) *hb.mutable_heartbeat()->add_gpu_memory() = m;
            out.push_back(std::move(hb));
            ++stats_.heartbeats;
            heartbeat_now_ = false;
            next_heartbeat = now + heartbeat_ms_;
          }
          if (!out.empty() || !done.empty()) break;
          // Wake for the next heartbeat or batch deadline; at least every 100 ms so that a fake
          // clock moved by a test is noticed.
          const int64_t wait = std::clamp<int64_t>(wake - now, 1, 100);
          cv_.wait_for(l, std::chrono::milliseconds(wait));
        }
        for (const auto& m : out) {
          if (m.has_metrics() || m.has_event()) ++stats_.reports_sent;
        }
      }
      for (auto& d : done) {
        if (d->thread.joinable()) d->thread.join();
      }
      if (leave) break;
      for (const auto& m : out) {
        if (!stream->Write(m)) {
          broken = true;
          break;
        }
      }
      if (broken) break;
    }
  }
  bool read_ended;
  {
    std::lock_guard<std::mutex> l(mu_);
    connected_ = false;
    read_ended = session->broken;
  }
  // When the coordinator ended the stream, Finish() reports its status; cancelling first would
  // replace it with our own CANCELLED.
  if (!read_ended) stream->Cancel();
  reader.join();
  const Status st = stream->Finish();
  if (broken) Log("lost the coordinator stream: " + st.ToString());
  return registered;
}

Status Agent::Run() {
  ABLATE_RETURN_IF_ERROR(MakeDirs(options_.work_dir + "/trials"));
  Recover();
  // The GPUs' memory for the heartbeats, read every 2 s beside the session.
  std::atomic<bool> sampling{true};
  std::thread sampler;
  if (env_.gpu_prober && !options_.gpus.empty()) {
    sampler = std::thread([this, &sampling] {
      while (sampling.load()) {
        SampleGpuMemory();
        for (int i = 0; i < 20 && sampling.load(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    });
  }
  struct StopSampler {
    std::atomic<bool>& on;
    std::thread& t;
    ~StopSampler() {
      on = false;
      if (t.joinable()) t.join();
    }
  } stop_sampler{sampling, sampler};
  int64_t backoff = options_.backoff_initial_ms;
  int64_t failures = 0;  // consecutive failed connects
  auto sleep = [&](int64_t ms) {
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    const int64_t until = env_.clock->MonotonicMs() + int64_t(double(ms) * jitter(rng_));
    std::unique_lock<std::mutex> l(mu_);
    while (env_.clock->MonotonicMs() < until && !ExitDue(env_.clock->MonotonicMs())) {
      cv_.wait_for(
          l, std::chrono::milliseconds(std::clamp<int64_t>(until - env_.clock->MonotonicMs(), 1, 100)));
    }
  };
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (ExitDue(env_.clock->MonotonicMs())) break;
    }
    auto stream = env_.connector->Connect();
    {
      std::lock_guard<std::mutex> l(mu_);
      tried_connect_ = true;
    }
    if (!stream.ok()) {
      // The first failures, then about once a minute: a long outage must not flood the log.
      if (++failures <= 3 || failures % 12 == 0) {
        Log("coordinator unreachable (" + stream.status().message() + "; " +
            std::to_string(failures) + " attempt(s)); retrying with backoff up to " +
            std::to_string(options_.backoff_max_ms) + " ms");
      }
      sleep(backoff);
      backoff = std::min(backoff * 2, options_.backoff_max_ms);
      continue;
    }
    if (failures > 3) Log("connected to " + env_.connector->target() + " again");
    failures = 0;
    const bool registered = RunSession(stream->get());
    stream->reset();
    if (registered) {
      backoff = options_.backoff_initial_ms;
    } else {
      backoff = std::min(backoff * 2, options_.backoff_max_ms);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (ExitDue(env_.clock->MonotonicMs())) break;
    }
    sleep(backoff);
  }
  // Every trainer has exited (ExitDue requires it); collect their threads.
  std::vector<std::unique_ptr<Attempt>> left;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [k, a] : attempts_) left.push_back(std::move(a));
    attempts_.clear();
  }
  size_t unacked = 0;
  for (auto& a : left) {
    if (a->thread.joinable()) a->thread.join();
    unacked += a->outbox->unacked();
  }
  Log(unacked == 0 ? std::string("exiting: nothing left to report")
                   : "exiting: " + std::to_string(unacked) +
                         " unacknowledged report(s) stay in the spools for the next start");
  return Status::Ok();
}

}  // namespace ablate::agent
