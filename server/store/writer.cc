// The write path: every Store write is an operation queued to the one writer thread, which commits
// them in batches (store_internal.h: Writer, Op, Impl::Enqueue).
#include "store/store_internal.h"

namespace ablate::server {

// ---- Writes -------------------------------------------------------------------------------------

StatusOr<Store::SubmitResult> Store::SubmitSweep(SweepRecord sweep,
                                                 std::vector<TrialRecord> trials) {
  if (impl_->OnWriterThread()) {
    return FailedPrecondition("store: SubmitSweep called from a done callback (writer thread)");
  }
  if (sweep.name.empty()) return InvalidArgument("submit sweep: the sweep has no name");
  for (size_t i = 0; i < trials.size(); ++i) {
    if (trials[i].config_hash.empty()) {
      return InvalidArgument("submit sweep '" + sweep.name + "': trial " + std::to_string(i) +
                             " has no config_hash");
    }
    if (!ValidTrialState(trials[i].state)) {
      return InvalidArgument("submit sweep '" + sweep.name + "': trial " + std::to_string(i) +
                             " has no state (unspecified)");
    }
  }
  auto result = std::make_shared<SubmitResult>();
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  auto shared_sweep = std::make_shared<SweepRecord>(std::move(sweep));
  auto shared_trials = std::make_shared<std::vector<TrialRecord>>(std::move(trials));

  auto apply = [result, shared_sweep, shared_trials](Writer& w) -> Status {
    *result = SubmitResult();
    SweepRecord& s = *shared_sweep;
    const std::string what = "submit sweep '" + s.name + "'";
    if (s.created_at == 0) s.created_at = w.Now();
    ABLATE_ASSIGN_OR_RETURN(
        Stmt up,
        w.db().Prepare("INSERT INTO sweeps(name, spec_yaml, priority, max_attempts, gpus, "
                       "cpu_slots, axes_json, created_at, gpu_share, early_stop_json) "
                       "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
                       "ON CONFLICT(name) DO UPDATE SET spec_yaml = excluded.spec_yaml, "
                       "priority = excluded.priority, max_attempts = excluded.max_attempts, "
                       "gpus = excluded.gpus, cpu_slots = excluded.cpu_slots, "
                       "axes_json = excluded.axes_json, gpu_share = excluded.gpu_share, "
                       "early_stop_json = excluded.early_stop_json RETURNING id"));
    up.Bind(1, s.name);
    up.Bind(2, s.spec_yaml);
    up.Bind(3, s.priority);
    up.Bind(4, s.max_attempts);
    up.Bind(5, s.gpus);
    up.Bind(6, s.cpu_slots);
    up.Bind(7, Json(s.axes).dump());
    up.Bind(8, s.created_at);
    up.Bind(9, s.gpu_share);
    up.Bind(10, s.early_stop_json);
    ABLATE_ASSIGN_OR_RETURN(bool row, up.Step(what));
    if (!row) return Internal(what + ": upsert returned no id");
    result->sweep_id = up.Int(0);
    up.Reset();
    // The GPU share is how the trials run, not what they compute: a resubmitted spec may change
    // it for the trials that have not started.
    ABLATE_ASSIGN_OR_RETURN(Stmt share, w.db().Prepare("UPDATE trials SET gpu_share = ?2 WHERE "
                                                       "sweep_id = ?1 AND state = 'queued'"));
    share.BindAll(result->sweep_id, s.gpu_share);
    ABLATE_RETURN_IF_ERROR(share.Run(what + ": update the queued trials' GPU share"));

    ABLATE_ASSIGN_OR_RETURN(
        Stmt ins,
        w.db().Prepare(
            "INSERT INTO trials(sweep_id, config_hash, config_json, axes_json, state, priority, "
            "order_key, gpus, cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, "
            "checkpoint_step, reason, created_at, started_at, finished_at, gpu_share) VALUES(?1, "
            "?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) "
            "ON CONFLICT(sweep_id, config_hash) DO NOTHING"));
    const double now = w.Now();
    for (const TrialRecord& t : *shared_trials) {
      ins.BindAll(result->sweep_id, t.config_hash, t.config_json, AxesToJson(t.axes),
                  std::string(TrialStateName(t.state)),
                  t.priority, t.order_key, t.gpus, t.cpu_slots, t.attempts, t.max_attempts,
                  t.total_steps, t.checkpoint_path, t.checkpoint_step, t.reason,
                  t.created_at == 0 ? now : t.created_at, Stmt::Time{t.started_at},
                  Stmt::Time{t.finished_at}, t.gpu_share);
      ABLATE_RETURN_IF_ERROR(ins.Run(what + ": insert trial " + t.config_hash));
      if (w.Changes() == 0) {
        ++result->existing;
        continue;
      }
      TrialRecord r = t;
      r.id = sqlite3_last_insert_rowid(w.db().raw());
      r.sweep_id = result->sweep_id;
      if (r.created_at == 0) r.created_at = now;
      result->inserted.push_back(std::move(r));
    }
    return Status::Ok();
  };
  impl_->Enqueue(
      std::make_unique<FnOp>(apply, [promise](const Status& s) { promise->set_value(s); }));
  Status s = future.get();
  if (!s.ok()) return s;
  return std::move(*result);
}

namespace {

Status ApplyTrialUpdate(Writer& w, const TrialUpdate& u) {
  const std::string what = "update trial " + std::to_string(u.trial_id);
  if (u.state && !ValidTrialState(*u.state)) {
    return InvalidArgument(what + ": no state (unspecified; expected queued, running, succeeded, "
                           "failed, diverged, canceled or stopped)");
  }
  std::optional<std::string> state;
  if (u.state) state = std::string(TrialStateName(*u.state));
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st,
      w.db().Prepare(
          "UPDATE trials SET state = coalesce(?2, state), attempts = coalesce(?3, attempts), "
          "checkpoint_path = coalesce(?4, checkpoint_path), "
          "checkpoint_step = coalesce(?5, checkpoint_step), reason = coalesce(?6, reason), "
          "started_at = CASE WHEN ?7 IS NULL THEN started_at ELSE nullif(?7, 0) END, "
          "finished_at = CASE WHEN ?8 IS NULL THEN finished_at ELSE nullif(?8, 0) END, "
          "priority = coalesce(?9, priority), max_attempts = coalesce(?10, max_attempts), "
          "early_stop_exempt = coalesce(?11, early_stop_exempt), "
          "gpu_share = coalesce(?12, gpu_share) WHERE id = ?1"));
  std::optional<int> exempt;
  if (u.early_stop_exempt) exempt = *u.early_stop_exempt ? 1 : 0;
  st.BindAll(u.trial_id, state, u.attempts, u.checkpoint_path, u.checkpoint_step, u.reason,
             u.started_at, u.finished_at, u.priority, u.max_attempts, exempt, u.gpu_share);
  ABLATE_RETURN_IF_ERROR(st.Run(what));
  if (w.Changes() == 0) return NotFound(what + ": no such trial");
  return Status::Ok();
}

Status ApplyInsertAttempt(Writer& w, const AttemptRecord& a) {
  const std::string what =
      "insert attempt " + std::to_string(a.attempt) + " of trial " + std::to_string(a.trial_id);
  if (!ValidAttemptState(a.state)) {
    return InvalidArgument(what + ": unknown state '" + a.state +
                           "' (expected running, succeeded, failed, diverged, lost, canceled or stopped)");
  }
  ABLATE_RETURN_IF_ERROR(w.CheckTrial(a.trial_id, what));
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st,
      w.db().Prepare(
          "INSERT INTO attempts(trial_id, attempt, worker_id, gpus_json, cpu_slots, state, "
          "started_at, ended_at, exit_code, reason, log_tail, checkpoint_path, checkpoint_step, "
          "gpu_share) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"));
  st.BindAll(a.trial_id, a.attempt, a.worker_id, IntsToJson(a.gpu_indices), a.cpu_slots, a.state,
             Stmt::Time{a.started_at == 0 ? w.Now() : a.started_at}, Stmt::Time{a.ended_at},
             a.exit_code, a.reason, a.log_tail, a.checkpoint_path, a.checkpoint_step,
             a.gpu_share);
  Status s = st.Run(what);
  if (s.code() == StatusCode::kAlreadyExists) return Status(s.code(), what + ": it exists already");
  return s;
}

}  // namespace

