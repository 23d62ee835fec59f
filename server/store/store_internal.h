// The store's internals, shared by its files (store.cc: open and close; schema.cc: the tables;
// writer.cc: the writer thread's operations; reads.cc: the queries). Not part of the interface:
// include only from server/store/*.cc.
#pragma once

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
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>
#include "store/query.h"
#include "store/sqlite_util.h"

#include "ablate/axis_value.h"
#include "ablate/utf8.h"

namespace ablate::server {
namespace store_internal {

using sqlite::Db;
using sqlite::Stmt;
using Json = nlohmann::json;

constexpr int kSchemaVersion = 3;
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();


// A number for a JSON document: NaN and +-Inf (which JSON cannot hold) as null.
inline Json JsonNumber(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }
inline double NumberFromJson(const Json& v) { return v.is_number() ? v.get<double>() : kNaN; }

inline double ReadTime(const Stmt& st, int col) { return st.IsNull(col) ? 0 : st.Real(col); }

inline std::string IntsToJson(const std::vector<int>& v) { return Json(v).dump(); }

// Trial axes are stored as a JSON object in spec order (nlohmann::ordered_json keeps it).
inline std::string AxesToJson(const std::vector<std::pair<std::string, std::string>>& axes) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& [k, v] : axes) j[k] = v;
  return j.dump();
}

// The common case of axes_json, {"key":"value",...} with plain strings (no escapes), read without
// building a JSON tree (status reads it for every trial of a sweep); false for anything else.
inline bool FlatStringObject(const std::string& text,
                             std::vector<std::pair<std::string, std::string>>* out) {
  size_t i = 0;
  const size_t n = text.size();
  auto str = [&](std::string* s) {
    if (i >= n || text[i] != '"') return false;
    const size_t end = text.find_first_of("\"\\", i + 1);
    if (end == std::string::npos || text[end] != '"') return false;
    s->assign(text, i + 1, end - i - 1);
    i = end + 1;
    return true;
  };
  if (n < 2 || text[0] != '{') return false;
  i = 1;
  if (text[i] == '}') return i + 1 == n;
  for (;;) {
    std::string k, v;
    if (!str(&k) || i >= n || text[i++] != ':' || !str(&v)) return false;
    out->emplace_back(std::move(k), std::move(v));
    if (i >= n) return false;
    const char c = text[i++];
    if (c == '}') return i == n;
    if (c != ',') return false;
  }
}

inline std::vector<std::pair<std::string, std::string>> AxesFromJson(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  if (FlatStringObject(text, &out)) return out;
  out.clear();
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out.emplace_back(it.key(), it->is_string() ? it->get<std::string>() : it->dump());
  }
  return out;
}

inline std::vector<std::string> NamesFromJson(const std::string& text) {
  std::vector<std::string> out;
  if (text == "[]" || text.empty()) return out;  // most trials' tags: no parse
  auto j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return out;
  for (const auto& e : j) out.push_back(e.is_string() ? e.get<std::string>() : e.dump());
  return out;
}

inline std::vector<int> IntsFromJson(const std::string& text) {
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
  "id, name, spec_yaml, priority, max_attempts, gpus, cpu_slots, axes_json, created_at, archived, " \
  "gpu_share, early_stop_json"
inline SweepRecord ReadSweep(const Stmt& st) {
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
  r.archived = st.Int(9) != 0;
  r.gpu_share = std::max(1, static_cast<int>(st.Int(10)));
  r.early_stop_json = st.Text(11);
  return r;
}

#define TRIAL_COLS                                                                             \
  "id, sweep_id, config_hash, config_json, axes_json, state, priority, order_key, gpus, "      \
  "cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, checkpoint_step, reason, " \
  "created_at, started_at, finished_at, tags_json, note, gpu_share, early_stop_exempt"
// The same columns with config_json read as '' (ReadTrial reads either).
#define TRIAL_COLS_NO_CONFIG                                                                   \
  "id, sweep_id, config_hash, '', axes_json, state, priority, order_key, gpus, "              \
  "cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, checkpoint_step, reason, " \
  "created_at, started_at, finished_at, tags_json, note, gpu_share, early_stop_exempt"
inline TrialRecord ReadTrial(const Stmt& st) {
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
  r.tags = NamesFromJson(st.Text(19));
  r.note = st.Text(20);
  r.gpu_share = std::max(1, static_cast<int>(st.Int(21)));
  r.early_stop_exempt = st.Int(22) != 0;
  return r;
}

#define ATTEMPT_COLS                                                                  \
  "trial_id, attempt, worker_id, gpus_json, cpu_slots, state, started_at, ended_at, " \
  "exit_code, reason, log_tail, checkpoint_path, checkpoint_step, build_version, build_commit, " \
  "numerics_version, gpu_share"
inline AttemptRecord ReadAttempt(const Stmt& st) {
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
  r.build_version = st.Text(13);
  r.build_commit = st.Text(14);
  r.numerics_version = st.Text(15);
  r.gpu_share = std::max(1, static_cast<int>(st.Int(16)));
  return r;
}

#define WORKER_COLS                                                                    \
  "id, hostname, gpus_json, cpu_slots, state, registered_at, last_seen_at, failures, " \
  "quarantined, draining"
inline WorkerRecord ReadWorker(const Stmt& st) {
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

// Orders result keys: each key by AxisValueLess (ablate/axis_value.h), then the shorter first.
struct KeyLess {
  bool operator()(const std::vector<std::string>& a, const std::vector<std::string>& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), AxisValueLess);
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
  // A connection if one is free now (never waits: a reader that already holds one must not wait
  // for a second, or readers could hold every connection and wait for each other).
  std::optional<Lease> TryBorrow() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) return std::nullopt;
    std::unique_ptr<Db> db = std::move(free_.back());
    free_.pop_back();
    return Lease(this, std::move(db));
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

inline bool AllDigits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// ---- Schema (schema.cc) -------------------------------------------------------------------------

bool ValidTrialState(v1::TrialState s);
bool ValidAttemptState(const std::string& s);

// Opens the writer connection: PRAGMAs, then the schema, idempotently, in one transaction (two
// processes opening at once cannot interleave).
StatusOr<std::unique_ptr<sqlite::Db>> OpenWriter(const Store::Options& opt);

}  // namespace store_internal

