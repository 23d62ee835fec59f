// The CLI end to end against an in-process fake ControlService: what each command sends (including
// the bearer token), what it prints, and its exit code.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "app.h"
#include "commands/command.h"
#include "exit_codes.h"
#include "fake_control.h"

namespace ablate::cli {
namespace {

using testing::FakeControl;
using testing::FakeServer;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct CliResult {
  int code;
  std::string out, err;
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ablate_cli_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    token_file_ = Write("token", std::string(kToken) + "\n");
    ::chmod(token_file_.c_str(), 0600);
    server_ = std::make_unique<FakeServer>(&fake_);
  }
  void TearDown() override {
    server_.reset();
    for (const std::string& f : files_) std::remove(f.c_str());
    ::rmdir(dir_.c_str());
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  // Runs `ablate --coordinator <fake> --token-file <token> args...`; the clock advances 10 s per
  // reading.
  CliResult Ablate(std::vector<std::string> args, bool tty = false) {
    std::vector<std::string> full = {"--coordinator", server_->address(), "--token-file",
                                     token_file_};
    full.insert(full.end(), args.begin(), args.end());
    std::ostringstream out, err;
    Io io;
    io.out = &out;
    io.err = &err;
    io.tty = tty;
    io.width = 120;
    io.height = 30;
    io.now = [t = 1.7e9]() mutable { return t += 10; };
    const int code = RunCli(full, io, [](const std::string&) { return std::nullopt; });
    return {code, out.str(), err.str()};
  }

  void ExpectAuthenticated() {
    auto auth = fake_.authorization();
    ASSERT_FALSE(auth.empty());
    for (const std::string& a : auth) EXPECT_EQ(a, std::string("Bearer ") + kToken);
  }

  FakeControl fake_{kToken};
  std::unique_ptr<FakeServer> server_;
  std::string dir_, token_file_;
  std::vector<std::string> files_;
};

v1::TrialSummary Trial(int64_t id, v1::TrialState state, int64_t step, int64_t total,
                       std::map<std::string, std::string> axes, double loss = kNaN) {
  v1::TrialSummary t;
  t.set_trial_id(id);
  t.set_state(state);
  t.set_step(step);
  t.set_total_steps(total);
  t.set_loss(loss);
  t.set_val_loss(kNaN);
  for (auto& [k, v] : axes) (*t.mutable_axes())[k] = v;
  return t;
}

TEST_F(CliTest, SubmitSendsTheSpecAndTheToken) {
  const std::string spec = "name: qk\nbase: {}\ngrid: {attention.kind: [fpa, sagebwd]}\n";
  const std::string path = Write("sweep.yaml", spec);
  fake_.submit.set_sweep_id(3);
  fake_.submit.set_sweep_name("qk");
  fake_.submit.set_total_trials(16);
  fake_.submit.set_new_trials(4);
  CliResult r = Ablate({"submit", path, "--priority", "5"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "sweep qk (id 3): 16 trials, 4 new\n");
  const v1::SubmitRequest req = fake_.last_submit();
  EXPECT_EQ(req.spec_yaml(), spec);
  EXPECT_EQ(req.spec_file(), path);
  EXPECT_TRUE(req.has_priority());
  EXPECT_EQ(req.priority(), 5);
  EXPECT_FALSE(req.dry_run());
  EXPECT_FALSE(req.force());
  ExpectAuthenticated();

  r = Ablate({"submit", path, "--force", "--format", "json"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(fake_.last_submit().force());
  EXPECT_FALSE(fake_.last_submit().has_priority());
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sweep_id"], 3);
  EXPECT_EQ(j["new_trials"], 4);
}

TEST_F(CliTest, SubmitDryRunPrintsTheExpandedTrials) {
  const std::string path = Write("sweep.yaml", "name: qk\n");
  fake_.submit.set_sweep_name("qk");
  fake_.submit.set_total_trials(2);
  fake_.submit.set_new_trials(2);
  fake_.submit.add_axes("attention.kind");
  fake_.submit.add_axes("seed");
  for (const char* kind : {"fpa", "sagebwd"}) {
    v1::TrialSummary* t = fake_.submit.add_trials();
    (*t->mutable_axes())["attention.kind"] = kind;
    (*t->mutable_axes())["seed"] = "0";
    t->set_config_hash(std::string(kind) == "fpa" ? "a1b2c3d4e5f60708" : "0f0e0d0c0b0a0908");
    t->set_config_json(R"({"attention":{"kind":")" + std::string(kind) + R"("}})");
    t->set_plan(std::string(kind) == "fpa" ? "existing" : "new");
  }
  fake_.submit.set_new_trials(1);
  fake_.submit.set_existing_trials(1);
  CliResult r = Ablate({"submit", "--dry-run", path});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fake_.last_submit().dry_run());
  EXPECT_EQ(r.out,
            "#  attention.kind  seed  config_hash       plan\n"
            "1  fpa             0     a1b2c3d4e5f60708  existing\n"
            "2  sagebwd         0     0f0e0d0c0b0a0908  new\n"
            "2 trials in sweep qk: 1 new, 1 existing, 0 changed (dry run: nothing submitted)\n");

  r = Ablate({"submit", "--dry-run", path, "--format", "json"});
  EXPECT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);  // the count went to stderr
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["attention.kind"], "sagebwd");
  EXPECT_EQ(j[1]["config"]["attention"]["kind"], "sagebwd");
  EXPECT_NE(r.err.find("2 trials"), std::string::npos);
}

// A dry run of 4,000 trials with their configs is ~6 MB: past gRPC's default 4 MB receive limit
// ("Received message larger than max" before). The server's warnings reach stderr.
TEST_F(CliTest, SubmitDryRunOfThousandsOfTrialsAndTheServersWarnings) {
  const std::string path = Write("sweep.yaml", "name: big\n");
  fake_.submit.set_sweep_name("big");
  fake_.submit.set_total_trials(4000);
  fake_.submit.add_axes("seed");
  const std::string config = R"({"pad":")" + std::string(1500, 'x') + R"("})";
  for (int i = 0; i < 4000; ++i) {
    v1::TrialSummary* t = fake_.submit.add_trials();
    (*t->mutable_axes())["seed"] = std::to_string(i);
    // Appended, not "h" + std::to_string(i): GCC 12 warns (-Wrestrict, a false positive) there.
    t->set_config_hash(std::string("h").append(std::to_string(i)));
    t->set_config_json(config);
  }
  fake_.submit.add_warnings("exclude[0] matches no point");
  CliResult r = Ablate({"submit", "--dry-run", path});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4002);  // header, rows, count
  EXPECT_EQ(r.err, "warning: exclude[0] matches no point\n");
}

// What only the CLI can place: a spec that is not UTF-8 (protobuf would refuse to send it:
// "ablate: INTERNAL" before) gets FILE:LINE:COL, and a folder is no spec. Nothing is sent.
TEST_F(CliTest, SubmitRefusesASpecThatIsNotUtf8OrNotAFile) {
  const std::string path = Write("latin1.yaml", "name: x\n# r\xE9sum\xE9\n");
  CliResult r = Ablate({"submit", "--dry-run", path});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "ablate: " + path +
                       ":2:4: the spec is not valid UTF-8 (byte 0xE9); save it as UTF-8\n");
  r = Ablate({"submit", dir_});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("not a regular file (it is a directory)"), std::string::npos) << r.err;
  EXPECT_EQ(fake_.calls(), 0);
}

