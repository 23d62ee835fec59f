#include "metrics/catalog.h"

namespace ablate::server::metrics {

const std::vector<MetricDef>& Catalog() {
  // Durations: queue waits span seconds to days, trials minutes to days, commits sub-ms to seconds.
  static const std::vector<double> kLongBuckets = {1,    5,     15,    60,    300,   900,
                                                   1800, 3600,  7200,  14400, 43200, 86400};
  static const std::vector<double> kCommitBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,   0.1,   0.25,   0.5,   1,    2.5};
  static const std::vector<MetricDef> kCatalog = {
      {kTrials, MetricType::kGauge, "1", {"sweep", "state"},
       "Trials by sweep and state (queued, running, succeeded, failed, diverged, canceled).", {}},
      {kWorkers, MetricType::kGauge, "1", {"state"},
       "Known workers by state (idle, busy, draining, quarantined, lost).", {}},
      {kAssignments, MetricType::kCounter, "1", {}, "Attempts assigned to workers.", {}},
      {kRetries, MetricType::kCounter, "1", {}, "Trials requeued for another attempt.", {}},
      {kLostAttempts, MetricType::kCounter, "1", {},
       "Attempts whose lease expired (worker died or was cut off).", {}},
      {kFencedReports, MetricType::kCounter, "1", {},
       "Reports from stale attempts that were rejected by attempt number.", {}},
      {kPointsIngested, MetricType::kCounter, "1", {}, "Metric points stored.", {}},
      {kDuplicateReports, MetricType::kCounter, "1", {},
       "Metric reports received again (replays) and not stored twice.", {}},
      {kStoreCommits, MetricType::kCounter, "1", {}, "SQLite write transactions committed.", {}},
      {kStoreQueueDepth, MetricType::kGauge, "1", {},
       "Write operations waiting for the SQLite writer thread.", {}},
      {kQueueWait, MetricType::kHistogram, "seconds", {},
       "Time from a trial's submission to its first assignment.", kLongBuckets},
      {kTrialDuration, MetricType::kHistogram, "seconds", {"state"},
       "Time from a trial's first assignment to its final state, by final state.", kLongBuckets},
      {kCommitLatency, MetricType::kHistogram, "seconds", {},
       "SQLite write transaction latency (BEGIN to COMMIT).", kCommitBuckets},
      {kBuildInfo, MetricType::kGauge, "1", {"version", "component"},
       "Build information; value 1.", {}},
      {kTrialGpuInfo, MetricType::kGauge, "1", {"trial", "worker", "gpu_uuid"},
       "Running trials' GPUs, value 1: joins DCGM series (by GPU UUID) to trials.", {}},
      {kWorkerGpuBusy, MetricType::kGauge, "1", {"worker", "gpu", "gpu_uuid"},
       "1 when the worker runs a trial on this GPU (or CPU slot, gpu=\"cpu<N>\"), else 0.", {}},
      {kWorkerTokensPerSecond, MetricType::kGauge, "1/seconds", {"worker", "trial"},
       "Training throughput of the trials the worker runs (tokens per second, last step).", {}},
  };
  return kCatalog;
}

const MetricDef* FindMetric(std::string_view name) {
  for (const auto& m : Catalog()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace ablate::server::metrics
