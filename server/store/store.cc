#include "store/store.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "store/query.h"
#include "store/sqlite_util.h"

namespace ablate::server {
namespace {

using sqlite::Db;
using sqlite::Stmt;
using Json = nlohmann::json;

constexpr int kSchemaVersion = 1;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The schema (store.h and the README document it). Every statement is idempotent.
//
// Layout choices (measured with ablate-store-bench --layouts, see the README):
// - metrics is a WITHOUT ROWID table clustered on (trial_id, name, step, attempt): one B-tree
// insert
//   per point instead of a rowid table plus a secondary index (two inserts), and GetSeries reads
//   one contiguous key range already in step order. No foreign key on metrics: every point is
//   inserted by the same operation that inserts its metric_batches row, which has one (a per-point
//   parent lookup would cost ingest speed for nothing).
// - The UNIQUE(sweep_id, config_hash) index serves "trials by sweep"; trials_by_sweep_state makes
//   the per-state counts of ListSweeps/GetSweep a covering-index scan.
// - attempts' primary key serves "attempts by trial"; it stays a rowid table because log_tail can
//   be a few KiB (WITHOUT ROWID suits small rows only).
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  spec_yaml TEXT NOT NULL DEFAULT '',
  priority INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL DEFAULT 3,
  gpus INTEGER NOT NULL DEFAULT 0,
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  axes_json TEXT NOT NULL DEFAULT '[]',
  created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS trials(
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  config_hash TEXT NOT NULL,
  config_json TEXT NOT NULL,
  axes_json TEXT NOT NULL DEFAULT '{}',
  state TEXT NOT NULL DEFAULT 'queued'
    CHECK(state IN ('queued','running','succeeded','failed','diverged','canceled')),
  priority INTEGER NOT NULL DEFAULT 0,
  order_key INTEGER NOT NULL DEFAULT 0,
  gpus INTEGER NOT NULL DEFAULT 0,
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL DEFAULT 3,
  total_steps INTEGER NOT NULL DEFAULT 0,
  checkpoint_path TEXT NOT NULL DEFAULT '',
  checkpoint_step INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  created_at REAL NOT NULL,
  started_at REAL,
  finished_at REAL,
  UNIQUE(sweep_id, config_hash));
CREATE INDEX IF NOT EXISTS trials_by_sweep_state ON trials(sweep_id, state);
CREATE TABLE IF NOT EXISTS attempts(
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  attempt INTEGER NOT NULL,
  worker_id TEXT NOT NULL DEFAULT '',
  gpus_json TEXT NOT NULL DEFAULT '[]',
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'running'
    CHECK(state IN ('running','succeeded','failed','diverged','lost','canceled')),
  started_at REAL,
  ended_at REAL,
  exit_code INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  log_tail TEXT NOT NULL DEFAULT '',
  checkpoint_path TEXT NOT NULL DEFAULT '',
  checkpoint_step INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(trial_id, attempt));
CREATE INDEX IF NOT EXISTS attempts_running ON attempts(trial_id, attempt) WHERE state = 'running';
CREATE TABLE IF NOT EXISTS metrics(
  trial_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  name TEXT NOT NULL,
  value REAL,
  PRIMARY KEY(trial_id, name, step, attempt)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS metric_batches(
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  attempt INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  points INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(trial_id, attempt, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS latest_metrics(
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  name TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  PRIMARY KEY(trial_id, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workers(
  id TEXT PRIMARY KEY,
  hostname TEXT NOT NULL DEFAULT '',
  gpus_json TEXT NOT NULL DEFAULT '[]',
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT '',
  registered_at REAL,
  last_seen_at REAL,
  failures INTEGER NOT NULL DEFAULT 0,
  quarantined INTEGER NOT NULL DEFAULT 0,
  draining INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS events(
  id INTEGER PRIMARY KEY,
  time REAL NOT NULL,
  kind TEXT NOT NULL,
  sweep_id INTEGER,
  trial_id INTEGER,
  attempt INTEGER,
  worker_id TEXT,
  message TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS events_by_trial ON events(trial_id) WHERE trial_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_by_sweep ON events(sweep_id) WHERE sweep_id IS NOT NULL;
)sql";

bool ValidTrialState(v1::TrialState s) { return ParseTrialState(TrialStateName(s)).has_value(); }
bool ValidAttemptState(const std::string& s) {
  for (const char* v : {"running", "succeeded", "failed", "diverged", "lost", "canceled"}) {
    if (s == v) return true;
  }
  return false;
}

double ReadTime(const Stmt& st, int col) { return st.IsNull(col) ? 0 : st.Real(col); }

std::string IntsToJson(const std::vector<int>& v) { return Json(v).dump(); }

// Trial axes are stored as a JSON object in spec order (nlohmann::ordered_json keeps it).
std::string AxesToJson(const std::vector<std::pair<std::string, std::string>>& axes) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [k, v] : axes) j[k] = v;
  return j.dump();
}

std::vector<std::pair<std::string, std::string>> AxesFromJson(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out.emplace_back(it.key(), it->is_string() ? it->get<std::string>() : it->dump());
  }
  return out;
}

std::vector<std::string> NamesFromJson(const std::string& text) {
  std::vector<std::string> out;
  auto j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const auto& e : j) out.push_back(e.is_string() ? e.get<std::string>() : e.dump());
  return out;
}

std::vector<int> IntsFromJson(const std::string& text) {
  std::vector<int> out;
  auto j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const auto& e : j) {
    if (e.is_number_integer()) out.push_back(e.get<int>());
  }
  return out;
}

// ---- Row readers (column lists and readers kept side by side) -----------------------------------

#define SWEEP_COLS \
  "id, name, spec_yaml, priority, max_attempts, gpus, cpu_slots, axes_json, created_at"
SweepRecord ReadSweep(const Stmt& st) {
  SweepRecord r;
  r.id = st.Int(0);
  r.name = st.Text(1);
  r.spec_yaml = st.Text(2);
  r.priority = static_cast<int>(st.Int(3));
  r.max_attempts = static_cast<int>(st.Int(4));
  r.gpus = static_cast<int>(st.Int(5));
  r.cpu_slots = static_cast<int>(st.Int(6));
  r.axes = NamesFromJson(st.Text(7));
  r.created_at = ReadTime(st, 8);
  return r;
}

#define TRIAL_COLS                                                                             \
  "id, sweep_id, config_hash, config_json, axes_json, state, priority, order_key, gpus, "      \
  "cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, checkpoint_step, reason, " \
  "created_at, started_at, finished_at"
TrialRecord ReadTrial(const Stmt& st) {
  TrialRecord r;
  r.id = st.Int(0);
  r.sweep_id = st.Int(1);
  r.config_hash = st.Text(2);
  r.config_json = st.Text(3);
  r.axes = AxesFromJson(st.Text(4));
  r.state = ParseTrialState(st.Text(5)).value_or(v1::TRIAL_STATE_UNSPECIFIED);
  r.priority = static_cast<int>(st.Int(6));
  r.order_key = st.Int(7);
  r.gpus = static_cast<int>(st.Int(8));
  r.cpu_slots = static_cast<int>(st.Int(9));
  r.attempts = static_cast<int>(st.Int(10));
  r.max_attempts = static_cast<int>(st.Int(11));
  r.total_steps = st.Int(12);
  r.checkpoint_path = st.Text(13);
  r.checkpoint_step = st.Int(14);
  r.reason = st.Text(15);
  r.created_at = ReadTime(st, 16);
  r.started_at = ReadTime(st, 17);
  r.finished_at = ReadTime(st, 18);
  return r;
}

#define ATTEMPT_COLS                                                                  \
  "trial_id, attempt, worker_id, gpus_json, cpu_slots, state, started_at, ended_at, " \
  "exit_code, reason, log_tail, checkpoint_path, checkpoint_step"
AttemptRecord ReadAttempt(const Stmt& st) {
  AttemptRecord r;
  r.trial_id = st.Int(0);
  r.attempt = static_cast<int>(st.Int(1));
  r.worker_id = st.Text(2);
  r.gpu_indices = IntsFromJson(st.Text(3));
  r.cpu_slots = static_cast<int>(st.Int(4));
  r.state = st.Text(5);
  r.started_at = ReadTime(st, 6);
  r.ended_at = ReadTime(st, 7);
  r.exit_code = static_cast<int>(st.Int(8));
  r.reason = st.Text(9);
  r.log_tail = st.Text(10);
  r.checkpoint_path = st.Text(11);
  r.checkpoint_step = st.Int(12);
  return r;
}

#define WORKER_COLS                                                                    \
  "id, hostname, gpus_json, cpu_slots, state, registered_at, last_seen_at, failures, " \
  "quarantined, draining"
WorkerRecord ReadWorker(const Stmt& st) {
  WorkerRecord r;
  r.id = st.Text(0);
  r.hostname = st.Text(1);
  r.gpus_json = st.Text(2);
  r.cpu_slots = static_cast<int>(st.Int(3));
  r.state = st.Text(4);
  r.registered_at = ReadTime(st, 5);
  r.last_seen_at = ReadTime(st, 6);
  r.failures = static_cast<int>(st.Int(7));
  r.quarantined = st.Int(8) != 0;
  r.draining = st.Int(9) != 0;
  return r;
}

// Orders result keys: numbers numerically (8192 before 16384), otherwise as text.
bool ParseNumber(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}
struct KeyLess {
  bool operator()(const std::vector<std::string>& a, const std::vector<std::string>& b) const {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (a[i] == b[i]) continue;
      double x, y;
      bool nx = ParseNumber(a[i], &x), ny = ParseNumber(b[i], &y);
      if (nx && ny && x != y) return x < y;
      if (nx != ny) return nx;  // numbers before text
      return a[i] < b[i];
    }
    return a.size() < b.size();
  }
};

// ---- Write operations ---------------------------------------------------------------------------

class Writer;

// One queued write. Apply runs inside the writer's open transaction and may run twice (after a
// rollback of its batch it is retried alone), so it must reset whatever it records about itself.
class Op {
 public:
  virtual ~Op() = default;
  virtual Status Apply(Writer& w) = 0;
  // After COMMIT (or the failure), on the writer thread, with no store lock held.
  virtual void Finish(const Status& s) = 0;
  virtual size_t Weight() const { return 1; }  // points, for the batch size cap
  virtual int64_t PointsWritten() const { return 0; }
  virtual bool Duplicate() const { return false; }
};

class FnOp final : public Op {
 public:
  FnOp(std::function<Status(Writer&)> apply, Store::Done done)
      : apply_(std::move(apply)), done_(std::move(done)) {}
  Status Apply(Writer& w) override { return apply_(w); }
  void Finish(const Status& s) override {
    if (done_) done_(s);
  }

