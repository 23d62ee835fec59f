// The reads: each Store read is one short read transaction on a pooled read-only connection.
#include "store/store_internal.h"

#include "ablate/stats.h"

namespace ablate::server {

// ---- Reads --------------------------------------------------------------------------------------

StatusOr<LoadedState> Store::LoadState() {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  LoadedState out;
  const std::string what = "load state";
  {
    ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("SELECT " SWEEP_COLS " FROM sweeps ORDER BY id"));
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      out.sweeps.push_back(ReadSweep(st));
    }
  }
  {
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st, db->Prepare("SELECT " TRIAL_COLS " FROM trials WHERE state IN ('queued', "
                             "'running') ORDER BY id"));
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      out.trials.push_back(ReadTrial(st));
    }
  }
  {
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st, db->Prepare("SELECT " ATTEMPT_COLS " FROM attempts WHERE state = 'running' "
                             "ORDER BY trial_id, attempt"));
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      out.running.push_back(ReadAttempt(st));
    }
  }
  {
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st, db->Prepare("SELECT t.id, t.state FROM attempts a JOIN trials t ON t.id = "
                             "a.trial_id WHERE a.state = 'running'"));
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      out.running_trial_state[st.Int(0)] =
          ParseTrialState(st.Text(1)).value_or(v1::TRIAL_STATE_UNSPECIFIED);
    }
  }
  {
    ABLATE_ASSIGN_OR_RETURN(Stmt st,
                            db->Prepare("SELECT " WORKER_COLS " FROM workers ORDER BY id"));
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      out.workers.push_back(ReadWorker(st));
    }
  }
  {
    ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("SELECT coalesce(max(seq), 0) FROM metric_batches "
                                                 "WHERE trial_id = ?1 AND attempt = ?2"));
    for (const AttemptRecord& a : out.running) {
      st.Bind(1, a.trial_id);
      st.Bind(2, a.attempt);
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      out.max_seq[{a.trial_id, a.attempt}] = row ? st.Int(0) : 0;
      st.Reset();
    }
  }
  return out;
}

StatusOr<std::vector<SweepSummary>> Store::ListSweeps() {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "list sweeps";
  std::vector<SweepSummary> out;
  std::unordered_map<int64_t, size_t> index;
  {
    ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("SELECT " SWEEP_COLS " FROM sweeps ORDER BY id"));
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      index[st.Int(0)] = out.size();
      out.push_back(SweepSummary{ReadSweep(st), {}, 0});
    }
  }
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st,
      db->Prepare("SELECT sweep_id, state, count(*) FROM trials GROUP BY sweep_id, state"));
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    auto it = index.find(st.Int(0));
    if (it == index.end()) continue;
    int n = static_cast<int>(st.Int(2));
    out[it->second].counts[st.Text(1)] = n;
    out[it->second].total += n;
  }
  return out;
}

StatusOr<SweepSummary> Store::GetSweep(const std::string& name_or_id) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "sweep '" + name_or_id + "'";
  if (AllDigits(name_or_id)) {
    ABLATE_ASSIGN_OR_RETURN(Stmt st,
                            db->Prepare("SELECT " SWEEP_COLS " FROM sweeps WHERE id = ?1"));
    st.Bind(1, static_cast<int64_t>(std::strtoll(name_or_id.c_str(), nullptr, 10)));
    auto r = impl_->SweepWithCounts(*db, st, what);
    if (r.ok() || r.status().code() != StatusCode::kNotFound) return r;
    // A sweep may be named with digits only: fall through to the name.
  }
  ABLATE_ASSIGN_OR_RETURN(Stmt st,
                          db->Prepare("SELECT " SWEEP_COLS " FROM sweeps WHERE name = ?1"));
  st.Bind(1, name_or_id);
  return impl_->SweepWithCounts(*db, st, what);
}