TEST_F(CliTest, SubmitPrintsSpecErrorsAsIs) {
  const std::string path = Write("bad.yaml", "name: qk\n");
  const std::string msg =
      path + ":3:7: grid.atention.kind: unknown key (did you mean 'attention.kind'?)";
  fake_.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
  CliResult r = Ablate({"submit", path});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, msg + "\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, StatusListsSweeps) {
  v1::SweepInfo* s = fake_.sweeps.add_sweeps();
  s->set_sweep_id(1);
  s->set_name("pgrid");
  s->set_total(4);
  (*s->mutable_counts())["succeeded"] = 4;
  CliResult r = Ablate({"status"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "id  name   total  queued  running  succeeded  failed  diverged  canceled  progress\n"
            " 1  pgrid      4       0        0          4       0         0         0      100%\n");
  r = Ablate({"status", "--format", "csv"});
  EXPECT_EQ(r.out,
            "id,name,total,queued,running,succeeded,failed,diverged,canceled,stopped,progress_pct,"
            "waiting_reason\r\n"
            "1,pgrid,4,0,0,4,0,0,0,0,100,\r\n");
  ExpectAuthenticated();
}

// A sweep whose queued trials no connected worker can take says why: a line under the sweeps
// table, waiting_reason in the machine formats, and a line under one sweep's header.
TEST_F(CliTest, StatusSaysWhyQueuedTrialsWait) {
  const std::string why = "no worker is connected; start an ablate-worker";
  v1::SweepInfo* s = fake_.sweeps.add_sweeps();
  s->set_sweep_id(2);
  s->set_name("idle");
  s->set_total(3);
  (*s->mutable_counts())["queued"] = 3;
  s->set_waiting_reason(why);
  CliResult r = Ablate({"status"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\nsweep idle is waiting: " + why + "\n"), std::string::npos) << r.out;
  r = Ablate({"status", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["waiting_reason"], why) << r.out;

  *fake_.sweep.mutable_sweep() = *s;
  r = Ablate({"status", "idle"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(0% done)\nwaiting: " + why + "\n\n"), std::string::npos) << r.out;
}

TEST_F(CliTest, StatusOfOneSweepListsItsTrials) {
  v1::SweepInfo* s = fake_.sweep.mutable_sweep();
  s->set_sweep_id(3);
  s->set_name("qk");
  s->set_total(2);
  s->add_axes("attention.qk_norm");
  (*s->mutable_counts())["running"] = 1;
  (*s->mutable_counts())["queued"] = 1;
  *fake_.sweep.add_trials() =
      Trial(5, v1::RUNNING, 120, 500, {{"attention.qk_norm", "true"}}, 3.25);
  *fake_.sweep.add_trials() = Trial(6, v1::QUEUED, 0, 500, {{"attention.qk_norm", "false"}});
  fake_.sweep.mutable_trials(0)->set_attempt(1);
  fake_.sweep.mutable_trials(0)->set_worker_id("w1");
  CliResult r = Ablate({"status", "sweep:3"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.last_get_sweep().sweep(), "3");
  EXPECT_EQ(r.out,
            "sweep qk (id 3): 2 trials, 1 queued, 1 running, 0 succeeded, 0 failed, 0 diverged, "
            "0 canceled (0% done)\n\n"
            "id  attention.qk_norm  state    attempt  worker     step    loss  val_loss  reason\n"
            " 5  true               running        1  w1      120/500  3.2500         -  -\n"
            " 6  false              queued         -  -         0/500       -         -  -\n");
  r = Ablate({"status", "qk", "--format", "json"});
  EXPECT_EQ(fake_.last_get_sweep().sweep(), "qk");
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j[0]["attention.qk_norm"], "true");
  EXPECT_EQ(j[0]["step"], 120);
  EXPECT_DOUBLE_EQ(j[0]["loss"].get<double>(), 3.25);
  EXPECT_TRUE(j[1]["loss"].is_null());
}

TEST_F(CliTest, StatusOfOneTrialShowsAttemptsAndMetrics) {
  *fake_.trial.mutable_trial() = Trial(12, v1::RUNNING, 40, 100, {{"optimizer.p", "0.5"}}, 4.5);
  fake_.trial.mutable_trial()->set_config_hash("abcd");
  fake_.trial.mutable_trial()->set_config_json(R"({"seed":1})");
  fake_.trial.set_sweep_name("pgrid");
  v1::AttemptInfo* a = fake_.trial.add_attempts();
  a->set_attempt(1);
  a->set_worker_id("w1");
  a->set_state("lost");
  a->set_reason("lease expired");
  a->set_checkpoint_path("/ckpt/12-1");
  a->set_checkpoint_step(30);
  a = fake_.trial.add_attempts();
  a->set_attempt(2);
  a->set_worker_id("w2");
  a->set_state("running");
  a->add_gpu_indices(0);
  a->add_gpu_indices(1);
  a->mutable_build()->set_version("0.4.0");
  a->mutable_build()->set_commit("0123456789abcdef-dirty");
  a->mutable_build()->set_numerics("1");
  fake_.trial.mutable_trial()->add_tags("outlier");
  fake_.trial.mutable_trial()->set_note("spike at 30");
  v1::MetricPoint* m = fake_.trial.add_latest();
  m->set_name("loss");
  m->set_step(40);
  m->set_value(4.5);
  CliResult r = Ablate({"status", "trial:12"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "trial 12 of sweep pgrid: running\n"
            "  axes     optimizer.p=0.5\n"
            "  hash     abcd\n"
            "  step     40/100   loss 4.5000   val_loss -\n"
            "  tags     outlier\n"
            "  note     spike at 30\n"
            "\n"
            "attempt  worker  state    gpus  checkpoint  exit  reason         build\n"
            "      1  w1      lost     -             30     0  lease expired  -\n"
            "      2  w2      running  0,1            -     -  -              0.4.0 0123456789ab-dirty numerics 1\n"
            "\n"
            "metric  step  value\n"
            "loss      40    4.5\n");
  r = Ablate({"status", "trial:12", "--format", "json"});
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["trial_id"], 12);
  EXPECT_EQ(j["config"]["seed"], 1);
  EXPECT_EQ(j["attempts"][0]["reason"], "lease expired");
  EXPECT_TRUE(j["attempts"][1]["reason"].is_null());  // absent values are null, not ""
  EXPECT_TRUE(j["reason"].is_null());
  EXPECT_EQ(j["latest"]["loss"]["value"], 4.5);
  EXPECT_TRUE(j["attempts"][0]["build"].is_null());  // not reported
  EXPECT_EQ(j["attempts"][1]["build"]["commit"], "0123456789abcdef-dirty");
  EXPECT_EQ(j["tags"], nlohmann::json::array({"outlier"}));
  EXPECT_EQ(j["note"], "spike at 30");
}

TEST_F(CliTest, UnknownSweepExitsThree) {
  fake_.status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no sweep named 'nope'");
  CliResult r = Ablate({"status", "nope"});
  EXPECT_EQ(r.code, kExitNotFound);
  EXPECT_EQ(r.err, "ablate: no sweep named 'nope'\n");
}

TEST_F(CliTest, WrongTokenExitsFiveAndNamesTheTokenFile) {
  const std::string other = Write("other-token", "ffffffffffffffffffffffffffffffff\n");
  ::chmod(other.c_str(), 0600);
  CliResult r = Ablate({"workers", "--token-file", other});
  EXPECT_EQ(r.code, kExitAuth);
  EXPECT_NE(r.err.find(other), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rejected the token"), std::string::npos) << r.err;
  EXPECT_EQ(fake_.authorization().back(), "Bearer ffffffffffffffffffffffffffffffff");
}

TEST_F(CliTest, ResultsSendsMetricAndAxesAndMarksTheBest) {
  fake_.results.set_metric("final_val_loss");
  fake_.results.add_by("attention.kind");
  for (auto [kind, mean] : {std::pair{"fpa", 3.3}, std::pair{"sagebwd", 3.2}}) {
    v1::ResultsRow* row = fake_.results.add_rows();
    row->add_keys(kind);
    row->set_n(2);
    row->set_trials(2);
    row->set_mean(mean);
    row->set_std(0.01);
    row->set_se(0.01 / std::sqrt(2.0));
    row->set_ci_low(mean - 12.706205 * row->se());
    row->set_ci_high(mean + 12.706205 * row->se());
    row->set_min(mean - 0.01);
    row->set_max(mean + 0.01);
    row->set_builds(1);
  }
  fake_.results.set_lower_is_better(true);
  CliResult r = Ablate({"results", "qk", "--by", "attention.kind,optimizer.p", "--by", "seed"});
  EXPECT_EQ(r.code, 0) << r.err;
  const v1::ResultsRequest req = fake_.last_results();
  EXPECT_EQ(req.sweep(), "qk");
  EXPECT_EQ(req.metric(), "final_val_loss");
  ASSERT_EQ(req.by_size(), 3);
  EXPECT_EQ(req.by(0), "attention.kind");
  EXPECT_EQ(req.by(1), "optimizer.p");
  EXPECT_EQ(req.by(2), "seed");
  // Two seeds: intervals too wide to separate 3.2 from 3.3, so no best.
  EXPECT_EQ(r.out,
            "  attention.kind  final_val_loss mean ± se (n)            95% CI\n"
            "  fpa                      3.3000 ± 0.0071 (2)  [3.2102, 3.3898]\n"
            "  sagebwd                  3.2000 ± 0.0071 (2)  [3.1102, 3.2898]\n"
            "se: standard error of the mean over seeds; 95% CI: t interval of the mean; (n/m): n of "
            "the m trials have a value\n"
            "no best marked: no cell's 95% interval is apart from all others (seed noise may "
            "explain the order; ablate compare tests paired differences)\n");
  // The server's mark is the best.
  fake_.results.mutable_rows(1)->set_best(true);
  r = Ablate({"results", "qk", "--by", "attention.kind"});
  EXPECT_NE(r.out.find("*  sagebwd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("* best: the lowest mean, its 95% interval apart from every other cell's"),
            std::string::npos)
      << r.out;
  fake_.results.mutable_rows(1)->set_best(false);

  r = Ablate({"results", "sweep:9", "--metric", "tokens_per_s", "--format", "csv"});
  EXPECT_EQ(fake_.last_results().sweep(), "9");
  EXPECT_EQ(fake_.last_results().metric(), "tokens_per_s");
  EXPECT_EQ(fake_.last_results().by_size(), 0);
  EXPECT_EQ(r.out.substr(0, r.out.find("\r\n")),
            "attention.kind,metric,mean,std,se,ci_low,ci_high,n,trials,min,max,diverged,failed,"
            "stopped,builds,best");
}

// A misspelled --metric printed a table of '-' with no word about it: now stderr says that no
// trial has a value of it, and which metrics the sweep's trials report (one read-only query).
TEST_F(CliTest, ResultsOfAMetricNoTrialHasSaySoAndListWhatThereIs) {
  fake_.results.set_metric("final_val_los");
  fake_.results.add_by("attention.kind");
  v1::ResultsRow* row = fake_.results.add_rows();
  row->add_keys("fpa");
  row->set_trials(2);
  fake_.query.add_columns("name");
  for (const char* name : {"final_val_loss", "loss"}) {
    fake_.query.add_rows()->add_values()->set_text(name);
  }
  CliResult r = Ablate({"results", "it's", "--metric", "final_val_los"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err,
            "no trial of sweep it's has a value of final_val_los yet; its trials report: "
            "final_val_loss, loss\n");
  // The sweep's name is quoted for SQL.
  EXPECT_NE(fake_.last_query().sql().find("name = 'it''s'"), std::string::npos)
      << fake_.last_query().sql();
}

TEST_F(CliTest, QueryPrintsRowsAndNotesTruncation) {
  fake_.query.add_columns("trial_id");
  fake_.query.add_columns("name");
  fake_.query.add_columns("value");
  v1::QueryRow* row = fake_.query.add_rows();
  row->add_values()->set_integer(1);
  row->add_values()->set_text("loss, train");
  row->add_values()->set_real(3.25);
  row = fake_.query.add_rows();
  row->add_values()->set_integer(2);
  row->add_values()->set_null(true);
  row->add_values()->set_real(0.1);
  fake_.query.set_truncated(true);
  CliResult r = Ablate({"query", "SELECT trial_id, name, value FROM metrics", "--max-rows", "2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.last_query().sql(), "SELECT trial_id, name, value FROM metrics");
  EXPECT_EQ(fake_.last_query().max_rows(), 2);
  EXPECT_EQ(r.out,
            "trial_id  name         value\n"
            "       1  loss, train   3.25\n"
            "       2  -              0.1\n");
  EXPECT_NE(r.err.find("truncated to 2 rows"), std::string::npos);
  r = Ablate({"query", "SELECT 1", "--format", "csv"});
  EXPECT_EQ(r.out, "trial_id,name,value\r\n1,\"loss, train\",3.25\r\n2,,0.1\r\n");
  r = Ablate({"query", "SELECT 1", "--format", "json"});
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j[1]["name"].is_null());
  EXPECT_EQ(j[0]["trial_id"], 1);

  fake_.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "only SELECT is allowed");
  r = Ablate({"query", "DELETE FROM trials"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err, "ablate: only SELECT is allowed\n");
}

TEST_F(CliTest, CancelTellsTrialsFromSweeps) {
  fake_.cancel.set_canceled(1);
  CliResult r = Ablate({"cancel", "12"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fake_.last_cancel().is_trial());
  EXPECT_EQ(fake_.last_cancel().target(), "12");
  EXPECT_EQ(r.out, "trial 12: canceled 1 trial\n");
  fake_.cancel.set_canceled(7);
  r = Ablate({"cancel", "qk"});
  EXPECT_FALSE(fake_.last_cancel().is_trial());
  EXPECT_EQ(fake_.last_cancel().target(), "qk");
  EXPECT_EQ(r.out, "sweep qk: canceled 7 trials\n");
  r = Ablate({"cancel", "sweep:4"});
  EXPECT_FALSE(fake_.last_cancel().is_trial());
  EXPECT_EQ(fake_.last_cancel().target(), "4");
}

TEST_F(CliTest, RetryAndWorkersAndLogs) {
  fake_.retry.set_requeued(2);
  CliResult r = Ablate({"retry", "qk", "--failed"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fake_.last_retry().failed_only());
  EXPECT_EQ(r.out, "sweep qk: requeued 2 failed trials\n");

  v1::WorkerInfo* w = fake_.workers.add_workers();
  w->set_worker_id("w1");
  w->set_hostname("node1");
  w->set_state("idle");
  w->set_cpu_slots(2);
  r = Ablate({"workers", "--format", "json"});
  EXPECT_EQ(r.code, 0);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j[0]["worker_id"], "w1");
  EXPECT_EQ(j[0]["cpu_slots"], 2);

  auto* e = fake_.logs.add_entries();
  e->set_attempt(1);
  e->set_worker_id("w1");
  e->set_state("failed");
  e->set_log_tail("step 10 loss 9.1\nerror: out of memory");
  r = Ablate({"logs", "trial:12", "--attempt", "1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.last_logs().trial_id(), 12);
  EXPECT_EQ(fake_.last_logs().attempt(), 1);
  EXPECT_EQ(r.out,
            "=== trial 12 · attempt 1 · worker w1 · failed ===\n"
            "step 10 loss 9.1\nerror: out of memory\n");
  ExpectAuthenticated();
}

// A sweep of two 100-step trials, one snapshot per stage; `last` is the final state of trial 2.
std::vector<v1::SweepSnapshot> Stages(v1::TrialState last) {
  std::vector<v1::SweepSnapshot> out;
  auto snap = [&](v1::TrialState a, int64_t sa, v1::TrialState b, int64_t sb) {
    v1::SweepSnapshot s;
    s.mutable_sweep()->set_sweep_id(2);
    s.mutable_sweep()->set_name("qk");
    s.mutable_sweep()->set_total(2);
    s.mutable_sweep()->add_axes("seed");
    for (auto [state, step, id] : {std::tuple{a, sa, 1}, std::tuple{b, sb, 2}}) {
      *s.add_trials() = Trial(id, state, step, 100, {{"seed", std::to_string(id)}}, 3.0);
      (*s.mutable_sweep()->mutable_counts())[std::string(TrialStateName(state))] += 1;
    }
    const bool done =
        (a != v1::QUEUED && a != v1::RUNNING) && (b != v1::QUEUED && b != v1::RUNNING);
    s.mutable_sweep()->set_finished(done);
    if (b == v1::FAILED) s.mutable_trials(1)->set_reason("exit code 1\ntraceback");
    out.push_back(s);
  };
  snap(v1::RUNNING, 0, v1::QUEUED, 0);
  snap(v1::RUNNING, 50, v1::QUEUED, 0);
  snap(v1::RUNNING, 50, v1::QUEUED, 0);  // no change: no new line off a terminal
  snap(v1::SUCCEEDED, 100, v1::RUNNING, 20);
  snap(v1::SUCCEEDED, 100, last, 100);
  return out;
}

TEST_F(CliTest, WatchPrintsOneLinePerChangeAndEndsWithTheSweep) {
  fake_.snapshots = Stages(v1::DIVERGED);
  CliResult r = Ablate({"watch", "qk", "--interval", "0.5"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.last_watch().sweep(), "qk");
  EXPECT_EQ(fake_.last_watch().interval_ms(), 500);
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 5u) << r.out;  // 4 distinct snapshots + the summary
  EXPECT_NE(lines[0].find("] sweep qk: 0% · 0/2 finished · 1 running · 1 queued · ETA -"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[0].front(), '[');  // a timestamp
  // 50 of 200 steps in 10 s: 5 steps/s, 150 steps left.
  EXPECT_NE(lines[1].find("25% · 0/2 finished · 1 running · 1 queued · ETA 30s"), std::string::npos)
      << lines[1];
  EXPECT_NE(lines[3].find("100% · 2/2 finished · 1 succeeded · 1 diverged · done"),
            std::string::npos)
      << lines[3];
  EXPECT_EQ(lines[4], "sweep qk finished: 1 succeeded, 1 diverged, 0 failed, 0 canceled");
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos);  // no escape codes off a terminal
  ExpectAuthenticated();
}

TEST_F(CliTest, WatchExitsSevenWhenTrialsFailed) {
  fake_.snapshots = Stages(v1::FAILED);
  CliResult r = Ablate({"watch", "qk"});
  EXPECT_EQ(r.code, kExitWatchFailures) << r.err;
  EXPECT_NE(r.out.find("sweep qk finished: 1 succeeded, 0 diverged, 1 failed, 0 canceled\n"
                       "  trial 2 failed: exit code 1\n"),
            std::string::npos)
      << r.out;
}

TEST_F(CliTest, WatchRedrawsInPlaceOnATerminal) {
  fake_.snapshots = Stages(v1::SUCCEEDED);
  CliResult r = Ablate({"watch", "qk"}, /*tty=*/true);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\x1b[2K"), std::string::npos);
  EXPECT_NE(r.out.find("\x1b[4A\r"), std::string::npos);  // back over a 4-line frame
  EXPECT_NE(r.out.find("█"), std::string::npos);
  EXPECT_NE(r.out.find("      1  [█████     ]  50/100  3.0000         -  -       1\n"),
            std::string::npos)
      << r.out;
}

TEST_F(CliTest, WatchReconnectsWhenTheStreamBreaks) {
  fake_.snapshots = Stages(v1::SUCCEEDED);
  fake_.watch_break_after = 2;
  CliResult r = Ablate({"watch", "qk"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.watch_calls(), 2);
  EXPECT_NE(r.err.find("reconnecting"), std::string::npos);
  EXPECT_NE(r.out.find("sweep qk finished: 2 succeeded"), std::string::npos);
}

TEST_F(CliTest, WatchRidesOutAFirstConnectionThatFails) {
  fake_.snapshots = Stages(v1::SUCCEEDED);
  fake_.unavailable_first = 2;
  CliResult r = Ablate({"watch", "qk"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.calls(), 3);
  EXPECT_NE(r.out.find("sweep qk finished: 2 succeeded"), std::string::npos);
}

TEST_F(CliTest, WatchReportsAnUnreachableCoordinatorAfterAFewTries) {
  fake_.unavailable_first = 100;
  CliResult r = Ablate({"watch", "qk"});
  EXPECT_EQ(r.code, kExitUnavailable);
  EXPECT_EQ(fake_.calls(), 4);
  EXPECT_NE(r.err.find("cannot reach the coordinator"), std::string::npos) << r.err;
}

TEST_F(CliTest, ReadOnlyCallsAreRetriedWhenUnavailableAndChangesAreNot) {
  fake_.unavailable_first = 2;
  CliResult r = Ablate({"status", "qk"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fake_.calls(), 3);
  fake_.unavailable_first = 4;  // one more failure: the submit sees it
  const std::string spec = Write("s.yaml", "name: qk\n");
  r = Ablate({"submit", spec});
  EXPECT_EQ(r.code, kExitUnavailable);
  EXPECT_EQ(fake_.calls(), 4);
}

// A coordinator that freezes (SIGSTOP, a hung host) keeps the connection open: Read waited for
// good. The server sends a snapshot at least every five intervals, so a silence past that and
// --timeout counts as a lost connection, then as unreachable once --timeout has passed.
TEST_F(CliTest, WatchGivesUpOnACoordinatorThatFreezes) {
  fake_.snapshots = Stages(v1::SUCCEEDED);
  fake_.watch_stall_after = 1;
  const auto start = std::chrono::steady_clock::now();
  CliResult r = Ablate({"--timeout", "1", "watch", "qk", "--interval", "0.2"});
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;
  EXPECT_NE(r.err.find("lost the connection"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sent nothing for 2 s"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_GE(fake_.watch_calls(), 2);
}

// Frozen before the first snapshot: reported after --timeout, not after gRPC's own ~20 s.
TEST_F(CliTest, WatchReportsACoordinatorThatNeverAnswers) {
  fake_.snapshots = Stages(v1::SUCCEEDED);
  fake_.watch_stall_after = 0;
  const auto start = std::chrono::steady_clock::now();
  CliResult r = Ablate({"--timeout", "1", "watch", "qk"});
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;
  EXPECT_NE(r.err.find("accepted the connection but sent nothing within 1 s (--timeout)"),
            std::string::npos)
      << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(CliTest, WatchOfAnUnknownSweepExitsThree) {
  fake_.status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no sweep named 'nope'");
  CliResult r = Ablate({"watch", "nope"});
  EXPECT_EQ(r.code, kExitNotFound);
  EXPECT_EQ(fake_.watch_calls(), 0);
  EXPECT_EQ(r.err, "ablate: no sweep named 'nope'\n");
}

}  // namespace
}  // namespace ablate::cli