 private:
  std::function<Status(Writer&)> apply_;
  Store::Done done_;
};

// Statements of the writer connection. Only the writer thread touches it (and Open, before the
// thread starts).
class Writer {
 public:
  Writer(std::unique_ptr<Db> db, const Clock* clock) : db_(std::move(db)), clock_(clock) {}
  Db& db() { return *db_; }
  double Now() const { return clock_->UnixSeconds(); }
  int64_t Changes() const { return sqlite3_changes64(db_->raw()); }

  Status CheckTrial(int64_t trial_id, const std::string& what) {
    ABLATE_ASSIGN_OR_RETURN(Stmt st, db_->Prepare("SELECT 1 FROM trials WHERE id = ?1"));
    st.Bind(1, trial_id);
    ABLATE_ASSIGN_OR_RETURN(bool found, st.Step(what));
    if (!found) return NotFound(what + ": no trial with id " + std::to_string(trial_id));
    return Status::Ok();
  }

  // Inserts (trial, attempt, seq) unless present; *duplicate tells which.
  Status RecordSeq(int64_t trial_id, int attempt, int64_t seq, int64_t points, bool* duplicate,
                   const std::string& what) {
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st, db_->Prepare("INSERT INTO metric_batches(trial_id, attempt, seq, points) "
                              "VALUES(?1, ?2, ?3, ?4) ON CONFLICT DO NOTHING"));
    st.Bind(1, trial_id);
    st.Bind(2, attempt);
    st.Bind(3, seq);
    st.Bind(4, points);
    ABLATE_RETURN_IF_ERROR(st.Run(what));
    *duplicate = Changes() == 0;
    return Status::Ok();
  }