namespace {
// NotFound (with `what`) unless the sweep exists.
Status CheckSweep(Db& db, int64_t sweep_id, const std::string& what) {
  ABLATE_ASSIGN_OR_RETURN(Stmt st, db.Prepare("SELECT 1 FROM sweeps WHERE id = ?1"));
  st.Bind(1, sweep_id);
  ABLATE_ASSIGN_OR_RETURN(bool found, st.Step(what));
  if (!found) return NotFound(what + ": no such sweep");
  return Status::Ok();
}
}  // namespace

StatusOr<std::vector<TrialStatus>> Store::GetTrials(int64_t sweep_id, TrialsRead read) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "get trials of sweep " + std::to_string(sweep_id);
  ABLATE_RETURN_IF_ERROR(CheckSweep(*db, sweep_id, what));
  // The progress statements of a sweep, on either connection.
  auto read_progress = [sweep_id, &what](Db& on) -> StatusOr<Impl::Progress> {
    // max(attempt) makes SQLite return the worker_id of that row (a documented bare-column rule).
    ABLATE_ASSIGN_OR_RETURN(
        Stmt attempts,
        on.Prepare(
            "SELECT a.trial_id, a.worker_id, max(a.attempt) FROM trials t "
            "JOIN attempts a ON a.trial_id = t.id WHERE t.sweep_id = ?1 GROUP BY a.trial_id"));
    attempts.Bind(1, sweep_id);
    ABLATE_ASSIGN_OR_RETURN(
        Stmt latest,
        on.Prepare("SELECT l.trial_id, l.name, l.attempt, l.step, l.value FROM trials t "
                   "JOIN latest_metrics l ON l.trial_id = t.id WHERE t.sweep_id = ?1"));
    latest.Bind(1, sweep_id);
    return Impl::ReadProgress(attempts, latest, what);
  };
  // With a second connection free, the progress is read on it while this one reads the trials (a
  // later snapshot at most: a trial it does not know is skipped, one it lacks has no progress yet).
  std::optional<ReadPool::Lease> second =
      read.progress ? impl_->pool.TryBorrow() : std::optional<ReadPool::Lease>();
  std::future<StatusOr<Impl::Progress>> progress;
  if (second) {
    progress = std::async(std::launch::async, [&]() -> StatusOr<Impl::Progress> {
      ReadTxn txn2(**second);
      ABLATE_RETURN_IF_ERROR(txn2.status());
      return read_progress(**second);
    });
  }
  // Every path below waits for the progress read before `second` and `what` go.
  struct Join {
    std::future<StatusOr<Impl::Progress>>& f;
    ~Join() {
      if (f.valid()) f.wait();
    }
  } join{progress};
  std::vector<TrialStatus> out;
  {
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st, db->Prepare(read.config_json
                                 ? "SELECT " TRIAL_COLS " FROM trials WHERE sweep_id = ?1 ORDER BY id"
                                 : "SELECT " TRIAL_COLS_NO_CONFIG
                                   " FROM trials WHERE sweep_id = ?1 ORDER BY id"));
    st.Bind(1, sweep_id);
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      TrialStatus t;
      t.trial = ReadTrial(st);
      t.loss = t.val_loss = kNaN;
      out.push_back(std::move(t));
    }
  }
  if (!read.progress) return out;
  StatusOr<Impl::Progress> p = second ? progress.get() : read_progress(*db);
  if (!p.ok()) return p.status();
  Impl::ApplyProgress(*p, out);
  return out;
}

