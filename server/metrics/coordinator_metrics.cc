#include "metrics/coordinator_metrics.h"

#include <prometheus/text_serializer.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "ablate/metric_catalog.h"
#include "proto/trial_state.h"

namespace ablate::server::metrics {

namespace catalog = ::ablate::metrics;
namespace {

const char* const kWorkerStates[] = {"idle", "busy", "draining", "quarantined", "lost"};

double WallNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const catalog::MetricDef& Def(std::string_view name) {
  const catalog::MetricDef* d = catalog::FindMetric(name);
  if (!d) std::abort();  // a name missing from the catalog is a programming error
  return *d;
}

double CellDouble(const QueryResult::Cell& c) {
  if (c.kind == QueryResult::Cell::kInteger) return double(c.i);
  if (c.kind == QueryResult::Cell::kReal) return c.d;
  return NAN;
}

std::string Fixed(double v) {  // SQL literal of a timestamp, exact enough for a watermark
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(Options options)
    : registry_(std::make_shared<prometheus::Registry>()) {
  double since = options.observe_since < 0 ? WallNow() : options.observe_since;
  since_ = started_.watermark = finished_.watermark = since;
  commit_latency_ = &HistogramFamily(catalog::kCommitLatency)
                         .Add({}, prometheus::Histogram::BucketBoundaries(
                                      Def(catalog::kCommitLatency).buckets));
  commits_ = &CounterFamily(catalog::kStoreCommits).Add({});
  for (std::string_view n : {catalog::kAssignments, catalog::kRetries, catalog::kLostAttempts, catalog::kFencedReports,
                             catalog::kPointsIngested, catalog::kDuplicateReports}) {
    counters_[std::string(n)] = &CounterFamily(n).Add({});
  }
  GaugeFamily(catalog::kBuildInfo).Add({{"version", ABLATE_VERSION}, {"component", "ablated"}}).Set(1);
  auto& workers = GaugeFamily(catalog::kWorkers);
  for (const char* s : kWorkerStates) workers.Add({{"state", s}});
  GaugeFamily(catalog::kStoreQueueDepth).Add({});
  GaugeFamily(catalog::kTrials);
  GaugeFamily(catalog::kTrialGpuInfo);
  HistogramFamily(catalog::kQueueWait).Add({}, prometheus::Histogram::BucketBoundaries(
                                          Def(catalog::kQueueWait).buckets));
  HistogramFamily(catalog::kTrialDuration);
}

prometheus::Family<prometheus::Gauge>& CoordinatorMetrics::GaugeFamily(std::string_view name) {
  const catalog::MetricDef& d = Def(name);
  return prometheus::BuildGauge().Name(std::string(d.name)).Help(std::string(d.help))
      .Register(*registry_);  // prometheus-cpp returns the existing family on a second call
}
prometheus::Family<prometheus::Counter>& CoordinatorMetrics::CounterFamily(std::string_view name) {
  const catalog::MetricDef& d = Def(name);
  // prometheus-cpp appends nothing: the catalog name already ends in _total.
  return prometheus::BuildCounter().Name(std::string(d.name)).Help(std::string(d.help))
      .Register(*registry_);
}
prometheus::Family<prometheus::Histogram>& CoordinatorMetrics::HistogramFamily(
    std::string_view name) {
  const catalog::MetricDef& d = Def(name);
  return prometheus::BuildHistogram().Name(std::string(d.name)).Help(std::string(d.help))
      .Register(*registry_);
}

void CoordinatorMetrics::ObserveCommit(double seconds, int ops) {
  commit_latency_->Observe(seconds);
  commits_->Increment();
}

void CoordinatorMetrics::AddCounter(prometheus::Counter* c, int64_t now, int64_t* last) {
  if (now > *last) c->Increment(double(now - *last));
  *last = std::max(*last, now);
}

Status CoordinatorMetrics::Refresh(Store* store, const Scheduler* scheduler) {
  std::lock_guard<std::mutex> lock(mu_);
  if (scheduler) {
    Scheduler::Counters c = scheduler->counters();
    AddCounter(counters_[std::string(catalog::kAssignments)], c.assignments, &last_.assignments);
    AddCounter(counters_[std::string(catalog::kRetries)], c.retries, &last_.retries);
    AddCounter(counters_[std::string(catalog::kLostAttempts)], c.lost_attempts, &last_.lost_attempts);
    AddCounter(counters_[std::string(catalog::kFencedReports)], c.fenced_reports, &last_.fenced_reports);
    AddCounter(counters_[std::string(catalog::kPointsIngested)], c.points_ingested,
               &last_.points_ingested);
    AddCounter(counters_[std::string(catalog::kDuplicateReports)], c.duplicate_reports,
               &last_.duplicate_reports);
    std::map<std::string, int> by_state;
    for (const auto& w : scheduler->Workers()) by_state[w.state()]++;
    auto& workers = GaugeFamily(catalog::kWorkers);
    for (const char* s : kWorkerStates) workers.Add({{"state", s}}).Set(by_state[s]);
  }
  GaugeFamily(catalog::kStoreQueueDepth).Add({}).Set(double(store->stats().queue_depth));

  ABLATE_ASSIGN_OR_RETURN(auto sweeps, store->ListSweeps());
  auto& trials = GaugeFamily(catalog::kTrials);
  for (const auto& s : sweeps) {
    auto& series = trials_[s.sweep.name];
    for (v1::TrialState trial_state : kTrialStates) {
      const std::string state(TrialStateName(trial_state));
      prometheus::Gauge*& g = series[state];
      if (!g) g = &trials.Add({{"sweep", s.sweep.name}, {"state", state}});
      auto it = s.counts.find(state);
      g->Set(it == s.counts.end() ? 0 : it->second);
    }
  }
  ABLATE_RETURN_IF_ERROR(RefreshTrialHistograms(store));
  return RefreshGpuInfo(store);
}

Status CoordinatorMetrics::RefreshTrialHistograms(Store* store) {
  // Only rows near or past the watermarks are read, so a refresh costs O(trials that changed).
  // Returns true when the row (id at time `at`) was not observed before, and records it.
  auto fresh = [](Seen& seen, int64_t id, double at) {
    if (at < seen.watermark - kLookback_s || seen.recent.count(id)) return false;
    seen.recent[id] = at;
    seen.watermark = std::max(seen.watermark, at);
    return true;
  };
  auto prune = [](Seen& seen) {
    for (auto it = seen.recent.begin(); it != seen.recent.end();) {
      it = it->second < seen.watermark - kLookback_s ? seen.recent.erase(it) : std::next(it);
    }
  };
  ABLATE_ASSIGN_OR_RETURN(
      QueryResult started,
      store->Query("SELECT id, started_at - created_at, started_at FROM trials WHERE started_at "
                   "IS NOT NULL AND started_at >= " + Fixed(started_.watermark - kLookback_s),
                   1 << 30));
  auto& wait = HistogramFamily(catalog::kQueueWait).Add(
      {}, prometheus::Histogram::BucketBoundaries(Def(catalog::kQueueWait).buckets));
  for (const auto& row : started.rows) {
    double at = CellDouble(row[2]);
    if (at < since_) continue;  // history from before this process
    if (fresh(started_, row[0].i, at)) wait.Observe(std::max(0.0, CellDouble(row[1])));
  }
  prune(started_);
  ABLATE_ASSIGN_OR_RETURN(
      QueryResult finished,
      store->Query("SELECT id, finished_at - started_at, finished_at, state FROM trials WHERE "
                   "finished_at IS NOT NULL AND started_at IS NOT NULL AND state IN "
                   "('succeeded','failed','diverged','canceled','stopped') AND finished_at >= " +
                       Fixed(finished_.watermark - kLookback_s),
                   1 << 30));
  auto& duration = HistogramFamily(catalog::kTrialDuration);
  for (const auto& row : finished.rows) {
    double at = CellDouble(row[2]);
    if (at < since_) continue;
    if (!fresh(finished_, row[0].i, at)) continue;
    duration
        .Add({{"state", row[3].s}},
             prometheus::Histogram::BucketBoundaries(Def(catalog::kTrialDuration).buckets))
        .Observe(std::max(0.0, CellDouble(row[1])));
  }
  prune(finished_);
  return Status::Ok();
}

Status CoordinatorMetrics::RefreshGpuInfo(Store* store) {
  // The latest attempt of every running trial, with the GPU indices it holds; the UUIDs come from
  // the worker's registered GPU list.
  ABLATE_ASSIGN_OR_RETURN(
      QueryResult rows,
      store->Query("SELECT a.trial_id, a.worker_id, a.gpus_json, w.gpus_json FROM attempts a "
                   "JOIN trials t ON t.id = a.trial_id AND t.attempts = a.attempt "
                   "LEFT JOIN workers w ON w.id = a.worker_id "
                   "WHERE t.state = 'running' AND a.state = 'running'",
                   1 << 30));
  std::set<std::tuple<std::string, std::string, std::string>> now;
  for (const auto& row : rows.rows) {
    std::string trial = std::to_string(row[0].i), worker = row[1].s;
    auto held = nlohmann::json::parse(row[2].s, nullptr, false);
    auto gpus = nlohmann::json::parse(row[3].s, nullptr, false);
    if (!held.is_array()) continue;
    for (const auto& idx : held) {
      if (!idx.is_number_integer()) continue;
      std::string uuid;
      if (gpus.is_array()) {
        for (const auto& g : gpus) {
          if (g.is_object() && g.value("index", -1) == idx.get<int>()) {
            uuid = g.value("uuid", "");
          }
        }
      }
      if (uuid.empty()) uuid = "index:" + idx.dump();  // an unknown UUID still shows the trial
      now.insert({trial, worker, uuid});
    }
  }
  auto& fam = GaugeFamily(catalog::kTrialGpuInfo);
  for (auto it = gpu_info_.begin(); it != gpu_info_.end();) {
    if (now.count(it->first)) {
      ++it;
    } else {
      fam.Remove(it->second);
      it = gpu_info_.erase(it);
    }
  }
  for (const auto& key : now) {
    if (gpu_info_.count(key)) continue;
    auto& g = fam.Add({{"trial", std::get<0>(key)}, {"worker", std::get<1>(key)},
                       {"gpu_uuid", std::get<2>(key)}});
    g.Set(1);
    gpu_info_[key] = &g;
  }
  return Status::Ok();
}

std::string CoordinatorMetrics::Exposition() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace ablate::server::metrics