 private:
  std::unique_ptr<Db> db_;
  const Clock* clock_;
};

// AppendMetrics: the hot path, so a dedicated op with its points sorted by (name, step) on the
// caller's thread (inserts then walk each name's key range in order; the last point of each name is
// the batch's latest value of it).
class MetricsOp final : public Op {
 public:
  MetricsOp(int64_t trial_id, int attempt, int64_t seq, std::vector<Point> points,
            Store::MetricsDone done, bool record_only)
      : trial_id_(trial_id),
        attempt_(attempt),
        seq_(seq),
        points_(std::move(points)),
        done_(std::move(done)),
        record_only_(record_only) {
    std::stable_sort(points_.begin(), points_.end(), [](const Point& a, const Point& b) {
      int c = a.name.compare(b.name);
      return c != 0 ? c < 0 : a.step < b.step;
    });
  }

  size_t Weight() const override { return std::max<size_t>(1, points_.size()); }
  int64_t PointsWritten() const override { return duplicate_ ? 0 : points_.size(); }
  bool Duplicate() const override { return duplicate_; }

  Status Apply(Writer& w) override {
    duplicate_ = false;
    const std::string what = (record_only_ ? "record seq (trial " : "append metrics (trial ") +
                             std::to_string(trial_id_) + ", attempt " + std::to_string(attempt_) +
                             ", seq " + std::to_string(seq_) + ")";
    for (size_t i = 0; i < points_.size(); ++i) {
      if (points_[i].name.empty()) return InvalidArgument(what + ": a point has an empty name");
    }
    ABLATE_RETURN_IF_ERROR(w.CheckTrial(trial_id_, what));
    ABLATE_RETURN_IF_ERROR(
        w.RecordSeq(trial_id_, attempt_, seq_, points_.size(), &duplicate_, what));
    if (duplicate_ || points_.empty()) return Status::Ok();

    ABLATE_ASSIGN_OR_RETURN(
        Stmt ins, w.db().Prepare("INSERT OR REPLACE INTO metrics(trial_id, attempt, step, name, "
                                 "value) VALUES(?1, ?2, ?3, ?4, ?5)"));
    ins.Bind(1, trial_id_);
    ins.Bind(2, attempt_);
    for (const Point& p : points_) {
      ins.Bind(3, p.step);
      ins.BindStatic(4, p.name);
      ins.Bind(5, p.value);
      ABLATE_RETURN_IF_ERROR(ins.Run(what));
    }

    ABLATE_ASSIGN_OR_RETURN(
        Stmt up,
        w.db().Prepare("INSERT INTO latest_metrics(trial_id, name, attempt, step, value) "
                       "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(trial_id, name) DO UPDATE SET "
                       "attempt = excluded.attempt, step = excluded.step, value = excluded.value "
                       "WHERE excluded.attempt > latest_metrics.attempt OR "
                       "(excluded.attempt = latest_metrics.attempt AND excluded.step >= "
                       "latest_metrics.step)"));
    up.Bind(1, trial_id_);
    up.Bind(3, attempt_);
    for (size_t i = 0; i < points_.size(); ++i) {
      if (i + 1 < points_.size() && points_[i + 1].name == points_[i].name) continue;
      up.BindStatic(2, points_[i].name);
      up.Bind(4, points_[i].step);
      up.Bind(5, points_[i].value);
      ABLATE_RETURN_IF_ERROR(up.Run(what));
    }
    return Status::Ok();
  }

