// ablate-worker as a process: its command line errors, and a run against the in-process fake
// coordinator with the signals an operator sends (SIGTERM drains, a second one kills the trials).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#ifdef ABLATE_WORKER_METRICS
#include <httplib.h>
#endif

#include "agent/process.h"
#include "agent/spool.h"
#include "agent/util.h"
#include "fake_coordinator.h"
#include "test_util.h"

#ifndef ABLATE_WORKER_BIN
#error "ABLATE_WORKER_BIN must name the ablate-worker binary"
#endif

namespace ablate::agent {
namespace {

using testing::FakeCoordinator;
using testing::ReadAll;
using testing::TempDir;
using testing::WaitFor;

class WorkerMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&coord_);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_);
    trainer_ = testing::WriteFakeTrainer(dir_.path());
    token_ = dir_.path() + "/token";
    testing::WriteAll(token_, std::string(testing::kToken) + "\n");
    ::chmod(token_.c_str(), 0600);
    // Empty counts as unset: whatever the test runner's environment holds does not leak in, and
    // the default token file (~/.ablate/token) is one that does not exist.
    env_ = {{"ABLATE_COORDINATOR", "127.0.0.1:" + std::to_string(port_)},
            {"ABLATE_TOKEN_FILE", ""},
            {"ABLATE_DATA_DIR", ""},
            {"HOME", dir_.path() + "/home"}};
  }
  void TearDown() override {
    if (child_ && !child_->TryWait()) child_->SignalGroup(SIGKILL);
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  // Starts ablate-worker with `args`; its stderr goes to <dir>/worker.log.
  void Launch(std::vector<std::string> args) {
    SpawnSpec spec;
    spec.program = ABLATE_WORKER_BIN;
    spec.args = std::move(args);
    spec.stderr_path = dir_.path() + "/worker.log";
    spec.env = env_;
    auto c = RealSpawner()->Spawn(spec);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    child_ = std::move(*c);
  }

  // Waits for the worker to exit (draining its stdout); nullopt after timeout_ms.
  std::optional<ExitStatus> Wait(int timeout_ms) {
    std::optional<ExitStatus> st;
    WaitFor(
        [&] {
          std::string sink;
          child_->ReadStdout(&sink, 0);
          st = child_->TryWait();
          return st.has_value();
        },
        timeout_ms);
    return st;
  }

  // Runs ablate-worker to its end; returns its exit code and stderr.
  std::pair<int, std::string> RunToEnd(std::vector<std::string> args) {
    ::unlink((dir_.path() + "/worker.log").c_str());
    Launch(std::move(args));
    auto st = Wait(15000);
    EXPECT_TRUE(st.has_value()) << "ablate-worker did not exit";
    return {st ? st->code : -1, ReadAll(dir_.path() + "/worker.log")};
  }

  TempDir dir_;
  FakeCoordinator coord_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::string trainer_, token_;
  std::vector<std::pair<std::string, std::string>> env_;  // ablate-worker's, on top of ours
  std::unique_ptr<ChildProcess> child_;
};

TEST_F(WorkerMainTest, BadCommandLinesExitWithCode2AndSayWhy) {
  const std::string work = dir_.path() + "/w";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--gpus", "none"},
       "the default token file (no --token-file, $ABLATE_TOKEN_FILE or $ABLATE_DATA_DIR given): "
       "token file " +
           dir_.path() + "/home/.ablate/token"},
      {{"--token-file", dir_.path() + "/missing"},
       "--token-file: token file " + dir_.path() + "/missing"},
      {{"--token-file", token_, "--gpus", "0,x"}, "--gpus: 'x' is not a GPU index"},
      {{"--token-file", token_, "--gpus", "none", "--cpu-slots", "0"}, "it could run nothing"},
      {{"--token-file", token_, "--gpus", "none", "--work-dir", work, "--trainer",
        dir_.path() + "/nope"},
       "--trainer " + dir_.path() + "/nope: not an executable file"},
      {{"--token-file", token_, "--bogus"}, "--bogus"},
      {{"--token-file", token_, "--gpus", "none", "--metrics-public"},
       "--metrics-public requires --metrics"},
      {{"--token-file", token_, "--gpus", "none", "--work-dir", work, "--trainer", trainer_,
        "--gemm-tuning", dir_.path() + "/none.json"},
       "--gemm-tuning " + dir_.path() + "/none.json: no such file"},
      {{"--token-file", token_, "--gpus", "none", "--work-dir", work, "--trainer", trainer_,
        "--gemm-tuning", token_},
       "not a GEMM tuning table (ablate-train --tune-gemm): not valid JSON"},
