#include "rpc/services.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "ablate/token.h"
#include "analysis/compare.h"
#include "analysis/sweep_values.h"
#include "analysis/export.h"
#include "analysis/results.h"
#include "sweep/identity.h"
#include "sweep/sweep.h"
#include "proto/trial_state.h"

namespace ablate::server {
namespace {

// Request size limits (beyond gRPC's own message limit set in main.cc).
constexpr size_t kMaxSpecBytes = 1 << 20;
constexpr size_t kMaxQueryBytes = 64 << 10;

// `waiting_reason`: Scheduler::WaitingReason of the sweep (the store knows no workers).
void FillSweep(const SweepSummary& s, const std::string& waiting_reason, v1::SweepInfo* out) {
  out->set_sweep_id(s.sweep.id);
  out->set_name(s.sweep.name);
  out->set_priority(s.sweep.priority);
  out->set_created_at(s.sweep.created_at);
  out->set_max_attempts(s.sweep.max_attempts);
  int active = 0;
  for (const auto& [state, n] : s.counts) {
    (*out->mutable_counts())[state] = n;
    if (const auto s = ParseTrialState(state); s && IsActive(*s)) active += n;
  }
  out->set_total(s.total);
  out->set_finished(active == 0);
  for (const auto& a : s.sweep.axes) out->add_axes(a);
  if (active > 0) out->set_waiting_reason(waiting_reason);
  out->set_archived(s.sweep.archived);
  out->set_gpus(s.sweep.gpu_share > 1 ? 1.0 / s.sweep.gpu_share : double(s.sweep.gpus));
  out->set_early_stop_json(s.sweep.early_stop_json);
}

void FillDecision(const StopDecisionRecord& d, v1::StopDecision* out) {
  out->set_id(d.id);
  out->set_sweep_id(d.sweep_id);
  out->set_rule(d.rule);
  out->set_metric(d.metric);
  out->set_rung(d.rung);
  out->set_step(d.step);
  out->set_config(d.config);
  out->set_group(d.group);
  for (int64_t id : d.trial_ids) out->add_trial_ids(id);
  out->set_value(d.value);
  for (double v : d.seed_values) out->add_seed_values(v);
  for (const auto& [config, value] : d.compared) {
    out->add_compared_configs(config);
    out->add_compared_values(value);
  }
  out->set_threshold(d.threshold);
  out->set_decision(d.decision);
  out->set_decided_at(d.decided_at);
}

void FillTrial(const TrialStatus& t, v1::TrialSummary* out) {
  out->set_trial_id(t.trial.id);
  out->set_config_hash(t.trial.config_hash);
  for (const auto& [k, v] : t.trial.axes) (*out->mutable_axes())[k] = v;
  out->set_state(t.trial.state);
  out->set_attempt(t.trial.attempts);
  out->set_worker_id(t.worker_id);
  out->set_step(t.step);
  out->set_total_steps(t.trial.total_steps);
  out->set_loss(t.loss);
  out->set_val_loss(t.val_loss);
  out->set_reason(t.trial.reason);
  out->set_started_at(t.trial.started_at);
  out->set_finished_at(t.trial.finished_at);
  for (const auto& tag : t.trial.tags) out->add_tags(tag);
  out->set_note(t.trial.note);
}

// A bounded outbound queue drained by one writer thread: Scheduler callbacks never block on a slow
// worker's stream.
class StreamLink : public WorkerLink {
 public:
  explicit StreamLink(grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream)
      : stream_(stream), writer_([this] { Run(); }) {}
  ~StreamLink() override { Close(); }

  void Send(const v1::CoordinatorMessage& msg) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    queue_.push_back(msg);
    cv_.notify_one();
  }
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_ && !writer_.joinable()) return;
      closed_ = true;
      cv_.notify_one();
    }
    if (writer_.joinable()) writer_.join();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return closed_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closed and drained
      v1::CoordinatorMessage msg = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      bool ok = stream_->Write(msg);
      lock.lock();
      if (!ok) {
        closed_ = true;
        queue_.clear();
        return;
      }
    }
  }

  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::CoordinatorMessage> queue_;  // GUARDED_BY(mu_)
  bool closed_ = false;                       // GUARDED_BY(mu_)
  std::thread writer_;
};