StatusOr<TrialStatus> Store::GetTrial(int64_t trial_id) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "get trial " + std::to_string(trial_id);
  std::vector<TrialStatus> out(1);
  {
    ABLATE_ASSIGN_OR_RETURN(Stmt st,
                            db->Prepare("SELECT " TRIAL_COLS " FROM trials WHERE id = ?1"));
    st.Bind(1, trial_id);
    ABLATE_ASSIGN_OR_RETURN(bool found, st.Step(what));
    if (!found) return NotFound(what + ": no such trial");
    out[0].trial = ReadTrial(st);
    out[0].loss = out[0].val_loss = kNaN;
  }
  ABLATE_ASSIGN_OR_RETURN(Stmt attempts,
                          db->Prepare("SELECT trial_id, worker_id, max(attempt) FROM attempts "
                                      "WHERE trial_id = ?1 GROUP BY trial_id"));
  attempts.Bind(1, trial_id);
  ABLATE_ASSIGN_OR_RETURN(
      Stmt latest, db->Prepare("SELECT trial_id, name, attempt, step, value FROM latest_metrics "
                               "WHERE trial_id = ?1"));
  latest.Bind(1, trial_id);
  ABLATE_RETURN_IF_ERROR(impl_->FillProgress(attempts, latest, out, what));
  return std::move(out[0]);
}

StatusOr<std::vector<AttemptRecord>> Store::GetAttempts(int64_t trial_id) {
  auto db = impl_->pool.Borrow();
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st,
      db->Prepare("SELECT " ATTEMPT_COLS " FROM attempts WHERE trial_id = ?1 ORDER BY attempt"));
  st.Bind(1, trial_id);
  std::vector<AttemptRecord> out;
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step("get attempts of trial " + std::to_string(trial_id)));
    if (!row) break;
    out.push_back(ReadAttempt(st));
  }
  return out;
}

StatusOr<std::vector<StopDecisionRecord>> Store::GetStopDecisions(int64_t sweep_id) {
  auto db = impl_->pool.Borrow();
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st,
      db->Prepare("SELECT id, sweep_id, rule, metric, rung, step, config, grp, trials_json, value, "
                  "seed_values_json, compared_json, threshold, decision, decided_at FROM "
                  "stop_decisions WHERE sweep_id = ?1 ORDER BY id"));
  st.Bind(1, sweep_id);
  std::vector<StopDecisionRecord> out;
  const std::string what = "get stop decisions of sweep " + std::to_string(sweep_id);
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    StopDecisionRecord d;
    d.id = st.Int(0);
    d.sweep_id = st.Int(1);
    d.rule = st.Text(2);
    d.metric = st.Text(3);
    d.rung = static_cast<int>(st.Int(4));
    d.step = st.Int(5);
    d.config = st.Text(6);
    d.group = st.Text(7);
    d.value = st.Real(9);
    d.threshold = st.Real(12);
    d.decision = st.Text(13);
    d.decided_at = ReadTime(st, 14);
    const Json trials = Json::parse(st.Text(8), nullptr, false);
    const Json seeds = Json::parse(st.Text(10), nullptr, false);
    const Json compared = Json::parse(st.Text(11), nullptr, false);
    if (!trials.is_array() || !seeds.is_array() || !compared.is_array()) {
      return DataLoss(what + ": decision " + std::to_string(d.id) + " holds malformed JSON");
    }
    for (const auto& t : trials) d.trial_ids.push_back(t.get<int64_t>());
    for (const auto& v : seeds) d.seed_values.push_back(NumberFromJson(v));
    for (const auto& c : compared) {
      if (!c.is_array() || c.size() != 2 || !c[0].is_string()) {
        return DataLoss(what + ": decision " + std::to_string(d.id) + " holds malformed JSON");
      }
      d.compared.emplace_back(c[0].get<std::string>(), NumberFromJson(c[1]));
    }
    out.push_back(std::move(d));
  }
  return out;
}

StatusOr<std::vector<Point>> Store::GetLatestMetrics(int64_t trial_id) {
  auto db = impl_->pool.Borrow();
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st, db->Prepare("SELECT name, step, value FROM latest_metrics WHERE trial_id = ?1 "
                           "ORDER BY name"));
  st.Bind(1, trial_id);
  std::vector<Point> out;
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row,
                            st.Step("get latest metrics of trial " + std::to_string(trial_id)));
    if (!row) break;
    out.push_back(Point{st.Int(1), st.Text(0), st.Real(2)});
  }
  return out;
}

