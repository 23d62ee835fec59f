// The whole system with the real binaries on loopback: ablated, two ablate-worker processes running
// the real CPU trainer, and the ablate CLI.
//   - a 2x2x2 sweep runs to completion, every trial succeeds exactly once;
//   - the metrics in SQLite equal what each trainer printed (count and values);
//   - `results` prints the right table; `query` rejects writes;
//   - resubmitting adds nothing; cancel stops the trainers; retry requeues only what it should.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "db_util.h"
#include "process_util.h"
#include "temp_dir.h"

#ifndef ABLATED_BIN
#error "ABLATED_BIN, ABLATE_WORKER_BIN, ABLATE_CLI_BIN, ABLATE_TRAIN_BIN must be defined"
#endif

namespace ablate::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

using ::ablate::testing::TempDir;

// A toy corpus (the tests need no download).
std::string Corpus() {
  std::string text;
  const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
  unsigned x = 7;
  while (text.size() < 40000) {
    x = x * 1103515245u + 12345u;
    text += words[(x >> 16) % 8];
    text += (x >> 8) % 9 == 0 ? ".\n" : " ";
  }
  return text;
}

class Cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir("ablate_e2e");
    dir_ = new std::string(tmp_->path());
    std::ofstream(*dir_ + "/corpus.txt") << Corpus();
    ::mkdir((*dir_ + "/coord").c_str(), 0700);
    coordinator_ = new Proc(Spawn({ABLATED_BIN, "--data-dir", *dir_ + "/coord", "--grpc",
                                   "127.0.0.1:0", "--lease-seconds", "4",
                                   "--heartbeat-seconds", "0.5"},
                                  *dir_ + "/ablated.log"));
    addr_ = new std::string(WaitForFile(*dir_ + "/coord/ablated.addr", seconds(10)));
    ASSERT_FALSE(addr_->empty()) << ReadFile(*dir_ + "/ablated.log");
    for (int w = 0; w < 2; ++w) {
      workers_[w] = new Proc(Spawn({ABLATE_WORKER_BIN, "--coordinator", *addr_, "--token-file",
                                    *dir_ + "/coord/token", "--gpus", "none", "--cpu-slots", "2",
                                    "--work-dir", *dir_ + "/w" + std::to_string(w), "--trainer",
                                    ABLATE_TRAIN_BIN, "--data-root", *dir_},
                                   *dir_ + "/worker" + std::to_string(w) + ".log"));
    }
  }
  static void TearDownTestSuite() {
    for (auto* w : workers_) {
      if (w) Kill(*w, SIGKILL), Wait(*w, seconds(5));
    }
    if (coordinator_) Kill(*coordinator_, SIGTERM), Wait(*coordinator_, seconds(10));
    delete tmp_;  // after every process that wrote there
    tmp_ = nullptr;
  }

  static Output Cli(std::vector<std::string> args, seconds timeout = seconds(60)) {
    args.insert(args.begin(), ABLATE_CLI_BIN);
    return ::ablate::testing::Run(args, *dir_,
               {"ABLATE_COORDINATOR=" + *addr_, "ABLATE_TOKEN_FILE=" + *dir_ + "/coord/token"},
               timeout);
  }

  static std::string WriteSpec(const std::string& name, const std::string& body) {
    std::string path = *dir_ + "/" + name + ".yaml";
    std::ofstream(path) << "name: " << name << "\n" << body;
    return path;
  }

  static std::string SmallBase(int steps, const std::string& train_extra = "") {
    return "base:\n"
           "  data: {corpus: " +
           *dir_ +
           "/corpus.txt, val_fraction: 0.1, eval_batches: 2}\n"
           "  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n"
           "  optimizer: {lr: 0.01, lr_vector: 0.003}\n"
           "  train: {steps: " +
           std::to_string(steps) +
           ", tokens_per_step: 256, micro_batch: 8, warmup: 2, eval_every: 10,\n"
           "          diagnostics_every: 10, checkpoint_every: 10, threads: 1" +
           train_extra +
           "}\n"
           "resources: {gpus: 0}\n";
  }

  // Rows of a read-only query on the coordinator's database, straight through SQLite.
  static Rows Sql(const std::string& sql) { return ReadOnlySql(*dir_ + "/coord/ablate.db", sql); }

  static TempDir* tmp_;
  static std::string* dir_;
  static std::string* addr_;
  static Proc* coordinator_;
  static Proc* workers_[2];
};
TempDir* Cluster::tmp_ = nullptr;
std::string* Cluster::dir_ = nullptr;
std::string* Cluster::addr_ = nullptr;
Proc* Cluster::coordinator_ = nullptr;
Proc* Cluster::workers_[2] = {nullptr, nullptr};

