// Unit tests of the SQLite store: schema, writes, dedup, latest values, ordering, reads.
#include <sqlite3.h>

#include <cmath>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include "store/store_internal.h"
#include "test_util.h"

namespace ablate::server {
namespace {

using testing::MakeTrial;
using testing::OpenOrDie;
using testing::OptionsFor;
using testing::QueryInt;
using testing::TempDir;

struct AppendResult {
  Status status;
  bool duplicate = false;
};

AppendResult AppendSync(Store& store, int64_t trial, int attempt, int64_t seq,
                        std::vector<Point> points) {
  std::promise<AppendResult> p;
  auto f = p.get_future();
  store.AppendMetrics(trial, attempt, seq, std::move(points), [&p](const Status& s, bool dup) {
    p.set_value({s, dup});
  });
  return f.get();
}

Status DoneSync(const std::function<void(Store::Done)>& call) {
  std::promise<Status> p;
  auto f = p.get_future();
  call([&p](const Status& s) { p.set_value(s); });
  return f.get();
}

// A sweep with `n` trials named h0..h(n-1); returns the submit result.
Store::SubmitResult Submit(Store& store, const std::string& name, int n,
                           std::vector<std::string> axes = {}) {
  SweepRecord sweep;
  sweep.name = name;
  sweep.spec_yaml = "name: " + name + "\n";
  sweep.axes = std::move(axes);
  std::vector<TrialRecord> trials;
  for (int i = 0; i < n; ++i) trials.push_back(MakeTrial("h" + std::to_string(i)));
  auto r = store.SubmitSweep(sweep, trials);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Store::SubmitResult();
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenOrDie(OptionsFor(dir_.File("ablate.db"), &clock_));
    ASSERT_NE(store_, nullptr);
  }
  void Reopen() {
    store_.reset();
    store_ = OpenOrDie(OptionsFor(dir_.File("ablate.db"), &clock_));
    ASSERT_NE(store_, nullptr);
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
};

// ---- Open / schema ------------------------------------------------------------------------------

TEST_F(StoreTest, SchemaCreationIsIdempotent) {
  const int64_t tables = QueryInt(*store_, "SELECT count(*) FROM sqlite_master");
  EXPECT_GE(tables, 9);
  Submit(*store_, "s", 2);
  Reopen();
  Reopen();
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM sqlite_master"), tables);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM schema_version"), 1);
  EXPECT_EQ(QueryInt(*store_, "SELECT version FROM schema_version"), 3);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM trials"), 2);  // data kept
  auto mode = store_->Query("PRAGMA journal_mode");
  EXPECT_FALSE(mode.ok());  // PRAGMA is refused in Query; check WAL through the file instead
  EXPECT_TRUE(std::filesystem::exists(dir_.File("ablate.db-wal")));
}

TEST_F(StoreTest, RefusesNewerSchemaVersion) {
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir_.File("ablate.db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version = 7", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto s = Store::Open(OptionsFor(dir_.File("ablate.db")));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("version 7"), std::string::npos) << s.status().message();
}

TEST(StoreOpenTest, RejectsBadOptionsAndFiles) {
  TempDir dir;
  auto mem = Store::Open(OptionsFor(":memory:"));
  ASSERT_FALSE(mem.ok());
  EXPECT_EQ(mem.status().code(), StatusCode::kInvalidArgument);
  auto empty = Store::Open(OptionsFor(""));
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);

  std::ofstream(dir.File("junk.db")) << std::string(8192, 'x');
  auto junk = Store::Open(OptionsFor(dir.File("junk.db")));
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().code(), StatusCode::kDataLoss) << junk.status().ToString();
  EXPECT_NE(junk.status().message().find("junk.db"), std::string::npos);

  auto missing_dir = Store::Open(OptionsFor(dir.File("no/such/dir/a.db")));
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_EQ(missing_dir.status().code(), StatusCode::kFailedPrecondition);
}

// ---- SubmitSweep --------------------------------------------------------------------------------

