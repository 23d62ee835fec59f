// How the commands present what the coordinator sends: the ablation table, status and worker
// listings, the watch frame and line, and the argument conventions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "commands/command.h"
#include "commands/results.h"
#include "commands/status.h"
#include "commands/watch.h"
#include "commands/workers.h"
#include "render/table.h"

namespace ablate::cli {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A row as the server fills it: se and a 95% interval (t_{0.975, n-1}) when n >= 2.
v1::ResultsRow Row(std::vector<std::string> keys, int n, int trials, double mean, double std,
                   double min, double max) {
  v1::ResultsRow r;
  for (auto& k : keys) r.add_keys(k);
  r.set_n(n);
  r.set_trials(trials);
  r.set_mean(mean);
  r.set_std(n >= 2 ? std : kNaN);
  r.set_min(min);
  r.set_max(max);
  const double t[] = {0, 0, 12.706205, 4.302653, 3.182446};
  r.set_se(n >= 2 ? std / std::sqrt(double(n)) : kNaN);
  r.set_ci_low(n >= 2 ? mean - t[n] * r.se() : kNaN);
  r.set_ci_high(n >= 2 ? mean + t[n] * r.se() : kNaN);
  r.set_builds(n > 0 ? 1 : 0);
  return r;
}

v1::ResultsResponse Results(const std::string& metric) {
  v1::ResultsResponse resp;
  resp.set_metric(metric);
  resp.set_lower_is_better(true);
  resp.add_by("attention.kind");
  resp.add_by("optimizer.p");
  *resp.add_rows() = Row({"fpa", "0"}, 3, 3, 3.30125, 0.01234, 3.29, 3.31);
  *resp.add_rows() = Row({"sagebwd", "0"}, 3, 3, 3.21449, 0.00051, 3.214, 3.215);
  *resp.add_rows() = Row({"sagebwd", "0.5"}, 1, 3, 3.5, 0, 3.5, 3.5);
  *resp.add_rows() = Row({"fpa", "0.5"}, 0, 3, 0, 0, 0, 0);
  resp.mutable_rows(2)->set_diverged(2);
  resp.mutable_rows(1)->set_best(true);
  return resp;
}

TEST(Results, MeanSeIntervalAndCount) {
  EXPECT_EQ(FormatMeanSe(Row({}, 4, 4, 3.30125, 0.02468, 0, 0)), "3.3013 ± 0.0123 (4)");
  EXPECT_EQ(FormatMeanSe(Row({}, 1, 3, 3.5, 0, 0, 0)), "3.5000 ± - (1/3)");  // no se from one
  EXPECT_EQ(FormatMeanSe(Row({}, 0, 2, 0, 0, 0, 0)), "-");
  EXPECT_EQ(FormatMeanSe(Row({}, 4, 4, 12345.6, 24.6, 0, 0)), "12346 ± 12 (4)");
  EXPECT_EQ(FormatMeanSe(Row({}, 4, 4, 150.123, 3.0, 0, 0)), "150.12 ± 1.50 (4)");
  EXPECT_EQ(FormatInterval(Row({}, 4, 4, 3.0, 0.02, 0, 0)), "[2.9682, 3.0318]");
  EXPECT_EQ(FormatInterval(Row({}, 1, 1, 3.0, 0, 0, 0)), "-");
}

TEST(Results, TheBestIsTheOneTheServerMarked) {
  EXPECT_EQ(BestRow(Results("final_val_loss")), 1);
  v1::ResultsResponse none = Results("final_val_loss");
  none.mutable_rows(1)->set_best(false);
  EXPECT_EQ(BestRow(none), -1);
}

TEST(Results, TableMarksTheBestRowAndDivergedCells) {
  EXPECT_EQ(RenderText(ResultsTable(Results("final_val_loss"))),
            "   attention.kind  optimizer.p  final_val_loss mean ± se (n)            95% CI  diverged\n"
            "   fpa             0                     3.3013 ± 0.0071 (3)  [3.2706, 3.3319]         0\n"
            "*  sagebwd         0                     3.2145 ± 0.0003 (3)  [3.2132, 3.2158]         0\n"
            "!  sagebwd         0.5                      3.5000 ± - (1/3)                 -         2\n"
            "   fpa             0.5                                     -                 -         0\n");
}

TEST(Results, MixedBuildsAreShown) {
  v1::ResultsResponse r = Results("final_val_loss");
  r.mutable_rows(0)->set_builds(2);
  const std::string text = RenderText(ResultsTable(r));
  EXPECT_NE(text.find("builds"), std::string::npos) << text;
  EXPECT_EQ(RenderText(ResultsTable(Results("final_val_loss"))).find("builds"), std::string::npos);
}

TEST(Results, MachineFormatsHaveSeparateFields) {
  Table t = ResultsTable(Results("final_val_loss"));
  auto j = nlohmann::json::parse(RenderJson(t));
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[1]["attention.kind"], "sagebwd");
  EXPECT_EQ(j[1]["metric"], "final_val_loss");
  EXPECT_DOUBLE_EQ(j[1]["mean"].get<double>(), 3.21449);
  EXPECT_DOUBLE_EQ(j[1]["std"].get<double>(), 0.00051);
  EXPECT_DOUBLE_EQ(j[1]["se"].get<double>(), 0.00051 / std::sqrt(3.0));
  EXPECT_LT(j[1]["ci_low"].get<double>(), 3.21449);
  EXPECT_EQ(j[1]["n"], 3);
  EXPECT_DOUBLE_EQ(j[1]["min"].get<double>(), 3.214);
  EXPECT_DOUBLE_EQ(j[1]["max"].get<double>(), 3.215);
  EXPECT_EQ(j[1]["best"], true);
  EXPECT_EQ(j[0]["best"], false);
  EXPECT_EQ(j[2]["diverged"], 2);
  EXPECT_TRUE(j[2]["se"].is_null());
  EXPECT_TRUE(j[3]["mean"].is_null());
  EXPECT_EQ(j[3]["n"], 0);
  EXPECT_EQ(RenderCsv(t).substr(0, RenderCsv(t).find("\r\n")),
            "attention.kind,optimizer.p,metric,mean,std,se,ci_low,ci_high,n,trials,min,max,"
            "diverged,failed,stopped,builds,best");
}

