// The schema: the tables, their indexes and the states they accept, and the writer connection that
// creates them.
#include "store/store_internal.h"

namespace ablate::server {

namespace store_internal {

// The schema at version 1 (store.h and the README document it; kMigrations below take it to
// kSchemaVersion). Every statement is idempotent.
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

// The steps from version 1 (kSchema) to kSchemaVersion, in order. A step only adds (tables,
// columns with defaults, indexes), so every row stored before it keeps its values. Never edit a
// released step: add the next one, bump kSchemaVersion, and extend the upgrade test
// (tests/unit/server/store/migration_test.cc), which opens a database written by version 1.
struct Migration {
  int version;
  const char* sql;
};
constexpr Migration kMigrations[] = {
    // 2: provenance (the build that ran each attempt), annotations, archived sweeps.
    {2, R"sql(
ALTER TABLE attempts ADD COLUMN build_version TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN build_commit TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN numerics_version TEXT NOT NULL DEFAULT '';
ALTER TABLE trials ADD COLUMN tags_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE trials ADD COLUMN note TEXT NOT NULL DEFAULT '';
ALTER TABLE sweeps ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
)sql"},
    // 3: GPU shares, early stopping. Trials and attempts gain the state 'stopped': SQLite cannot
    // change a CHECK constraint in place, so both tables are rebuilt (create, copy every row, drop,
    // rename: sqlite.org/lang_altertable.html, "other kinds of table schema changes"; OpenWriter
    // runs the steps with foreign keys off, as that procedure requires, and checks them after).
    {3, R"sql(
CREATE TABLE trials_v3(
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  config_hash TEXT NOT NULL,
  config_json TEXT NOT NULL,
  axes_json TEXT NOT NULL DEFAULT '{}',
  state TEXT NOT NULL DEFAULT 'queued'
    CHECK(state IN ('queued','running','succeeded','failed','diverged','canceled','stopped')),
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
  tags_json TEXT NOT NULL DEFAULT '[]',
  note TEXT NOT NULL DEFAULT '',
  gpu_share INTEGER NOT NULL DEFAULT 1,
  early_stop_exempt INTEGER NOT NULL DEFAULT 0,
  UNIQUE(sweep_id, config_hash));
INSERT INTO trials_v3(id, sweep_id, config_hash, config_json, axes_json, state, priority, order_key,
  gpus, cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, checkpoint_step, reason,
  created_at, started_at, finished_at, tags_json, note)
  SELECT id, sweep_id, config_hash, config_json, axes_json, state, priority, order_key, gpus,
  cpu_slots, attempts, max_attempts, total_steps, checkpoint_path, checkpoint_step, reason,
  created_at, started_at, finished_at, tags_json, note FROM trials;
DROP TABLE trials;
ALTER TABLE trials_v3 RENAME TO trials;
CREATE INDEX trials_by_sweep_state ON trials(sweep_id, state);
CREATE TABLE attempts_v3(
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  attempt INTEGER NOT NULL,
  worker_id TEXT NOT NULL DEFAULT '',
  gpus_json TEXT NOT NULL DEFAULT '[]',
  cpu_slots INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL DEFAULT 'running'
    CHECK(state IN ('running','succeeded','failed','diverged','lost','canceled','stopped')),
  started_at REAL,
  ended_at REAL,
  exit_code INTEGER NOT NULL DEFAULT 0,
  reason TEXT NOT NULL DEFAULT '',
  log_tail TEXT NOT NULL DEFAULT '',
  checkpoint_path TEXT NOT NULL DEFAULT '',
  checkpoint_step INTEGER NOT NULL DEFAULT 0,
  build_version TEXT NOT NULL DEFAULT '',
  build_commit TEXT NOT NULL DEFAULT '',
  numerics_version TEXT NOT NULL DEFAULT '',
  gpu_share INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY(trial_id, attempt));
INSERT INTO attempts_v3(trial_id, attempt, worker_id, gpus_json, cpu_slots, state, started_at,
  ended_at, exit_code, reason, log_tail, checkpoint_path, checkpoint_step, build_version,
  build_commit, numerics_version)
  SELECT trial_id, attempt, worker_id, gpus_json, cpu_slots, state, started_at, ended_at,
  exit_code, reason, log_tail, checkpoint_path, checkpoint_step, build_version, build_commit,
  numerics_version FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_v3 RENAME TO attempts;
CREATE INDEX attempts_running ON attempts(trial_id, attempt) WHERE state = 'running';
ALTER TABLE sweeps ADD COLUMN gpu_share INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sweeps ADD COLUMN early_stop_json TEXT NOT NULL DEFAULT '';
CREATE TABLE stop_decisions(
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  rule TEXT NOT NULL,
  metric TEXT NOT NULL,
  rung INTEGER NOT NULL,
  step INTEGER NOT NULL,
  config TEXT NOT NULL,
  grp TEXT NOT NULL DEFAULT '',
  trials_json TEXT NOT NULL,
  value REAL,
  seed_values_json TEXT NOT NULL DEFAULT '[]',
  compared_json TEXT NOT NULL DEFAULT '[]',
  threshold REAL,
  decision TEXT NOT NULL CHECK(decision IN ('continue','stop')),
  decided_at REAL NOT NULL,
  UNIQUE(sweep_id, config, rung));
)sql"},
};
static_assert(kMigrations[std::size(kMigrations) - 1].version == kSchemaVersion);

bool ValidTrialState(v1::TrialState s) {
  return s != v1::TRIAL_STATE_UNSPECIFIED && v1::TrialState_IsValid(s);
}
bool ValidAttemptState(const std::string& s) {
  for (const char* v : {"running", "succeeded", "failed", "diverged", "lost", "canceled", "stopped"}) {
    if (s == v) return true;
  }
  return false;
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
      "; PRAGMA temp_store=MEMORY;"
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
      version = 1;
    }
    // Upgrade in place, inside the same transaction: a database is at one version or the next,
    // never between them. A new database takes the same steps (so every step runs in every test).
    for (const Migration& m : kMigrations) {
      if (m.version <= version) continue;
      ABLATE_RETURN_IF_ERROR(db->Exec(m.sql).WithPrefix("schema step to version " +
                                                        std::to_string(m.version)));
      ABLATE_RETURN_IF_ERROR(db->Exec(("UPDATE schema_version SET version = " +
                                       std::to_string(m.version))
                                          .c_str()));
      version = m.version;
    }
    // A rebuilt table (step 3) must leave every reference intact.
    {
      ABLATE_ASSIGN_OR_RETURN(Stmt st, db->Prepare("PRAGMA foreign_key_check"));
      ABLATE_ASSIGN_OR_RETURN(bool row, st.Step("check foreign keys"));
      if (row) {
        return DataLoss("schema upgrade: table " + st.Text(0) + " has a row whose reference to " +
                        st.Text(2) + " is broken");
      }
    }
    return db->Exec("COMMIT");
  }();
  if (!schema.ok()) {
    (void)db->Exec("ROLLBACK");
    return schema;
  }
  // Foreign keys are enforced from here on (off above: the schema steps rebuild tables, and
  // PRAGMA foreign_keys cannot change inside a transaction).
  ABLATE_RETURN_IF_ERROR(db->Exec("PRAGMA foreign_keys=ON"));
  return db;
}

}  // namespace store_internal

}  // namespace ablate::server