TEST_F(StoreTest, SubmitSweepInsertsAndResubmitAddsOnlyMissing) {
  SweepRecord sweep;
  sweep.name = "qk";
  sweep.priority = 1;
  sweep.axes = {"attention.kind", "seed"};
  std::vector<TrialRecord> trials = {MakeTrial("a", {{"attention.kind", "fpa"}, {"seed", "0"}}),
                                     MakeTrial("b", {{"attention.kind", "fpa"}, {"seed", "1"}})};
  trials[1].order_key = 5;
  auto first = store_->SubmitSweep(sweep, trials);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_GT(first->sweep_id, 0);
  ASSERT_EQ(first->inserted.size(), 2u);
  EXPECT_EQ(first->existing, 0);
  EXPECT_GT(first->inserted[0].id, 0);
  EXPECT_NE(first->inserted[0].id, first->inserted[1].id);
  EXPECT_EQ(first->inserted[1].sweep_id, first->sweep_id);
  EXPECT_EQ(first->inserted[1].order_key, 5);
  EXPECT_DOUBLE_EQ(first->inserted[0].created_at, clock_.UnixSeconds());

  sweep.priority = 7;
  trials.push_back(MakeTrial("c", {{"attention.kind", "sagebwd"}, {"seed", "0"}}));
  auto second = store_->SubmitSweep(sweep, trials);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->sweep_id, first->sweep_id);
  ASSERT_EQ(second->inserted.size(), 1u);
  EXPECT_EQ(second->inserted[0].config_hash, "c");
  EXPECT_EQ(second->existing, 2);

  auto summary = store_->GetSweep("qk");
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->sweep.priority, 7);  // settings follow the latest submit
  EXPECT_EQ(summary->sweep.axes, (std::vector<std::string>{"attention.kind", "seed"}));
  EXPECT_EQ(summary->total, 3);
  EXPECT_EQ(summary->counts["queued"], 3);

  auto trials_back = store_->GetTrials(first->sweep_id);
  ASSERT_TRUE(trials_back.ok());
  ASSERT_EQ(trials_back->size(), 3u);
  EXPECT_EQ((*trials_back)[0].trial.axes, trials[0].axes);  // axis order kept
  EXPECT_EQ((*trials_back)[2].trial.config_json, trials[2].config_json);
  EXPECT_TRUE(std::isnan((*trials_back)[0].loss));
  EXPECT_EQ((*trials_back)[0].worker_id, "");
}

TEST_F(StoreTest, SubmitSweepRejectsBadInput) {
  SweepRecord sweep;
  auto r = store_->SubmitSweep(sweep, {});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  sweep.name = "x";
  r = store_->SubmitSweep(sweep, {MakeTrial("")});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("config_hash"), std::string::npos);
}

TEST_F(StoreTest, GetSweepByNameOrIdAndListSweeps) {
  auto a = Submit(*store_, "alpha", 2);
  auto b = Submit(*store_, "123", 1);  // a name of digits still resolves by name
  auto by_id = store_->GetSweep(std::to_string(a.sweep_id));
  ASSERT_TRUE(by_id.ok());
  EXPECT_EQ(by_id->sweep.name, "alpha");
  auto by_digits_name = store_->GetSweep("123");
  ASSERT_TRUE(by_digits_name.ok());
  EXPECT_EQ(by_digits_name->sweep.id, b.sweep_id);
  auto missing = store_->GetSweep("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

  ASSERT_TRUE(DoneSync([&](Store::Done d) {
                store_->UpdateTrial({.trial_id = a.inserted[0].id, .state = v1::RUNNING}, d);
              }).ok());
  auto all = store_->ListSweeps();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].sweep.name, "alpha");
  EXPECT_EQ((*all)[0].counts["queued"], 1);
  EXPECT_EQ((*all)[0].counts["running"], 1);
  EXPECT_EQ((*all)[0].total, 2);
  EXPECT_EQ((*all)[1].total, 1);
}

// ---- Trial / attempt / worker round trips -------------------------------------------------------

TEST_F(StoreTest, UpdateTrialWritesOnlySetFields) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  TrialUpdate u;
  u.trial_id = id;
  u.state = v1::RUNNING;
  u.attempts = 1;
  u.started_at = 100.5;
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->UpdateTrial(u, d); }).ok());
  TrialUpdate v;
  v.trial_id = id;
  v.checkpoint_path = "/ck/1";
  v.checkpoint_step = 40;
  v.priority = 3;
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->UpdateTrial(v, d); }).ok());
  auto t = store_->GetTrial(id);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->trial.state, v1::RUNNING);
  EXPECT_EQ(t->trial.attempts, 1);
  EXPECT_DOUBLE_EQ(t->trial.started_at, 100.5);
  EXPECT_EQ(t->trial.finished_at, 0);
  EXPECT_EQ(t->trial.checkpoint_path, "/ck/1");
  EXPECT_EQ(t->trial.checkpoint_step, 40);
  EXPECT_EQ(t->trial.priority, 3);
  EXPECT_EQ(t->trial.total_steps, 100);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM trials WHERE finished_at IS NULL"), 1);

  Status missing = DoneSync([&](Store::Done d) { store_->UpdateTrial({.trial_id = 999}, d); });
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("999"), std::string::npos);
  Status bad =
      DoneSync([&](Store::Done d) {
        store_->UpdateTrial({.trial_id = id, .state = v1::TRIAL_STATE_UNSPECIFIED}, d);
      });
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("unspecified"), std::string::npos);
  EXPECT_EQ(store_->GetTrial(424242).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, AttemptRoundTrip) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  AttemptRecord a;
  a.trial_id = id;
  a.attempt = 1;
  a.worker_id = "w1";
  a.gpu_indices = {0, 3};
  a.started_at = 10;
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->InsertAttempt(a, d); }).ok());
  Status again = DoneSync([&](Store::Done d) { store_->InsertAttempt(a, d); });
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();
  AttemptRecord orphan = a;
  orphan.trial_id = 77;
  EXPECT_EQ(DoneSync([&](Store::Done d) { store_->InsertAttempt(orphan, d); }).code(),
            StatusCode::kNotFound);

  AttemptUpdate u;
  u.trial_id = id;
  u.attempt = 1;
  u.state = "failed";
  u.ended_at = 20;
  u.exit_code = -9;
  u.reason = "killed by signal 9 (SIGKILL)";
  u.log_tail = "line1\nline2";
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->UpdateAttempt(u, d); }).ok());
  a.attempt = 2;
  a.worker_id = "w2";
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->InsertAttempt(a, d); }).ok());

  auto got = store_->GetAttempts(id);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  const AttemptRecord& first = (*got)[0];
  EXPECT_EQ(first.worker_id, "w1");
  EXPECT_EQ(first.gpu_indices, (std::vector<int>{0, 3}));
  EXPECT_EQ(first.state, "failed");
  EXPECT_DOUBLE_EQ(first.started_at, 10);
  EXPECT_DOUBLE_EQ(first.ended_at, 20);
  EXPECT_EQ(first.exit_code, -9);
  EXPECT_EQ(first.reason, "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(first.log_tail, "line1\nline2");
  EXPECT_EQ((*got)[1].state, "running");

  auto t = store_->GetTrial(id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->worker_id, "w2");  // of the latest attempt

  u.attempt = 9;
  EXPECT_EQ(DoneSync([&](Store::Done d) { store_->UpdateAttempt(u, d); }).code(),
            StatusCode::kNotFound);
  u.attempt = 1;
  u.state = "exploded";
  EXPECT_EQ(DoneSync([&](Store::Done d) { store_->UpdateAttempt(u, d); }).code(),
            StatusCode::kInvalidArgument);
}