TEST(Status, SweepsTable) {
  v1::ListSweepsResponse resp;
  v1::SweepInfo* s = resp.add_sweeps();
  s->set_sweep_id(3);
  s->set_name("qknorm");
  s->set_total(8);
  (*s->mutable_counts())["succeeded"] = 2;
  (*s->mutable_counts())["failed"] = 1;
  (*s->mutable_counts())["running"] = 2;
  (*s->mutable_counts())["queued"] = 3;
  EXPECT_EQ(
      RenderText(SweepsTable(resp)),
      "id  name    total  queued  running  succeeded  failed  diverged  canceled  progress\n"
      " 3  qknorm      8       3        2          2       1         0         0       37%\n");
  auto j = nlohmann::json::parse(RenderJson(SweepsTable(resp)));
  EXPECT_EQ(j[0]["progress_pct"], 37);
  EXPECT_EQ(j[0]["queued"], 3);
}

TEST(Status, TrialsTableShowsAxesStepAndShortReason) {
  v1::SweepInfo s;
  s.add_axes("attention.kind");
  s.add_axes("seed");
  google::protobuf::RepeatedPtrField<v1::TrialSummary> trials;
  v1::TrialSummary* a = trials.Add();
  a->set_trial_id(1);
  (*a->mutable_axes())["attention.kind"] = "fpa";
  (*a->mutable_axes())["seed"] = "0";
  a->set_state(v1::RUNNING);
  a->set_attempt(1);
  a->set_worker_id("w1");
  a->set_step(250);
  a->set_total_steps(500);
  a->set_loss(3.123456);
  a->set_val_loss(kNaN);
  v1::TrialSummary* b = trials.Add();
  b->set_trial_id(2);
  (*b->mutable_axes())["attention.kind"] = "sagebwd";
  b->set_state(v1::FAILED);
  b->set_attempt(3);
  b->set_loss(kNaN);
  b->set_val_loss(kNaN);
  b->set_step(10);
  b->set_total_steps(500);
  b->set_reason("exit code 1: " + std::string(100, 'x') + "\nsecond line");
  const std::string text = RenderText(TrialsTable(s, trials));
  EXPECT_EQ(
      text.substr(0, text.find('\n')),
      "id  attention.kind  seed  state    attempt  worker     step    loss  val_loss  reason");
  EXPECT_NE(
      text.find(" 1  fpa             0     running        1  w1      250/500  3.1235         -"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("sagebwd         -     failed         3  -        10/500       -         -  "
                      "exit code 1: xxx"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("second line"), std::string::npos);
  EXPECT_NE(text.find("…"), std::string::npos);

  auto j = nlohmann::json::parse(RenderJson(TrialsTable(s, trials)));
  EXPECT_EQ(j[0]["trial_id"], 1);
  EXPECT_EQ(j[0]["step"], 250);
  EXPECT_EQ(j[0]["total_steps"], 500);
  EXPECT_TRUE(j[0]["val_loss"].is_null());
  EXPECT_NE(j[1]["reason"].get<std::string>().find("second line"), std::string::npos);
}

TEST(Workers, GpuSummaryAndTable) {
  v1::ListWorkersResponse resp;
  v1::WorkerInfo* w = resp.add_workers();
  w->set_worker_id("node1");
  w->set_hostname("gpu-01");
  w->set_state("busy");
  for (int i = 0; i < 2; ++i) w->add_gpus()->set_name("NVIDIA H100 80GB HBM3");
  w->add_gpus()->set_name("NVIDIA A100");
  w->add_busy_gpus(0);
  v1::AttemptRef* r = w->add_running();
  r->set_trial_id(12);
  r->set_attempt(2);
  w->set_last_seen_at(995);
  v1::WorkerInfo* c = resp.add_workers();
  c->set_worker_id("cpu1");
  c->set_hostname("laptop");
  c->set_state("idle");
  c->set_cpu_slots(4);
  c->set_busy_cpu_slots(1);
  c->set_last_seen_at(0);
  EXPECT_EQ(GpuSummary(*w), "2× NVIDIA H100 80GB HBM3, 1× NVIDIA A100");
  EXPECT_EQ(GpuSummary(*c), "-");
  const std::string text = RenderText(WorkersTable(resp, 1000));
  EXPECT_NE(text.find("node1  gpu-01  busy   2× NVIDIA H100 80GB HBM3, 1× NVIDIA A100          0  "
                      "1/3 gpus   12#2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("5s ago"), std::string::npos);
  EXPECT_NE(text.find("4  1/4 slots"), std::string::npos) << text;
  EXPECT_NE(text.find("never"), std::string::npos);
  auto j = nlohmann::json::parse(RenderJson(WorkersTable(resp, 1000)));
  EXPECT_EQ(j[0]["gpus"], 3);
  EXPECT_EQ(j[0]["gpu_names"][2], "NVIDIA A100");
  EXPECT_EQ(j[0]["running"][0]["trial_id"], 12);
  EXPECT_EQ(j[0]["busy_gpus"][0], 0);
  EXPECT_TRUE(j[1]["last_seen_at"].is_null());
}

v1::SweepSnapshot Snapshot() {
  v1::SweepSnapshot snap;
  v1::SweepInfo* s = snap.mutable_sweep();
  s->set_sweep_id(4);
  s->set_name("pgrid");
  s->add_axes("optimizer.p");
  s->set_total(4);
  (*s->mutable_counts())["succeeded"] = 1;
  (*s->mutable_counts())["running"] = 2;
  (*s->mutable_counts())["queued"] = 1;
  auto add = [&](int64_t id, v1::TrialState st, int64_t step, const char* p) {
    v1::TrialSummary* t = snap.add_trials();
    t->set_trial_id(id);
    t->set_state(st);
    t->set_step(step);
    t->set_total_steps(100);
    t->set_loss(2.5);
    t->set_val_loss(kNaN);
    t->set_worker_id(st == v1::RUNNING ? "w1" : "");
    (*t->mutable_axes())["optimizer.p"] = p;
  };
  add(1, v1::SUCCEEDED, 100, "0");
  add(3, v1::RUNNING, 50, "1");
  add(2, v1::RUNNING, 25, "0.5");
  add(4, v1::QUEUED, 0, "0.25");
  return snap;
}

TEST(Watch, ProgressCountsStepsOfEveryTrial) {
  SweepProgress p = ComputeProgress(Snapshot());
  EXPECT_TRUE(p.in_steps);
  EXPECT_DOUBLE_EQ(p.done, 175);
  EXPECT_DOUBLE_EQ(p.total, 400);
  EXPECT_EQ(p.finished_trials, 1);
  EXPECT_EQ(p.total_trials, 4);

  // A failed trial's remaining steps are not work left; unknown totals fall back to trials.
  v1::SweepSnapshot snap = Snapshot();
  snap.mutable_trials(1)->set_state(v1::FAILED);
  EXPECT_DOUBLE_EQ(ComputeProgress(snap).done, 225);
  snap.mutable_trials(3)->set_total_steps(0);
  p = ComputeProgress(snap);
  EXPECT_FALSE(p.in_steps);
  EXPECT_DOUBLE_EQ(p.done, 2);
  EXPECT_DOUBLE_EQ(p.total, 4);
}

TEST(Watch, FrameHasOverallBarCountsAndRunningTrials) {
  std::vector<std::string> lines = WatchFrame(Snapshot(), 125.0, 200, 10, /*unicode=*/false);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "sweep pgrid (id 4)  [#############-----------------] 43%  ETA 2m05s");
  EXPECT_EQ(lines[1], "  1/4 trials finished · 2 running · 1 queued · 1 succeeded");
  // Running trials by id, with a small bar, step/total, losses, worker and axis values.
  EXPECT_EQ(lines[2], "  trial  progress        step    loss  val_loss  worker  p");
  EXPECT_EQ(lines[3], "      2  [##--------]  25/100  2.5000         -  w1      0.5");
  EXPECT_EQ(lines[4], "      3  [#####-----]  50/100  2.5000         -  w1      1");
}

TEST(Watch, FrameLimitsLinesAndWidth) {
  std::vector<std::string> lines = WatchFrame(Snapshot(), std::nullopt, 30, 1, /*unicode=*/true);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[4], "  … and 1 more running");
  for (const std::string& l : lines) EXPECT_LE(DisplayWidth(l), 29u) << l;
  EXPECT_EQ(lines[0].substr(0, 19), "sweep pgrid (id 4) ");
  // Nothing running: no trial table.
  v1::SweepSnapshot snap = Snapshot();
  for (auto& t : *snap.mutable_trials()) t.set_state(v1::QUEUED);
  EXPECT_EQ(WatchFrame(snap, std::nullopt, 100, 10, false).size(), 2u);
}

TEST(Watch, CompactLine) {
  v1::SweepSnapshot snap = Snapshot();
  EXPECT_EQ(WatchLine(snap, std::nullopt),
            "sweep pgrid: 43% · 1/4 finished · 2 running · 1 queued · 1 succeeded · ETA -");
  snap.mutable_sweep()->set_finished(true);
  EXPECT_EQ(WatchLine(snap, 5.0).substr(WatchLine(snap, 5.0).size() - 4), "done");
}

// With no connected worker able to take the queued trials, the reason replaces the ETA that
// could never come ("ETA -" for ever): on its own line in the frame, inline in the compact line.
TEST(Watch, TheWaitingReasonReplacesTheEta) {
  v1::SweepSnapshot snap = Snapshot();
  snap.mutable_sweep()->set_waiting_reason("no worker is connected; start an ablate-worker");
  std::vector<std::string> lines = WatchFrame(snap, std::nullopt, 200, 10, /*unicode=*/false);
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0], "sweep pgrid (id 4)  [#############-----------------] 43%  waiting");
  EXPECT_EQ(lines[1], "  1/4 trials finished · 2 running · 1 queued · 1 succeeded");
  EXPECT_EQ(lines[2], "  waiting: no worker is connected; start an ablate-worker");
  EXPECT_EQ(lines[3], "  trial  progress        step    loss  val_loss  worker  p");
  EXPECT_EQ(WatchLine(snap, 30.0),
            "sweep pgrid: 43% · 1/4 finished · 2 running · 1 queued · 1 succeeded · waiting: no "
            "worker is connected; start an ablate-worker");
  snap.mutable_sweep()->set_finished(true);
  lines = WatchFrame(snap, std::nullopt, 200, 10, false);
  EXPECT_EQ(lines[0].substr(lines[0].size() - 6), "  done");
  EXPECT_EQ(lines[2].find("waiting"), std::string::npos);
  EXPECT_EQ(WatchLine(snap, 5.0).substr(WatchLine(snap, 5.0).size() - 4), "done");
}