void Store::UpdateTrial(const TrialUpdate& u, Done done) {
  impl_->Enqueue(
      std::make_unique<FnOp>([u](Writer& w) { return ApplyTrialUpdate(w, u); }, std::move(done)));
}

void Store::InsertAttempt(const AttemptRecord& a, Done done) {
  impl_->Enqueue(
      std::make_unique<FnOp>([a](Writer& w) { return ApplyInsertAttempt(w, a); }, std::move(done)));
}

void Store::StartAttempt(const AttemptRecord& a, const TrialUpdate& u, Done done) {
  // One op: a batch may end between two ops, and a kill there would leave the attempt
  // running under a trial that does not know it.
  impl_->Enqueue(std::make_unique<FnOp>(
      [a, u](Writer& w) -> Status {
        ABLATE_RETURN_IF_ERROR(ApplyInsertAttempt(w, a));
        return ApplyTrialUpdate(w, u);
      },
      std::move(done)));
}

void Store::UpdateAttempt(const AttemptUpdate& u, Done done) {
  auto apply = [u](Writer& w) -> Status {
    const std::string what =
        "update attempt " + std::to_string(u.attempt) + " of trial " + std::to_string(u.trial_id);
    if (u.state && !ValidAttemptState(*u.state)) {
      return InvalidArgument(what + ": unknown state '" + *u.state +
                             "' (expected running, succeeded, failed, diverged, lost, canceled or stopped)");
    }
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st,
        w.db().Prepare(
            "UPDATE attempts SET state = coalesce(?3, state), "
            "ended_at = CASE WHEN ?4 IS NULL THEN ended_at ELSE nullif(?4, 0) END, "
            "exit_code = coalesce(?5, exit_code), reason = coalesce(?6, reason), "
            "log_tail = coalesce(?7, log_tail), checkpoint_path = coalesce(?8, checkpoint_path), "
            "checkpoint_step = coalesce(?9, checkpoint_step), "
            "build_version = coalesce(?10, build_version), "
            "build_commit = coalesce(?11, build_commit), "
            "numerics_version = coalesce(?12, numerics_version) "
            "WHERE trial_id = ?1 AND attempt = ?2"));
    st.BindAll(u.trial_id, u.attempt, u.state, u.ended_at, u.exit_code, u.reason, u.log_tail,
               u.checkpoint_path, u.checkpoint_step, u.build_version, u.build_commit,
               u.numerics_version);
    ABLATE_RETURN_IF_ERROR(st.Run(what));
    if (w.Changes() == 0) return NotFound(what + ": no such attempt");
    return Status::Ok();
  };
  impl_->Enqueue(std::make_unique<FnOp>(std::move(apply), std::move(done)));
}