StatusOr<int64_t> ResolveSweep(Store* store, const std::string& name_or_id) {
  ABLATE_ASSIGN_OR_RETURN(SweepSummary s, store->GetSweep(name_or_id));
  return s.sweep.id;
}

}  // namespace

grpc::Status ToGrpc(const Status& st) {
  using C = grpc::StatusCode;
  C code = C::UNKNOWN;
  switch (st.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = C::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = C::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: code = C::ALREADY_EXISTS; break;
    case StatusCode::kFailedPrecondition: code = C::FAILED_PRECONDITION; break;
    case StatusCode::kOutOfRange: code = C::OUT_OF_RANGE; break;
    case StatusCode::kDataLoss: code = C::DATA_LOSS; break;
    case StatusCode::kInternal: code = C::INTERNAL; break;
    case StatusCode::kUnavailable: code = C::UNAVAILABLE; break;
    case StatusCode::kUnimplemented: code = C::UNIMPLEMENTED; break;
    case StatusCode::kPermissionDenied: code = C::PERMISSION_DENIED; break;
    case StatusCode::kUnauthenticated: code = C::UNAUTHENTICATED; break;
    case StatusCode::kResourceExhausted: code = C::RESOURCE_EXHAUSTED; break;
    case StatusCode::kAborted: code = C::ABORTED; break;
    case StatusCode::kCancelled: code = C::CANCELLED; break;
    case StatusCode::kDeadlineExceeded: code = C::DEADLINE_EXCEEDED; break;
  }
  return grpc::Status(code, st.message());
}

grpc::Status CheckAuth(const grpc::ServerContext* ctx, const std::string& token) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(kAuthMetadataKey);
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing 'authorization: Bearer <token>' metadata");
  }
  if (!BearerMatches(std::string(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid bearer token");
  }
  return grpc::Status::OK;
}

#define ABLATE_AUTH(ctx)                                    \
  do {                                                      \
    grpc::Status _auth = CheckAuth((ctx), opt_.token);      \
    if (!_auth.ok()) return _auth;                          \
  } while (0)

#define ABLATE_GRPC_ASSIGN(lhs, expr)          \
  auto ABLATE_CONCAT(_r_, __LINE__) = (expr);  \
  if (!ABLATE_CONCAT(_r_, __LINE__).ok())      \
    return ToGrpc(ABLATE_CONCAT(_r_, __LINE__).status()); \
  lhs = std::move(ABLATE_CONCAT(_r_, __LINE__)).value()

// ---- WorkerService ---------------------------------------------------------------------------------

grpc::Status WorkerServiceImpl::Connect(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) {
  ABLATE_AUTH(ctx);
  if (opt_.require_worker_cert) {
    // The TLS layer verified any certificate presented; a worker must present one.
    auto auth = ctx->auth_context();
    if (!auth || !auth->IsPeerAuthenticated() ||
        auth->FindPropertyValues("x509_pem_cert").empty()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "workers must connect with a client certificate signed by the "
                          "coordinator's --tls-client-ca (mutual TLS)");
    }
  }
  v1::WorkerMessage first;
  if (!stream->Read(&first)) return grpc::Status::OK;
  if (!first.has_register_() || first.register_().worker_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message on a worker stream must be a register with a worker_id");
  }
  const std::string worker_id = first.register_().worker_id();
  auto link = std::make_shared<StreamLink>(stream);
  scheduler_->Register(first.register_(), link);
  v1::WorkerMessage msg;
  while (stream->Read(&msg)) {
    switch (msg.msg_case()) {
      case v1::WorkerMessage::kHeartbeat:
        scheduler_->OnHeartbeat(worker_id, msg.heartbeat());
        break;
      case v1::WorkerMessage::kMetrics:
        scheduler_->OnMetrics(worker_id, msg.metrics());
        break;
      case v1::WorkerMessage::kEvent:
        scheduler_->OnEvent(worker_id, msg.event());
        break;
      case v1::WorkerMessage::kRegister:
        // A re-register on the same stream (e.g. after draining changed): treat as fresh.
        scheduler_->Register(msg.register_(), link);
        break;
      default:
        break;
    }
  }
  scheduler_->Disconnect(worker_id, link.get());
  link->Close();
  return grpc::Status::OK;
}