// The start of an attempt is one transaction: the attempt and the trial's update both, or neither
// (as two operations a batch could end between them, and a kill there left an attempt running
// under a trial that did not know it).
TEST_F(StoreTest, StartAttemptIsAllOrNothing) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  AttemptRecord a;
  a.trial_id = id;
  a.attempt = 1;
  a.worker_id = "w1";
  TrialUpdate u;
  u.trial_id = id;
  u.state = v1::RUNNING;
  u.attempts = 1;
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->StartAttempt(a, u, d); }).ok());
  EXPECT_EQ(store_->GetTrial(id)->trial.state, v1::RUNNING);
  ASSERT_EQ(store_->GetAttempts(id)->size(), 1u);
  // The attempt exists already: the trial is not touched either.
  u.state = v1::QUEUED;
  u.attempts = 5;
  EXPECT_EQ(DoneSync([&](Store::Done d) { store_->StartAttempt(a, u, d); }).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->GetTrial(id)->trial.state, v1::RUNNING);
  EXPECT_EQ(store_->GetTrial(id)->trial.attempts, 1);
  // The trial update fails (no state): the attempt is not inserted either.
  a.attempt = 2;
  u.state = v1::TRIAL_STATE_UNSPECIFIED;
  EXPECT_EQ(DoneSync([&](Store::Done d) { store_->StartAttempt(a, u, d); }).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetAttempts(id)->size(), 1u);
}

TEST_F(StoreTest, WorkerUpsertRoundTrip) {
  WorkerRecord w;
  w.id = "node-1";
  w.hostname = "gpu01";
  w.gpus_json = R"([{"index":0,"uuid":"GPU-1","name":"H100","memory_bytes":1}])";
  w.state = "idle";
  w.registered_at = 5;
  w.last_seen_at = 6;
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->UpsertWorker(w, d); }).ok());
  w.state = "quarantined";
  w.quarantined = true;
  w.failures = 4;
  w.last_seen_at = 9;
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->UpsertWorker(w, d); }).ok());
  WorkerRecord cpu;
  cpu.id = "node-0";
  cpu.cpu_slots = 2;
  cpu.draining = true;
  ASSERT_TRUE(DoneSync([&](Store::Done d) { store_->UpsertWorker(cpu, d); }).ok());
  EXPECT_EQ(DoneSync([&](Store::Done d) { store_->UpsertWorker(WorkerRecord{}, d); }).code(),
            StatusCode::kInvalidArgument);

  auto all = store_->ListWorkers();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "node-0");
  EXPECT_EQ((*all)[0].cpu_slots, 2);
  EXPECT_TRUE((*all)[0].draining);
  EXPECT_EQ((*all)[0].gpus_json, "[]");
  const WorkerRecord& g = (*all)[1];
  EXPECT_EQ(g.hostname, "gpu01");
  EXPECT_EQ(g.gpus_json, w.gpus_json);
  EXPECT_EQ(g.state, "quarantined");
  EXPECT_TRUE(g.quarantined);
  EXPECT_FALSE(g.draining);
  EXPECT_EQ(g.failures, 4);
  EXPECT_DOUBLE_EQ(g.registered_at, 5);
  EXPECT_DOUBLE_EQ(g.last_seen_at, 9);
}