TEST(Watch, RedrawMovesUpOverThePreviousFrame) {
  Redrawer r;
  EXPECT_EQ(r.Draw({"a", "b"}), "\x1b[2Ka\n\x1b[2Kb\n\x1b[J");
  EXPECT_EQ(r.Draw({"c"}), "\x1b[2A\r\x1b[2Kc\n\x1b[J");
  r.Forget();
  EXPECT_EQ(r.Draw({"d"}), "\x1b[2Kd\n\x1b[J");
}

TEST(Watch, OutcomeTreatsDivergedAsSuccess) {
  WatchOutcome o;
  o.succeeded = 3;
  o.diverged = 2;
  EXPECT_TRUE(o.all_ok());
  o.canceled = 1;
  EXPECT_FALSE(o.all_ok());
  o.canceled = 0;
  o.failed = 1;
  EXPECT_FALSE(o.all_ok());
}

TEST(Targets, TrialsSweepsAndIds) {
  auto t = ParseTarget("12");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->is_trial);
  EXPECT_EQ(t->trial_id, 12);
  t = ParseTarget("trial:7");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->is_trial);
  EXPECT_EQ(t->trial_id, 7);
  t = ParseTarget("sweep:3");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->is_trial);
  EXPECT_EQ(t->sweep, "3");
  t = ParseTarget("qknorm-vs-tps");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->is_trial);
  EXPECT_EQ(t->sweep, "qknorm-vs-tps");
  EXPECT_EQ(ParseTarget("trial:x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTarget("sweep:-1").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTarget("foo:bar").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseTrialRef("trial:9"), 9);
  EXPECT_EQ(ParseTrialRef("qknorm").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTrialRef("0").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ablate::cli
