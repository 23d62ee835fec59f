// Supervision of a real child process: a fake trainer script written by the test prints lines,
// exits 0 / exits 3 / kills itself / sleeps until cancelled, and the supervisor must report the
// right events, exit codes and log tails, and kill the whole process group.
#include "agent/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "agent/util.h"
#include "test_util.h"

namespace ablate::agent {
namespace {

using testing::ProcessGone;
using testing::ReadAll;
using testing::TempDir;
using testing::WaitFor;

class RecordingSink : public SupervisorSink {
 public:
  void OnPoints(std::vector<v1::MetricPoint> points) override {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& p : points) points_.push_back(std::move(p));
  }
  void OnEvent(v1::TrialEvent event) override {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back(std::move(event));
  }
  std::vector<v1::TrialEvent> events() const {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }
  std::vector<v1::MetricPoint> points() const {
    std::lock_guard<std::mutex> l(mu_);
    return points_;
  }
  size_t num_events() const {
    std::lock_guard<std::mutex> l(mu_);
    return events_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<v1::TrialEvent> events_;
  std::vector<v1::MetricPoint> points_;
};

class WorkerSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override { script_ = testing::WriteFakeTrainer(dir_.path()); }

  SpawnSpec Spec(const std::string& mode) {
    SpawnSpec s;
    s.program = script_;
    s.args = {mode};
    s.cwd = dir_.path();
    s.stderr_path = dir_.path() + "/stderr.log";
    s.env = {{"CUDA_VISIBLE_DEVICES", ""}, {"ABLATE_CPU_THREADS", "3"}};
    return s;
  }

  // Runs a supervisor to its end on this thread.
  std::vector<v1::TrialEvent> RunMode(const std::string& mode, SupervisorOptions opt = {}) {
    Supervisor sup(Spec(mode), RealSpawner(), SystemClock(), &sink_, opt);
    sup.Run();
    non_json_ = sup.non_json_lines();
    return sink_.events();
  }

  int GrandchildPid() {
    const std::string s = ReadAll(dir_.path() + "/grandchild.pid");
    return s.empty() ? 0 : std::stoi(s);
  }

  TempDir dir_;
  std::string script_;
  RecordingSink sink_;
  int64_t non_json_ = 0;
};

TEST_F(WorkerSupervisorTest, CleanRunReportsPointsCheckpointAndFinished) {
  auto ev = RunMode("ok");
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind(), v1::TrialEvent::STARTED);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::CHECKPOINTED);
  EXPECT_EQ(ev[1].step(), 3);
  EXPECT_EQ(ev[1].checkpoint_path(), "/ckpt/step_3.ckpt");
  EXPECT_EQ(ev[2].kind(), v1::TrialEvent::FINISHED);
  EXPECT_EQ(ev[2].status(), "ok");
  EXPECT_EQ(ev[2].exit_code(), 0);
  EXPECT_EQ(ev[2].step(), 3);
  EXPECT_EQ(ev[2].reason(), "");
  // The environment reached the child (its stderr is the log tail).
  EXPECT_NE(ev[2].log_tail().find("CUDA_VISIBLE_DEVICES=[] ABLATE_CPU_THREADS=[3]"),
            std::string::npos)
      << ev[2].log_tail();
  EXPECT_EQ(non_json_, 1);

  std::map<std::string, std::vector<std::pair<int64_t, double>>> by_name;
  for (const auto& p : sink_.points()) by_name[p.name()].push_back({p.step(), p.value()});
  EXPECT_EQ(by_name["params"], (std::vector<std::pair<int64_t, double>>{{0, 1000}}));
  EXPECT_EQ(by_name["cpu_threads"], (std::vector<std::pair<int64_t, double>>{{0, 3}}));
  EXPECT_EQ(by_name["loss"],
            (std::vector<std::pair<int64_t, double>>{{1, 99.5}, {2, 98.5}, {3, 97.5}}));
  EXPECT_EQ(by_name["val_loss"], (std::vector<std::pair<int64_t, double>>{{3, 6.25}}));
  EXPECT_EQ(by_name["final_val_loss"], (std::vector<std::pair<int64_t, double>>{{3, 6.25}}));
  EXPECT_EQ(by_name.count("config_hash"), 0u);
  EXPECT_EQ(by_name.count("step"), 0u);
  // The overhead outside the steps, measured by the supervisor: from its start to the first step
  // line (at that step) and from the last step line to the exit (at that step).
  ASSERT_EQ(by_name["startup_s"].size(), 1u);
  EXPECT_EQ(by_name["startup_s"][0].first, 1);
  EXPECT_GE(by_name["startup_s"][0].second, 0.0);
  EXPECT_LT(by_name["startup_s"][0].second, 30.0);
  ASSERT_EQ(by_name["teardown_s"].size(), 1u);
  EXPECT_EQ(by_name["teardown_s"][0].first, 3);
  EXPECT_GE(by_name["teardown_s"][0].second, 0.0);
  EXPECT_LT(by_name["teardown_s"][0].second, 30.0);
}