void Store::UpsertWorker(const WorkerRecord& wr, Done done) {
  auto apply = [wr](Writer& w) -> Status {
    if (wr.id.empty()) return InvalidArgument("upsert worker: the worker id is empty");
    const std::string what = "upsert worker '" + wr.id + "'";
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st,
        w.db().Prepare(
            "INSERT INTO workers(id, hostname, gpus_json, cpu_slots, state, registered_at, "
            "last_seen_at, failures, quarantined, draining) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, "
            "?8, ?9, ?10) ON CONFLICT(id) DO UPDATE SET hostname = excluded.hostname, "
            "gpus_json = excluded.gpus_json, cpu_slots = excluded.cpu_slots, "
            "state = excluded.state, registered_at = excluded.registered_at, "
            "last_seen_at = excluded.last_seen_at, failures = excluded.failures, "
            "quarantined = excluded.quarantined, draining = excluded.draining"));
    st.BindAll(wr.id, wr.hostname, wr.gpus_json.empty() ? std::string("[]") : wr.gpus_json,
               wr.cpu_slots, wr.state, Stmt::Time{wr.registered_at}, Stmt::Time{wr.last_seen_at},
               wr.failures, wr.quarantined ? 1 : 0, wr.draining ? 1 : 0);
    return st.Run(what);
  };
  impl_->Enqueue(std::make_unique<FnOp>(std::move(apply), std::move(done)));
}