// ---- ControlService --------------------------------------------------------------------------------

grpc::Status ControlServiceImpl::Submit(grpc::ServerContext* ctx, const v1::SubmitRequest* req,
                                        v1::SubmitResponse* resp) {
  ABLATE_AUTH(ctx);
  if (req->spec_yaml().size() > kMaxSpecBytes) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "sweep spec is " + std::to_string(req->spec_yaml().size()) +
                            " bytes; the limit is " + std::to_string(kMaxSpecBytes));
  }
  ExpandOptions eo;
  eo.max_trials = opt_.max_trials;
  eo.force = req->force();
  const std::string file = req->spec_file().empty() ? "<spec>" : req->spec_file();
  ABLATE_GRPC_ASSIGN(ExpandedSweep sweep, ExpandSweep(req->spec_yaml(), file, eo));
  if (req->has_priority()) sweep.priority = req->priority();
  resp->set_sweep_name(sweep.name);
  resp->set_total_trials(int(sweep.trials.size()));
  for (const auto& a : sweep.axes) resp->add_axes(a);
  for (const auto& w : sweep.warnings) resp->add_warnings(w);
  // The stored sweep of that name, if any: may this spec add to it (sweep/identity.h)?
  SweepDiff diff;
  diff.plan.assign(sweep.trials.size(), TrialPlan::kNew);
  diff.new_trials = int(sweep.trials.size());
  std::string store_as = sweep.name;
  auto existing = store_->GetSweep(sweep.name);
  if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) {
    return ToGrpc(existing.status());
  }
  if (existing.ok()) {
    ABLATE_GRPC_ASSIGN(auto stored_trials, store_->GetTrials(existing->sweep.id));
    std::vector<StoredTrial> stored;
    stored.reserve(stored_trials.size());
    for (const auto& t : stored_trials) {
      stored.push_back({t.trial.axes, t.trial.config_hash, t.trial.config_json});
    }
    diff = DiffSweep(existing->sweep.axes, stored, sweep);
    // The early-stopping rule decides which trials end early: a change of it is a change of
    // definition too.
    const std::string rule = sweep.has_early_stop ? sweep.early_stop.ToJson() : "";
    if (rule != existing->sweep.early_stop_json) {
      auto show = [](const std::string& j) { return j.empty() ? std::string("none") : j; };
      diff.changes.push_back("early_stop: " + show(existing->sweep.early_stop_json) + " -> " +
                             show(rule));
    }
    if (req->new_version()) {
      ABLATE_GRPC_ASSIGN(auto all, store_->ListSweeps());
      std::vector<std::string> names;
      for (const auto& s : all) names.push_back(s.sweep.name);
      store_as = NextVersionName(sweep.name, names);
      diff = SweepDiff();
      diff.plan.assign(sweep.trials.size(), TrialPlan::kNew);
      diff.new_trials = int(sweep.trials.size());
    } else {
      resp->set_sweep_id(existing->sweep.id);
    }
  }
  resp->set_sweep_name(store_as);
  for (const auto& c : diff.changes) resp->add_changes(c);
  resp->set_existing_trials(diff.existing);
  resp->set_changed_trials(diff.changed);
  resp->set_removed_trials(diff.removed);
  resp->set_new_trials(diff.new_trials);
  if (req->dry_run()) {
    for (size_t i = 0; i < sweep.trials.size(); ++i) {
      const auto& t = sweep.trials[i];
      auto* s = resp->add_trials();
      s->set_config_hash(t.config_hash);
      for (const auto& [k, v] : t.axes) (*s->mutable_axes())[k] = v;
      s->set_state(v1::QUEUED);
      s->set_total_steps(t.config.train.steps);
      s->set_config_json(t.config_json);
      s->set_loss(NAN);
      s->set_val_loss(NAN);
      s->set_plan(diff.plan[i] == TrialPlan::kNew        ? "new"
                  : diff.plan[i] == TrialPlan::kExisting ? "existing"
                                                         : "changed");
    }
    return grpc::Status::OK;
  }
  if (!diff.changes.empty()) {
    std::string msg = "sweep '" + sweep.name + "' exists with a different definition; nothing was "
                      "submitted. Changed:";
    for (const auto& c : diff.changes) msg += "\n  " + c;
    msg += "\nAdding seeds or axis values is allowed; for anything else submit with --new-version "
           "(stored as " + NextVersionName(sweep.name, {}) + " or the next free version) or use "
           "another name.";
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, msg);
  }
  SweepRecord rec;
  rec.name = store_as;
  rec.spec_yaml = req->spec_yaml();
  rec.priority = sweep.priority;
  rec.max_attempts = sweep.max_attempts;
  rec.gpus = sweep.gpus;
  rec.cpu_slots = sweep.cpu_slots;
  rec.gpu_share = sweep.gpu_share;
  if (sweep.has_early_stop) rec.early_stop_json = sweep.early_stop.ToJson();
  rec.axes = sweep.axes;
  rec.created_at = SystemClock()->UnixSeconds();
  std::vector<TrialRecord> trials;
  trials.reserve(sweep.trials.size());
  for (const auto& t : sweep.trials) {
    TrialRecord r;
    r.config_hash = t.config_hash;
    r.config_json = t.config_json;
    r.axes = t.axes;
    r.priority = sweep.priority;
    r.order_key = t.order_key;
    r.gpus = sweep.gpus;
    r.cpu_slots = sweep.cpu_slots;
    r.gpu_share = sweep.gpu_share;
    r.max_attempts = sweep.max_attempts;
    r.total_steps = t.config.train.steps;
    r.created_at = rec.created_at;
    trials.push_back(std::move(r));
  }
  ABLATE_GRPC_ASSIGN(SubmitOutcome out, scheduler_->Submit(rec, std::move(trials)));
  resp->set_sweep_id(out.sweep_id);
  resp->set_new_trials(out.added);
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Export(grpc::ServerContext* ctx, const v1::ExportRequest* req,
                                        grpc::ServerWriter<v1::ExportChunk>* writer) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(auto format, analysis::ParseExportFormat(req->format()));
  ABLATE_GRPC_ASSIGN(int64_t id, ResolveSweep(store_, req->sweep()));
  std::vector<std::string> names(req->metrics().begin(), req->metrics().end());
  ABLATE_GRPC_ASSIGN(auto table, names.empty() ? analysis::ExportTrials(*store_, id)
                                               : analysis::ExportSeries(*store_, id, names));
  const std::string body = analysis::Render(table, format);
  constexpr size_t kChunk = size_t(1) << 20;  // well under gRPC's 4 MiB message limit
  for (size_t at = 0; at < body.size(); at += kChunk) {
    v1::ExportChunk chunk;
    chunk.set_data(body.substr(at, kChunk));
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
  }
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Annotate(grpc::ServerContext* ctx,
                                          const v1::AnnotateRequest* req,
                                          v1::AnnotateResponse* resp) {
  ABLATE_AUTH(ctx);
  TrialAnnotation a;
  a.trial_id = req->trial_id();
  a.add_tags.assign(req->add_tags().begin(), req->add_tags().end());
  a.remove_tags.assign(req->remove_tags().begin(), req->remove_tags().end());
  if (req->set_note()) a.note = req->note();
  ABLATE_GRPC_ASSIGN(TrialRecord t, store_->AnnotateTrial(a));
  for (const auto& tag : t.tags) resp->add_tags(tag);
  resp->set_note(t.note);
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Archive(grpc::ServerContext* ctx, const v1::ArchiveRequest* req,
                                         v1::ArchiveResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(int64_t id, ResolveSweep(store_, req->sweep()));
  if (auto st = store_->ArchiveSweep(id, req->archived()); !st.ok()) return ToGrpc(st);
  resp->set_sweep_id(id);
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::ListSweeps(grpc::ServerContext* ctx,
                                            const v1::ListSweepsRequest* req,
                                            v1::ListSweepsResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(auto sweeps, store_->ListSweeps());
  for (const auto& s : sweeps) {
    if (s.sweep.archived && !req->include_archived()) continue;
    FillSweep(s, scheduler_->WaitingReason(s.sweep.id), resp->add_sweeps());
  }
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::GetSweep(grpc::ServerContext* ctx, const v1::GetSweepRequest* req,
                                          v1::GetSweepResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(SweepSummary s, store_->GetSweep(req->sweep()));
  ABLATE_GRPC_ASSIGN(auto trials, store_->GetTrials(s.sweep.id, {.config_json = false}));
  FillSweep(s, scheduler_->WaitingReason(s.sweep.id), resp->mutable_sweep());
  for (const auto& t : trials) FillTrial(t, resp->add_trials());
  if (!s.sweep.early_stop_json.empty()) {
    ABLATE_GRPC_ASSIGN(auto decisions, store_->GetStopDecisions(s.sweep.id));
    for (const auto& d : decisions) FillDecision(d, resp->add_decisions());
  }
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::GetTrial(grpc::ServerContext* ctx, const v1::GetTrialRequest* req,
                                          v1::GetTrialResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(TrialStatus t, store_->GetTrial(req->trial_id()));
  FillTrial(t, resp->mutable_trial());
  resp->mutable_trial()->set_config_json(t.trial.config_json);
  auto sweep = store_->GetSweep(std::to_string(t.trial.sweep_id));
  if (sweep.ok()) resp->set_sweep_name(sweep->sweep.name);
  if (sweep.ok() && !sweep->sweep.early_stop_json.empty()) {
    ABLATE_GRPC_ASSIGN(auto decisions, store_->GetStopDecisions(t.trial.sweep_id));
    for (const auto& d : decisions) {
      if (std::find(d.trial_ids.begin(), d.trial_ids.end(), t.trial.id) != d.trial_ids.end()) {
        FillDecision(d, resp->add_decisions());
      }
    }
  }
  ABLATE_GRPC_ASSIGN(auto attempts, store_->GetAttempts(t.trial.id));
  for (const auto& a : attempts) {
    auto* ai = resp->add_attempts();
    ai->set_attempt(a.attempt);
    ai->set_worker_id(a.worker_id);
    ai->set_state(a.state);
    ai->set_started_at(a.started_at);
    ai->set_ended_at(a.ended_at);
    ai->set_exit_code(a.exit_code);
    ai->set_reason(a.reason);
    ai->set_checkpoint_path(a.checkpoint_path);
    ai->set_checkpoint_step(a.checkpoint_step);
    for (int g : a.gpu_indices) ai->add_gpu_indices(g);
    ai->mutable_build()->set_version(a.build_version);
    ai->mutable_build()->set_commit(a.build_commit);
    ai->mutable_build()->set_numerics(a.numerics_version);
  }
  ABLATE_GRPC_ASSIGN(auto latest, store_->GetLatestMetrics(t.trial.id));
  for (const auto& p : latest) {
    auto* mp = resp->add_latest();
    mp->set_step(p.step);
    mp->set_name(p.name);
    mp->set_value(p.value);
  }
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Cancel(grpc::ServerContext* ctx, const v1::CancelRequest* req,
                                        v1::CancelResponse* resp) {
  ABLATE_AUTH(ctx);
  if (req->is_trial()) {
    int64_t id = 0;
    try {
      id = std::stoll(req->target());
    } catch (...) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "trial id must be a number, got '" + req->target() + "'");
    }
    ABLATE_GRPC_ASSIGN(TrialStatus t, store_->GetTrial(id));
    (void)t;
    ABLATE_GRPC_ASSIGN(int n, scheduler_->CancelTrial(id));
    resp->set_canceled(n);
    return grpc::Status::OK;
  }
  ABLATE_GRPC_ASSIGN(int64_t sweep_id, ResolveSweep(store_, req->target()));
  ABLATE_GRPC_ASSIGN(int n, scheduler_->CancelSweep(sweep_id));
  resp->set_canceled(n);
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Retry(grpc::ServerContext* ctx, const v1::RetryRequest* req,
                                       v1::RetryResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(int64_t sweep_id, ResolveSweep(store_, req->sweep()));
  ABLATE_GRPC_ASSIGN(int n, scheduler_->Retry(sweep_id, req->stopped() ? Scheduler::RetryWhich::kStopped
                                                         : req->failed_only()
                                                             ? Scheduler::RetryWhich::kFailed
                                                             : Scheduler::RetryWhich::kFailedAndCanceled));
  resp->set_requeued(n);
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Compare(grpc::ServerContext* ctx, const v1::CompareRequest* req,
                                         v1::CompareResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(SweepSummary s, store_->GetSweep(req->sweep()));
  const std::string metric = req->metric().empty() ? "final_val_loss" : req->metric();
  ABLATE_GRPC_ASSIGN(std::vector<analysis::TrialValue> in,
                     analysis::SweepValues(*store_, s.sweep.id, metric));
  analysis::CompareSpec spec;
  spec.factor = req->factor();
  spec.baseline = req->baseline();
  spec.by.assign(req->by().begin(), req->by().end());
  spec.best_over = req->best_over();
  spec.select_seeds.assign(req->select_seeds().begin(), req->select_seeds().end());
  spec.lower_is_better = analysis::LowerIsBetter(metric);
  ABLATE_GRPC_ASSIGN(analysis::CompareResult r, analysis::Compare(in, spec));
  resp->set_best_over(spec.best_over);
  resp->set_optimistic(r.optimistic);
  for (const auto& s : r.test_seeds) resp->add_test_seeds(s);
  resp->set_metric(metric);
  resp->set_factor(spec.factor);
  resp->set_baseline(r.baseline);
  for (const auto& b : spec.by) resp->add_by(b);
  for (const auto& l : r.levels) resp->add_levels(l);
  for (const analysis::ComparisonRow& c : r.rows) {
    v1::CompareRow* row = resp->add_rows();
    for (const auto& k : c.cell) row->add_cell(k);
    row->set_value(c.value);
    row->set_baseline(c.baseline);
    row->set_test(c.test.test);
    row->set_n(c.test.n);
    row->set_mean(c.mean);
    row->set_baseline_mean(c.baseline_mean);
    row->set_delta(c.test.delta);
    row->set_has_interval(c.test.has_interval);
    row->set_ci_low(c.test.ci_low);
    row->set_ci_high(c.test.ci_high);
    row->set_p_value(c.test.p_value);
    row->set_p_permutation(c.paired ? c.test.p_permutation : 1.0);
    row->set_p_adjusted(c.p_adjusted);
    row->set_seeds(c.level_count.seeds);
    row->set_diverged(c.level_count.diverged);
    row->set_failed(c.level_count.failed);
    row->set_missing(c.level_count.missing);
    row->set_baseline_seeds(c.baseline_count.seeds);
    row->set_baseline_diverged(c.baseline_count.diverged);
    row->set_baseline_failed(c.baseline_count.failed);
    row->set_baseline_missing(c.baseline_count.missing);
    row->set_stopped(c.level_count.stopped);
    row->set_baseline_stopped(c.baseline_count.stopped);
    row->set_left_out(c.left_out);
    row->set_best_value(c.best_value);
    row->set_baseline_best_value(c.baseline_best_value);
    row->set_builds(c.level_count.builds);
    row->set_baseline_builds(c.baseline_count.builds);
  }
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Results(grpc::ServerContext* ctx, const v1::ResultsRequest* req,
                                         v1::ResultsResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(SweepSummary s, store_->GetSweep(req->sweep()));
  std::string metric = req->metric().empty() ? "final_val_loss" : req->metric();
  std::vector<std::string> by(req->by().begin(), req->by().end());
  if (by.empty()) {
    for (const auto& a : s.sweep.axes) {
      if (a != "seed") by.push_back(a);
    }
  }
  ABLATE_GRPC_ASSIGN(auto rows, store_->Results(s.sweep.id, metric, by));
  resp->set_metric(metric);
  const bool lower = analysis::LowerIsBetter(metric);
  resp->set_lower_is_better(lower);
  const int best = analysis::SeparatedBest(rows, lower);
  for (const auto& b : by) resp->add_by(b);
  for (const auto& r : rows) {
    auto* row = resp->add_rows();
    row->set_best(&r - rows.data() == best);
    for (const auto& k : r.keys) row->add_keys(k);
    row->set_n(r.n);
    row->set_trials(r.trials);
    row->set_mean(r.mean);
    row->set_std(r.std);
    row->set_min(r.min);
    row->set_max(r.max);
    row->set_se(r.se);
    row->set_ci_low(r.ci_low);
    row->set_ci_high(r.ci_high);
    row->set_diverged(r.diverged);
    row->set_failed(r.failed);
    row->set_stopped(r.stopped);
    row->set_builds(r.builds);
  }
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Query(grpc::ServerContext* ctx, const v1::QueryRequest* req,
                                       v1::QueryResponse* resp) {
  ABLATE_AUTH(ctx);
  if (req->sql().size() > kMaxQueryBytes) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "query is " + std::to_string(req->sql().size()) + " bytes; the limit is " +
                            std::to_string(kMaxQueryBytes));
  }
  ABLATE_GRPC_ASSIGN(QueryResult r, store_->Query(req->sql(), req->max_rows()));
  for (const auto& c : r.columns) resp->add_columns(c);
  for (const auto& row : r.rows) {
    auto* out = resp->add_rows();
    for (const auto& cell : row) {
      auto* v = out->add_values();
      switch (cell.kind) {
        case QueryResult::Cell::kNull: v->set_null(true); break;
        case QueryResult::Cell::kInteger: v->set_integer(cell.i); break;
        case QueryResult::Cell::kReal: v->set_real(cell.d); break;
        case QueryResult::Cell::kText: v->set_text(cell.s); break;
      }
    }
  }
  resp->set_truncated(r.truncated);
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::ListWorkers(grpc::ServerContext* ctx,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* resp) {
  ABLATE_AUTH(ctx);
  for (auto& w : scheduler_->Workers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Logs(grpc::ServerContext* ctx, const v1::LogsRequest* req,
                                      v1::LogsResponse* resp) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(TrialStatus t, store_->GetTrial(req->trial_id()));
  (void)t;
  ABLATE_GRPC_ASSIGN(auto attempts, store_->GetAttempts(req->trial_id()));
  for (const auto& a : attempts) {
    if (req->attempt() != 0 && a.attempt != req->attempt()) continue;
    auto* e = resp->add_entries();
    e->set_attempt(a.attempt);
    e->set_worker_id(a.worker_id);
    e->set_state(a.state);
    e->set_log_tail(a.log_tail);
  }
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                                       grpc::ServerWriter<v1::SweepSnapshot>* writer) {
  ABLATE_AUTH(ctx);
  ABLATE_GRPC_ASSIGN(SweepSummary first, store_->GetSweep(req->sweep()));
  const int64_t sweep_id = first.sweep.id;
  const int interval_ms = req->interval_ms() > 0 ? std::max(100, req->interval_ms()) : 1000;
  std::string last;
  auto last_sent = std::chrono::steady_clock::now() - std::chrono::hours(1);
  while (!ctx->IsCancelled() && !shutting_down_) {
    ABLATE_GRPC_ASSIGN(SweepSummary s, store_->GetSweep(std::to_string(sweep_id)));
    ABLATE_GRPC_ASSIGN(auto trials, store_->GetTrials(sweep_id, {.config_json = false}));
    v1::SweepSnapshot snap;
    FillSweep(s, scheduler_->WaitingReason(sweep_id), snap.mutable_sweep());
    for (const auto& t : trials) FillTrial(t, snap.add_trials());
    std::string bytes = snap.SerializeAsString();
    auto now = std::chrono::steady_clock::now();
    // Send on change, and at least every 5 intervals as a keep-alive.
    if (bytes != last || now - last_sent > std::chrono::milliseconds(5 * interval_ms)) {
      if (!writer->Write(snap)) break;
      last = std::move(bytes);
      last_sent = now;
    }
    if (snap.sweep().finished()) break;
    // In slices: a client may ask for an interval of an hour, and gRPC's shutdown waits for this
    // handler, so a canceled call or a shutdown must end it within a slice.
    const auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms);
    while (!ctx->IsCancelled() && !shutting_down_) {
      const auto left = next - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) break;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(100)));
    }
  }
  return grpc::Status::OK;
}

}  // namespace ablate::server
