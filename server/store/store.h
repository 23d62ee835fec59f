// The coordinator's SQLite store: the only durable state of ablate (docs/design.md, "Storage").
//
// One database file in WAL mode. All writes go through ONE writer thread fed by a queue: each
// operation below is enqueued and applied in a batched transaction (group commit: the writer drains
// whatever is queued, up to Options::max_batch_ops, into one BEGIN IMMEDIATE..COMMIT, with prepared
// statements); an operation's `done` callback runs on the writer thread after its transaction
// committed (or failed, with the error). When an operation of a batch fails, the transaction is
// rolled back and its operations are applied again one per transaction, so one bad operation does
// not fail its neighbours (each gets its own status). Reads use separate connections (a small pool;
// WAL lets them run beside the writer), and never starve checkpoints: the writer runs a PASSIVE
// wal_checkpoint after commits when the WAL grows past Options::wal_autocheckpoint_pages (SQLite's
// autocheckpoint), and read transactions are short (every read function is one statement or one
// short transaction).
//
// Durability: journal_mode=WAL with synchronous=NORMAL (or FULL, Options::synchronous_full). A
// committed transaction survives the process being killed at any moment; with NORMAL a power loss
// or OS crash may lose the last transactions before the next checkpoint (never corrupts the file).
//
// Schema (a public interface: `ablate query` reads it; documented in the README):
//   sweeps(id INTEGER PK, name TEXT UNIQUE, spec_yaml, priority, max_attempts, gpus, cpu_slots,
//          axes_json (JSON array of axis names, spec order), created_at REAL unix s,
//          archived INTEGER 0|1, gpu_share (k: 1/k of a GPU per trial; 1 whole GPUs),
//          early_stop_json (the early_stop rule, '' none))
//   trials(id INTEGER PK, sweep_id, config_hash, config_json, axes_json (JSON object axis -> value
//          as text), state TEXT (queued|running|succeeded|failed|diverged|canceled|stopped), priority,
//          order_key (position in the sweep's seeded order), gpus, cpu_slots, attempts (count of
//          attempts made), max_attempts, total_steps, checkpoint_path, checkpoint_step, reason,
//          created_at, started_at, finished_at (NULL until set), tags_json (JSON array), note,
//          gpu_share, early_stop_exempt INTEGER 0|1;
//          UNIQUE(sweep_id, config_hash))
//   attempts(trial_id, attempt, worker_id, gpus_json, cpu_slots, state TEXT (running|succeeded|
//          failed|diverged|lost|canceled|stopped), started_at, ended_at, exit_code, reason,
//          log_tail, checkpoint_path, checkpoint_step, build_version, build_commit,
//          numerics_version, gpu_share;
//          PK(trial_id, attempt))
//   metrics(trial_id, attempt, step, name TEXT, value REAL;       -- every point, exactly once
//          PK(trial_id, name, step, attempt), WITHOUT ROWID)     -- (a repeated point replaces)
//   metric_batches(trial_id, attempt, seq, points; PK the first three)  -- dedup of reports
//   latest_metrics(trial_id, name, attempt, step, value; PK(trial_id, name))  -- dashboards/status
//   workers(id TEXT PK, hostname, gpus_json, cpu_slots, state, registered_at, last_seen_at,
//          failures, quarantined INTEGER, draining INTEGER)
//   events(id INTEGER PK, time REAL, kind TEXT, sweep_id, trial_id, attempt, worker_id, message)
//   stop_decisions(id INTEGER PK, sweep_id, rule, metric, rung, step, config (axes without the
//          seed), grp (factor values), trials_json, value REAL (the seeds' mean), seed_values_json,
//          compared_json ([[config, value], ...]), threshold REAL, decision (continue|stop),
//          decided_at; UNIQUE(sweep_id, config, rung))  -- every early-stopping judgment
//   schema_version(version)  -- one row; the store upgrades an older database in place when it
//          opens it (schema.cc, kMigrations: one transaction; rows are never changed or lost)
// NaN values are stored as NULL (SQLite has no NaN) and read back as NaN; +-Inf are stored as is.
//
// Thread safety: every method may be called from any thread. Writes are applied in the order they
// were enqueued (one queue, one thread), so a caller that enqueues A then B sees A committed no
// later than B, and done callbacks run in that order. Done callbacks run on the writer thread: they
// must be quick, must not throw, and must not call the synchronous writes (SubmitSweep, Flush),
// which fail with FailedPrecondition there instead of deadlocking.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ablate/clock.h"
#include "ablate/status.h"
#include "proto/trial_state.h"