StatusOr<std::vector<std::pair<int64_t, double>>> Store::LatestValues(
    int64_t sweep_id, const std::string& metric) {
  auto db = impl_->pool.Borrow();
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st, db->Prepare("SELECT l.trial_id, l.value FROM latest_metrics l JOIN trials t ON "
                           "t.id = l.trial_id WHERE t.sweep_id = ?1 AND l.name = ?2 "
                           "ORDER BY l.trial_id"));
  st.Bind(1, sweep_id);
  st.Bind(2, metric);
  std::vector<std::pair<int64_t, double>> out;
  const std::string what = "latest '" + metric + "' of sweep " + std::to_string(sweep_id);
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    if (!st.IsNull(1)) out.emplace_back(st.Int(0), st.Real(1));
  }
  return out;
}

StatusOr<std::vector<WorkerRecord>> Store::ListWorkers() {
  auto db = impl_->pool.Borrow();
  ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("SELECT " WORKER_COLS " FROM workers ORDER BY id"));
  std::vector<WorkerRecord> out;
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step("list workers"));
    if (!row) break;
    out.push_back(ReadWorker(st));
  }
  return out;
}

StatusOr<std::vector<Point>> Store::GetSeries(int64_t trial_id, const std::string& name) {
  auto db = impl_->pool.Borrow();
  // The primary key order (trial_id, name, step, attempt) is this query's order: no sort.
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st, db->Prepare("SELECT step, value FROM metrics WHERE trial_id = ?1 AND name = ?2 "
                           "ORDER BY step, attempt"));
  st.Bind(1, trial_id);
  st.Bind(2, name);
  std::vector<Point> out;
  const std::string what = "get series '" + name + "' of trial " + std::to_string(trial_id);
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    int64_t step = st.Int(0);
    double value = st.Real(1);
    if (!out.empty() && out.back().step == step) {
      out.back().value = value;  // a later attempt reported the same step: it wins
    } else {
      out.push_back(Point{step, name, value});
    }
  }
  return out;
}