using namespace store_internal;  // NOLINT: the store's own files only

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

  // Applies `apply` on the writer thread and waits for its commit (the synchronous writes; never
  // from the writer thread itself).
  Status RunSync(std::function<Status(Writer&)> apply) {
    auto promise = std::make_shared<std::promise<Status>>();
    auto future = promise->get_future();
    Enqueue(std::make_unique<FnOp>(std::move(apply),
                                   [promise](const Status& s) { promise->set_value(s); }));
    return future.get();
  }

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

  // The progress of trials (worker_id, step, loss, val_loss), read by two statements that select
  // (trial_id, worker_id, attempt) and (trial_id, name, attempt, step, value), then applied to the
  // trials by id. Reading and applying are apart so that a sweep's progress can be read on a second
  // connection while the first reads the trials. (Streaming the rows is 5x faster than a GROUP BY
  // in SQLite here, which needs a temporary B-tree.)
  struct ProgressRow {
    int64_t trial_id = 0, step = 0;
    int attempt = 0;
    int kind = 0;  // 1 loss, 2 val_loss, 0 any other name
    double value = 0;
  };
  struct Progress {
    std::vector<std::pair<int64_t, std::string>> workers;  // of the latest attempt
    std::vector<ProgressRow> latest;
  };
  static StatusOr<Progress> ReadProgress(Stmt& attempts, Stmt& latest, const std::string& what) {
    Progress p;
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, attempts.Step(what));
      if (!row) break;
      p.workers.emplace_back(attempts.Int(0), attempts.Text(1));
    }
    for (;;) {
      ABLATE_ASSIGN_OR_RETURN(bool row, latest.Step(what));
      if (!row) break;
      const char* name = reinterpret_cast<const char*>(sqlite3_column_text(latest.raw(), 1));
      p.latest.push_back({latest.Int(0), latest.Int(3), static_cast<int>(latest.Int(2)),
                          std::strcmp(name, "loss") == 0       ? 1
                          : std::strcmp(name, "val_loss") == 0 ? 2
                                                               : 0,
                          latest.Real(4)});
    }
    return p;
  }
  static void ApplyProgress(const Progress& p, std::vector<TrialStatus>& trials) {
    std::unordered_map<int64_t, size_t> index;
    index.reserve(trials.size());
    for (size_t i = 0; i < trials.size(); ++i) index[trials[i].trial.id] = i;
    for (const auto& [id, worker] : p.workers) {
      auto it = index.find(id);
      if (it != index.end()) trials[it->second].worker_id = worker;
    }
    std::vector<int> best_attempt(trials.size(), -1);
    for (const ProgressRow& r : p.latest) {
      auto it = index.find(r.trial_id);
      if (it == index.end()) continue;  // a trial the other snapshot did not have
      TrialStatus& t = trials[it->second];
      // The trial's progress is the newest attempt's step (a resumed attempt restarts below the
      // step its lost predecessor reached).
      int& best = best_attempt[it->second];
      if (r.attempt > best) {
        best = r.attempt;
        t.step = r.step;
      } else if (r.attempt == best) {
        t.step = std::max(t.step, r.step);
      }
      if (r.kind == 1) t.loss = r.value;
      if (r.kind == 2) t.val_loss = r.value;
    }
  }
  Status FillProgress(Stmt& attempts, Stmt& latest, std::vector<TrialStatus>& trials,
                      const std::string& what) {
    ABLATE_ASSIGN_OR_RETURN(Progress p, ReadProgress(attempts, latest, what));
    ApplyProgress(p, trials);
    return Status::Ok();
  }
};

}  // namespace ablate::server
