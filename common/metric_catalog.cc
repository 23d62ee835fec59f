#include "ablate/metric_catalog.h"

namespace ablate::metrics {

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
      // ablate-worker --metrics.
      {kWorkerBuildInfo, MetricType::kGauge, "1", {"worker", "version"},
       "Build information of ablate-worker; value 1.", {}},
      {kWorkerConnected, MetricType::kGauge, "1", {"worker"},
       "1 while the worker is registered with the coordinator over a live stream, else 0.", {}},
      {kWorkerDraining, MetricType::kGauge, "1", {"worker"},
       "1 once the worker drains (SIGTERM or --drain): it takes no new trials.", {}},
      {kWorkerReconnects, MetricType::kCounter, "1", {"worker"},
       "Registrations with the coordinator after the first one (each follows a lost stream).",
       {}},
      {kWorkerGpuBusy, MetricType::kGauge, "1", {"worker", "gpu", "gpu_uuid"},
       "1 while a trial's trainer runs on this GPU (gpu = its index on the node), else 0.", {}},
      {kWorkerCpuSlots, MetricType::kGauge, "1", {"worker"},
       "CPU trial slots of the worker (--cpu-slots).", {}},
      {kWorkerCpuSlotsBusy, MetricType::kGauge, "1", {"worker"},
       "CPU slots held by running CPU trials.", {}},
      {kWorkerRunningAttempts, MetricType::kGauge, "1", {"worker"},
       "Trainer processes running now.", {}},
      {kWorkerTokensPerSecond, MetricType::kGauge, "1/seconds", {"worker", "slot"},
       "Training throughput (tokens per second, the trainer's last step line) of the trial "
       "running on this slot (its first GPU, gpu<N>, or CPU slot, cpu<N>); absent when idle.",
       {}},
      {kWorkerTrialInfo, MetricType::kGauge, "1", {"worker", "trial", "slot", "gpu_uuid"},
       "Running trials' slots, value 1 (gpu_uuid empty on CPU slots): joins tokens per second "
       "and DCGM series (by GPU UUID) to trials.",
       {}},
      {kWorkerTrialsStarted, MetricType::kCounter, "1", {"worker"},
       "Attempts whose trainer process was started.", {}},
      {kWorkerTrialsFinished, MetricType::kCounter, "1", {"worker", "outcome"},
       "Attempts ended, by outcome: succeeded, diverged, failed, canceled, preempted (checkpointed "
       "and handed back), refused (never started: draining or a refused config), lost (the "
       "trainer outlived a previous worker process).",
       {}},
      {kWorkerBatchesSpooled, MetricType::kCounter, "1", {"worker"},
       "Metric batches closed and written to an attempt's spool for delivery.", {}},
      {kWorkerBatchesAcked, MetricType::kCounter, "1", {"worker"},
       "Metric batches acknowledged by the coordinator (committed to SQLite).", {}},
      {kWorkerBatchesReplayed, MetricType::kCounter, "1", {"worker"},
       "Metric batches sent again after a reconnect or a worker restart (not yet acknowledged).",
       {}},
      {kWorkerUnackedReports, MetricType::kGauge, "1", {"worker"},
       "Reports (metric batches and trial events) waiting for the coordinator's acknowledgement.",
       {}},
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

}  // namespace ablate::metrics