namespace ablate::server {

// ---- Records ------------------------------------------------------------------------------------

struct SweepRecord {
  int64_t id = 0;  // assigned by the store
  std::string name;
  std::string spec_yaml;
  int priority = 0;
  int max_attempts = 3;
  int gpus = 0;       // per trial
  int cpu_slots = 0;  // per trial (CPU trials: 1)
  int gpu_share = 1;  // k > 1: each trial takes 1/k of one GPU (gpus is then 1)
  std::vector<std::string> axes;
  double created_at = 0;
  bool archived = false;  // hidden from listings unless asked for; kept whole (ArchiveSweep)
  std::string early_stop_json;  // the spec's early_stop rule (sweep/sweep.h EarlyStopRule), or ""
};

struct TrialRecord {
  int64_t id = 0;  // assigned by the store
  int64_t sweep_id = 0;
  std::string config_hash;
  std::string config_json;
  std::vector<std::pair<std::string, std::string>> axes;  // axis -> value text, spec order
  v1::TrialState state = v1::QUEUED;  // stored as its name (proto/trial_state.h)
  int priority = 0;
  int64_t order_key = 0;
  int gpus = 0;
  int cpu_slots = 0;
  int gpu_share = 1;  // as SweepRecord::gpu_share
  int attempts = 0;
  int max_attempts = 3;
  int64_t total_steps = 0;
  std::string checkpoint_path;
  int64_t checkpoint_step = 0;
  std::string reason;
  double created_at = 0, started_at = 0, finished_at = 0;
  std::vector<std::string> tags;  // the user's annotations (AnnotateTrial); sorted, distinct
  std::string note;
  bool early_stop_exempt = false;  // resumed with retry --stopped: early stopping leaves it alone
};

struct AttemptRecord {
  int64_t trial_id = 0;
  int attempt = 0;
  std::string worker_id;
  std::vector<int> gpu_indices;
  int cpu_slots = 0;
  int gpu_share = 1;  // k > 1: it had 1/k of its GPU
  std::string state = "running";
  double started_at = 0, ended_at = 0;
  int exit_code = 0;
  std::string reason;
  std::string log_tail;
  std::string checkpoint_path;
  int64_t checkpoint_step = 0;
  // The build of the trainer that ran the attempt ("" until its start line is reported): the
  // release version, the source commit, and the numerics version of the kernels and the training
  // math (kernels/numerics_version.h), which changes whenever results may change.
  std::string build_version, build_commit, numerics_version;
};

struct WorkerRecord {
  std::string id;
  std::string hostname;
  std::string gpus_json;  // JSON array of {index, uuid, name, memory_bytes}
  int cpu_slots = 0;
  std::string state;  // idle | busy | draining | quarantined | lost
  double registered_at = 0, last_seen_at = 0;
  int failures = 0;
  bool quarantined = false;
  bool draining = false;
};

struct Point {
  int64_t step = 0;
  std::string name;
  double value = 0;
};

// A partial update of a trial: only the fields that are set are written.
struct TrialUpdate {
  int64_t trial_id = 0;
  std::optional<v1::TrialState> state;
  std::optional<int> attempts;
  std::optional<std::string> checkpoint_path;
  std::optional<int64_t> checkpoint_step;
  std::optional<std::string> reason;
  std::optional<double> started_at;
  std::optional<double> finished_at;
  std::optional<int> priority;
  std::optional<int> max_attempts;
  std::optional<bool> early_stop_exempt;
  std::optional<int> gpu_share;
};

// One early-stopping judgment (proto StopDecision; scheduler/early_stop.h). The compared values
// are those of every configuration of the group recorded at the rung so far, in order.
struct StopDecisionRecord {
  int64_t id = 0;  // assigned by the store
  int64_t sweep_id = 0;
  std::string rule, metric;
  int rung = 0;
  int64_t step = 0;
  std::string config, group;
  std::vector<int64_t> trial_ids;
  double value = 0;
  std::vector<double> seed_values;
  std::vector<std::pair<std::string, double>> compared;  // (config, value)
  double threshold = 0;
  std::string decision;  // continue | stop
  double decided_at = 0;
};

// A partial update of an attempt.
struct AttemptUpdate {
  int64_t trial_id = 0;
  int attempt = 0;
  std::optional<std::string> state;
  std::optional<double> ended_at;
  std::optional<int> exit_code;
  std::optional<std::string> reason;
  std::optional<std::string> log_tail;
  std::optional<std::string> checkpoint_path;
  std::optional<int64_t> checkpoint_step;
  std::optional<std::string> build_version, build_commit, numerics_version;
};

// An annotation of a trial: tags added and removed, and the note replaced when set.
struct TrialAnnotation {
  int64_t trial_id = 0;
  std::vector<std::string> add_tags, remove_tags;
  std::optional<std::string> note;
};

// ---- Read results -------------------------------------------------------------------------------

struct SweepSummary {
  SweepRecord sweep;
  std::map<std::string, int> counts;  // trials by state
  int total = 0;
};

// A trial with its latest progress (from latest_metrics: "loss", "val_loss" and the max step).
struct TrialStatus {
  TrialRecord trial;
  std::string worker_id;  // of the latest attempt ("" if none)
  int64_t step = 0;       // latest step with any metric
  double loss = 0;        // NaN when absent
  double val_loss = 0;    // NaN when absent
};

struct ResultRow {
  std::vector<std::string> keys;  // the values of the `by` axes, in `by` order
  // Trials of the group that have the metric (a NaN value counts as missing); diverged and failed
  // trials are counted below, never in n (their last value is not a final one).
  int n = 0;
  int trials = 0;  // trials in the group
  // NaN when n == 0; std (sample, n - 1) is NaN when n < 2.
  double mean = 0, std = 0, min = 0, max = 0;
  // The standard error std / sqrt(n) and the 95% t interval of the mean (df n - 1); NaN when
  // n < 2.
  double se = 0, ci_low = 0, ci_high = 0;
  // Trials of the group in those states (counted, never dropped; stopped: ended early by the
  // sweep's early_stop rule, so their last value is not a final one either).
  int diverged = 0, failed = 0, stopped = 0;
  int builds = 0;  // distinct builds (version, commit, numerics) over the attempts of the trials
                   // with a value; above 1 the group mixes builds
};

struct QueryResult {
  std::vector<std::string> columns;
  // Each cell: kNull for NULL; integers and reals as their SQLite type; text as text; a BLOB as
  // text in SQL literal form (X'0A1B').
  struct Cell {
    enum Kind { kNull, kInteger, kReal, kText } kind = kNull;
    int64_t i = 0;
    double d = 0;
    std::string s;
  };
  std::vector<std::vector<Cell>> rows;
  bool truncated = false;
};

// Everything the scheduler needs to resume after a restart.
struct LoadedState {
  std::vector<SweepRecord> sweeps;
  std::vector<TrialRecord> trials;     // every trial that is queued or running
  std::vector<AttemptRecord> running;  // attempts in state running
  // The stored state of each running attempt's trial (a trial canceled or stopped while its
  // attempt ran has ended already; the attempt has not).
  std::map<int64_t, v1::TrialState> running_trial_state;
  std::vector<WorkerRecord> workers;
  // For every running attempt: (trial_id, attempt) -> the highest stored seq (0 when none). The
  // full set of stored seqs stays in metric_batches, where AppendMetrics/RecordSeq check it.
  std::map<std::pair<int64_t, int>, int64_t> max_seq;
};

// ---- The store ----------------------------------------------------------------------------------

// What Store::GetTrials reads: progress = false leaves worker_id, step, loss and val_loss empty
// (readers of axes and states); config_json = false leaves TrialRecord::config_json empty
// (listings that do not show it: a resolved config is ~1 KB per trial).
struct TrialsRead {
  bool progress = true;
  bool config_json = true;
};

class Store {
 public:
  struct Options {
    std::string path;          // database file; ":memory:" is not supported (WAL + pool)
    int max_batch_ops = 4096;  // operations per transaction at most
    int wal_autocheckpoint_pages = 4000;
    int busy_timeout_ms = 5000;
    int query_timeout_ms = 5000;  // Query(): cancelled past this
    int query_max_rows = 10000;   // Query(): rows returned at most (truncated flag beyond)
    size_t query_max_result_bytes = size_t(48) << 20;  // Query(): all cells together at most
    int read_connections = 4;
    int max_batch_points = 200000;  // points per transaction at most (an op is never split)
    int max_queue_ops = 100000;     // enqueuers block while the queue holds this many (the
                                    // writer thread itself never blocks); 0 = unbounded
    bool synchronous_full = false;  // PRAGMA synchronous=FULL (fsync per commit) vs NORMAL
    // The wall clock (UnixSeconds) of created_at / event times; null: SystemClock(). Tests inject
    // a FakeClock. Not owned; must outlive the store.
    const Clock* clock = nullptr;
    // Called on the writer thread after every commit: seconds from BEGIN to COMMIT and the number
    // of operations it carried (the Prometheus commit-latency histogram hooks in here).
    std::function<void(double seconds, int ops)> on_commit;
  };
  using Done = std::function<void(const Status&)>;

