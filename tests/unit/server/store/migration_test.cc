// Schema upgrades: a database written by version 1 of the store (testdata/schema_v1.sql, the dump of
// a real CPU sweep run by that release) opens with the current store, is upgraded in place, and
// keeps every row and value; a step that fails leaves the database exactly as it was.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace ablate::server {
namespace {

using testing::OptionsFor;
using testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Raw SQLite, outside the store: what an independent reader sees.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
  }
  ~RawDb() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
  }
  // Every row of `sql` as text ("NULL" for NULL), one string per row.
  std::vector<std::string> Rows(const std::string& sql) {
    std::vector<std::string> out;
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    while (st && sqlite3_step(st) == SQLITE_ROW) {
      std::string row;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        row += (c ? "|" : "") + (t ? std::string(reinterpret_cast<const char*>(t)) : "NULL");
      }
      out.push_back(row);
    }
    sqlite3_finalize(st);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

// The version-1 tables and their columns (every one of them, in that release's order).
const std::map<std::string, std::string> kV1Tables = {
    {"sweeps", "id, name, spec_yaml, priority, max_attempts, gpus, cpu_slots, axes_json, "
               "created_at"},
    {"trials", "id, sweep_id, config_hash, config_json, axes_json, state, priority, order_key, "
               "gpus, cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, "
               "checkpoint_step, reason, created_at, started_at, finished_at"},
    {"attempts", "trial_id, attempt, worker_id, gpus_json, cpu_slots, state, started_at, "
                 "ended_at, exit_code, reason, log_tail, checkpoint_path, checkpoint_step"},
    {"metrics", "trial_id, attempt, step, name, value"},
    {"metric_batches", "trial_id, attempt, seq, points"},
    {"latest_metrics", "trial_id, name, attempt, step, value"},
    {"workers", "id, hostname, gpus_json, cpu_slots, state, registered_at, last_seen_at, "
                "failures, quarantined, draining"},
    {"events", "id, time, kind, sweep_id, trial_id, attempt, worker_id, message"},
};

std::map<std::string, std::vector<std::string>> Snapshot(RawDb& db) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [table, cols] : kV1Tables) {
    out[table] = db.Rows("SELECT " + cols + " FROM " + table + " ORDER BY " + cols);
  }
  return out;
}

std::string WriteV1(const TempDir& dir) {
  const std::string path = dir.File("v1.db");
  RawDb db(path);
  db.Exec(ReadFile(std::string(ABLATE_STORE_TESTDATA) + "/schema_v1.sql"));
  return path;
}