TEST_F(StoreTest, EventsAreStoredWithTheClock) {
  auto s = Submit(*store_, "s", 1);
  clock_.SetUnixSeconds(1234.5);
  store_->AddEvent("trial_failed", s.sweep_id, s.inserted[0].id, 1, "w1", "exit code 1");
  store_->AddEvent("sweep_submitted", s.sweep_id, 0, 0, "", "");
  ASSERT_TRUE(store_->Flush().ok());
  auto r = store_->Query("SELECT time, kind, trial_id, worker_id, message FROM events ORDER BY id");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_DOUBLE_EQ(r->rows[0][0].d, 1234.5);
  EXPECT_EQ(r->rows[0][1].s, "trial_failed");
  EXPECT_EQ(r->rows[0][2].i, s.inserted[0].id);
  EXPECT_EQ(r->rows[0][4].s, "exit code 1");
  EXPECT_EQ(r->rows[1][2].kind, QueryResult::Cell::kNull);  // 0 means "no trial"
  EXPECT_EQ(r->rows[1][3].kind, QueryResult::Cell::kNull);
}

// ---- Metrics ------------------------------------------------------------------------------------

TEST_F(StoreTest, AppendMetricsIsExactlyOnce) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  std::vector<Point> pts = {{1, "loss", 3.0}, {2, "loss", 2.5}, {2, "lr", 0.01}};
  AppendResult first = AppendSync(*store_, id, 1, 1, pts);
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  EXPECT_FALSE(first.duplicate);
  AppendResult again = AppendSync(*store_, id, 1, 1, {{3, "loss", 99.0}});  // a replay of seq 1
  ASSERT_TRUE(again.status.ok());
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM metrics"), 3);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM metrics WHERE step = 3"), 0);
  EXPECT_EQ(QueryInt(*store_, "SELECT points FROM metric_batches WHERE seq = 1"), 3);

  // The same seq of another attempt is a different report.
  AppendResult other = AppendSync(*store_, id, 2, 1, {{1, "loss", 3.1}});
  EXPECT_TRUE(other.status.ok());
  EXPECT_FALSE(other.duplicate);

  // RecordSeq shares the numbering: a metric batch with a recorded seq is a duplicate.
  std::promise<AppendResult> p;
  store_->RecordSeq(id, 1, 2, [&](const Status& st, bool dup) { p.set_value({st, dup}); });
  AppendResult rec = p.get_future().get();
  ASSERT_TRUE(rec.status.ok());
  EXPECT_FALSE(rec.duplicate);
  EXPECT_TRUE(AppendSync(*store_, id, 1, 2, {{5, "loss", 1.0}}).duplicate);

  auto stats = store_->stats();
  EXPECT_EQ(stats.points_inserted, 4);
  EXPECT_EQ(stats.duplicate_batches, 2);
  EXPECT_EQ(stats.queue_depth, 0);

  AppendResult orphan = AppendSync(*store_, 4242, 1, 1, pts);
  EXPECT_EQ(orphan.status.code(), StatusCode::kNotFound);
  AppendResult unnamed = AppendSync(*store_, id, 1, 9, {{1, "", 1.0}});
  EXPECT_EQ(unnamed.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM metric_batches WHERE seq = 9"), 0);
}

TEST_F(StoreTest, LatestMetricsSemantics) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  auto latest = [&](const std::string& name) -> std::pair<int64_t, double> {
    auto r = store_->GetLatestMetrics(id);
    EXPECT_TRUE(r.ok());
    for (const Point& p : *r) {
      if (p.name == name) return {p.step, p.value};
    }
    return {-1, 0};
  };
  // Within a batch the highest step wins, whatever the order of the points.
  ASSERT_TRUE(AppendSync(*store_, id, 1, 1, {{20, "loss", 2.0}, {10, "loss", 3.0}}).status.ok());
  EXPECT_EQ(latest("loss"), (std::pair<int64_t, double>(20, 2.0)));
  // An older step of the same attempt does not replace it...
  ASSERT_TRUE(AppendSync(*store_, id, 1, 2, {{15, "loss", 9.0}}).status.ok());
  EXPECT_EQ(latest("loss"), (std::pair<int64_t, double>(20, 2.0)));
  // ...an equal step does (>=).
  ASSERT_TRUE(
      AppendSync(*store_, id, 1, 3, {{20, "loss", 1.5}, {20, "val_loss", 1.9}}).status.ok());
  EXPECT_EQ(latest("loss"), (std::pair<int64_t, double>(20, 1.5)));
  // A newer attempt (resumed from an earlier checkpoint) replaces it even at a lower step.
  ASSERT_TRUE(AppendSync(*store_, id, 2, 1, {{12, "loss", 2.2}}).status.ok());
  EXPECT_EQ(latest("loss"), (std::pair<int64_t, double>(12, 2.2)));
  // A late report of the old attempt does not.
  ASSERT_TRUE(AppendSync(*store_, id, 1, 4, {{30, "loss", 0.1}}).status.ok());
  EXPECT_EQ(latest("loss"), (std::pair<int64_t, double>(12, 2.2)));
  EXPECT_EQ(latest("val_loss"), (std::pair<int64_t, double>(20, 1.9)));  // untouched

  auto t = store_->GetTrial(id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->step, 12);  // the newest attempt's progress
  EXPECT_DOUBLE_EQ(t->loss, 2.2);
  EXPECT_DOUBLE_EQ(t->val_loss, 1.9);
}