  // Opens (creating if needed) the database, applies the schema (idempotent; a database written by
  // a newer schema version is refused with FailedPrecondition), starts the writer thread. Errors:
  // InvalidArgument (bad options), FailedPrecondition (cannot open/create), DataLoss (not a
  // database or corrupt).
  static StatusOr<std::unique_ptr<Store>> Open(const Options& options);
  // Applies everything queued, then stops the writer and closes the connections.
  ~Store();

  // ---- Writes (asynchronous unless stated) ------------------------------------------------------

  // Creates the sweep (matched by name: an existing sweep keeps its id, spec and settings are
  // updated) and inserts the trials whose (sweep, config_hash) is not there yet. Synchronous:
  // returns after the commit with the sweep id and the ids of the NEW trials (the records are
  // filled in).
  struct SubmitResult {
    int64_t sweep_id = 0;
    std::vector<TrialRecord> inserted;  // with ids
    int existing = 0;                   // trials already present
  };
  StatusOr<SubmitResult> SubmitSweep(SweepRecord sweep, std::vector<TrialRecord> trials);

  // Errors passed to `done`: NotFound (no such trial / attempt), AlreadyExists (InsertAttempt of an
  // existing attempt), InvalidArgument (unknown state, empty worker id), or a storage error.
  void UpdateTrial(const TrialUpdate& update, Done done = nullptr);
  void InsertAttempt(const AttemptRecord& attempt, Done done = nullptr);
  // InsertAttempt and UpdateTrial in one operation (one transaction): the start of an attempt.
  void StartAttempt(const AttemptRecord& attempt, const TrialUpdate& update, Done done = nullptr);
  void UpdateAttempt(const AttemptUpdate& update, Done done = nullptr);
  void UpsertWorker(const WorkerRecord& worker, Done done = nullptr);
  // Synchronous. Tags are 1..64 characters of [A-Za-z0-9._:/-]; a note at most 4 KiB of UTF-8.
  // Returns the trial's tags and note after the change. Errors: NotFound, InvalidArgument.
  StatusOr<TrialRecord> AnnotateTrial(const TrialAnnotation& annotation);
  // Synchronous: hides (or shows again) a sweep in listings; its trials and metrics stay.
  Status ArchiveSweep(int64_t sweep_id, bool archived);
  void AddEvent(const std::string& kind, int64_t sweep_id, int64_t trial_id, int attempt,
                const std::string& worker_id, const std::string& message);
  // An early-stopping judgment and, for a stop, the updates that end its trials (state stopped),
  // in one transaction. AlreadyExists when the sweep has a judgment of that (config, rung).
  void RecordStopDecision(const StopDecisionRecord& decision, std::vector<TrialUpdate> updates,
                          Done done = nullptr);