#ifdef ABLATE_WORKER_METRICS
      {{"--token-file", token_, "--gpus", "none", "--work-dir", work, "--trainer", trainer_,
        "--metrics", "9101"},
       "--metrics 9101: expected HOST:PORT"},
#endif
  };
  for (const auto& c : cases) {
    auto [code, err] = RunToEnd(c.args);
    EXPECT_EQ(code, 2) << err;
    EXPECT_NE(err.find(c.message), std::string::npos) << "expected '" << c.message << "' in:\n"
                                                      << err;
  }
}

TEST_F(WorkerMainTest, SigtermDrainsAndASecondOneKillsTheTrials) {
  const std::string work = dir_.path() + "/work";
  v1::Assignment a;
  a.set_trial_id(12);
  a.set_attempt(1);
  a.set_config_json(R"({"mode": "sleep"})");
  a.set_cpu_slots(1);
  coord_.Assign(a);
  Launch({"--token-file", token_, "--gpus", "none", "--cpu-slots", "2", "--work-dir", work,
          "--trainer", trainer_});
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.HasEvent(12, v1::TrialEvent::STARTED); }))
      << ReadAll(dir_.path() + "/worker.log");
  {
    std::lock_guard<std::mutex> l(coord_.mu());
    ASSERT_EQ(coord_.registers().size(), 1u);
    const auto& reg = coord_.registers()[0];
    std::string id = ReadAll(work + "/worker_id");
    ASSERT_FALSE(id.empty());
    id.pop_back();  // newline
    EXPECT_EQ(reg.worker_id(), id);
    EXPECT_EQ(reg.cpu_slots(), 2);
    EXPECT_EQ(reg.gpus_size(), 0);
    EXPECT_FALSE(reg.hostname().empty());
    EXPECT_FALSE(reg.version().empty());
  }
  // A second worker on the same work dir is refused (it would share the worker id, and its
  // restart recovery would kill this one's trainer as an orphan); this one's trial runs on.
  {
    SpawnSpec second;
    second.program = ABLATE_WORKER_BIN;
    second.args = {"--token-file", token_, "--gpus",    "none",
                   "--work-dir",   work,   "--trainer", trainer_};
    second.stderr_path = dir_.path() + "/second.log";
    second.env = {{"ABLATE_COORDINATOR", "127.0.0.1:" + std::to_string(port_)}};
    auto c = RealSpawner()->Spawn(second);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::optional<ExitStatus> st;
    WaitFor([&] { return (st = (*c)->TryWait()).has_value(); }, 10000);
    ASSERT_TRUE(st.has_value()) << "the second worker did not exit";
    EXPECT_EQ(st->code, 2);
    EXPECT_NE(
        ReadAll(dir_.path() + "/second.log")
            .find("is in use by another ablate-worker (pid " + std::to_string(child_->pid()) + ")"),
        std::string::npos)
        << ReadAll(dir_.path() + "/second.log");
    std::lock_guard<std::mutex> l(coord_.mu());
    EXPECT_EQ(coord_.registers().size(), 1u);
    EXPECT_EQ(coord_.FinalOf(12, 1), nullptr);
  }
  // First SIGTERM: draining, the trial keeps running.
  ::kill(child_->pid(), SIGTERM);
  ASSERT_TRUE(coord_.WaitUntil([&] {
    for (const auto& h : coord_.heartbeats()) {
      if (h.draining()) return true;
    }
    return false;
  }));
  EXPECT_FALSE(Wait(300).has_value()) << "the worker exited while its trial was running";
  {
    std::lock_guard<std::mutex> l(coord_.mu());
    EXPECT_EQ(coord_.FinalOf(12, 1), nullptr);
  }
  // Second SIGTERM: the trial is killed and reported, the worker exits 0.
  ::kill(child_->pid(), SIGTERM);
  auto st = Wait(10000);
  ASSERT_TRUE(st.has_value());
  EXPECT_FALSE(st->signaled);
  EXPECT_EQ(st->code, 0) << ReadAll(dir_.path() + "/worker.log");
  std::lock_guard<std::mutex> l(coord_.mu());
  const v1::TrialEvent* e = coord_.FinalOf(12, 1);
  ASSERT_NE(e, nullptr) << ReadAll(dir_.path() + "/worker.log");
  EXPECT_EQ(e->kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(e->reason(), "worker stopped: killed by signal 9 (SIGKILL)");
}