namespace {

Status CheckTag(const std::string& tag) {
  const bool ok = !tag.empty() && tag.size() <= 64 &&
                  std::all_of(tag.begin(), tag.end(), [](unsigned char c) {
                    return std::isalnum(c) || std::strchr("._:/-", c) != nullptr;
                  });
  if (ok) return Status::Ok();
  return InvalidArgument("tag '" + SanitizeUtf8(tag.substr(0, 80)) +
                         "': a tag is 1..64 characters of letters, digits and . _ : / -");
}

}  // namespace

StatusOr<TrialRecord> Store::AnnotateTrial(const TrialAnnotation& a) {
  if (impl_->OnWriterThread()) {
    return FailedPrecondition("store: AnnotateTrial called from a done callback (writer thread)");
  }
  for (const auto* list : {&a.add_tags, &a.remove_tags}) {
    for (const std::string& t : *list) ABLATE_RETURN_IF_ERROR(CheckTag(t));
  }
  if (a.note && a.note->size() > 4096) {
    return InvalidArgument("note: " + std::to_string(a.note->size()) +
                           " bytes; a note is at most 4096");
  }
  if (a.note && InvalidUtf8At(*a.note) != std::string::npos) {
    return InvalidArgument("note: not valid UTF-8 (at byte " +
                           std::to_string(InvalidUtf8At(*a.note)) + ")");
  }
  auto out = std::make_shared<TrialRecord>();
  Status s = impl_->RunSync([a, out](Writer& w) -> Status {
    const std::string what = "annotate trial " + std::to_string(a.trial_id);
    ABLATE_ASSIGN_OR_RETURN(Stmt rd, w.db().Prepare("SELECT tags_json, note FROM trials WHERE "
                                                    "id = ?1"));
    rd.Bind(1, a.trial_id);
    ABLATE_ASSIGN_OR_RETURN(bool row, rd.Step(what));
    if (!row) return NotFound(what + ": no such trial");
    std::vector<std::string> v = NamesFromJson(rd.Text(0));
    std::set<std::string> tags(v.begin(), v.end());
    out->note = a.note ? *a.note : rd.Text(1);
    rd.Reset();
    for (const auto& t : a.add_tags) tags.insert(t);
    for (const auto& t : a.remove_tags) tags.erase(t);
    out->tags.assign(tags.begin(), tags.end());
    out->id = a.trial_id;
    ABLATE_ASSIGN_OR_RETURN(Stmt up, w.db().Prepare("UPDATE trials SET tags_json = ?2, note = ?3 "
                                                    "WHERE id = ?1"));
    up.BindAll(a.trial_id, Json(out->tags).dump(), out->note);
    return up.Run(what);
  });
  if (!s.ok()) return s;
  return std::move(*out);
}

Status Store::ArchiveSweep(int64_t sweep_id, bool archived) {
  if (impl_->OnWriterThread()) {
    return FailedPrecondition("store: ArchiveSweep called from a done callback (writer thread)");
  }
  return impl_->RunSync([sweep_id, archived](Writer& w) -> Status {
    const std::string what = "archive sweep " + std::to_string(sweep_id);
    ABLATE_ASSIGN_OR_RETURN(Stmt st,
                            w.db().Prepare("UPDATE sweeps SET archived = ?2 WHERE id = ?1"));
    st.BindAll(sweep_id, archived ? 1 : 0);
    ABLATE_RETURN_IF_ERROR(st.Run(what));
    if (w.Changes() == 0) return NotFound(what + ": no such sweep");
    return Status::Ok();
  });
}