StatusOr<std::vector<ResultRow>> Store::Results(int64_t sweep_id, const std::string& metric,
                                                const std::vector<std::string>& by) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "results of sweep " + std::to_string(sweep_id);
  std::string sweep_name;
  std::vector<std::string> axes;
  {
    ABLATE_ASSIGN_OR_RETURN(Stmt st,
                            db->Prepare("SELECT name, axes_json FROM sweeps WHERE id = ?1"));
    st.Bind(1, sweep_id);
    ABLATE_ASSIGN_OR_RETURN(bool found, st.Step(what));
    if (!found) return NotFound(what + ": no such sweep");
    sweep_name = st.Text(0);
    axes = NamesFromJson(st.Text(1));
  }
  bool trial_axes_added = false;
  for (const std::string& axis : by) {
    if (std::find(axes.begin(), axes.end(), axis) != axes.end()) continue;
    if (!trial_axes_added) {
      // Axes that trials carry beyond the sweep's list (a caller that left SweepRecord::axes
      // empty): known too. Only on this path, so the common case reads no JSON keys.
      trial_axes_added = true;
      ABLATE_ASSIGN_OR_RETURN(
          Stmt keys, db->Prepare("SELECT DISTINCT j.key FROM trials t, json_each(t.axes_json) j "
                                 "WHERE t.sweep_id = ?1 ORDER BY j.key"));
      keys.Bind(1, sweep_id);
      for (;;) {
        ABLATE_ASSIGN_OR_RETURN(bool row, keys.Step(what));
        if (!row) break;
        std::string k = keys.Text(0);
        if (std::find(axes.begin(), axes.end(), k) == axes.end()) axes.push_back(k);
      }
      if (std::find(axes.begin(), axes.end(), axis) != axes.end()) continue;
    }
    std::string known;
    for (const std::string& a : axes) known += (known.empty() ? "" : ", ") + a;
    return InvalidArgument("results: '" + axis + "' is not an axis of sweep '" + sweep_name +
                           "' (its axes: " + (known.empty() ? "none" : known) + ")");
  }

  // One statement per call (the number of axes varies): json_extract pulls each axis value out of
  // trials.axes_json, so no JSON is parsed in C++.
  std::string sql = "SELECT l.value";
  for (size_t i = 0; i < by.size(); ++i) {
    sql += ", json_extract(t.axes_json, ?" + std::to_string(i + 3) + ")";
  }
  // Then the trial's state and its attempts' distinct builds ("version|commit|numerics", one per
  // line) for the counts beside the figures.
  sql +=
      ", t.state, (SELECT group_concat(b, char(10)) FROM (SELECT DISTINCT a.build_version || '|' "
      "|| a.build_commit || '|' || a.numerics_version AS b FROM attempts a WHERE a.trial_id = t.id "
      "AND (a.build_version != '' OR a.build_commit != '' OR a.numerics_version != '')))"
      " FROM trials t LEFT JOIN latest_metrics l ON l.trial_id = t.id AND l.name = ?2 "
      "WHERE t.sweep_id = ?1";
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db->raw(), sql.c_str(), -1, &raw, nullptr);
  if (rc != SQLITE_OK) return sqlite::ToStatus(db->raw(), rc, what);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owned(raw, sqlite3_finalize);
  Stmt st(db->raw(), raw);
  st.Bind(1, sweep_id);
  st.Bind(2, metric);
  for (size_t i = 0; i < by.size(); ++i) {
    st.Bind(static_cast<int>(i + 3), "$.\"" + by[i] + "\"");
  }
  struct Group {
    int trials = 0, diverged = 0, failed = 0, stopped = 0;
    std::vector<double> values;
    std::set<std::string> builds;
  };
  std::map<std::vector<std::string>, Group, KeyLess> groups;
  std::vector<std::string> key(by.size());
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    for (size_t i = 0; i < by.size(); ++i) key[i] = st.Text(static_cast<int>(i + 1));
    Group& g = groups[key];
    ++g.trials;
    const int state_col = static_cast<int>(by.size() + 1);
    const std::string state = st.Text(state_col);
    g.diverged += state == "diverged";
    g.failed += state == "failed";
    g.stopped += state == "stopped";
    // A diverged, failed or stopped trial's last value is not a final one: counted, not averaged.
    if (!st.IsNull(0) && state != "diverged" && state != "failed" && state != "stopped") {
      g.values.push_back(st.Real(0));
      std::string builds = st.IsNull(state_col + 1) ? "" : st.Text(state_col + 1);
      for (size_t at = 0; !builds.empty() && at != std::string::npos;) {
        const size_t nl = builds.find('\n', at);
        g.builds.insert(builds.substr(at, nl == std::string::npos ? nl : nl - at));
        at = nl == std::string::npos ? nl : nl + 1;
      }
    }
  }
  std::vector<ResultRow> out;
  out.reserve(groups.size());
  for (auto& [k, g] : groups) {
    ResultRow r;
    r.keys = k;
    r.trials = g.trials;
    r.diverged = g.diverged;
    r.failed = g.failed;
    r.stopped = g.stopped;
    r.builds = static_cast<int>(g.builds.size());
    r.n = static_cast<int>(g.values.size());
    r.mean = r.std = r.min = r.max = r.se = r.ci_low = r.ci_high = kNaN;
    if (r.n > 0) {
      double sum = 0;
      r.min = r.max = g.values[0];
      for (double v : g.values) {
        sum += v;
        r.min = std::min(r.min, v);
        r.max = std::max(r.max, v);
      }
      r.mean = sum / r.n;
    }
    if (r.n > 1) {
      double ss = 0;  // two passes: exact enough for values far from zero (losses ~ 2-10)
      for (double v : g.values) ss += (v - r.mean) * (v - r.mean);
      r.std = std::sqrt(ss / (r.n - 1));
      r.se = r.std / std::sqrt(double(r.n));
      const double half = stats::TCritical(r.n - 1) * r.se;
      r.ci_low = r.mean - half;
      r.ci_high = r.mean + half;
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<QueryResult> Store::Query(const std::string& sql, int max_rows) {
  ReadOnlyQueryLimits limits;
  limits.timeout_ms = impl_->opt.query_timeout_ms;
  limits.max_rows = max_rows > 0 ? max_rows : impl_->opt.query_max_rows;
  limits.busy_timeout_ms = impl_->opt.busy_timeout_ms;
  limits.max_result_bytes = impl_->opt.query_max_result_bytes;
  return RunReadOnlyQuery(impl_->opt.path, sql, limits);
}

Store::Stats Store::stats() const {
  Stats s;
  s.commits = impl_->commits.load(std::memory_order_relaxed);
  s.ops = impl_->ops.load(std::memory_order_relaxed);
  s.points_inserted = impl_->points.load(std::memory_order_relaxed);
  s.duplicate_batches = impl_->duplicates.load(std::memory_order_relaxed);
  s.queue_depth = impl_->queue_depth.load(std::memory_order_relaxed);
  return s;
}



StatusOr<std::vector<Store::TrialMetric>> Store::SweepLatestMetrics(int64_t sweep_id) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "latest metrics of sweep " + std::to_string(sweep_id);
  ABLATE_RETURN_IF_ERROR(CheckSweep(*db, sweep_id, what));
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st, db->Prepare("SELECT l.trial_id, l.name, l.value FROM trials t JOIN latest_metrics l "
                           "ON l.trial_id = t.id WHERE t.sweep_id = ?1 ORDER BY l.trial_id, "
                           "l.name"));
  st.Bind(1, sweep_id);
  std::vector<TrialMetric> out;
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    out.push_back({st.Int(0), st.Text(1), st.IsNull(2) ? kNaN : st.Real(2)});
  }
  return out;
}