// Like the CLI (ablate/endpoint.h): $ABLATE_TOKEN_FILE and $ABLATE_DATA_DIR (its token and the
// address in its ablated.addr) stand in for the flags, which win over them.
TEST_F(WorkerMainTest, TheEnvironmentGivesTheCoordinatorAndTheToken) {
  const std::string work = dir_.path() + "/work";
  const std::vector<std::string> args = {"--gpus", "none",      "--work-dir",
                                         work,     "--trainer", trainer_};
  // Starts the worker with env_, waits for its registration (the address and token were right),
  // then drains it.
  auto registers = [&](size_t n) {
    ::unlink((dir_.path() + "/worker.log").c_str());
    Launch(args);
    EXPECT_TRUE(coord_.WaitUntil([&] { return coord_.registers().size() == n; }))
        << ReadAll(dir_.path() + "/worker.log");
    ::kill(child_->pid(), SIGTERM);
    auto st = Wait(10000);
    EXPECT_TRUE(st.has_value() && st->code == 0) << ReadAll(dir_.path() + "/worker.log");
    return ReadAll(dir_.path() + "/worker.log");
  };
  env_ = {{"ABLATE_COORDINATOR", "127.0.0.1:" + std::to_string(port_)},
          {"ABLATE_TOKEN_FILE", token_},
          {"ABLATE_DATA_DIR", ""}};
  registers(1);

  // The data dir alone: ablated.addr names the fake coordinator, the token is <dir>/token.
  const std::string data = dir_.path() + "/coordinator";
  ASSERT_TRUE(MakeDirs(data).ok());
  testing::WriteAll(data + "/token", std::string(testing::kToken) + "\n");
  ::chmod((data + "/token").c_str(), 0600);
  testing::WriteAll(data + "/ablated.addr", "127.0.0.1:" + std::to_string(port_) + "\n");
  env_ = {{"ABLATE_COORDINATOR", ""}, {"ABLATE_TOKEN_FILE", ""}, {"ABLATE_DATA_DIR", data}};
  const std::string log = registers(2);
  EXPECT_NE(log.find("coordinator 127.0.0.1:" + std::to_string(port_)), std::string::npos) << log;

  // A flag beats the environment; a missing file is named with where its path came from.
  std::vector<std::string> flagged = args;
  flagged.insert(flagged.end(), {"--token-file", dir_.path() + "/nope"});
  auto [code, err] = RunToEnd(flagged);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("--token-file: token file " + dir_.path() + "/nope"), std::string::npos)
      << err;
  env_ = {{"ABLATE_COORDINATOR", "127.0.0.1:" + std::to_string(port_)},
          {"ABLATE_TOKEN_FILE", dir_.path() + "/missing"}};
  std::tie(code, err) = RunToEnd(args);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("$ABLATE_TOKEN_FILE: token file " + dir_.path() + "/missing"),
            std::string::npos)
      << err;
  std::remove((data + "/ablated.addr").c_str());
  env_ = {{"ABLATE_COORDINATOR", ""}, {"ABLATE_TOKEN_FILE", ""}, {"ABLATE_DATA_DIR", data}};
  std::tie(code, err) = RunToEnd(args);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find(data + "/ablated.addr does not exist"), std::string::npos) << err;
}