  void Finish(const Status& s) override {
    if (done_) done_(s, s.ok() && duplicate_);
  }

 private:
  int64_t trial_id_;
  int attempt_;
  int64_t seq_;
  std::vector<Point> points_;
  Store::MetricsDone done_;
  bool record_only_;
  bool duplicate_ = false;
};

// ---- The read pool ------------------------------------------------------------------------------

class ReadPool {
 public:
  class Lease {
   public:
    Lease(ReadPool* pool, std::unique_ptr<Db> db) : pool_(pool), db_(std::move(db)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (db_) pool_->Return(std::move(db_));
    }
    Db& operator*() { return *db_; }
    Db* operator->() { return db_.get(); }

   private:
    ReadPool* pool_;
    std::unique_ptr<Db> db_;
  };

  void Add(std::unique_ptr<Db> db) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(db));
  }
  Lease Borrow() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !free_.empty(); });
    std::unique_ptr<Db> db = std::move(free_.back());
    free_.pop_back();
    return Lease(this, std::move(db));
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    free_.clear();
  }

 private:
  void Return(std::unique_ptr<Db> db) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(std::move(db));
    }
    cv_.notify_one();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Db>> free_;  // GUARDED_BY(mu_)
};

// A short read transaction: one consistent snapshot for the statements of one read function, ended
// on scope exit so it never holds back a checkpoint.
class ReadTxn {
 public:
  explicit ReadTxn(Db& db) : db_(db) { status_ = db_.Exec("BEGIN"); }
  ~ReadTxn() {
    if (status_.ok()) (void)db_.Exec("COMMIT");
  }
  const Status& status() const { return status_; }

 private:
  Db& db_;
  Status status_;
};