TEST(MigrationTest, VersionOneDatabaseIsUpgradedInPlaceWithEveryRowKept) {
  TempDir dir;
  const std::string path = WriteV1(dir);
  std::map<std::string, std::vector<std::string>> before;
  {
    RawDb db(path);
    before = Snapshot(db);
    ASSERT_EQ(db.Rows("SELECT version FROM schema_version"), std::vector<std::string>{"1"});
  }
  ASSERT_EQ(before["trials"].size(), 4u);
  ASSERT_GT(before["metrics"].size(), 100u);
  {
    auto store = Store::Open(OptionsFor(path));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    // The upgraded database reads like any other.
    auto sweeps = (*store)->ListSweeps();
    ASSERT_TRUE(sweeps.ok());
    ASSERT_EQ(sweeps->size(), 1u);
    EXPECT_FALSE((*sweeps)[0].sweep.archived);
    EXPECT_EQ((*sweeps)[0].counts["succeeded"], 4);
    auto trials = (*store)->GetTrials((*sweeps)[0].sweep.id);
    ASSERT_TRUE(trials.ok());
    ASSERT_EQ(trials->size(), 4u);
    EXPECT_TRUE((*trials)[0].trial.tags.empty());
    auto attempts = (*store)->GetAttempts((*trials)[0].trial.id);
    ASSERT_TRUE(attempts.ok());
    ASSERT_EQ(attempts->size(), 1u);
    EXPECT_EQ((*attempts)[0].build_version, "");  // unknown for attempts run before provenance
    // The new columns take writes.
    TrialAnnotation a;
    a.trial_id = (*trials)[0].trial.id;
    a.add_tags = {"baseline"};
    a.note = "kept from version 1";
    ASSERT_TRUE((*store)->AnnotateTrial(a).ok());
    // Version 3: a trial can be stopped early, its judgment stored beside it.
    StopDecisionRecord d;
    d.sweep_id = (*sweeps)[0].sweep.id;
    d.rule = "asha";
    d.metric = "val_loss";
    d.config = "optimizer.lr=0.1";
    d.trial_ids = {(*trials)[1].trial.id};
    d.value = 5.0;
    d.seed_values = {5.0};
    d.compared = {{"optimizer.lr=0.01", 4.0}, {"optimizer.lr=0.1", 5.0}};
    d.threshold = 4.0;
    d.decision = "stop";
    TrialUpdate u;
    u.trial_id = (*trials)[1].trial.id;
    u.state = v1::STOPPED;
    std::promise<Status> done;
    (*store)->RecordStopDecision(d, {u}, [&](const Status& st) { done.set_value(st); });
    ASSERT_TRUE(done.get_future().get().ok());
    auto stored = (*store)->GetStopDecisions(d.sweep_id);
    ASSERT_TRUE(stored.ok());
    ASSERT_EQ(stored->size(), 1u);
    EXPECT_EQ(stored->at(0).compared, d.compared);
    EXPECT_EQ((*store)->GetTrial(u.trial_id)->trial.state, v1::STOPPED);
    EXPECT_EQ((*store)->GetTrial(u.trial_id)->trial.gpu_share, 1);
    // (Back to its state, so that the rows compare equal to version 1's below.)
    TrialUpdate restore;
    restore.trial_id = u.trial_id;
    restore.state = v1::SUCCEEDED;
    (*store)->UpdateTrial(restore);
    ASSERT_TRUE((*store)->Flush().ok());
  }
  RawDb db(path);
  EXPECT_EQ(db.Rows("SELECT version FROM schema_version"), std::vector<std::string>{"3"});
  EXPECT_EQ(db.Rows("SELECT count(*) FROM stop_decisions"), std::vector<std::string>{"1"});
  EXPECT_EQ(db.Rows("SELECT sql LIKE '%REFERENCES sweeps(id)%' FROM sqlite_schema WHERE name = "
                    "'trials'"),
            std::vector<std::string>{"1"});
  EXPECT_EQ(db.Rows("SELECT count(*) FROM pragma_index_list('trials') WHERE name = "
                    "'trials_by_sweep_state'"),
            std::vector<std::string>{"1"});
  const auto after = Snapshot(db);
  for (const auto& [table, rows] : before) {
    EXPECT_EQ(after.at(table), rows) << "table " << table << " changed";
  }
  EXPECT_EQ(db.Rows("SELECT count(*) FROM trials WHERE tags_json = '[]' AND note = ''"),
            std::vector<std::string>{"3"});
  EXPECT_EQ(db.Rows("SELECT count(*) FROM attempts WHERE build_version = '' AND "
                    "build_commit = '' AND numerics_version = ''"),
            std::vector<std::string>{"4"});
  // Opening again is a no-op.
  ASSERT_TRUE(Store::Open(OptionsFor(path)).ok());
  RawDb again(path);
  EXPECT_EQ(again.Rows("SELECT version FROM schema_version"), std::vector<std::string>{"3"});
}

TEST(MigrationTest, AStepThatFailsLeavesTheDatabaseAsItWas) {
  TempDir dir;
  const std::string path = WriteV1(dir);
  std::map<std::string, std::vector<std::string>> before;
  {
    RawDb db(path);
    // A column of step 2 already there: its ALTER TABLE fails halfway through the step.
    db.Exec("ALTER TABLE sweeps ADD COLUMN archived INTEGER");
    before = Snapshot(db);
  }
  auto store = Store::Open(OptionsFor(path));
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("schema step to version 2"), std::string::npos)
      << store.status().ToString();
  RawDb db(path);
  EXPECT_EQ(db.Rows("SELECT version FROM schema_version"), std::vector<std::string>{"1"});
  EXPECT_TRUE(db.Rows("SELECT 1 FROM pragma_table_info('attempts') WHERE name = "
                      "'build_version'")
                  .empty());
  EXPECT_EQ(Snapshot(db), before);
}

TEST(MigrationTest, ANewerDatabaseIsRefused) {
  TempDir dir;
  const std::string path = WriteV1(dir);
  {
    RawDb db(path);
    db.Exec("UPDATE schema_version SET version = 99");
  }
  auto store = Store::Open(OptionsFor(path));
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("newer than this program supports"), std::string::npos);
}

}  // namespace
}  // namespace ablate::server