void Store::AddEvent(const std::string& kind, int64_t sweep_id, int64_t trial_id, int attempt,
                     const std::string& worker_id, const std::string& message) {
  auto apply = [=](Writer& w) -> Status {
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st, w.db().Prepare("INSERT INTO events(time, kind, sweep_id, trial_id, attempt, "
                                "worker_id, message) VALUES(?1, ?2, nullif(?3, 0), nullif(?4, 0), "
                                "nullif(?5, 0), nullif(?6, ''), ?7)"));
    st.Bind(1, w.Now());
    st.Bind(2, kind);
    st.Bind(3, sweep_id);
    st.Bind(4, trial_id);
    st.Bind(5, attempt);
    st.Bind(6, worker_id);
    st.Bind(7, message);
    return st.Run("add event '" + kind + "'");
  };
  impl_->Enqueue(std::make_unique<FnOp>(std::move(apply), nullptr));
}

void Store::RecordStopDecision(const StopDecisionRecord& d, std::vector<TrialUpdate> updates,
                               Done done) {
  auto apply = [d, updates = std::move(updates)](Writer& w) -> Status {
    const std::string what = "record stop decision of '" + d.config + "' at rung " +
                             std::to_string(d.rung) + " of sweep " + std::to_string(d.sweep_id);
    if (d.decision != "continue" && d.decision != "stop") {
      return InvalidArgument(what + ": decision '" + d.decision + "' (expected continue or stop)");
    }
    Json compared = Json::array();
    for (const auto& [config, value] : d.compared) compared.push_back({config, JsonNumber(value)});
    Json seeds = Json::array();
    for (double v : d.seed_values) seeds.push_back(JsonNumber(v));
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st,
        w.db().Prepare("INSERT INTO stop_decisions(sweep_id, rule, metric, rung, step, config, "
                       "grp, trials_json, value, seed_values_json, compared_json, threshold, "
                       "decision, decided_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
                       "?11, ?12, ?13, ?14)"));
    st.BindAll(d.sweep_id, d.rule, d.metric, d.rung, d.step, d.config, d.group,
               Json(d.trial_ids).dump(), d.value, seeds.dump(), compared.dump(), d.threshold,
               d.decision, d.decided_at == 0 ? w.Now() : d.decided_at);
    Status s = st.Run(what);
    if (s.code() == StatusCode::kAlreadyExists) {
      return Status(s.code(), what + ": that configuration was judged at that rung already");
    }
    ABLATE_RETURN_IF_ERROR(s);
    for (const TrialUpdate& u : updates) ABLATE_RETURN_IF_ERROR(ApplyTrialUpdate(w, u));
    return Status::Ok();
  };
  impl_->Enqueue(std::make_unique<FnOp>(std::move(apply), std::move(done)));
}

void Store::AppendMetrics(int64_t trial_id, int attempt, int64_t seq, std::vector<Point> points,
                          MetricsDone done) {
  impl_->Enqueue(std::make_unique<MetricsOp>(trial_id, attempt, seq, std::move(points),
                                             std::move(done), /*record_only=*/false));
}

void Store::RecordSeq(int64_t trial_id, int attempt, int64_t seq, MetricsDone done) {
  impl_->Enqueue(std::make_unique<MetricsOp>(trial_id, attempt, seq, std::vector<Point>(),
                                             std::move(done), /*record_only=*/true));
}

void Store::Barrier(Done done) {
  impl_->Enqueue(std::make_unique<FnOp>([](Writer&) { return Status::Ok(); }, std::move(done)));
}

Status Store::Flush() {
  if (impl_->OnWriterThread()) {
    return FailedPrecondition("store: Flush called from a done callback (writer thread)");
  }
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  Impl* impl = impl_.get();
  // The barrier's callback runs after everything queued before it committed (or failed); it takes
  // the first error recorded since the previous barrier.
  impl_->Enqueue(std::make_unique<FnOp>([](Writer&) { return Status::Ok(); },
                                        [promise, impl](const Status&) {
                                          Status first = impl->first_error;
                                          impl->first_error = Status::Ok();
                                          promise->set_value(first);
                                        }));
  return future.get();
}

}  // namespace ablate::server
