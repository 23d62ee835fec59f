#include "http/api.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ablate/axis_value.h"
#include "ablate/token.h"
#include "analysis/compare.h"
#include "analysis/export.h"
#include "analysis/results.h"
#include "analysis/sweep_values.h"
#include "http/downsample.h"
#include "http/static_files.h"
#include "ablate/metric_catalog.h"
#include "proto/trial_state.h"

namespace ablate::server::http {
namespace {

using nlohmann::json;

const char* const kSortColumns[] = {"id", "state", "step", "loss", "val_loss", "attempt",
                                    "started_at", "finished_at"};

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json Time(double t) { return t > 0 ? json(t) : json(nullptr); }

// `waiting_reason`: Scheduler::WaitingReason ("" without a scheduler, or when a worker can run
// the queued trials).
json SweepJson(const SweepSummary& s, const std::string& waiting_reason) {
  json counts = json::object();
  int active = 0, done = 0;
  for (v1::TrialState state : kTrialStates) {
    const std::string st(TrialStateName(state));
    auto it = s.counts.find(st);
    int n = it == s.counts.end() ? 0 : it->second;
    counts[st] = n;
    (IsActive(state) ? active : done) += n;
  }
  return {{"id", s.sweep.id},
          {"name", s.sweep.name},
          {"priority", s.sweep.priority},
          {"max_attempts", s.sweep.max_attempts},
          {"gpus", s.sweep.gpu_share > 1 ? 1.0 / s.sweep.gpu_share : double(s.sweep.gpus)},
          {"early_stop", s.sweep.early_stop_json.empty()
                             ? json(nullptr)
                             : json::parse(s.sweep.early_stop_json, nullptr, false)},
          {"cpu_slots", s.sweep.cpu_slots},
          {"axes", s.sweep.axes},
          {"created_at", Time(s.sweep.created_at)},
          {"counts", counts},
          {"total", s.total},
          {"done", done},
          {"finished", active == 0},
          {"archived", s.sweep.archived},
          {"waiting_reason", active == 0 ? std::string() : waiting_reason}};
}

json DecisionJson(const StopDecisionRecord& d) {
  json compared = json::array();
  for (const auto& [config, value] : d.compared) {
    compared.push_back({{"config", config}, {"value", Num(value)}});
  }
  json seeds = json::array();
  for (double v : d.seed_values) seeds.push_back(Num(v));
  return {{"id", d.id},       {"rule", d.rule},         {"metric", d.metric},
          {"rung", d.rung},   {"step", d.step},         {"config", d.config},
          {"group", d.group}, {"trial_ids", d.trial_ids}, {"value", Num(d.value)},
          {"seed_values", seeds}, {"compared", compared}, {"threshold", Num(d.threshold)},
          {"decision", d.decision}, {"decided_at", Time(d.decided_at)}};
}

json TrialJson(const TrialStatus& t) {
  json axes = json::object();
  for (const auto& [k, v] : t.trial.axes) axes[k] = v;
  return {{"id", t.trial.id},
          {"sweep_id", t.trial.sweep_id},
          {"config_hash", t.trial.config_hash},
          {"state", TrialStateName(t.trial.state)},
          {"axes", axes},
          {"attempt", t.trial.attempts},
          {"max_attempts", t.trial.max_attempts},
          {"worker_id", t.worker_id},
          {"step", t.step},
          {"total_steps", t.trial.total_steps},
          {"loss", Num(t.loss)},
          {"val_loss", Num(t.val_loss)},
          {"reason", t.trial.reason},
          {"priority", t.trial.priority},
          {"created_at", Time(t.trial.created_at)},
          {"started_at", Time(t.trial.started_at)},
          {"finished_at", Time(t.trial.finished_at)},
          {"tags", t.trial.tags},
          {"note", t.trial.note}};
}

HttpResponse Json(const json& j, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse FromStatus(const Status& st) { return JsonError(HttpStatusFor(st), st.message()); }

std::string Param(const HttpRequest& r, const std::string& key, const std::string& def = "") {
  auto it = r.params.find(key);
  return it == r.params.end() ? def : it->second;
}

// Splits "a/b/c" into segments (no empty ones).
std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  std::stringstream ss(path);
  for (std::string s; std::getline(ss, s, '/');) {
    if (!s.empty()) out.push_back(s);
  }
  return out;
}

StatusOr<int64_t> ParseInt(const std::string& name, const std::string& text, int64_t lo,
                           int64_t hi) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    return InvalidArgument("parameter " + name + "=" + text + ": expected an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return int64_t(v);
}

StatusOr<int64_t> ParseId(const std::string& what, const std::string& text) {
  auto v = ParseInt(what, text, 1, INT64_MAX);
  if (!v.ok()) return NotFound(what + " " + text + " not found (ids are positive integers)");
  return v;
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) {
    if (!x.empty()) out.push_back(x);
  }
  return out;
}

// Axis values are text: ablate/axis_value.h orders them.
using ::ablate::AxisValueLess;

const std::string* AxisOf(const TrialStatus& t, const std::string& name) {
  for (const auto& [k, v] : t.trial.axes) {
    if (k == name) return &v;
  }
  return nullptr;
}

// -1, 0, 1 comparing a and b on `sort`, with "missing" (NaN, unset, absent axis) reported through
// `missing_a` / `missing_b` so the caller keeps them last in either order.
int Compare(const TrialStatus& a, const TrialStatus& b, const std::string& sort, bool* missing_a,
            bool* missing_b) {
  auto num = [&](double x, double y, bool miss_x, bool miss_y) {
    *missing_a = miss_x;
    *missing_b = miss_y;
    return x < y ? -1 : (y < x ? 1 : 0);
  };
  *missing_a = *missing_b = false;
  if (sort == "id") return num(double(a.trial.id), double(b.trial.id), false, false);
  if (sort == "state") {
    const int c = TrialStateName(a.trial.state).compare(TrialStateName(b.trial.state));
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (sort == "step") return num(double(a.step), double(b.step), false, false);
  if (sort == "loss") return num(a.loss, b.loss, std::isnan(a.loss), std::isnan(b.loss));
  if (sort == "val_loss") {
    return num(a.val_loss, b.val_loss, std::isnan(a.val_loss), std::isnan(b.val_loss));
  }
  if (sort == "attempt") return num(a.trial.attempts, b.trial.attempts, false, false);
  if (sort == "started_at") {
    return num(a.trial.started_at, b.trial.started_at, a.trial.started_at <= 0,
               b.trial.started_at <= 0);
  }
  if (sort == "finished_at") {
    return num(a.trial.finished_at, b.trial.finished_at, a.trial.finished_at <= 0,
               b.trial.finished_at <= 0);
  }
  // axis.<name>
  const std::string name = sort.substr(5);
  const std::string *x = AxisOf(a, name), *y = AxisOf(b, name);
  *missing_a = !x;
  *missing_b = !y;
  if (!x || !y) return 0;
  return AxisValueLess(*x, *y) ? -1 : (AxisValueLess(*y, *x) ? 1 : 0);
}

}  // namespace

HttpResponse JsonError(int status, const std::string& message) {
  HttpResponse r;
  r.status = status;
  r.body = json({{"error", message}}).dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

int HttpStatusFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted:
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

StatusOr<TrialQuery> ParseTrialQuery(const std::multimap<std::string, std::string>& params) {
  TrialQuery q;
  for (const auto& [key, value] : params) {
    if (key == "offset") {
      ABLATE_ASSIGN_OR_RETURN(q.offset, ParseInt("offset", value, 0, INT64_MAX / 2));
    } else if (key == "limit") {
      ABLATE_ASSIGN_OR_RETURN(q.limit, ParseInt("limit", value, 1, kMaxPageSize));
    } else if (key == "sort") {
      bool ok = value.rfind("axis.", 0) == 0 && value.size() > 5;
      for (const char* c : kSortColumns) ok = ok || value == c;
      if (!ok) {
        return InvalidArgument("parameter sort=" + value +
                               ": expected id, state, step, loss, val_loss, attempt, started_at, "
                               "finished_at or axis.<name>");
      }
      q.sort = value;
    } else if (key == "order") {
      if (value != "asc" && value != "desc") {
        return InvalidArgument("parameter order=" + value + ": expected asc or desc");
      }
      q.descending = value == "desc";
    } else if (key == "state") {
      for (const auto& s : SplitCommas(value)) {
        if (!ParseTrialState(s)) {
          return InvalidArgument("parameter state=" + s +
                                 ": expected queued, running, succeeded, failed, diverged, "
                                 "canceled or stopped (comma-separated)");
        }
        q.states.push_back(s);
      }
    } else if (key.rfind("axis.", 0) == 0 && key.size() > 5) {
      q.axes.emplace_back(key.substr(5), value);
    } else if (key != "token") {
      return InvalidArgument("unknown parameter " + key +
                             " (expected offset, limit, sort, order, state, axis.<name>)");
    }
  }
  return q;
}

TrialPage ApplyTrialQuery(std::vector<TrialStatus> trials, const TrialQuery& q) {
  auto keep = [&](const TrialStatus& t) {
    if (!q.states.empty() &&
        std::find(q.states.begin(), q.states.end(), TrialStateName(t.trial.state)) ==
            q.states.end()) {
      return false;
    }
    for (const auto& [axis, value] : q.axes) {
      const std::string* v = AxisOf(t, axis);
      if (!v || *v != value) return false;
    }
    return true;
  };
  trials.erase(std::remove_if(trials.begin(), trials.end(), [&](const auto& t) { return !keep(t); }),
               trials.end());
  TrialPage page;
  page.total = int64_t(trials.size());
  auto less = [&](const TrialStatus& a, const TrialStatus& b) {
    bool ma = false, mb = false;
    int c = Compare(a, b, q.sort, &ma, &mb);
    if (ma != mb) return mb;  // missing values last, in either order
    if (!ma && c != 0) return q.descending ? c > 0 : c < 0;
    return q.descending && q.sort == "id" ? a.trial.id > b.trial.id : a.trial.id < b.trial.id;
  };
  int64_t begin = std::min<int64_t>(q.offset, page.total);
  int64_t end = std::min<int64_t>(begin + q.limit, page.total);
  // Only the requested page needs ordering: partial_sort to its end, then drop the prefix.
  std::partial_sort(trials.begin(), trials.begin() + end, trials.end(), less);
  page.trials.assign(std::make_move_iterator(trials.begin() + begin),
                     std::make_move_iterator(trials.begin() + end));
  return page;
}

Api::Api(Store* store, const Scheduler* scheduler, metrics::CoordinatorMetrics* metrics,
         ApiOptions options)
    : store_(store), scheduler_(scheduler), metrics_(metrics), opt_(std::move(options)) {}

bool Api::Authorized(const HttpRequest& r) const {
  if (opt_.token.empty()) return false;
  auto h = r.headers.find("authorization");
  if (h != r.headers.end() && BearerMatches(h->second, opt_.token)) return true;
  auto p = r.params.find("token");
  return p != r.params.end() && TokenEquals(p->second, opt_.token);
}

HttpResponse Api::Handle(const HttpRequest& r) const {
  if (r.method != "GET" && r.method != "HEAD") {
    return JsonError(405, "method " + r.method + " not allowed: the HTTP API is read-only (GET)");
  }
  const bool is_api = r.path == "/api" || r.path.rfind("/api/", 0) == 0;
  const bool is_metrics = r.path == "/metrics";
  if ((is_api || (is_metrics && !opt_.metrics_public)) && !Authorized(r)) {
    return JsonError(401,
                     "missing or wrong bearer token: send 'Authorization: Bearer <token>' or "
                     "?token=<token> (the token is in the coordinator's --token-file)");
  }
  if (is_metrics) {
    if (!metrics_) return JsonError(404, "metrics are not enabled");
    if (auto st = metrics_->Refresh(store_, scheduler_); !st.ok()) {
      return JsonError(500, "refreshing metrics: " + st.message());
    }
    HttpResponse resp;
    resp.content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp.body = metrics_->Exposition();
    return resp;
  }
  if (!is_api) {
    if (opt_.web_dir.empty()) return JsonError(404, "no web dir configured (--web-dir)");
    auto file = ResolveStaticPath(opt_.web_dir, r.path);
    if (!file.ok()) return FromStatus(file.status());
    std::ifstream in(*file, std::ios::binary);
    if (!in) return JsonError(404, "not found: " + r.path);
    HttpResponse resp;
    resp.content_type = ContentTypeFor(*file);
    resp.body.assign(std::istreambuf_iterator<char>(in), {});
    return resp;
  }
  return Route(r);
}

std::string Api::WaitingReason(int64_t sweep_id) const {
  return scheduler_ ? scheduler_->WaitingReason(sweep_id) : std::string();
}

HttpResponse Api::Route(const HttpRequest& r) const {
  const std::vector<std::string> seg = Segments(r.path);  // seg[0] == "api"
  const size_t n = seg.size();
  if (n == 2 && seg[1] == "sweeps") {
    auto sweeps = store_->ListSweeps();
    if (!sweeps.ok()) return FromStatus(sweeps.status());
    const bool archived = Param(r, "archived", "0") == "1";  // include archived sweeps
    json out = json::array();
    for (const auto& s : *sweeps) {
      if (s.sweep.archived && !archived) continue;
      out.push_back(SweepJson(s, WaitingReason(s.sweep.id)));
    }
    return Json({{"sweeps", out}});
  }
  if (n >= 3 && seg[1] == "sweeps") {
    auto sweep = store_->GetSweep(seg[2]);
    if (!sweep.ok()) return FromStatus(sweep.status());
    const int64_t id = sweep->sweep.id;
    if (n == 3) {
      json j = SweepJson(*sweep, WaitingReason(id));
      j["spec_yaml"] = sweep->sweep.spec_yaml;
      return Json(j);
    }
    if (n == 4 && seg[3] == "decisions") {
      auto decisions = store_->GetStopDecisions(id);
      if (!decisions.ok()) return FromStatus(decisions.status());
      json list = json::array();
      for (const auto& d : *decisions) list.push_back(DecisionJson(d));
      return Json({{"sweep_id", id}, {"decisions", list}});
    }
    if (n == 4 && seg[3] == "trials") {
      auto q = ParseTrialQuery(r.params);
      if (!q.ok()) return FromStatus(q.status());
      auto trials = store_->GetTrials(id, {.config_json = false});
      if (!trials.ok()) return FromStatus(trials.status());
      TrialPage page = ApplyTrialQuery(std::move(*trials), *q);
      json list = json::array();
      for (const auto& t : page.trials) list.push_back(TrialJson(t));
      return Json({{"sweep_id", id},
                   {"total", page.total},
                   {"offset", q->offset},
                   {"limit", q->limit},
                   {"sort", q->sort},
                   {"order", q->descending ? "desc" : "asc"},
                   {"trials", list}});
    }
    if (n == 4 && seg[3] == "compare") {  // ?factor=K&baseline=V&metric=M&by=K,K
      const std::string metric = Param(r, "metric", "final_val_loss");
      analysis::CompareSpec spec;
      spec.factor = Param(r, "factor", "");
      spec.baseline = Param(r, "baseline", "");
      for (auto [it, end] = r.params.equal_range("by"); it != end; ++it) {
        for (auto& a : SplitCommas(it->second)) spec.by.push_back(a);
      }
      spec.best_over = Param(r, "best_over", "");
      for (auto [it, end] = r.params.equal_range("select_seeds"); it != end; ++it) {
        for (auto& a : SplitCommas(it->second)) spec.select_seeds.push_back(a);
      }
      spec.lower_is_better = analysis::LowerIsBetter(metric);
      auto in = analysis::SweepValues(*store_, id, metric);
      if (!in.ok()) return FromStatus(in.status());
      auto cmp = analysis::Compare(*in, spec);
      if (!cmp.ok()) return FromStatus(cmp.status());
      json rows = json::array();
      for (const analysis::ComparisonRow& c : cmp->rows) {
        const bool has = c.test.test != "none";
        auto ci = [&](double v) { return c.test.has_interval ? Num(v) : json(nullptr); };
        rows.push_back({{"cell", c.cell},
                        {"value", c.value},
                        {"baseline", c.baseline},
                        {"test", c.test.test},
                        {"n", c.test.n},
                        {"mean", has ? Num(c.mean) : json(nullptr)},
                        {"baseline_mean", has ? Num(c.baseline_mean) : json(nullptr)},
                        {"delta", has ? Num(c.test.delta) : json(nullptr)},
                        {"ci_low", ci(c.test.ci_low)},
                        {"ci_high", ci(c.test.ci_high)},
                        {"p_value", Num(c.test.p_value)},
                        {"p_permutation", c.paired ? Num(c.test.p_permutation) : json(nullptr)},
                        {"p_adjusted", Num(c.p_adjusted)},
                        {"seeds", c.level_count.seeds},
                        {"diverged", c.level_count.diverged},
                        {"failed", c.level_count.failed},
                        {"missing", c.level_count.missing},
                        {"baseline_seeds", c.baseline_count.seeds},
                        {"baseline_diverged", c.baseline_count.diverged},
                        {"baseline_failed", c.baseline_count.failed},
                        {"baseline_missing", c.baseline_count.missing},
                        {"stopped", c.level_count.stopped},
                        {"baseline_stopped", c.baseline_count.stopped},
                        {"left_out", c.left_out},
                        {"builds", c.level_count.builds},
                        {"baseline_builds", c.baseline_count.builds}});
        if (!spec.best_over.empty()) {
          auto text = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
          rows.back()["best_value"] = text(c.best_value);
          rows.back()["baseline_best_value"] = text(c.baseline_best_value);
        }
      }
      json out = {{"sweep_id", id}, {"metric", metric}, {"factor", spec.factor},
                  {"baseline", cmp->baseline}, {"by", spec.by}, {"levels", cmp->levels},
                  {"adjustment", "holm"}, {"rows", rows}};
      if (!spec.best_over.empty()) {
        out["best_over"] = spec.best_over;
        out["optimistic"] = cmp->optimistic;
        out["test_seeds"] = cmp->test_seeds;
      }
      return Json(out);
    }
    if (n == 4 && seg[3] == "export") {  // ?format=csv|jsonl[&metrics=a,b]
      auto format = analysis::ParseExportFormat(Param(r, "format", "jsonl"));
      if (!format.ok()) return FromStatus(format.status());
      std::vector<std::string> names;
      for (auto [it, end] = r.params.equal_range("metrics"); it != end; ++it) {
        for (auto& m : SplitCommas(it->second)) names.push_back(m);
      }
      auto table = names.empty() ? analysis::ExportTrials(*store_, id)
                                 : analysis::ExportSeries(*store_, id, names);
      if (!table.ok()) return FromStatus(table.status());
      HttpResponse resp;
      resp.content_type = *format == analysis::ExportFormat::kCsv
                              ? "text/csv; charset=utf-8"
                              : "application/x-ndjson; charset=utf-8";
      resp.body = analysis::Render(*table, *format);
      return resp;
    }
    if (n == 4 && seg[3] == "results") {
      std::string metric = Param(r, "metric", "final_val_loss");
      std::vector<std::string> by;
      for (auto [it, end] = r.params.equal_range("by"); it != end; ++it) {
        for (auto& a : SplitCommas(it->second)) by.push_back(a);
      }
      auto rows = store_->Results(id, metric, by);
      if (!rows.ok()) return FromStatus(rows.status());
      json out = json::array();
      const bool lower = analysis::LowerIsBetter(metric);
      const int best = analysis::SeparatedBest(*rows, lower);
      for (const auto& row : *rows) {
        out.push_back({{"keys", row.keys}, {"n", row.n}, {"trials", row.trials},
                       {"mean", Num(row.mean)}, {"std", Num(row.std)}, {"se", Num(row.se)},
                       {"ci_low", Num(row.ci_low)}, {"ci_high", Num(row.ci_high)},
                       {"min", Num(row.min)}, {"max", Num(row.max)},
                       {"diverged", row.diverged}, {"failed", row.failed},
                       {"stopped", row.stopped}, {"builds", row.builds}, {"best", &row - rows->data() == best}});
      }
      return Json({{"sweep_id", id}, {"metric", metric}, {"by", by},
                   {"lower_is_better", lower}, {"rows", out}});
    }
  }
  if (n >= 3 && seg[1] == "trials") {
    auto id = ParseId("trial", seg[2]);
    if (!id.ok()) return FromStatus(id.status());
    if (n == 3) {
      auto t = store_->GetTrial(*id);
      if (!t.ok()) return FromStatus(t.status());
      auto attempts = store_->GetAttempts(*id);
      if (!attempts.ok()) return FromStatus(attempts.status());
      auto latest = store_->GetLatestMetrics(*id);
      if (!latest.ok()) return FromStatus(latest.status());
      json j = TrialJson(*t);
      j["config"] = json::parse(t->trial.config_json, nullptr, false);
      j["checkpoint"] = {{"path", t->trial.checkpoint_path}, {"step", t->trial.checkpoint_step}};
      json atts = json::array();
      for (const auto& a : *attempts) {
        atts.push_back({{"attempt", a.attempt}, {"worker_id", a.worker_id},
                        {"gpus", a.gpu_indices}, {"cpu_slots", a.cpu_slots}, {"state", a.state},
                        {"started_at", Time(a.started_at)}, {"ended_at", Time(a.ended_at)},
                        {"exit_code", a.exit_code}, {"reason", a.reason},
                        {"log_tail", a.log_tail}, {"checkpoint_step", a.checkpoint_step},
                        {"build",
                         {{"version", a.build_version},
                          {"commit", a.build_commit},
                          {"numerics", a.numerics_version}}}});
      }
      j["attempts"] = atts;
      json decided = json::array();
      auto decisions = store_->GetStopDecisions(t->trial.sweep_id);
      if (!decisions.ok()) return FromStatus(decisions.status());
      for (const auto& d : *decisions) {
        if (std::find(d.trial_ids.begin(), d.trial_ids.end(), *id) != d.trial_ids.end()) {
          decided.push_back(DecisionJson(d));
        }
      }
      j["decisions"] = decided;
      json lm = json::object();
      for (const auto& p : *latest) lm[p.name] = {{"step", p.step}, {"value", Num(p.value)}};
      j["latest_metrics"] = lm;
      return Json(j);
    }
    if (n == 4 && seg[3] == "series") {
      std::string name = Param(r, "name");
      if (name.empty()) return JsonError(400, "parameter name is required (e.g. name=loss)");
      auto points = ParseInt("points", Param(r, "points", "500"), 2, 10000);
      if (!points.ok()) return FromStatus(points.status());
      auto t = store_->GetTrial(*id);  // NotFound for a missing trial, not an empty series
      if (!t.ok()) return FromStatus(t.status());
      auto series = store_->GetSeries(*id, name);
      if (!series.ok()) return FromStatus(series.status());
      std::vector<Point> ds = DownsampleMinMax(*series, size_t(*points));
      json steps = json::array(), values = json::array();
      for (const auto& p : ds) steps.push_back(p.step), values.push_back(Num(p.value));
      return Json({{"trial_id", *id}, {"name", name}, {"total_points", series->size()},
                   {"steps", steps}, {"values", values}});
    }
  }
  if (n == 2 && seg[1] == "workers") {
    json out = json::array();
    if (scheduler_) {
      for (const auto& w : scheduler_->Workers()) {
        json gpus = json::array(), running = json::array();
        for (const auto& g : w.gpus()) {
          gpus.push_back({{"index", g.index()}, {"uuid", g.uuid()}, {"name", g.name()},
                          {"memory_bytes", g.memory_bytes()}});
        }
        for (const auto& a : w.running()) {
          running.push_back({{"trial_id", a.trial_id()}, {"attempt", a.attempt()}});
        }
        json load = json::array();
        for (const auto& g : w.gpu_load()) {
          load.push_back({{"index", g.index()},
                          {"trial_ids", std::vector<int64_t>(g.trial_ids().begin(),
                                                             g.trial_ids().end())},
                          {"share", g.share()},
                          {"estimated_bytes", g.estimated_bytes()},
                          {"used_bytes", g.used_bytes()},
                          {"total_bytes", g.total_bytes()}});
        }
        out.push_back({{"id", w.worker_id()}, {"hostname", w.hostname()}, {"state", w.state()},
                       {"gpu_load", load},
                       {"gpus", gpus}, {"cpu_slots", w.cpu_slots()}, {"running", running},
                       {"last_seen_at", Time(w.last_seen_at())}, {"failures", w.failures()},
                       {"busy_gpus", std::vector<int>(w.busy_gpus().begin(), w.busy_gpus().end())},
                       {"busy_cpu_slots", w.busy_cpu_slots()}});
      }
    }
    return Json({{"workers", out}});
  }
  if (n == 3 && seg[1] == "metrics" && seg[2] == "catalog") {
    json out = json::array();
    for (const auto& m : ::ablate::metrics::Catalog()) {
      std::vector<std::string> labels(m.labels.begin(), m.labels.end());
      out.push_back({{"name", m.name}, {"type", ::ablate::metrics::MetricTypeName(m.type)},
                     {"unit", m.unit}, {"labels", labels}, {"help", m.help}});
    }
    return Json({{"metrics", out}});
  }
  return JsonError(404, "no such API route: " + r.path);
}

}  // namespace ablate::server::http