TEST_F(Cluster, SweepRunsToCompletionAndMetricsMatchTheTrainers) {
  // train.profile_steps: each trainer's profile line (steps 6-9) is stored like any other point.
  std::string spec = WriteSpec("grid222", SmallBase(20, ", profile_steps: 4") +
                                              "grid:\n"
                                              "  attention.kind: [fpa, sagebwd]\n"
                                              "  optimizer.p: [0, 0.5]\n"
                                              "  model.mlp: [gelu, relu2]\n"
                                              "order: grid\n");
  Output dry = Cli({"submit", spec, "--dry-run"});
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("8"), std::string::npos) << dry.out;
  EXPECT_TRUE(Sql("SELECT id FROM sweeps").empty());  // a dry run stores nothing

  Output sub = Cli({"submit", spec});
  ASSERT_EQ(sub.code, 0) << sub.out;
  Output watch = Cli({"watch", "grid222"}, seconds(240));
  ASSERT_EQ(watch.code, 0) << watch.out << ReadFile(*dir_ + "/worker0.log");

  auto trials = Sql("SELECT id, state, attempts FROM trials ORDER BY id");
  ASSERT_EQ(trials.size(), 8u);
  for (const auto& t : trials) {
    EXPECT_EQ(t[1], "succeeded") << "trial " << t[0];
    EXPECT_EQ(t[2], "1") << "trial " << t[0];  // exactly once
  }
  // Both workers took part.
  auto workers = Sql("SELECT DISTINCT worker_id FROM attempts");
  EXPECT_EQ(workers.size(), 2u);

  // Metrics in SQLite == what each trainer printed (its metrics.jsonl), count and values.
  for (const auto& t : trials) {
    std::string jsonl;
    for (int w = 0; w < 2 && jsonl.empty(); ++w) {
      jsonl = ReadFile(*dir_ + "/w" + std::to_string(w) + "/trials/" + t[0] + "/attempt-1/metrics.jsonl");
    }
    ASSERT_FALSE(jsonl.empty()) << "no metrics.jsonl for trial " << t[0];
    auto want = ExpectedPoints(jsonl);
    std::multiset<Point> got;
    // (startup_s and teardown_s are the worker's own points, not the trainer's: one each.)
    for (const auto& r : Sql("SELECT step, name, value FROM metrics WHERE trial_id = " + t[0] +
                             " AND name NOT IN ('startup_s', 'teardown_s')")) {
      got.insert({std::stoll(r[0]), r[1], std::stod(r[2])});
    }
    ASSERT_EQ(got.size(), want.size()) << "trial " << t[0];
    auto overhead = Sql("SELECT name, step, value FROM metrics WHERE trial_id = " + t[0] +
                        " AND name IN ('startup_s', 'teardown_s') ORDER BY name");
    ASSERT_EQ(overhead.size(), 2u) << "trial " << t[0];
    EXPECT_EQ(overhead[0][0], "startup_s");
    EXPECT_EQ(overhead[0][1], "1");  // at the first step
    EXPECT_EQ(overhead[1][1], "20");  // teardown_s at the last
    EXPECT_GT(std::stod(overhead[0][2]), 0.0);
    auto g = got.begin();
    for (auto w = want.begin(); w != want.end(); ++w, ++g) {
      EXPECT_EQ(std::get<0>(*g), std::get<0>(*w));
      EXPECT_EQ(std::get<1>(*g), std::get<1>(*w));
      EXPECT_NEAR(std::get<2>(*g), std::get<2>(*w), 1e-12 * (1 + std::fabs(std::get<2>(*w))));
    }
    auto gemm = Sql("SELECT step, value FROM metrics WHERE trial_id = " + t[0] +
                    " AND name = 'profile.gemm_ms'");
    ASSERT_EQ(gemm.size(), 1u) << "trial " << t[0];
    EXPECT_EQ(gemm[0][0], "9");
    EXPECT_GT(std::stod(gemm[0][1]), 0.0);
  }

  // results: grouped by attention.kind, the mean of final_val_loss over its 4 trials.
  Output res = Cli({"results", "grid222", "--by", "attention.kind", "--format", "json"});
  ASSERT_EQ(res.code, 0) << res.out;
  json rows = json::parse(res.out);
  ASSERT_EQ(rows.size(), 2u) << res.out;
  for (const auto& row : rows) {
    std::string kind = row["attention.kind"];
    auto vals = Sql("SELECT l.value FROM latest_metrics l JOIN trials t ON t.id = l.trial_id "
                    "WHERE l.name = 'final_val_loss' AND json_extract(t.axes_json, "
                    "'$.\"attention.kind\"') = '" + kind + "'");
    ASSERT_EQ(vals.size(), 4u);
    double mean = 0;
    for (const auto& v : vals) mean += std::stod(v[0]) / 4;
    EXPECT_NEAR(row["mean"].get<double>(), mean, 1e-9);
    EXPECT_EQ(row["n"], 4);
  }
  Output table = Cli({"results", "grid222"});
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("sagebwd"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("±"), std::string::npos) << table.out;

  // query is read-only.
  std::string count_before = Sql("SELECT count(*) FROM metrics")[0][0];
  Output del = Cli({"query", "DELETE FROM metrics"});
  EXPECT_NE(del.code, 0) << del.out;
  Output drop = Cli({"query", "DROP TABLE trials"});
  EXPECT_NE(drop.code, 0) << drop.out;
  EXPECT_EQ(Sql("SELECT count(*) FROM metrics")[0][0], count_before);
  Output q = Cli({"query", "SELECT count(*) AS n FROM trials", "--format", "csv"});
  ASSERT_EQ(q.code, 0) << q.out;
  EXPECT_NE(q.out.find("8"), std::string::npos) << q.out;

  // Resubmitting adds nothing.
  Output again = Cli({"submit", spec});
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("0 new"), std::string::npos) << again.out;
  EXPECT_EQ(Sql("SELECT count(*) FROM trials")[0][0], "8");

  // Logs and workers answer.
  Output logs = Cli({"logs", trials[0][0]});
  EXPECT_EQ(logs.code, 0) << logs.out;
  Output ws = Cli({"workers", "--format", "json"});
  ASSERT_EQ(ws.code, 0) << ws.out;
  EXPECT_EQ(json::parse(ws.out).size(), 2u) << ws.out;
}