TEST_F(StoreTest, GetSeriesPrefersTheLatestAttemptPerStep) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  ASSERT_TRUE(AppendSync(*store_, id, 1, 1,
                         {{10, "loss", 3.0}, {20, "loss", 2.0}, {30, "loss", 1.0}, {10, "lr", 1.0}})
                  .status.ok());
  ASSERT_TRUE(AppendSync(*store_, id, 2, 1, {{20, "loss", 2.1}, {25, "loss", 1.8}}).status.ok());
  auto series = store_->GetSeries(id, "loss");
  ASSERT_TRUE(series.ok());
  ASSERT_EQ(series->size(), 4u);
  EXPECT_EQ((*series)[0].step, 10);
  EXPECT_DOUBLE_EQ((*series)[0].value, 3.0);
  EXPECT_EQ((*series)[1].step, 20);
  EXPECT_DOUBLE_EQ((*series)[1].value, 2.1);  // attempt 2 wins
  EXPECT_EQ((*series)[2].step, 25);
  EXPECT_EQ((*series)[3].step, 30);
  EXPECT_EQ((*series)[3].name, "loss");
  auto none = store_->GetSeries(id, "nothing");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(StoreTest, NanIsStoredAsNullAndReadBackAsNan) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  const double inf = std::numeric_limits<double>::infinity();
  ASSERT_TRUE(
      AppendSync(*store_, id, 1, 1, {{1, "loss", std::nan("")}, {1, "g", inf}}).status.ok());
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM metrics WHERE value IS NULL"), 1);
  auto series = store_->GetSeries(id, "loss");
  ASSERT_TRUE(series.ok());
  ASSERT_EQ(series->size(), 1u);
  EXPECT_TRUE(std::isnan((*series)[0].value));
  auto g = store_->GetSeries(id, "g");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)[0].value, inf);
}

// ---- The writer: flush, ordering, group commit, isolation of failures ---------------------------

TEST_F(StoreTest, FlushWaitsForEverythingAndReportsTheFirstError) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  std::atomic<int> done{0};
  for (int i = 1; i <= 200; ++i) {
    store_->AppendMetrics(id, 1, i, {{i, "loss", 1.0 / i}},
                          [&](const Status& st, bool) { done += st.ok() ? 1 : 0; });
  }
  store_->UpdateTrial({.trial_id = 31337, .state = v1::FAILED});  // no callback: Flush reports it
  store_->UpdateTrial({.trial_id = 31338, .state = v1::FAILED});
  Status f = store_->Flush();
  EXPECT_EQ(done.load(), 200);  // every earlier callback ran before Flush returned
  EXPECT_EQ(f.code(), StatusCode::kNotFound);
  EXPECT_NE(f.message().find("31337"), std::string::npos) << f.message();  // the first error
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM metrics"), 200);
  EXPECT_TRUE(store_->Flush().ok());  // errors are reported once
}

TEST_F(StoreTest, WritesApplyAndCompleteInEnqueueOrder) {
  auto s = Submit(*store_, "s", 1);
  const int64_t id = s.inserted[0].id;
  std::vector<int> order;  // only the writer thread appends
  for (int i = 0; i < 300; ++i) {
    store_->UpdateTrial({.trial_id = id, .reason = "r" + std::to_string(i)},
                        [&order, i](const Status& st) {
                          if (st.ok()) order.push_back(i);
                        });
    if (i == 150) {
      // An attempt inserted then immediately updated: the update must see the insert.
      store_->InsertAttempt({.trial_id = id, .attempt = 1, .worker_id = "w"});
      store_->UpdateAttempt({.trial_id = id, .attempt = 1, .state = "lost"},
                            [&order](const Status& st) { order.push_back(st.ok() ? -1 : -2); });
    }
  }
  ASSERT_TRUE(store_->Flush().ok());
  ASSERT_EQ(order.size(), 301u);
  for (int i = 0; i <= 150; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(order[151], -1);
  for (int i = 151; i < 300; ++i) EXPECT_EQ(order[i + 1], i);
  auto t = store_->GetTrial(id);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->trial.reason, "r299");
}

// Holds the writer thread inside a done callback until released, so that the operations enqueued
// meanwhile are drained together into one batch.
class WriterGate {
 public:
  Store::Done Hold() {
    return [this](const Status&) {
      std::unique_lock<std::mutex> lock(mu_);
      held_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    };
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false, open_ = false;
};

// Records the number of operations of every commit (Options::on_commit).
class CommitLog {
 public:
  std::function<void(double, int)> Hook() {
    return [this](double seconds, int ops) {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_.push_back(ops);
    };
  }
  std::vector<int> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(sizes_, {});
  }

 private:
  std::mutex mu_;
  std::vector<int> sizes_;
};