bool AllDigits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Opens the writer connection: PRAGMAs, then the schema, idempotently, in one transaction (two
// processes opening at once cannot interleave).
StatusOr<std::unique_ptr<Db>> OpenWriter(const Store::Options& opt) {
  ABLATE_ASSIGN_OR_RETURN(std::unique_ptr<Db> db,
                          Db::Open(opt.path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
  sqlite3_busy_timeout(db->raw(), opt.busy_timeout_ms);
  {
    // journal_mode answers with the mode in effect: anything but "wal" (a read-only directory, a
    // network filesystem) is an error, not a silent downgrade.
    ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("PRAGMA journal_mode=WAL"));
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step("set journal_mode=WAL"));
    std::string mode = row ? st.Text(0) : "";
    if (mode != "wal") {
      return FailedPrecondition("cannot use WAL mode (journal_mode is '" + mode + "')");
    }
  }
  std::string pragmas =
      std::string("PRAGMA synchronous=") + (opt.synchronous_full ? "FULL" : "NORMAL") +
      "; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;"
      " PRAGMA cache_size=-65536; PRAGMA wal_autocheckpoint=" +
      std::to_string(opt.wal_autocheckpoint_pages) + "; PRAGMA journal_size_limit=67108864;";
  ABLATE_RETURN_IF_ERROR(db->Exec(pragmas.c_str()));

  ABLATE_RETURN_IF_ERROR(db->Exec("BEGIN IMMEDIATE"));
  Status schema = [&]() -> Status {
    ABLATE_RETURN_IF_ERROR(db->Exec(kSchema));
    int64_t version = 0;
    {
      ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("SELECT max(version) FROM schema_version"));
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step("read schema_version"));
      if (row && !st.IsNull(0)) version = st.Int(0);
    }
    if (version > kSchemaVersion) {
      return FailedPrecondition("database schema version " + std::to_string(version) +
                                " is newer than this program supports (" +
                                std::to_string(kSchemaVersion) + ")");
    }
    if (version == 0) {
      ABLATE_RETURN_IF_ERROR(db->Exec("INSERT INTO schema_version(version) VALUES(1)"));
    }
    return db->Exec("COMMIT");
  }();
  if (!schema.ok()) {
    (void)db->Exec("ROLLBACK");
    return schema;
  }
  return db;
}

}  // namespace

// ---- Impl ---------------------------------------------------------------------------------------

struct Store::Impl {
  Options opt;
  std::unique_ptr<Writer> writer;  // writer thread only (after Open)
  ReadPool pool;

  std::mutex mu;
  std::condition_variable work_cv;        // queue became non-empty, or stopping
  std::condition_variable space_cv;       // queue has room again
  std::deque<std::unique_ptr<Op>> queue;  // GUARDED_BY(mu)
  bool stopping = false;                  // GUARDED_BY(mu)
  std::thread thread;
  std::thread::id writer_id;

  Status first_error;  // writer thread only: first failure since the last Flush barrier

  std::atomic<int64_t> commits{0}, ops{0}, points{0}, duplicates{0}, queue_depth{0};

  bool OnWriterThread() const { return std::this_thread::get_id() == writer_id; }

  void Enqueue(std::unique_ptr<Op> op) {
    {
      std::unique_lock<std::mutex> lock(mu);
      if (opt.max_queue_ops > 0 && !OnWriterThread()) {
        space_cv.wait(lock, [&] {
          return stopping || queue.size() < static_cast<size_t>(opt.max_queue_ops);
        });
      }
      if (!stopping) {
        queue.push_back(std::move(op));
        queue_depth.store(static_cast<int64_t>(queue.size()), std::memory_order_relaxed);
      }
    }
    if (op) {  // not queued: the store is closing
      op->Finish(FailedPrecondition("store: closed; the write was not applied"));
      return;
    }
    work_cv.notify_one();
  }

  void Run() {
    for (;;) {
      std::vector<std::unique_ptr<Op>> batch;
      {
        std::unique_lock<std::mutex> lock(mu);
        work_cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and everything queued was applied
        size_t weight = 0;
        while (!queue.empty() && batch.size() < static_cast<size_t>(opt.max_batch_ops)) {
          size_t w = queue.front()->Weight();
          if (!batch.empty() && weight + w > static_cast<size_t>(opt.max_batch_points)) break;
          weight += w;
          batch.push_back(std::move(queue.front()));
          queue.pop_front();
        }
        queue_depth.store(static_cast<int64_t>(queue.size()), std::memory_order_relaxed);
      }
      space_cv.notify_all();
      RunBatch(batch);
    }
  }

  void Finish(Op& op, const Status& s) {
    if (!s.ok() && first_error.ok()) first_error = s;
    op.Finish(s);
  }

  void Committed(const std::vector<std::unique_ptr<Op>>& batch, size_t begin, size_t end,
                 std::chrono::steady_clock::time_point t0) {
    commits.fetch_add(1, std::memory_order_relaxed);
    ops.fetch_add(static_cast<int64_t>(end - begin), std::memory_order_relaxed);
    for (size_t i = begin; i < end; ++i) {
      points.fetch_add(batch[i]->PointsWritten(), std::memory_order_relaxed);
      if (batch[i]->Duplicate()) duplicates.fetch_add(1, std::memory_order_relaxed);
    }
    if (opt.on_commit) {
      opt.on_commit(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                    static_cast<int>(end - begin));
    }
  }

