// The one metric catalog: every series ablate exports to
// Prometheus, with its type, base unit, labels and help text. The Prometheus exporter builds its
// families from this table, the HTTP API serves it (GET /api/metrics/catalog) for the dashboard,
// and deploy/grafana + deploy/prometheus/alerts.yml use these names.
//
// Conventions: prefix ablate_, base units (seconds, bytes), counters end in _total, info gauges in
// _info (value 1). Labels are bounded: sweep names (sweeps are few), states, worker ids, GPU
// indices and UUIDs, a worker's slots ("gpu0", "cpu1": its GPUs and CPU slots), and the trial ids
// of running trials only. No per-step or per-trial loss series: those live in SQLite.
//
// Two processes export these series: ablated (every name without the ablate_worker_ prefix) and
// ablate-worker --metrics (the ablate_worker_ names, worker/agent/metrics.h). This file and
// catalog.cc depend on nothing else (CMake target ablate::metrics_catalog), so the worker links the
// table without the coordinator's code.
//
// Thread safety: the table is immutable.
#pragma once

#include <string_view>
#include <vector>

namespace ablate::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

struct MetricDef {
  std::string_view name;        // full Prometheus name
  MetricType type;
  std::string_view unit;        // base unit ("seconds", "1" for counts and info)
  std::vector<std::string_view> labels;
  std::string_view help;
  std::vector<double> buckets;  // histograms only
};

// Names, for code that refers to one metric.
inline constexpr std::string_view kTrials = "ablate_trials";
inline constexpr std::string_view kWorkers = "ablate_workers";
inline constexpr std::string_view kAssignments = "ablate_assignments_total";
inline constexpr std::string_view kRetries = "ablate_retries_total";
inline constexpr std::string_view kLostAttempts = "ablate_lost_attempts_total";
inline constexpr std::string_view kFencedReports = "ablate_fenced_reports_total";
inline constexpr std::string_view kPointsIngested = "ablate_metric_points_ingested_total";
inline constexpr std::string_view kDuplicateReports = "ablate_duplicate_reports_total";
inline constexpr std::string_view kStoreCommits = "ablate_store_commits_total";
inline constexpr std::string_view kStoreQueueDepth = "ablate_store_queue_depth";
inline constexpr std::string_view kQueueWait = "ablate_queue_wait_seconds";
inline constexpr std::string_view kTrialDuration = "ablate_trial_duration_seconds";
inline constexpr std::string_view kCommitLatency = "ablate_store_commit_duration_seconds";
inline constexpr std::string_view kBuildInfo = "ablate_build_info";
inline constexpr std::string_view kTrialGpuInfo = "ablate_trial_gpu_info";
// The worker's own series (ablate-worker --metrics). Every one carries the label worker (its id).
inline constexpr std::string_view kWorkerBuildInfo = "ablate_worker_build_info";
inline constexpr std::string_view kWorkerConnected = "ablate_worker_connected";
inline constexpr std::string_view kWorkerDraining = "ablate_worker_draining";
inline constexpr std::string_view kWorkerReconnects = "ablate_worker_reconnects_total";
inline constexpr std::string_view kWorkerGpuBusy = "ablate_worker_gpu_busy";
inline constexpr std::string_view kWorkerCpuSlots = "ablate_worker_cpu_slots";
inline constexpr std::string_view kWorkerCpuSlotsBusy = "ablate_worker_cpu_slots_busy";
inline constexpr std::string_view kWorkerRunningAttempts = "ablate_worker_running_attempts";
inline constexpr std::string_view kWorkerTokensPerSecond = "ablate_worker_tokens_per_second";
inline constexpr std::string_view kWorkerTrialInfo = "ablate_worker_trial_info";
inline constexpr std::string_view kWorkerTrialsStarted = "ablate_worker_trials_started_total";
inline constexpr std::string_view kWorkerTrialsFinished = "ablate_worker_trials_finished_total";
inline constexpr std::string_view kWorkerBatchesSpooled =
    "ablate_worker_metric_batches_spooled_total";
inline constexpr std::string_view kWorkerBatchesAcked = "ablate_worker_metric_batches_acked_total";
inline constexpr std::string_view kWorkerBatchesReplayed =
    "ablate_worker_metric_batches_replayed_total";
inline constexpr std::string_view kWorkerUnackedReports = "ablate_worker_unacked_reports";

// The whole catalog, coordinator series first, then the worker's.
const std::vector<MetricDef>& Catalog();
// The entry named `name`; nullptr when there is none.
const MetricDef* FindMetric(std::string_view name);
const char* MetricTypeName(MetricType type);  // "counter" | "gauge" | "histogram"

}  // namespace ablate::metrics