TEST(StoreBatchTest, GroupCommitAndABadOpDoesNotFailItsNeighbours) {
  TempDir dir;
  CommitLog log;
  Store::Options o = OptionsFor(dir.File("a.db"));
  o.on_commit = log.Hook();
  auto store = OpenOrDie(o);
  auto s = Submit(*store, "s", 1);
  const int64_t id = s.inserted[0].id;

  WriterGate gate;
  store->UpdateTrial({.trial_id = id, .reason = "gate"}, gate.Hold());
  gate.WaitHeld();
  log.Take();
  std::vector<Status> statuses(101);
  for (int i = 0; i < 101; ++i) {
    if (i == 50) {
      store->AppendMetrics(9999, 1, 1, {{1, "loss", 1}},
                           [&statuses](const Status& st, bool) { statuses[50] = st; });
    } else {
      store->AppendMetrics(id, 1, i + 1, {{i, "loss", 1.0}},
                           [&statuses, i](const Status& st, bool) { statuses[i] = st; });
    }
  }
  gate.Open();
  EXPECT_EQ(store->Flush().code(), StatusCode::kNotFound);
  for (int i = 0; i < 101; ++i) {
    if (i == 50) {
      EXPECT_EQ(statuses[i].code(), StatusCode::kNotFound);
    } else {
      EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].ToString();
    }
  }
  EXPECT_EQ(QueryInt(*store, "SELECT count(*) FROM metrics"), 100);
  // The batch of 101 failed as a whole, then its ops were retried one per transaction (the Flush
  // barrier may have joined the batch: then it commits alone too).
  std::vector<int> retried = log.Take();
  EXPECT_TRUE(retried == std::vector<int>(100, 1) || retried == std::vector<int>(101, 1))
      << retried.size();

  // Without a bad op, the same burst commits in one transaction.
  WriterGate gate2;
  store->UpdateTrial({.trial_id = id, .reason = "gate2"}, gate2.Hold());
  gate2.WaitHeld();
  log.Take();
  for (int i = 0; i < 100; ++i) store->AppendMetrics(id, 2, i + 1, {{i, "loss", 2.0}}, nullptr);
  gate2.Open();
  ASSERT_TRUE(store->Flush().ok());
  // The burst, then the Flush barrier (enqueued after the gate opened: its own commit).
  std::vector<int> sizes = log.Take();
  ASSERT_FALSE(sizes.empty());
  EXPECT_GE(sizes[0], 100);
}