  // Applies `batch` in one transaction; on a failure, rolls back and applies each op alone.
  void RunBatch(std::vector<std::unique_ptr<Op>>& batch) {
    Db& db = writer->db();
    auto t0 = std::chrono::steady_clock::now();
    Status begin = db.Exec("BEGIN IMMEDIATE");
    if (!begin.ok()) {
      // Cannot write at all right now (locked by another process past busy_timeout, disk
      // trouble): retrying op by op would only multiply the wait.
      for (auto& op : batch) Finish(*op, begin);
      return;
    }
    Status failed;
    for (auto& op : batch) {
      failed = op->Apply(*writer);
      if (!failed.ok()) break;
    }
    if (failed.ok()) failed = db.Exec("COMMIT");
    if (failed.ok()) {
      Committed(batch, 0, batch.size(), t0);
      for (auto& op : batch) Finish(*op, Status::Ok());
      return;
    }
    (void)db.Exec("ROLLBACK");
    if (batch.size() == 1) {
      Finish(*batch[0], failed);
      return;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      auto t1 = std::chrono::steady_clock::now();
      Status s = db.Exec("BEGIN IMMEDIATE");
      if (s.ok()) {
        s = batch[i]->Apply(*writer);
        if (s.ok()) s = db.Exec("COMMIT");
        if (s.ok()) {
          Committed(batch, i, i + 1, t1);
        } else {
          (void)db.Exec("ROLLBACK");
        }
      }
      Finish(*batch[i], s);
    }
  }

  // ---- Reads ------------------------------------------------------------------------------------

  StatusOr<SweepSummary> SweepWithCounts(Db& db, Stmt& sweep_stmt, const std::string& what) {
    ABLATE_ASSIGN_OR_RETURN(bool found, sweep_stmt.Step(what));
    if (!found) return NotFound(what + ": no such sweep");
    SweepSummary out;
    out.sweep = ReadSweep(sweep_stmt);
    ABLATE_ASSIGN_OR_RETURN(
        Stmt c,
        db.Prepare("SELECT state, count(*) FROM trials WHERE sweep_id = ?1 GROUP BY state"));
    c.Bind(1, out.sweep.id);
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, c.Step(what));
      if (!row) break;
      int n = static_cast<int>(c.Int(1));
      out.counts[c.Text(0)] = n;
      out.total += n;
    }
    return out;
  }

  // Fills worker_id / step / loss / val_loss of `trials` (indexed by id) from two statements that
  // select (trial_id, worker_id, attempt) and (trial_id, name, attempt, step, value).
  Status FillProgress(Stmt& attempts, Stmt& latest, std::vector<TrialStatus>& trials,
                      const std::string& what) {
    std::unordered_map<int64_t, size_t> index;
    index.reserve(trials.size());
    for (size_t i = 0; i < trials.size(); ++i) index[trials[i].trial.id] = i;
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, attempts.Step(what));
      if (!row) break;
      auto it = index.find(attempts.Int(0));
      if (it != index.end()) trials[it->second].worker_id = attempts.Text(1);
    }
    std::vector<int> best_attempt(trials.size(), -1);
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, latest.Step(what));
      if (!row) break;
      auto it = index.find(latest.Int(0));
      if (it == index.end()) continue;
      TrialStatus& t = trials[it->second];
      int attempt = static_cast<int>(latest.Int(2));
      int64_t step = latest.Int(3);
      // The trial's progress is the newest attempt's step (a resumed attempt restarts below the
      // step its lost predecessor reached).
      int& best = best_attempt[it->second];
      if (attempt > best) {
        best = attempt;
        t.step = step;
      } else if (attempt == best) {
        t.step = std::max(t.step, step);
      }
      const char* name = reinterpret_cast<const char*>(sqlite3_column_text(latest.raw(), 1));
      if (std::strcmp(name, "loss") == 0) t.loss = latest.Real(4);
      if (std::strcmp(name, "val_loss") == 0) t.val_loss = latest.Real(4);
    }
    return Status::Ok();
  }
};

// ---- Store --------------------------------------------------------------------------------------

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Store::~Store() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  impl_->space_cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Readers first: the last connection to close checkpoints and removes the WAL.
  impl_->pool.Clear();
  impl_->writer.reset();
}

