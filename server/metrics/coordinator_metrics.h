// The coordinator's Prometheus series (docs/design.md, "Observability"), built from the metric catalog
// (metrics/catalog.h) on a prometheus-cpp registry. server/http serves the text exposition of
// Collect() on ablated's --http port, so Prometheus scrapes the same port as the API.
//
// Most series are derived state: Refresh() reads the scheduler (counters, workers) and the store
// (trials by sweep and state, running attempts' GPUs, trials that started or finished since the
// last refresh) and updates gauges, counters and histograms; the HTTP layer calls it on every
// scrape, so the exposition is never staler than the scrape itself. Scheduler counters become
// Prometheus counters by adding their increase since the previous refresh (monotonic within the
// process; Prometheus handles the reset at a restart). The commit-latency histogram is fed live
// through ObserveCommit, which main.cc hooks into Store::Options::on_commit.
//
// Histograms of trials (queue wait, trial duration) observe each trial once, when a refresh first
// sees its started_at / finished_at at or after Options::observe_since (default: construction time,
// so a restart does not observe history again).
//
// Thread safety: all methods may be called from any thread; Refresh and Exposition serialise on an
// internal mutex; ObserveCommit is lock-free apart from prometheus-cpp's own atomics.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "ablate/status.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace ablate::server::metrics {

class CoordinatorMetrics {
 public:
  struct Options {
    // Trials that started / finished before this unix time are not observed by the histograms.
    // Negative: the construction time (wall clock).
    double observe_since = -1;
  };
  explicit CoordinatorMetrics(Options options);
  CoordinatorMetrics() : CoordinatorMetrics(Options{}) {}

  // Store::Options::on_commit hook.
  void ObserveCommit(double seconds, int ops);

  // Updates every derived series from the scheduler (may be null: no counters, no workers) and the
  // store. Errors: the store's read errors (the series keep their previous values).
  Status Refresh(Store* store, const Scheduler* scheduler);

  // Prometheus text exposition (format 0.0.4) of everything registered.
  std::string Exposition() const;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  prometheus::Family<prometheus::Gauge>& GaugeFamily(std::string_view name);
  prometheus::Family<prometheus::Counter>& CounterFamily(std::string_view name);
  prometheus::Family<prometheus::Histogram>& HistogramFamily(std::string_view name);
  void AddCounter(prometheus::Counter* c, int64_t now, int64_t* last);
  Status RefreshTrialHistograms(Store* store);
  Status RefreshGpuInfo(Store* store);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* commit_latency_;  // owned by registry_
  prometheus::Counter* commits_;

  mutable std::mutex mu_;
  // Trials observed by a histogram: a refresh reads rows whose timestamp is within kLookback_s of
  // the newest one seen (so a row committed late, or a clock step back, is still observed) and
  // skips the ids seen recently.
  struct Seen {
    double watermark = 0;
    std::map<int64_t, double> recent;  // id -> timestamp, pruned past the lookback
  };
  static constexpr double kLookback_s = 300;
  double since_;   // Options::observe_since, resolved
  Seen started_;   // GUARDED_BY(mu_)
  Seen finished_;  // GUARDED_BY(mu_)
  Scheduler::Counters last_{};          // GUARDED_BY(mu_): values already added
  std::map<std::string, prometheus::Counter*> counters_;  // GUARDED_BY(mu_): name -> series
  // (trial, worker, gpu_uuid) -> series of ablate_trial_gpu_info.
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Gauge*>
      gpu_info_;  // GUARDED_BY(mu_)
  std::map<std::string, std::map<std::string, prometheus::Gauge*>> trials_;  // GUARDED_BY(mu_)
};

}  // namespace ablate::server::metrics