StatusOr<std::vector<Store::AttemptBuild>> Store::SweepBuilds(int64_t sweep_id) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "builds of sweep " + std::to_string(sweep_id);
  ABLATE_RETURN_IF_ERROR(CheckSweep(*db, sweep_id, what));
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st, db->Prepare("SELECT a.trial_id, a.attempt, a.build_version, a.build_commit, "
                           "a.numerics_version FROM trials t JOIN attempts a ON a.trial_id = t.id "
                           "WHERE t.sweep_id = ?1 ORDER BY a.trial_id, a.attempt"));
  st.Bind(1, sweep_id);
  std::vector<AttemptBuild> out;
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    out.push_back({st.Int(0), int(st.Int(1)), st.Text(2), st.Text(3), st.Text(4)});
  }
  return out;
}

StatusOr<std::vector<Store::TrialPoint>> Store::SweepSeries(
    int64_t sweep_id, const std::vector<std::string>& names) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "series of sweep " + std::to_string(sweep_id);
  ABLATE_RETURN_IF_ERROR(CheckSweep(*db, sweep_id, what));
  // One key range of the metrics primary key per (trial, name): already in step, attempt order.
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st, db->Prepare("SELECT t.id, m.step, m.value FROM trials t JOIN metrics m ON "
                           "m.trial_id = t.id AND m.name = ?2 WHERE t.sweep_id = ?1 "
                           "ORDER BY t.id, m.step, m.attempt"));
  std::vector<TrialPoint> all;
  for (const std::string& name : names) {
    st.Reset();
    st.Bind(1, sweep_id);
    st.Bind(2, name);
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
      if (!row) break;
      TrialPoint p{st.Int(0), name, st.Int(1), st.IsNull(2) ? kNaN : st.Real(2)};
      if (!all.empty() && all.back().trial_id == p.trial_id && all.back().name == name &&
          all.back().step == p.step) {
        all.back().value = p.value;  // a later attempt reported the same step: it wins
      } else {
        all.push_back(std::move(p));
      }
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const TrialPoint& a, const TrialPoint& b) {
    return a.trial_id != b.trial_id ? a.trial_id < b.trial_id : a.name < b.name;
  });
  return all;
}

}  // namespace ablate::server