StatusOr<std::unique_ptr<Store>> Store::Open(const Options& options) {
  Options opt = options;
  if (opt.path.empty()) return InvalidArgument("store: Options::path is empty");
  if (opt.path == ":memory:" || opt.path.rfind("file::memory:", 0) == 0) {
    return InvalidArgument(
        "store: an in-memory database is not supported (WAL and a read pool "
        "need a file); use a temporary file");
  }
  if (opt.max_batch_ops < 1) return InvalidArgument("store: max_batch_ops must be >= 1");
  if (opt.max_batch_points < 1) return InvalidArgument("store: max_batch_points must be >= 1");
  if (opt.read_connections < 1) return InvalidArgument("store: read_connections must be >= 1");
  if (opt.query_max_rows < 1) return InvalidArgument("store: query_max_rows must be >= 1");
  if (opt.clock == nullptr) opt.clock = SystemClock();

  auto wdb_or = OpenWriter(opt);
  if (!wdb_or.ok()) return wdb_or.status().WithPrefix("open " + opt.path);
  std::unique_ptr<Db> wdb = std::move(wdb_or).value();

  auto impl = std::make_unique<Impl>();
  for (int i = 0; i < opt.read_connections; ++i) {
    ABLATE_ASSIGN_OR_RETURN(std::unique_ptr<Db> rdb, Db::Open(opt.path, SQLITE_OPEN_READONLY));
    sqlite3_busy_timeout(rdb->raw(), opt.busy_timeout_ms);
    ABLATE_RETURN_IF_ERROR(
        rdb->Exec("PRAGMA query_only=1; PRAGMA cache_size=-16384;").WithPrefix("open " + opt.path));
    impl->pool.Add(std::move(rdb));
  }
  impl->writer = std::make_unique<Writer>(std::move(wdb), opt.clock);
  impl->opt = std::move(opt);
  Impl* raw = impl.get();
  std::promise<std::thread::id> started;
  auto started_f = started.get_future();
  impl->thread = std::thread([raw, &started] {
    started.set_value(std::this_thread::get_id());
    raw->Run();
  });
  impl->writer_id = started_f.get();
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

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
                       "cpu_slots, axes_json, created_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
                       "ON CONFLICT(name) DO UPDATE SET spec_yaml = excluded.spec_yaml, "
                       "priority = excluded.priority, max_attempts = excluded.max_attempts, "
                       "gpus = excluded.gpus, cpu_slots = excluded.cpu_slots, "
                       "axes_json = excluded.axes_json RETURNING id"));
    up.Bind(1, s.name);
    up.Bind(2, s.spec_yaml);
    up.Bind(3, s.priority);
    up.Bind(4, s.max_attempts);
    up.Bind(5, s.gpus);
    up.Bind(6, s.cpu_slots);
    up.Bind(7, Json(s.axes).dump());
    up.Bind(8, s.created_at);
    ABLATE_ASSIGN_OR_RETURN(bool row, up.Step(what));
    if (!row) return Internal(what + ": upsert returned no id");
    result->sweep_id = up.Int(0);
    up.Reset();

    ABLATE_ASSIGN_OR_RETURN(
        Stmt ins,
        w.db().Prepare(
            "INSERT INTO trials(sweep_id, config_hash, config_json, axes_json, state, priority, "
            "order_key, gpus, cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, "
            "checkpoint_step, reason, created_at, started_at, finished_at) VALUES(?1, ?2, ?3, ?4, "
            "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18) "
            "ON CONFLICT(sweep_id, config_hash) DO NOTHING"));
    const double now = w.Now();
    for (const TrialRecord& t : *shared_trials) {
      ins.BindAll(result->sweep_id, t.config_hash, t.config_json, AxesToJson(t.axes),
                  std::string(TrialStateName(t.state)),
                  t.priority, t.order_key, t.gpus, t.cpu_slots, t.attempts, t.max_attempts,
                  t.total_steps, t.checkpoint_path, t.checkpoint_step, t.reason,
                  t.created_at == 0 ? now : t.created_at, Stmt::Time{t.started_at},
                  Stmt::Time{t.finished_at});
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
                           "failed, diverged or canceled)");
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
          "priority = coalesce(?9, priority), max_attempts = coalesce(?10, max_attempts) "
          "WHERE id = ?1"));
  st.BindAll(u.trial_id, state, u.attempts, u.checkpoint_path, u.checkpoint_step, u.reason,
             u.started_at, u.finished_at, u.priority, u.max_attempts);
  ABLATE_RETURN_IF_ERROR(st.Run(what));
  if (w.Changes() == 0) return NotFound(what + ": no such trial");
  return Status::Ok();
}