TEST_F(WorkerMainTest, DrainFlagResendsAndExitsKeepingTheWorkerId) {
  const std::string work = dir_.path() + "/work";
  ASSERT_TRUE(MakeDirs(work).ok());
  testing::WriteAll(work + "/worker_id", "node-a-123456\n");
  // A finished attempt whose final event was never acknowledged.
  const std::string adir = work + "/trials/30/attempt-1";
  ASSERT_TRUE(MakeDirs(adir).ok());
  {
    auto spool = Spool::Open(adir + "/spool");
    ASSERT_TRUE(spool.ok());
    v1::WorkerMessage m;
    m.mutable_event()->set_trial_id(30);
    m.mutable_event()->set_attempt(1);
    m.mutable_event()->set_seq(4);
    m.mutable_event()->set_kind(v1::TrialEvent::FINISHED);
    m.mutable_event()->set_status("diverged");
    ASSERT_TRUE((*spool)->Append(m).ok());
  }
  auto [code, err] = RunToEnd({"--token-file", token_, "--gpus", "none", "--work-dir", work,
                               "--trainer", trainer_, "--drain"});
  EXPECT_EQ(code, 0) << err;
  std::lock_guard<std::mutex> l(coord_.mu());
  ASSERT_EQ(coord_.registers().size(), 1u) << err;
  EXPECT_EQ(coord_.registers()[0].worker_id(), "node-a-123456");
  EXPECT_TRUE(coord_.registers()[0].draining());
  EXPECT_EQ(coord_.registers()[0].cpu_slots(), 1);  // the default without GPUs
  ASSERT_NE(coord_.FinalOf(30, 1), nullptr);
  EXPECT_EQ(coord_.FinalOf(30, 1)->status(), "diverged");
  EXPECT_FALSE(FileExists(adir + "/spool"));
}

#ifdef ABLATE_WORKER_METRICS
// The first line of `text` that starts with `prefix`, "" when there is none.
std::string LineOf(const std::string& text, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') return text.substr(pos, text.find('\n', pos) - pos);
    pos += prefix.size();
  }
  return "";
}
bool EndsWith(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

TEST_F(WorkerMainTest, MetricsFlagServesPrometheusWithTheToken) {
  const std::string work = dir_.path() + "/work";
  v1::Assignment a;
  a.set_trial_id(21);
  a.set_attempt(1);
  a.set_config_json(R"({"mode": "ok", "steps": 60, "sleep": 0.05})");
  a.set_cpu_slots(1);
  coord_.Assign(a);
  Launch({"--token-file", token_, "--gpus", "none", "--cpu-slots", "2", "--work-dir", work,
          "--trainer", trainer_, "--metrics", "127.0.0.1:0"});
  std::string addr;
  ASSERT_TRUE(WaitFor(
      [&] {
        addr = ReadAll(work + "/worker.metrics");
        return !addr.empty() && addr.back() == '\n';
      },
      10000))
      << ReadAll(dir_.path() + "/worker.log");
  addr.pop_back();
  ASSERT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;
  httplib::Client c("127.0.0.1", std::stoi(addr.substr(10)));
  c.set_read_timeout(5, 0);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = c.Get("/metrics", {{"Authorization", "Bearer not-the-token"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  // While the trial runs: a busy slot and the trainer's tokens per second.
  const httplib::Headers auth = {{"Authorization", std::string("Bearer ") + testing::kToken}};
  std::string body;
  EXPECT_TRUE(WaitFor(
      [&] {
        auto res = c.Get("/metrics", auth);
        if (!res || res->status != 200) return false;
        body = res->body;
        return EndsWith(LineOf(body, "ablate_worker_cpu_slots_busy{"), " 1") &&
               !LineOf(body, "ablate_worker_tokens_per_second{slot=\"cpu0\"").empty();
      },
      10000))
      << body;
  EXPECT_NE(body.find("# TYPE ablate_worker_build_info gauge"), std::string::npos) << body;
  EXPECT_NE(body.find("ablate_worker_connected{"), std::string::npos) << body;
  EXPECT_NE(body.find("ablate_worker_trial_info{gpu_uuid=\"\",slot=\"cpu0\",trial=\"21\""),
            std::string::npos)
      << body;
  ::kill(child_->pid(), SIGTERM);  // drains: the trial finishes, then the worker exits
  auto st = Wait(15000);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->code, 0) << ReadAll(dir_.path() + "/worker.log");
  EXPECT_FALSE(FileExists(work + "/worker.metrics"));
  EXPECT_NE(ReadAll(dir_.path() + "/worker.log")
                .find("Prometheus metrics on http://" + addr + "/metrics (bearer token required)"),
            std::string::npos);
}
#endif

}  // namespace
}  // namespace ablate::agent