  // Stores one report of an attempt's metrics exactly once: when (trial_id, attempt, seq) is new,
  // inserts the points into metrics, updates latest_metrics and records the seq, in one
  // transaction; when it was stored before, writes nothing. `done(status, duplicate)` runs after
  // the commit. latest_metrics: a point replaces the stored latest value of its name when its
  // attempt is newer, or the attempt is the same and its step is >= the stored step (so a retried
  // attempt that resumed from an earlier checkpoint shows its own progress, as GetSeries does).
  // Errors: NotFound (no such trial), InvalidArgument (a point with an empty name).
  using MetricsDone = std::function<void(const Status&, bool duplicate)>;
  void AppendMetrics(int64_t trial_id, int attempt, int64_t seq, std::vector<Point> points,
                     MetricsDone done);
  // Records a report seq that carried no metrics (a trial event) so a replay is recognised.
  // duplicate == true when it was recorded before.
  void RecordSeq(int64_t trial_id, int attempt, int64_t seq, MetricsDone done);

  // Runs `done` (on the writer thread) once every operation enqueued before it has committed and
  // its callback has run; writes nothing.
  void Barrier(Done done);

  // Blocks until every operation enqueued before the call has committed. Returns the first error
  // of the operations applied since the previous Flush (by any caller), if any.
  Status Flush();