// compare, on a real CPU sweep with four seeds: a learning rate 100x too small is found (its
// interval excludes 0 after Holm), a factor without any effect on training (how often
// checkpoints are written) is not; the figures equal an independent computation from SQLite.
TEST_F(Cluster, CompareFindsALargeEffectAndNotANullOne) {
  std::string spec = WriteSpec("lrgrid", SmallBase(20) +
                                             "grid:\n"
                                             "  optimizer.lr: [0.0001, 0.01]\n"
                                             "  train.checkpoint_every: [10, 20]\n"
                                             "seeds: [0, 1, 2, 3]\n"
                                             "order: grid\n");
  Output sub = Cli({"submit", spec});
  ASSERT_EQ(sub.code, 0) << sub.out;
  Output watch = Cli({"watch", "lrgrid"}, seconds(400));
  ASSERT_EQ(watch.code, 0) << watch.out << ReadFile(*dir_ + "/worker0.log");

  // By hand from the database: per seed, the mean over checkpoint_every of each lr's
  // final_val_loss, then the paired differences (0.01 - 0.0001).
  // (axes_json holds each value as the sweep spells it: 0.0001 is "1e-04".)
  auto value = [&](const std::string& lr, const std::string& ck, int seed) {
    auto r = Sql("SELECT l.value FROM latest_metrics l JOIN trials t ON t.id = l.trial_id "
                 "WHERE l.name = 'final_val_loss' AND t.sweep_id = (SELECT id FROM sweeps WHERE "
                 "name = 'lrgrid') AND json_extract(t.axes_json, '$.\"optimizer.lr\"') = '" + lr +
                 "' AND json_extract(t.axes_json, '$.\"train.checkpoint_every\"') = '" + ck +
                 "' AND json_extract(t.axes_json, '$.seed') = '" + std::to_string(seed) + "'");
    EXPECT_EQ(r.size(), 1u) << lr << " " << ck << " " << seed;
    return r.empty() ? 0.0 : std::stod(r[0][0]);
  };
  double d[4], mean = 0;
  for (int s = 0; s < 4; ++s) {
    d[s] = (value("0.01", "10", s) + value("0.01", "20", s)) / 2 -
           (value("1e-04", "10", s) + value("1e-04", "20", s)) / 2;
    mean += d[s] / 4;
  }
  double ss = 0;
  for (double x : d) ss += (x - mean) * (x - mean);
  const double half = 3.1824463 * std::sqrt(ss / 3) / 2;  // t_{0.975, 3} x se

  Output lr = Cli({"compare", "lrgrid", "--factor", "optimizer.lr", "--format", "json"});
  ASSERT_EQ(lr.code, 0) << lr.out;
  json rows = json::parse(lr.out);
  ASSERT_EQ(rows.size(), 1u) << lr.out;
  const json& row = rows[0];
  EXPECT_EQ(row["value"], "0.01");
  EXPECT_EQ(row["baseline"], "1e-04");  // the sweep's canonical spelling of 0.0001
  EXPECT_EQ(row["n"], 4);
  EXPECT_EQ(row["test"], "paired-t");
  EXPECT_NEAR(row["delta"].get<double>(), mean, 1e-9);
  EXPECT_NEAR(row["ci_low"].get<double>(), mean - half, 1e-6);
  EXPECT_NEAR(row["ci_high"].get<double>(), mean + half, 1e-6);
  EXPECT_LT(row["ci_high"].get<double>(), 0.0) << lr.out;  // the larger lr learns: lower loss
  EXPECT_LT(row["p_adjusted"].get<double>(), 0.05) << lr.out;
  EXPECT_EQ(row["diverged"], 0);
  EXPECT_EQ(row["left_out"], 0);

  Output ck = Cli({"compare", "lrgrid", "--factor", "train.checkpoint_every", "--format", "json"});
  ASSERT_EQ(ck.code, 0) << ck.out;
  json crow = json::parse(ck.out).at(0);
  EXPECT_LE(crow["ci_low"].get<double>(), 0.0) << ck.out;
  EXPECT_GE(crow["ci_high"].get<double>(), 0.0) << ck.out;
  EXPECT_GE(crow["p_adjusted"].get<double>(), 0.05) << ck.out;
  EXPECT_NE(crow["verdict"].get<std::string>().find("difference"), std::string::npos) << ck.out;

  // The text table says what it tested and never reads a direction into an interval with 0.
  Output text = Cli({"compare", "lrgrid", "--factor", "train.checkpoint_every"});
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("paired by seed"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("lower"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("higher"), std::string::npos) << text.out;
  // Best over the learning rate: each checkpoint_every at its own best lr (0.01, by far),
  // chosen on seeds 0 and 1 and tested on 2 and 3; without --select-seeds it says optimistic.
  Output best = Cli({"compare", "lrgrid", "--factor", "train.checkpoint_every", "--best-over",
                     "optimizer.lr", "--select-seeds", "0,1", "--format", "json"});
  ASSERT_EQ(best.code, 0) << best.out;
  json brow = json::parse(best.out).at(0);
  EXPECT_EQ(brow["best_value"], "0.01") << best.out;
  EXPECT_EQ(brow["baseline_best_value"], "0.01") << best.out;
  EXPECT_EQ(brow["n"], 2);
  EXPECT_NEAR(brow["mean"].get<double>(),
              (value("0.01", "20", 2) + value("0.01", "20", 3)) / 2, 1e-9);
  Output best_text = Cli({"compare", "lrgrid", "--factor", "train.checkpoint_every",
                          "--best-over", "optimizer.lr"});
  ASSERT_EQ(best_text.code, 0) << best_text.out;
  EXPECT_NE(best_text.out.find("optimistic"), std::string::npos) << best_text.out;
  // A factor that is not an axis: a clear error naming the axes.
  Output bad = Cli({"compare", "lrgrid", "--factor", "optimizer.beta"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("optimizer.lr"), std::string::npos) << bad.out;
}

// Sweep identity and provenance, end to end: a changed base is refused (exit 2, the changed key
// listed, SQLite untouched) unless asked for a new version; an added seed adds only its trials;
// every attempt records the build that ran it; export equals the database; annotations and
// archiving reach the CLI.
TEST_F(Cluster, ResubmitsKeepTheSweepsIdentityAndEveryAttemptRecordsItsBuild) {
  const std::string grid = "grid:\n  optimizer.p: [0, 0.5]\nseeds: [0, 1]\norder: grid\n";
  std::string spec = WriteSpec("ident", SmallBase(10) + grid);
  ASSERT_EQ(Cli({"submit", spec}).code, 0);
  Output watch = Cli({"watch", "ident"}, seconds(240));
  ASSERT_EQ(watch.code, 0) << watch.out << ReadFile(*dir_ + "/worker0.log");
  const std::string sweep_sql = "(SELECT id FROM sweeps WHERE name = 'ident')";
  const auto spec_before = Sql("SELECT spec_yaml FROM sweeps WHERE name = 'ident'");

  // Provenance: every attempt has the trainer's build.
  auto builds = Sql("SELECT a.build_version, a.build_commit, a.numerics_version FROM attempts a "
                    "JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = " + sweep_sql);
  ASSERT_EQ(builds.size(), 4u);
  for (const auto& b : builds) {
    EXPECT_FALSE(b[0].empty());
    EXPECT_FALSE(b[1].empty());
    EXPECT_FALSE(b[2].empty());
    EXPECT_EQ(b, builds[0]);
  }

  // The base changed: refused with the key, old and new value; nothing stored.
  // (Other files, the same sweep name.)
  const std::string changed = *dir_ + "/ident-steps12.yaml";
  std::ofstream(changed) << "name: ident\n" << SmallBase(12) << grid;
  Output dry = Cli({"submit", changed, "--dry-run"});
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("changed"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("a submit would be refused"), std::string::npos) << dry.out;
  Output refused = Cli({"submit", changed});
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_NE(refused.out.find("train.steps: 10 -> 12 (4 trials)"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("--new-version"), std::string::npos) << refused.out;
  EXPECT_EQ(Sql("SELECT count(*) FROM trials WHERE sweep_id = " + sweep_sql)[0][0], "4");
  EXPECT_EQ(Sql("SELECT spec_yaml FROM sweeps WHERE name = 'ident'"), spec_before);

  // A seed added: only its 2 trials are new.
  const std::string more = *dir_ + "/ident-seed2.yaml";
  std::ofstream(more) << "name: ident\n"
                      << SmallBase(10) << "grid:\n  optimizer.p: [0, 0.5]\nseeds: [0, 1, 2]\n"
                      << "order: grid\n";
  Output added = Cli({"submit", more});
  ASSERT_EQ(added.code, 0) << added.out;
  EXPECT_NE(added.out.find("6 trials, 2 new"), std::string::npos) << added.out;
  ASSERT_EQ(Cli({"watch", "ident"}, seconds(240)).code, 0);

  // The changed base as a new version: a sweep of its own.
  Output v2 = Cli({"submit", changed, "--new-version", "--format", "json"});
  ASSERT_EQ(v2.code, 0) << v2.out;
  EXPECT_EQ(json::parse(v2.out)["sweep_name"], "ident.v2");
  EXPECT_EQ(Sql("SELECT count(*) FROM trials WHERE sweep_id = (SELECT id FROM sweeps WHERE name "
                "= 'ident.v2')")[0][0],
            "4");
  ASSERT_EQ(Cli({"cancel", "ident.v2"}).code, 0);

  // Export: one row per trial, the axes and final metrics as columns, equal to SQLite.
  Output csv = Cli({"export", "ident", "--format", "jsonl"});
  ASSERT_EQ(csv.code, 0) << csv.out;
  std::istringstream lines(csv.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    json r = json::parse(line);
    ++rows;
    const std::string id = std::to_string(r["trial_id"].get<int64_t>());
    auto db = Sql("SELECT t.state, json_extract(t.axes_json, '$.\"optimizer.p\"'), l.value FROM "
                  "trials t JOIN latest_metrics l ON l.trial_id = t.id AND l.name = "
                  "'final_val_loss' WHERE t.id = " + id);
    ASSERT_EQ(db.size(), 1u) << line;
    EXPECT_EQ(r["state"], db[0][0]);
    EXPECT_EQ(r["optimizer.p"], std::stod(db[0][1])) << line;
    // (SQLite's text of a real has 15 significant digits.)
    EXPECT_NEAR(r["final_val_loss"].get<double>(), std::stod(db[0][2]), 1e-12) << line;
    EXPECT_EQ(r["build_version"], builds[0][0]);
    EXPECT_EQ(r["builds"], 1);
  }
  EXPECT_EQ(rows, 6);
  Output series = Cli({"export", "ident", "--metrics", "val_loss", "--format", "csv"});
  ASSERT_EQ(series.code, 0) << series.out;
  EXPECT_EQ(series.out.rfind("trial_id,step,tokens,name,value", 0), 0u) << series.out;
  const auto points = Sql("SELECT count(*) FROM metrics m JOIN trials t ON t.id = m.trial_id "
                          "WHERE m.name = 'val_loss' AND t.sweep_id = " + sweep_sql);
  EXPECT_EQ(std::count(series.out.begin(), series.out.end(), '\n') - 1, std::stol(points[0][0]));

  // Annotations and archiving.
  const std::string first = Sql("SELECT min(id) FROM trials WHERE sweep_id = " + sweep_sql)[0][0];
  Output ann = Cli({"annotate", "trial:" + first, "--tag", "outlier", "--note", "loss spike at 7"});
  ASSERT_EQ(ann.code, 0) << ann.out;
  Output shown = Cli({"status", "trial:" + first});
  EXPECT_NE(shown.out.find("tags     outlier"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("note     loss spike at 7"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("numerics " + builds[0][2]), std::string::npos) << shown.out;
  Output bad_tag = Cli({"annotate", "trial:" + first, "--tag", "no spaces"});
  EXPECT_NE(bad_tag.code, 0);
  EXPECT_NE(bad_tag.out.find("a tag is"), std::string::npos) << bad_tag.out;
  ASSERT_EQ(Cli({"archive", "ident.v2"}).code, 0);
  Output list = Cli({"status"});
  EXPECT_EQ(list.out.find("ident.v2"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("archived sweep"), std::string::npos) << list.out;
  Output all = Cli({"status", "--archived"});
  EXPECT_NE(all.out.find("ident.v2"), std::string::npos) << all.out;
  EXPECT_EQ(Sql("SELECT archived FROM sweeps WHERE name = 'ident.v2'")[0][0], "1");
}

TEST_F(Cluster, BadSpecsQueueNothing) {
  int64_t before = Sql("SELECT count(*) FROM trials").empty()
                       ? 0
                       : std::stoll(Sql("SELECT count(*) FROM trials")[0][0]);
  std::string spec = WriteSpec("bad", SmallBase(10) + "grid:\n  atention.kind: [fpa]\n");
  Output o = Cli({"submit", spec});
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_NE(o.out.find("bad.yaml:"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("did you mean"), std::string::npos) << o.out;
  EXPECT_EQ(std::stoll(Sql("SELECT count(*) FROM trials")[0][0]), before);
  // An oversized spec is refused before parsing.
  std::string huge = WriteSpec("huge", SmallBase(10) + "# " + std::string(2 << 20, 'x') + "\n");
  Output h = Cli({"submit", huge});
  EXPECT_EQ(h.code, 2) << h.out.substr(0, 300);
  EXPECT_NE(h.out.find("limit"), std::string::npos) << h.out.substr(0, 300);
  EXPECT_EQ(std::stoll(Sql("SELECT count(*) FROM trials")[0][0]), before);
}

TEST_F(Cluster, CancelStopsTrainersAndRetryRequeuesOnlyWhatItShould) {
  std::string spec = WriteSpec("long", SmallBase(100000) + "grid:\n  optimizer.p: [0, 0.5, 1]\n");
  ASSERT_EQ(Cli({"submit", spec}).code, 0);
  // Wait until trainers run.
  bool running = false;
  for (int i = 0; i < 200 && !running; ++i) {
    auto r = Sql("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                 "WHERE s.name = 'long' AND t.state = 'running'");
    running = !r.empty() && std::stoi(r[0][0]) >= 2;
    if (!running) std::this_thread::sleep_for(milliseconds(100));
  }
  ASSERT_TRUE(running);
  Output c = Cli({"cancel", "long"});
  ASSERT_EQ(c.code, 0) << c.out;
  // Every trial canceled, and no trainer of this sweep is left.
  bool gone = false;
  for (int i = 0; i < 150 && !gone; ++i) {
    Output ps = ::ablate::testing::Run({"/usr/bin/pgrep", "-f", "ablate-train --config " + *dir_}, *dir_);
    gone = ps.code != 0;  // pgrep exits 1 when nothing matches
    if (!gone) std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(gone) << "trainer processes survived the cancel";
  auto states = Sql("SELECT DISTINCT t.state FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                    "WHERE s.name = 'long'");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0][0], "canceled");
  // retry --failed: nothing failed, nothing requeued; plain retry requeues the canceled ones.
  Output r1 = Cli({"retry", "long", "--failed"});
  ASSERT_EQ(r1.code, 0) << r1.out;
  EXPECT_NE(r1.out.find("0"), std::string::npos) << r1.out;
  EXPECT_EQ(Sql("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                "WHERE s.name = 'long' AND t.state IN ('queued', 'running')")[0][0],
            "0");
  Output r2 = Cli({"retry", "long"});
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_EQ(Sql("SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                "WHERE s.name = 'long' AND t.state IN ('queued', 'running')")[0][0],
            "3");
  ASSERT_EQ(Cli({"cancel", "long"}).code, 0);
}

TEST_F(Cluster, ACorpusOutsideTheDataRootIsRefused) {
  // The workers run with --data-root <test dir>: a config cannot make them read other files.
  std::string spec = WriteSpec("escape", "base:\n  data: {corpus: /etc/passwd}\n"
                                         "  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n"
                                         "  train: {steps: 5, tokens_per_step: 256, micro_batch: 8,"
                                         " warmup: 1, threads: 1}\n"
                                         "resources: {gpus: 0}\n");
  ASSERT_EQ(Cli({"submit", spec}).code, 0);
  Output w = Cli({"watch", "escape"}, seconds(60));
  EXPECT_EQ(w.code, 7) << w.out;  // finished with a failed trial
  auto rows = Sql("SELECT t.state, t.attempts, t.reason FROM trials t JOIN sweeps s "
                  "ON s.id = t.sweep_id WHERE s.name = 'escape'");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0][0], "failed");
  EXPECT_EQ(rows[0][1], "1");  // a config error: not retried
  EXPECT_NE(rows[0][2].find("outside"), std::string::npos) << rows[0][2];
  EXPECT_TRUE(Sql("SELECT 1 FROM metrics m JOIN trials t ON t.id = m.trial_id JOIN sweeps s ON "
                  "s.id = t.sweep_id WHERE s.name = 'escape'").empty());
}

TEST_F(Cluster, CallsWithoutTheTokenAreRefused) {
  std::string bad = *dir_ + "/bad_token";
  std::ofstream(bad) << "0123456789abcdef0123456789abcdef\n";
  ::chmod(bad.c_str(), 0600);
  Output o = ::ablate::testing::Run({ABLATE_CLI_BIN, "status", "--token-file", bad}, *dir_,
                 {"ABLATE_COORDINATOR=" + *addr_});
  EXPECT_EQ(o.code, 5) << o.out;
}

// A coordinator of its own (no workers, so the sweep stays queued), with a client watching at an
// interval of an hour. The watch handler slept the whole interval, and gRPC's shutdown waits for
// every handler, so SIGTERM took up to an hour, even after the client had gone.
TEST(Coordinator, ALongWatchIntervalDoesNotHoldUpShutdown) {
  const TempDir tmp("ablate_e2e");
  const std::string dir = tmp.path();
  ::mkdir((dir + "/coord").c_str(), 0700);
  Proc coordinator = Spawn({ABLATED_BIN, "--data-dir", dir + "/coord", "--grpc", "127.0.0.1:0"},
                           dir + "/ablated.log");
  const std::string addr = WaitForFile(dir + "/coord/ablated.addr", seconds(10));
  ASSERT_FALSE(addr.empty()) << ReadFile(dir + "/ablated.log");
  const std::vector<std::string> env = {"ABLATE_COORDINATOR=" + addr,
                                        "ABLATE_TOKEN_FILE=" + dir + "/coord/token"};
  std::ofstream(dir + "/corpus.txt") << Corpus();
  std::ofstream(dir + "/idle.yaml")
      << "name: idle\nbase:\n  data: {corpus: " << dir << "/corpus.txt}\n"
      << "  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n"
      << "  train: {steps: 5, tokens_per_step: 256, micro_batch: 8, warmup: 1}\n"
      << "resources: {gpus: 0}\n";
  Output submitted =
      ::ablate::testing::Run({ABLATE_CLI_BIN, "submit", dir + "/idle.yaml"}, dir, env);
  ASSERT_EQ(submitted.code, 0) << submitted.out;
  Proc watch =
      Spawn({ABLATE_CLI_BIN, "watch", "idle", "--interval", "3600"}, dir + "/watch.log", env);
  std::this_thread::sleep_for(seconds(2));  // the first snapshot is sent; the handler sleeps
  Kill(watch, SIGKILL);
  Wait(watch, seconds(5));
  Kill(coordinator, SIGTERM);
  const int code = Wait(coordinator, seconds(15));
  if (code == 999) Kill(coordinator, SIGKILL), Wait(coordinator, seconds(5));
  EXPECT_EQ(code, 0) << ReadFile(dir + "/ablated.log");
}

// A first run's path: a coordinator of its own, sweeps submitted before any worker is connected,
// and every CLI call and the worker given nothing but ABLATE_DATA_DIR (the address comes from its
// ablated.addr, the token from its token file).
//   - status (JSON and table) says why the queued trials wait: no worker is connected;
//   - a device: cpu sweep without resources is a CPU trial: a CPU-only worker runs it;
//   - a GPU sweep then says the connected workers have only CPU slots.
TEST(Coordinator, StatusSaysWhyQueuedTrialsWaitAndTheDataDirAloneIsEnough) {
  const TempDir tmp("ablate_e2e");
  const std::string dir = tmp.path();
  ::mkdir((dir + "/coord").c_str(), 0700);
  Proc coordinator = Spawn({ABLATED_BIN, "--data-dir", dir + "/coord", "--grpc", "127.0.0.1:0",
                            "--heartbeat-seconds", "0.5"},
                           dir + "/ablated.log");
  ASSERT_FALSE(WaitForFile(dir + "/coord/ablated.addr", seconds(10)).empty())
      << ReadFile(dir + "/ablated.log");
  const std::vector<std::string> env = {"ABLATE_DATA_DIR=" + dir + "/coord",
                                        "ABLATE_COORDINATOR=", "ABLATE_TOKEN_FILE="};
  auto cli = [&](std::vector<std::string> args, seconds timeout = seconds(60)) {
    args.insert(args.begin(), ABLATE_CLI_BIN);
    return ::ablate::testing::Run(args, dir, env, timeout);
  };
  auto waiting = [&]() {
    std::map<std::string, std::string> out;
    Output o = cli({"status", "--format", "json"});
    EXPECT_EQ(o.code, 0) << o.out;
    json j = json::parse(o.out, nullptr, false);
    if (!j.is_array()) {
      ADD_FAILURE() << o.out;
      return out;
    }
    for (const auto& s : j) {
      out[s["name"]] =
          s["waiting_reason"].is_string() ? s["waiting_reason"].get<std::string>() : "";
    }
    return out;
  };
  std::ofstream(dir + "/corpus.txt") << Corpus();
  const std::string model =
      "  data: {corpus: " + dir + "/corpus.txt}\n" +
      "  model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n" +
      "  train: {steps: 5, tokens_per_step: 256, micro_batch: 8, threads: 1}\n";
  std::ofstream(dir + "/oncpu.yaml") << "name: oncpu\nbase:\n  device: cpu\n" << model;
  std::ofstream(dir + "/ongpu.yaml") << "name: ongpu\nbase:\n" << model << "resources: {gpus: 1}\n";
  for (const char* spec : {"/oncpu.yaml", "/ongpu.yaml"}) {
    Output o = cli({"submit", dir + spec});
    ASSERT_EQ(o.code, 0) << o.out;
  }
  auto reasons = waiting();
  EXPECT_EQ(reasons["oncpu"], "no worker is connected; start an ablate-worker");
  EXPECT_EQ(reasons["ongpu"], "no worker is connected; start an ablate-worker");
  Output table = cli({"status", "oncpu"});
  EXPECT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("waiting: no worker is connected"), std::string::npos) << table.out;

  Proc worker = Spawn({ABLATE_WORKER_BIN, "--gpus", "none", "--cpu-slots", "1", "--work-dir",
                       dir + "/w", "--trainer", ABLATE_TRAIN_BIN, "--data-root", dir},
                      dir + "/worker.log", env);
  Output watch = cli({"watch", "oncpu"}, seconds(120));
  EXPECT_EQ(watch.code, 0) << watch.out << ReadFile(dir + "/worker.log");
  reasons = waiting();
  EXPECT_EQ(reasons["oncpu"], "");
  EXPECT_EQ(reasons["ongpu"],
            "the queued trials need 1 GPU each; the connected workers have only CPU slots");
  Output workers = cli({"workers", "--format", "json"});
  ASSERT_EQ(workers.code, 0) << workers.out;
  EXPECT_EQ(json::parse(workers.out, nullptr, false).size(), 1u) << workers.out;

  Kill(worker, SIGKILL);
  Wait(worker, seconds(5));
  Kill(coordinator, SIGTERM);
  if (Wait(coordinator, seconds(15)) == 999)
    Kill(coordinator, SIGKILL), Wait(coordinator, seconds(5));
}


// Early stopping on the CPU: a learning-rate sweep whose two hopeless rates are stopped at their
// first check (state stopped, before their last step, their judgments in SQLite, replayed equal
// from the stored metrics), while the good rates run to the end. And a GPU-share spec dry-runs.
TEST_F(Cluster, EarlyStoppingStopsHopelessRatesAndEveryJudgmentReplays) {
  // The good rates come first in the grid, so they hold the four CPU slots and have recorded
  // their values at every check before the hopeless ones start (median rule, min_configs 2).
  std::string spec =
      WriteSpec("esgrid", SmallBase(300) +
                              "grid:\n"
                              "  optimizer.lr: [0.01, 0.003, 0.000001, 0.0000001]\n"
                              "seeds: [0, 1]\n"
                              "order: grid\n"
                              "early_stop: {rule: median, grace_steps: 20, interval: 20, "
                              "min_configs: 2}\n");
  Output sub = Cli({"submit", spec});
  ASSERT_EQ(sub.code, 0) << sub.out;
  Output watch = Cli({"watch", "esgrid"}, seconds(400));
  ASSERT_EQ(watch.code, 0) << watch.out << ReadFile(*dir_ + "/worker0.log");
  EXPECT_NE(watch.out.find("4 stopped early"), std::string::npos) << watch.out;

  const std::string sweep_sql = "(SELECT id FROM sweeps WHERE name = 'esgrid')";
  auto states = Sql("SELECT json_extract(axes_json, '$.\"optimizer.lr\"'), state, "
                    "checkpoint_step FROM trials WHERE sweep_id = " + sweep_sql + " ORDER BY id");
  ASSERT_EQ(states.size(), 8u);
  for (const auto& r : states) {
    const bool hopeless = r[0] == "1e-06" || r[0] == "1e-07";
    EXPECT_EQ(r[1], hopeless ? "stopped" : "succeeded") << r[0];
    // (300 steps: the hopeless trials are judged at step 20 and must still be running when the
    // stop arrives, also on a loaded machine.)
    if (hopeless) EXPECT_LT(std::stoi(r[2]), 300) << "stopped at its last step: " << r[0];
  }
  // A stopped trial's state is committed with its judgment; its attempt ends when the trainer has
  // written its checkpoint and exited, a moment later on a loaded machine.
  const auto attempts_done = [&] {
    return Sql("SELECT count(*) FROM attempts a JOIN trials t ON t.id = a.trial_id WHERE "
               "t.sweep_id = " +
               sweep_sql + " AND a.state = 'running'")[0][0] == "0";
  };
  for (int i = 0; i < 600 && !attempts_done(); ++i) std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(attempts_done()) << "an attempt still runs a minute after the sweep ended";
  // Their attempts ended "stopped" after a checkpoint, their metrics kept; a seed still queued
  // when its configuration was judged (a slot freed early on a loaded machine) never started.
  auto stopped_attempts = Sql("SELECT count(*) FROM attempts a JOIN trials t ON t.id = a.trial_id "
                              "WHERE t.sweep_id = " + sweep_sql + " AND a.state = 'stopped'");
  auto never_started = Sql("SELECT count(*) FROM trials t WHERE t.sweep_id = " + sweep_sql +
                           " AND t.state = 'stopped' AND NOT EXISTS (SELECT 1 FROM attempts a "
                           "WHERE a.trial_id = t.id)");
  EXPECT_EQ(std::stoi(stopped_attempts[0][0]) + std::stoi(never_started[0][0]), 4)
      << stopped_attempts[0][0] << " stopped attempts, " << never_started[0][0]
      << " stopped before they started";
  auto other =
      Sql("SELECT count(*) FROM attempts a JOIN trials t ON t.id = a.trial_id WHERE "
          "t.sweep_id = " +
          sweep_sql + " AND t.state = 'stopped' AND a.state <> 'stopped'");
  if (other[0][0] != "0") {
    for (const auto& r : Sql("SELECT a.trial_id, a.attempt, a.state, a.exit_code, a.reason FROM "
                             "attempts a JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = " +
                             sweep_sql + " AND t.state = 'stopped'")) {
      ADD_FAILURE() << "a stopped trial's attempt: trial " << r[0] << " attempt " << r[1] << " "
                    << r[2] << " exit " << r[3] << ": " << r[4];
    }
  }
  // Every judgment is a row; the two stops name the hopeless configurations' seeds (in either
  // order: which of them reaches its check first depends on the machine's load).
  auto stops = Sql("SELECT config, trials_json, threshold, value FROM stop_decisions WHERE "
                   "sweep_id = " + sweep_sql + " AND decision = 'stop' ORDER BY config");
  ASSERT_EQ(stops.size(), 2u);
  EXPECT_EQ(stops[0][0], "optimizer.lr=1e-06");
  EXPECT_EQ(stops[1][0], "optimizer.lr=1e-07");
  EXPECT_GT(std::stod(stops[0][3]), std::stod(stops[0][2]));  // worse than the median
  // Replay: each judgment's seed values are the trials' first val_loss at or after its step, and
  // its threshold is the median of the values recorded before it in the same check.
  auto decisions = Sql("SELECT id, step, rung, trials_json, seed_values_json, compared_json, "
                       "threshold, decision, config FROM stop_decisions WHERE sweep_id = " +
                       sweep_sql + " ORDER BY id");
  std::map<int, std::vector<double>> recorded;  // rung -> values so far
  for (const auto& d : decisions) {
    const int rung = std::stoi(d[2]);
    json trials = json::parse(d[3]), seeds = json::parse(d[4]), compared = json::parse(d[5]);
    ASSERT_EQ(trials.size(), seeds.size()) << d[0];
    double mean = 0;
    for (size_t i = 0; i < trials.size(); ++i) {
      auto v = Sql("SELECT value FROM metrics WHERE trial_id = " + trials[i].dump() +
                   " AND name = 'val_loss' AND step >= " + d[1] + " ORDER BY step, attempt DESC LIMIT 1");
      ASSERT_EQ(v.size(), 1u) << d[0];
      // (The query prints 15 significant digits.)
      EXPECT_NEAR(std::stod(v[0][0]), seeds[i].get<double>(), 1e-13 * seeds[i].get<double>())
          << d[0];
      mean += seeds[i].get<double>() / double(seeds.size());
    }
    std::vector<double> before = recorded[rung];
    ASSERT_EQ(compared.size(), before.size() + 1) << d[0];
    if (before.size() >= 2) {
      std::sort(before.begin(), before.end());
      const size_t n = before.size();
      const double median = n % 2 ? before[n / 2] : (before[n / 2 - 1] + before[n / 2]) / 2;
      EXPECT_NEAR(std::stod(d[6]), median, 1e-13 * median) << d[0];
      EXPECT_EQ(d[7], mean > median ? "stop" : "continue") << d[0];
    } else {
      EXPECT_EQ(d[7], "continue") << d[0];
    }
    recorded[rung].push_back(mean);
  }
  // The CLI shows them; compare and results count the stopped seeds apart, never averaged.
  Output status = Cli({"status", "esgrid"});
  EXPECT_NE(status.out.find("early stopping: median on val_loss"), std::string::npos) << status.out;
  Output listed = Cli({"status", "esgrid", "--decisions", "--format", "json"});
  ASSERT_EQ(listed.code, 0) << listed.out;
  EXPECT_EQ(json::parse(listed.out).size(), decisions.size());
  Output res = Cli({"results", "esgrid", "--format", "json"});
  ASSERT_EQ(res.code, 0) << res.out;
  for (const auto& row : json::parse(res.out)) {
    const std::string lr = row["optimizer.lr"];
    const bool hopeless = lr == "1e-06" || lr == "1e-07";
    EXPECT_EQ(row["stopped"], hopeless ? 2 : 0) << lr;
    EXPECT_EQ(row["n"], hopeless ? 0 : 2) << lr;
  }
  // retry --stopped resumes one configuration's trials from their checkpoints.
  Output retry = Cli({"retry", "esgrid", "--stopped"});
  ASSERT_EQ(retry.code, 0) << retry.out;
  EXPECT_NE(retry.out.find("requeued 4 stopped trials"), std::string::npos) << retry.out;
  ASSERT_EQ(Cli({"watch", "esgrid"}, seconds(300)).code, 0);
  auto after = Sql("SELECT count(*) FROM trials WHERE sweep_id = " + sweep_sql +
                   " AND state = 'succeeded' AND early_stop_exempt = 1");
  EXPECT_EQ(after[0][0], "4");

  // A share of a GPU: accepted, and a dry run shows the plan (no GPU needed to plan).
  std::string shared = WriteSpec("shared", "base: {train: {steps: 10}}\nresources: {gpus: 0.25}\n"
                                           "grid: {optimizer.lr: [0.01, 0.1]}\n");
  Output dry = Cli({"submit", shared, "--dry-run"});
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("2 trials"), std::string::npos) << dry.out;

  // The papers' own settings (examples/paper/) dry-run: accepted as they are, over llm.c shards
  // this machine does not have (a dry run plans; it reads no data).
  for (const auto& [file, trials] : {std::pair<std::string, std::string>{"sagebwd_tps", "4 trials"},
                                     {"beyondmuon_gpt2", "8 trials"},
                                     {"muon8bit_1p6b", "6 trials"}}) {
    Output paper =
        Cli({"submit", std::string(ABLATE_EXAMPLES_PAPER_DIR) + "/" + file + ".yaml", "--dry-run"});
    ASSERT_EQ(paper.code, 0) << file << ": " << paper.out;
    EXPECT_NE(paper.out.find(trials), std::string::npos) << file << ": " << paper.out;
  }
}

}  // namespace
}  // namespace ablate::testing