TEST_F(WorkerSupervisorTest, DivergedIsAFinishedRunWithItsReason) {
  auto ev = RunMode("diverged");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FINISHED);
  EXPECT_EQ(ev[1].status(), "diverged");
  EXPECT_EQ(ev[1].reason(), "train loss nan at step 1 is not finite");
  EXPECT_EQ(ev[1].step(), 1);
}

TEST_F(WorkerSupervisorTest, NonZeroExitIsFailedWithTheLogTail) {
  auto ev = RunMode("exit3");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(ev[1].reason(), "exit code 3");
  EXPECT_EQ(ev[1].exit_code(), 3);
  EXPECT_EQ(ev[1].step(), 1);
  EXPECT_NE(ev[1].log_tail().find("ablate-train: boom: the corpus is missing"), std::string::npos)
      << ev[1].log_tail();
}

TEST_F(WorkerSupervisorTest, ExitZeroWithoutFinalLineIsFailed) {
  auto ev = RunMode("nofinal");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(ev[1].reason(), "exited 0 without a final line");
  EXPECT_EQ(ev[1].exit_code(), 0);
}

TEST_F(WorkerSupervisorTest, KilledBySignal) {
  auto ev = RunMode("sigkill");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(ev[1].reason(), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(ev[1].exit_code(), -9);
}

TEST_F(WorkerSupervisorTest, UnstartableTrainerIsFailedWithTheErrnoText) {
  SpawnSpec spec = Spec("ok");
  spec.program = dir_.path() + "/no-such-trainer";
  Supervisor sup(spec, RealSpawner(), SystemClock(), &sink_);
  sup.Run();
  auto ev = sink_.events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(ev[0].reason(),
            "cannot start the trainer: exec " + spec.program + ": No such file or directory");
  EXPECT_EQ(ev[0].exit_code(), 127);

  // Not executable: permission denied.
  testing::WriteAll(dir_.path() + "/plain-file", "#!/bin/sh\n");
  spec.program = dir_.path() + "/plain-file";
  RecordingSink sink2;
  Supervisor sup2(spec, RealSpawner(), SystemClock(), &sink2);
  sup2.Run();
  ASSERT_EQ(sink2.num_events(), 1u);
  EXPECT_NE(sink2.events()[0].reason().find("Permission denied"), std::string::npos)
      << sink2.events()[0].reason();
}

TEST_F(WorkerSupervisorTest, CancelKillsTheWholeProcessGroup) {
  Supervisor sup(Spec("sleep"), RealSpawner(), SystemClock(), &sink_);
  std::thread t([&] { sup.Run(); });
  // Wait until the trainer has printed its step (so its grandchild exists).
  ASSERT_TRUE(WaitFor([&] { return !sink_.points().empty() && GrandchildPid() > 0; }, 5000));
  const int trainer = sup.pid();
  const int grandchild = GrandchildPid();
  EXPECT_FALSE(ProcessGone(grandchild));
  const auto t0 = std::chrono::steady_clock::now();
  sup.Cancel("canceled by the user");
  t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 2.0);  // SIGTERM was enough: no grace period spent
  auto ev = sink_.events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::CANCELED);
  EXPECT_EQ(ev[1].reason(), "canceled by the user (killed by signal 15 (SIGTERM))");
  EXPECT_EQ(ev[1].exit_code(), -15);
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(trainer) && ProcessGone(grandchild); }, 3000));
}

TEST_F(WorkerSupervisorTest, CancelEscalatesToSigkillAfterTheGrace) {
  FakeClock clock(1000);
  SupervisorOptions opt;
  opt.cancel_grace_ms = 5000;
  opt.poll_ms = 20;
  Supervisor sup(Spec("stubborn"), RealSpawner(), &clock, &sink_, opt);
  std::thread t([&] { sup.Run(); });
  ASSERT_TRUE(WaitFor([&] { return !sink_.points().empty() && GrandchildPid() > 0; }, 5000));
  const int grandchild = GrandchildPid();
  sup.Cancel("stop");
  // SIGTERM is ignored: still running a while later (on the fake clock no time has passed).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(sup.exited());
  EXPECT_FALSE(ProcessGone(grandchild));
  clock.AdvanceMs(4999);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE(sup.exited());
  clock.AdvanceMs(1);  // the grace is over: SIGKILL
  t.join();
  auto ev = sink_.events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::CANCELED);
  EXPECT_EQ(ev[1].exit_code(), -9);
  EXPECT_EQ(ev[1].reason(), "stop (killed by signal 9 (SIGKILL))");
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(grandchild); }, 3000));
}

TEST_F(WorkerSupervisorTest, GrandchildHoldingStdoutDoesNotHangTheAttempt) {
  const auto t0 = std::chrono::steady_clock::now();
  auto ev = RunMode("orphan");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 3.0);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FINISHED);
  EXPECT_EQ(ev[1].status(), "ok");
  // What the trainer left behind is killed with its process group.
  const int grandchild = GrandchildPid();
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(WaitFor([&] { return ProcessGone(grandchild); }, 3000));
}