TEST_F(StoreTest, SynchronousCallsFromACallbackFailInsteadOfDeadlocking) {
  auto s = Submit(*store_, "s", 1);
  std::promise<Status> flush_status, submit_status;
  store_->UpdateTrial({.trial_id = s.inserted[0].id}, [&](const Status&) {
    flush_status.set_value(store_->Flush());
    submit_status.set_value(store_->SubmitSweep(SweepRecord{.name = "x"}, {}).status());
  });
  EXPECT_EQ(flush_status.get_future().get().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(submit_status.get_future().get().code(), StatusCode::kFailedPrecondition);
}

TEST(StoreQueueTest, BoundedQueueBlocksProducersButNotTheWriter) {
  TempDir dir;
  Store::Options o = OptionsFor(dir.File("a.db"));
  o.max_queue_ops = 4;
  auto store = OpenOrDie(o);
  auto s = Submit(*store, "s", 1);
  const int64_t id = s.inserted[0].id;
  std::atomic<int> chained{0};
  // Callbacks enqueue more work from the writer thread: must not block on the full queue.
  for (int i = 0; i < 50; ++i) {
    store->AppendMetrics(id, 1, i + 1, {{i, "loss", 1.0}}, [&, i](const Status&, bool) {
      store->RecordSeq(id, 2, i + 1, [&](const Status& st, bool) { chained += st.ok(); });
    });
  }
  ASSERT_TRUE(store->Flush().ok());
  ASSERT_TRUE(store->Flush().ok());  // the chained ops were enqueued before this barrier
  EXPECT_EQ(chained.load(), 50);
}

// ---- Results ------------------------------------------------------------------------------------

TEST_F(StoreTest, ResultsGroupMeanStdMinMax) {
  SweepRecord sweep;
  sweep.name = "abl";
  sweep.axes = {"attention.kind", "optimizer.p", "seed"};
  std::vector<TrialRecord> trials;
  struct Spec {
    const char* kind;
    const char* p;
    const char* seed;
    double value;  // NaN: metric absent
  };
  const double kMissing = std::nan("");
  const std::vector<Spec> specs = {
      {"fpa", "0.5", "0", 2.0},    {"fpa", "0.5", "1", 2.5},     {"fpa", "10", "0", 4.0},
      {"fpa", "10", "1", 5.0},     {"sagebwd", "0.5", "0", 3.0}, {"sagebwd", "0.5", "1", kMissing},
      {"sagebwd", "10", "0", 1.0}, {"sagebwd", "10", "1", 2.0},
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    trials.push_back(MakeTrial(
        "t" + std::to_string(i),
        {{"attention.kind", specs[i].kind}, {"optimizer.p", specs[i].p}, {"seed", specs[i].seed}}));
  }
  auto sub = store_->SubmitSweep(sweep, trials);
  ASSERT_TRUE(sub.ok());
  for (size_t i = 0; i < specs.size(); ++i) {
    if (std::isnan(specs[i].value)) continue;
    // An earlier, worse value at a lower step: only the latest one counts.
    ASSERT_TRUE(AppendSync(*store_, sub->inserted[i].id, 1, 1,
                           {{10, "final_val_loss", 100.0}, {20, "final_val_loss", specs[i].value}})
                    .status.ok());
  }

  auto by_kind = store_->Results(sub->sweep_id, "final_val_loss", {"attention.kind"});
  ASSERT_TRUE(by_kind.ok()) << by_kind.status().ToString();
  ASSERT_EQ(by_kind->size(), 2u);
  const ResultRow& fpa = (*by_kind)[0];
  EXPECT_EQ(fpa.keys, std::vector<std::string>{"fpa"});
  EXPECT_EQ(fpa.n, 4);
  EXPECT_EQ(fpa.trials, 4);
  // Hand-computed: values 2, 2.5, 4, 5 -> mean 3.375; squared deviations 1.890625 + 0.765625 +
  // 0.390625 + 2.640625 = 5.6875; / 3 = 1.8958333; sqrt = 1.3768926.
  EXPECT_NEAR(fpa.mean, 3.375, 1e-12);
  EXPECT_NEAR(fpa.std, 1.3768926368215255, 1e-12);
  EXPECT_DOUBLE_EQ(fpa.min, 2.0);
  EXPECT_DOUBLE_EQ(fpa.max, 5.0);
  const ResultRow& sage = (*by_kind)[1];
  EXPECT_EQ(sage.n, 3);
  EXPECT_EQ(sage.trials, 4);
  EXPECT_NEAR(sage.mean, 2.0, 1e-12);
  EXPECT_NEAR(sage.std, 1.0, 1e-12);  // 3, 1, 2: deviations 1, -1, 0 -> sqrt(2 / 2)

  auto two = store_->Results(sub->sweep_id, "final_val_loss", {"optimizer.p", "attention.kind"});
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 4u);
  // "0.5" before "10": numbers sort numerically (as text "10" < "0.5" would be false anyway, so
  // check a pair where text order differs: see ResultsSortNumbersNumerically).
  EXPECT_EQ((*two)[0].keys, (std::vector<std::string>{"0.5", "fpa"}));
  EXPECT_NEAR((*two)[0].mean, 2.25, 1e-12);
  EXPECT_NEAR((*two)[0].std, 0.35355339059327379, 1e-12);  // sqrt(0.125)
  EXPECT_EQ((*two)[1].keys, (std::vector<std::string>{"0.5", "sagebwd"}));
  EXPECT_EQ((*two)[1].n, 1);
  EXPECT_EQ((*two)[1].trials, 2);
  EXPECT_DOUBLE_EQ((*two)[1].mean, 3.0);
  EXPECT_TRUE(std::isnan((*two)[1].std));  // one value: no sample std
  EXPECT_EQ((*two)[3].keys, (std::vector<std::string>{"10", "sagebwd"}));

  auto all = store_->Results(sub->sweep_id, "final_val_loss", {});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_TRUE((*all)[0].keys.empty());
  EXPECT_EQ((*all)[0].n, 7);
  EXPECT_EQ((*all)[0].trials, 8);
  EXPECT_NEAR((*all)[0].mean, 19.5 / 7, 1e-12);

  auto absent = store_->Results(sub->sweep_id, "no_such_metric", {"seed"});
  ASSERT_TRUE(absent.ok());
  ASSERT_EQ(absent->size(), 2u);
  EXPECT_EQ((*absent)[0].n, 0);
  EXPECT_EQ((*absent)[0].trials, 4);
  EXPECT_TRUE(std::isnan((*absent)[0].mean));

  auto bad = store_->Results(sub->sweep_id, "final_val_loss", {"attention.knd"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'attention.knd'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("attention.kind, optimizer.p, seed"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(store_->Results(999, "x", {}).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, ResultsSortNumbersNumerically) {
  SweepRecord sweep;
  sweep.name = "tps";
  sweep.axes = {"train.tokens_per_step"};
  std::vector<TrialRecord> trials;
  for (const char* v : {"65536", "8192", "16384", "auto"}) {
    trials.push_back(MakeTrial(v, {{"train.tokens_per_step", v}}));
  }
  auto sub = store_->SubmitSweep(sweep, trials);
  ASSERT_TRUE(sub.ok());
  auto r = store_->Results(sub->sweep_id, "loss", {"train.tokens_per_step"});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].keys[0], "8192");
  EXPECT_EQ((*r)[1].keys[0], "16384");
  EXPECT_EQ((*r)[2].keys[0], "65536");
  EXPECT_EQ((*r)[3].keys[0], "auto");
}

TEST_F(StoreTest, ResultsKnowTrialAxesWhenTheSweepListsNone) {
  SweepRecord sweep;
  sweep.name = "noaxes";  // axes left empty by the caller
  auto sub = store_->SubmitSweep(
      sweep, {MakeTrial("a", {{"seed", "0"}}), MakeTrial("b", {{"seed", "1"}})});
  ASSERT_TRUE(sub.ok());
  auto r = store_->Results(sub->sweep_id, "loss", {"seed"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 2u);
  auto bad = store_->Results(sub->sweep_id, "loss", {"sed"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "results: 'sed' is not an axis of sweep 'noaxes' (its axes: seed)");
}

// ---- Restart ------------------------------------------------------------------------------------

TEST_F(StoreTest, LoadStateAfterReopen) {
  auto a = Submit(*store_, "a", 3, {"seed"});
  auto b = Submit(*store_, "b", 1);
  const int64_t t0 = a.inserted[0].id, t1 = a.inserted[1].id, t2 = a.inserted[2].id;
  store_->UpdateTrial({.trial_id = t0, .state = v1::RUNNING, .attempts = 2});
  store_->UpdateTrial({.trial_id = t1, .state = v1::SUCCEEDED, .attempts = 1});
  store_->InsertAttempt({.trial_id = t0, .attempt = 1, .worker_id = "w1", .state = "lost"});
  store_->InsertAttempt({.trial_id = t0, .attempt = 2, .worker_id = "w2", .gpu_indices = {1}});
  store_->InsertAttempt({.trial_id = t1, .attempt = 1, .worker_id = "w1", .state = "succeeded"});
  store_->UpsertWorker({.id = "w2", .hostname = "h2", .state = "busy"});
  for (int seq : {1, 2, 5}) AppendSync(*store_, t0, 2, seq, {{seq, "loss", 1.0}});
  AppendSync(*store_, t0, 1, 9, {{1, "loss", 1.0}});
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();

  auto st = store_->LoadState();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->sweeps.size(), 2u);
  EXPECT_EQ(st->sweeps[0].name, "a");
  EXPECT_EQ(st->sweeps[0].axes, std::vector<std::string>{"seed"});
  ASSERT_EQ(st->trials.size(), 3u);  // t0 running, t2 queued, b's queued; t1 succeeded is not
  EXPECT_EQ(st->trials[0].id, t0);
  EXPECT_EQ(st->trials[0].state, v1::RUNNING);
  EXPECT_EQ(st->trials[0].attempts, 2);
  EXPECT_EQ(st->trials[1].id, t2);
  EXPECT_EQ(st->trials[2].id, b.inserted[0].id);
  ASSERT_EQ(st->running.size(), 1u);
  EXPECT_EQ(st->running[0].trial_id, t0);
  EXPECT_EQ(st->running[0].attempt, 2);
  EXPECT_EQ(st->running[0].worker_id, "w2");
  EXPECT_EQ(st->running[0].gpu_indices, std::vector<int>{1});
  ASSERT_EQ(st->workers.size(), 1u);
  EXPECT_EQ(st->workers[0].hostname, "h2");
  ASSERT_EQ(st->max_seq.size(), 1u);
  EXPECT_EQ((st->max_seq[{t0, 2}]), 5);

  // The dedup state survived the restart too.
  EXPECT_TRUE(AppendSync(*store_, t0, 2, 2, {{2, "loss", 7.0}}).duplicate);
}

TEST_F(StoreTest, ConcurrentProducersLoseNothing) {
  auto s = Submit(*store_, "s", 8);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int seq = 1; seq <= 50; ++seq) {
        std::vector<Point> pts;
        for (int k = 0; k < 20; ++k) pts.push_back({seq * 20 + k, k % 2 ? "loss" : "lr", 1.0});
        store_->AppendMetrics(s.inserted[t].id, 1, seq, std::move(pts),
                              [&](const Status& st, bool dup) { ok += st.ok() && !dup; });
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(ok.load(), 400);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM metrics"), 8 * 50 * 20);
  EXPECT_EQ(store_->stats().points_inserted, 8 * 50 * 20);
  EXPECT_LT(store_->stats().commits, 400 + 10);  // group commit: typically far fewer
}

// Axis values survive the store whatever they hold (the plain ones are read by a fast path, the
// rest by the JSON parser), in the spec's order.
TEST(AxesJson, RoundTripsPlainAndEscapedValuesInOrder) {
  const std::vector<std::pair<std::string, std::string>> cases[] = {
      {},
      {{"z.last", "1"}, {"a.first", "fpa"}, {"seed", "0"}},
      {{"path", "a \"quoted\" \\ value"}, {"tab", "x\ty"}, {"utf8", "\u00e9t\u00e9"}},
      {{"k", ""}},
  };
  for (const auto& axes : cases) {
    EXPECT_EQ(AxesFromJson(AxesToJson(axes)), axes) << AxesToJson(axes);
  }
  // Not a flat object of strings: the parser's reading (numbers as their JSON text).
  EXPECT_EQ(AxesFromJson(R"({"lr":0.01,"b":true})"),
            (std::vector<std::pair<std::string, std::string>>{{"lr", "0.01"}, {"b", "true"}}));
  EXPECT_TRUE(AxesFromJson(R"({"a":"b")").empty());  // truncated
  EXPECT_TRUE(AxesFromJson("").empty());
}

}  // namespace
}  // namespace ablate::server