Status ApplyInsertAttempt(Writer& w, const AttemptRecord& a) {
  const std::string what =
      "insert attempt " + std::to_string(a.attempt) + " of trial " + std::to_string(a.trial_id);
  if (!ValidAttemptState(a.state)) {
    return InvalidArgument(what + ": unknown state '" + a.state +
                           "' (expected running, succeeded, failed, diverged, lost or canceled)");
  }
  ABLATE_RETURN_IF_ERROR(w.CheckTrial(a.trial_id, what));
  ABLATE_ASSIGN_OR_RETURN(
      Stmt st,
      w.db().Prepare(
          "INSERT INTO attempts(trial_id, attempt, worker_id, gpus_json, cpu_slots, state, "
          "started_at, ended_at, exit_code, reason, log_tail, checkpoint_path, checkpoint_step) "
          "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"));
  st.BindAll(a.trial_id, a.attempt, a.worker_id, IntsToJson(a.gpu_indices), a.cpu_slots, a.state,
             Stmt::Time{a.started_at == 0 ? w.Now() : a.started_at}, Stmt::Time{a.ended_at},
             a.exit_code, a.reason, a.log_tail, a.checkpoint_path, a.checkpoint_step);
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
                             "' (expected running, succeeded, failed, diverged, lost or canceled)");
    }
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st,
        w.db().Prepare(
            "UPDATE attempts SET state = coalesce(?3, state), "
            "ended_at = CASE WHEN ?4 IS NULL THEN ended_at ELSE nullif(?4, 0) END, "
            "exit_code = coalesce(?5, exit_code), reason = coalesce(?6, reason), "
            "log_tail = coalesce(?7, log_tail), checkpoint_path = coalesce(?8, checkpoint_path), "
            "checkpoint_step = coalesce(?9, checkpoint_step) WHERE trial_id = ?1 AND attempt = "
            "?2"));
    st.BindAll(u.trial_id, u.attempt, u.state, u.ended_at, u.exit_code, u.reason, u.log_tail,
               u.checkpoint_path, u.checkpoint_step);
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

void Store::AppendMetrics(int64_t trial_id, int attempt, int64_t seq, std::vector<Point> points,
                          MetricsDone done) {
  impl_->Enqueue(std::make_unique<MetricsOp>(trial_id, attempt, seq, std::move(points),
                                             std::move(done), /*record_only=*/false));
}

void Store::RecordSeq(int64_t trial_id, int attempt, int64_t seq, MetricsDone done) {
  impl_->Enqueue(std::make_unique<MetricsOp>(trial_id, attempt, seq, std::vector<Point>(),
                                             std::move(done), /*record_only=*/true));
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

StatusOr<std::vector<TrialStatus>> Store::GetTrials(int64_t sweep_id) {
  auto db = impl_->pool.Borrow();
  ReadTxn txn(*db);
  ABLATE_RETURN_IF_ERROR(txn.status());
  const std::string what = "get trials of sweep " + std::to_string(sweep_id);
  {
    ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("SELECT 1 FROM sweeps WHERE id = ?1"));
    st.Bind(1, sweep_id);
    ABLATE_ASSIGN_OR_RETURN(bool found, st.Step(what));
    if (!found) return NotFound(what + ": no such sweep");
  }
  std::vector<TrialStatus> out;
  {
    ABLATE_ASSIGN_OR_RETURN(
        Stmt st, db->Prepare("SELECT " TRIAL_COLS " FROM trials WHERE sweep_id = ?1 ORDER BY id"));
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
  // max(attempt) makes SQLite return the worker_id of that row (a documented bare-column rule).
  ABLATE_ASSIGN_OR_RETURN(
      Stmt attempts,
      db->Prepare(
          "SELECT a.trial_id, a.worker_id, max(a.attempt) FROM trials t "
          "JOIN attempts a ON a.trial_id = t.id WHERE t.sweep_id = ?1 GROUP BY a.trial_id"));
  attempts.Bind(1, sweep_id);
  ABLATE_ASSIGN_OR_RETURN(
      Stmt latest,
      db->Prepare("SELECT l.trial_id, l.name, l.attempt, l.step, l.value FROM trials t "
                  "JOIN latest_metrics l ON l.trial_id = t.id WHERE t.sweep_id = ?1"));
  latest.Bind(1, sweep_id);
  ABLATE_RETURN_IF_ERROR(impl_->FillProgress(attempts, latest, out, what));
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
  sql +=
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
    int trials = 0;
    std::vector<double> values;
  };
  std::map<std::vector<std::string>, Group, KeyLess> groups;
  std::vector<std::string> key(by.size());
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, st.Step(what));
    if (!row) break;
    for (size_t i = 0; i < by.size(); ++i) key[i] = st.Text(static_cast<int>(i + 1));
    Group& g = groups[key];
    ++g.trials;
    if (!st.IsNull(0)) g.values.push_back(st.Real(0));
  }
  std::vector<ResultRow> out;
  out.reserve(groups.size());
  for (auto& [k, g] : groups) {
    ResultRow r;
    r.keys = k;
    r.trials = g.trials;
    r.n = static_cast<int>(g.values.size());
    r.mean = r.std = r.min = r.max = kNaN;
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

}  // namespace ablate::server