TEST_F(WorkerSupervisorTest, KillByTheWorkerIsFailed) {
  Supervisor sup(Spec("sleep"), RealSpawner(), SystemClock(), &sink_);
  std::thread t([&] { sup.Run(); });
  ASSERT_TRUE(WaitFor([&] { return !sink_.points().empty(); }, 5000));
  sup.Kill();
  t.join();
  auto ev = sink_.events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(ev[1].reason(), "worker stopped: killed by signal 9 (SIGKILL)");
  EXPECT_EQ(ev[1].exit_code(), -9);
}

TEST_F(WorkerSupervisorTest, CancelBeforeStartNeverSpawns) {
  Supervisor sup(Spec("ok"), RealSpawner(), SystemClock(), &sink_);
  sup.Cancel("canceled early");
  sup.Run();
  auto ev = sink_.events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind(), v1::TrialEvent::CANCELED);
  EXPECT_EQ(sup.pid(), 0);
}

TEST_F(WorkerSupervisorTest, OverlongLineIsDroppedAndCounted) {
  // A trainer line longer than the limit is dropped; the lines around it still count.
  const std::string script = dir_.path() + "/long.sh";
  testing::WriteAll(script,
                    "#!/bin/sh\n"
                    "echo '{\"type\":\"step\",\"step\":1,\"loss\":1}'\n"
                    "head -c 3000 /dev/zero | tr '\\0' 'x'; echo\n"
                    "echo '{\"type\":\"step\",\"step\":2,\"loss\":2}'\n"
                    "printf '{\"type\":\"final\",\"status\":\"ok\",\"step\":2}'\n");  // no newline
  ::chmod(script.c_str(), 0755);
  SpawnSpec spec = Spec("");
  spec.program = script;
  spec.args.clear();
  SupervisorOptions opt;
  opt.max_line_bytes = 1000;
  Supervisor sup(spec, RealSpawner(), SystemClock(), &sink_, opt);
  sup.Run();
  EXPECT_EQ(sup.non_json_lines(), 1);
  EXPECT_EQ(sup.json_lines(), 3);
  auto ev = sink_.events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FINISHED);
  // The two losses, then the supervisor's startup_s and teardown_s.
  auto points = sink_.points();
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0].name(), "loss");
  EXPECT_EQ(points[1].name(), "loss");
  EXPECT_EQ(points[2].name(), "startup_s");
  EXPECT_EQ(points[3].name(), "teardown_s");
}


TEST_F(WorkerSupervisorTest, ExitSeventySixIsAFatalDeviceError) {
  auto ev = RunMode("mps");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(ev[1].status(), "gpu_fault");
  EXPECT_EQ(ev[1].exit_code(), 76);
  EXPECT_NE(ev[1].log_tail().find("cudaErrorMpsClientTerminated"), std::string::npos);
}

TEST_F(WorkerSupervisorTest, ACancelWithCheckpointAsksForOneAndEndsCanceled) {
  Supervisor sup(Spec("usr1"), RealSpawner(), SystemClock(), &sink_);
  std::thread t([&] { sup.Run(); });
  ASSERT_TRUE(WaitFor([&] { return !sink_.points().empty(); }, 5000));
  sup.Cancel("stopped early", /*checkpoint=*/true);
  t.join();
  auto ev = sink_.events();
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].kind(), v1::TrialEvent::CHECKPOINTED);  // the trainer checkpointed first
  EXPECT_EQ(ev[2].kind(), v1::TrialEvent::CANCELED);
  EXPECT_EQ(ev[2].exit_code(), 75);
  EXPECT_EQ(ev[2].reason(), "stopped early (exit code 75)");
}

TEST_F(WorkerSupervisorTest, AStartGateHoldsTheSpawnUntilItOpens) {
  std::atomic<int> polls{0};
  Supervisor sup(Spec("ok"), RealSpawner(), SystemClock(), &sink_);
  sup.set_start_gate([&]() -> std::string { return ++polls < 4 ? "no room" : ""; });
  sup.Run();
  EXPECT_GE(polls.load(), 4);
  auto ev = sink_.events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev.back().kind(), v1::TrialEvent::FINISHED);
  // A cancel while it waits ends the attempt without spawning it.
  RecordingSink sink2;
  Supervisor waiting(Spec("ok"), RealSpawner(), SystemClock(), &sink2);
  waiting.set_start_gate([] { return std::string("no room"); });
  std::thread t([&] { waiting.Run(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  waiting.Cancel("canceled by the user");
  t.join();
  ASSERT_EQ(sink2.events().size(), 1u);
  EXPECT_EQ(sink2.events()[0].kind(), v1::TrialEvent::CANCELED);
  EXPECT_EQ(waiting.pid(), 0);
}

}  // namespace
}  // namespace ablate::agent