  // ---- Reads (synchronous, any thread) ----------------------------------------------------------
  StatusOr<LoadedState> LoadState();
  // Every sweep, archived ones too (SweepRecord::archived says which; listings filter).
  StatusOr<std::vector<SweepSummary>> ListSweeps();
  // By name, or by numeric id when `name_or_id` is all digits. NotFound with the name otherwise.
  StatusOr<SweepSummary> GetSweep(const std::string& name_or_id);
  // Every trial of the sweep, by id. NotFound when the sweep does not exist.
  // With TrialsRead (above the class): what a listing needs.
  StatusOr<std::vector<TrialStatus>> GetTrials(int64_t sweep_id) {
    return GetTrials(sweep_id, TrialsRead());
  }
  StatusOr<std::vector<TrialStatus>> GetTrials(int64_t sweep_id, TrialsRead read);
  StatusOr<TrialStatus> GetTrial(int64_t trial_id);
  StatusOr<std::vector<AttemptRecord>> GetAttempts(int64_t trial_id);
  // The sweep's early-stopping judgments in the order they were taken (by id).
  StatusOr<std::vector<StopDecisionRecord>> GetStopDecisions(int64_t sweep_id);
  StatusOr<std::vector<Point>> GetLatestMetrics(int64_t trial_id);
  StatusOr<std::vector<WorkerRecord>> ListWorkers();
  // A metric's series of one trial (all attempts, by step; for a step reported by several attempts
  // the latest attempt wins).
  StatusOr<std::vector<Point>> GetSeries(int64_t trial_id, const std::string& name);
  // The ablation table: for every trial of the sweep, the latest value of `metric`, grouped by the
  // values of the axes in `by` (every trial in a group shares them), with mean, sample std, min,
  // max over the trials that have the metric. Rows sorted by keys (numbers numerically). Errors:
  // NotFound (no such sweep), InvalidArgument (an axis in `by` that the sweep does not have; the
  // message names it and lists the sweep's axes).
  StatusOr<std::vector<ResultRow>> Results(int64_t sweep_id, const std::string& metric,
                                           const std::vector<std::string>& by);
  // The latest value of `metric` of every trial of the sweep that has one: (trial id, value),
  // by trial id. (The comparison of arms reads these beside GetTrials' axes and states.)
  StatusOr<std::vector<std::pair<int64_t, double>>> LatestValues(int64_t sweep_id,
                                                                 const std::string& metric);
  // For exports (one statement each, every trial of the sweep at once; NotFound for no sweep):
  // the latest value of every metric of every trial, by trial id then name (NaN values included);
  struct TrialMetric {
    int64_t trial_id = 0;
    std::string name;
    double value = 0;
  };
  StatusOr<std::vector<TrialMetric>> SweepLatestMetrics(int64_t sweep_id);
  // the build of every attempt, by trial id then attempt;
  struct AttemptBuild {
    int64_t trial_id = 0;
    int attempt = 0;
    std::string build_version, build_commit, numerics_version;
    bool reported() const {
      return !build_version.empty() || !build_commit.empty() || !numerics_version.empty();
    }
    // "version|commit|numerics": one build, as Results counts them too.
    std::string Key() const { return build_version + "|" + build_commit + "|" + numerics_version; }
  };
  StatusOr<std::vector<AttemptBuild>> SweepBuilds(int64_t sweep_id);
  // every point of the named metrics (GetSeries' rule per trial: one point per step, the latest
  // attempt's), by trial id, name, step.
  struct TrialPoint {
    int64_t trial_id = 0;
    std::string name;
    int64_t step = 0;
    double value = 0;
  };
  StatusOr<std::vector<TrialPoint>> SweepSeries(int64_t sweep_id,
                                                const std::vector<std::string>& names);

  // Read-only SQL: a separate connection opened read-only (SQLITE_OPEN_READONLY), an authorizer
  // that allows only SELECT and reads (no ATTACH, no PRAGMA, no functions that load
  // extensions), a time limit (progress handler) and a row limit (max_rows, 0 = the option's).
  // A statement that is not allowed fails with PermissionDenied naming what was refused ("query:
  // only SELECT statements are allowed (refused: INSERT)"); more than one statement or bad SQL with
  // InvalidArgument; the time limit with DeadlineExceeded ("query: time limit of 5000 ms
  // exceeded").
  StatusOr<QueryResult> Query(const std::string& sql, int max_rows = 0);

  // Counters for observability (issue 6) and benchmarks.
  struct Stats {
    int64_t commits = 0;
    int64_t ops = 0;
    int64_t points_inserted = 0;
    int64_t duplicate_batches = 0;
    int64_t queue_depth = 0;
  };
  Stats stats() const;

 private:
  struct Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ablate::server
