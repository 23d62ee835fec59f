// The agent against an in-process fake coordinator: a real gRPC server on 127.0.0.1:0 that
// implements WorkerService, registers the worker, assigns attempts of the fake trainer, acks (or
// withholds acks), cuts the stream, and records everything it receives.
#include "agent/agent.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <set>

#include "agent/util.h"
#include "fake_coordinator.h"
#include "proto/ablate.grpc.pb.h"
#include "test_util.h"

namespace ablate::agent {
namespace {

using testing::ReadAll;
using testing::TempDir;

using testing::FakeCoordinator;
using testing::kToken;
using testing::Received;

int64_t SeqOf(const v1::WorkerMessage& m) {
  return m.has_metrics() ? m.metrics().seq() : m.event().seq();
}
int64_t TrialOf(const v1::WorkerMessage& m) {
  return m.has_metrics() ? m.metrics().trial_id() : m.event().trial_id();
}

class WorkerAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&coord_);
    server_ = b.BuildAndStart();
    ASSERT_TRUE(server_);
    ASSERT_GT(port_, 0);
    trainer_ = testing::WriteFakeTrainer(dir_.path());
    work_ = dir_.path() + "/work";
    auto c = MakeGrpcConnector("127.0.0.1:" + std::to_string(port_), kToken);
    ASSERT_TRUE(c.ok());
    connector_ = std::move(*c);
  }
  void TearDown() override {
    if (agent_) {
      agent_->Stop();
      if (run_.valid()) run_.wait();
    }
    agent_.reset();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  AgentOptions Options() {
    AgentOptions o;
    o.worker_id = "w1";
    o.hostname = "test-host";
    o.cpu_slots = 2;
    o.nproc = 8;
    o.work_dir = work_;
    o.trainer_path = trainer_;
    o.version = "test";
    o.backoff_initial_ms = 100;
    o.backoff_max_ms = 400;
    o.drain_ack_wait_ms = 2000;
    return o;
  }

  void Start(AgentOptions o) {
    agent_ = std::make_unique<Agent>(std::move(o),
                                     AgentEnv{connector_.get(), RealSpawner(), SystemClock()});
    run_ = std::async(std::launch::async, [this] { return agent_->Run(); });
  }

  // Drains the agent and waits for Run() to return.
  void DrainAndWait() {
    agent_->Drain();
    ASSERT_EQ(run_.wait_for(std::chrono::seconds(15)), std::future_status::ready)
        << "Run() did not return after Drain()";
    EXPECT_TRUE(run_.get().ok());
  }

  static v1::Assignment Assignment(int64_t trial, int32_t attempt, const std::string& config) {
    v1::Assignment a;
    a.set_trial_id(trial);
    a.set_attempt(attempt);
    a.set_config_json(config);
    a.set_cpu_slots(1);
    a.set_sweep_name("test-sweep");
    return a;
  }

  std::string AttemptDir(int64_t trial, int32_t attempt) {
    return work_ + "/trials/" + std::to_string(trial) + "/attempt-" + std::to_string(attempt);
  }

  TempDir dir_;
  std::string work_;
  std::string trainer_;
  FakeCoordinator coord_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CoordinatorConnector> connector_;
  std::unique_ptr<Agent> agent_;
  std::future<Status> run_;
};

TEST_F(WorkerAgentTest, RunsAnAssignmentAndDeliversEveryReportOnce) {
  const std::string config = R"({"mode": "ok", "steps": 20, "sleep": 0.02})";
  auto a = Assignment(3, 1, config);
  a.set_resume_checkpoint(dir_.path() + "/missing.ckpt");  // not here: start from scratch
  coord_.Assign(a);
  Start(Options());
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.FinalOf(3, 1) != nullptr; }))
      << "no final event";
  ASSERT_TRUE(testing::WaitFor([&] { return agent_->stats().running == 0; }, 5000))
      << "the attempt was not retired after its final ack";
  DrainAndWait();

  std::lock_guard<std::mutex> l(coord_.mu());
  ASSERT_EQ(coord_.registers().size(), 1u);
  const auto& reg = coord_.registers()[0];
  EXPECT_EQ(reg.worker_id(), "w1");
  EXPECT_EQ(reg.hostname(), "test-host");
  EXPECT_EQ(reg.cpu_slots(), 2);
  EXPECT_EQ(reg.gpus_size(), 0);
  EXPECT_EQ(reg.running_size(), 0);
  EXPECT_FALSE(reg.draining());
  EXPECT_EQ(reg.version(), "test");
  EXPECT_FALSE(coord_.heartbeats().empty());

  // Every seq exactly once, numbered 1..N without gaps, in order.
  std::vector<int64_t> seqs;
  int batches = 0;
  std::map<int64_t, int> loss_by_step;
  double cpu_threads = -1;
  for (const auto& r : coord_.received()) {
    seqs.push_back(SeqOf(r.msg));
    if (r.msg.has_metrics()) {
      ++batches;
      EXPECT_EQ(r.msg.metrics().trial_id(), 3);
      EXPECT_EQ(r.msg.metrics().attempt(), 1);
      for (const auto& p : r.msg.metrics().points()) {
        if (p.name() == "loss") ++loss_by_step[p.step()];
        if (p.name() == "cpu_threads") cpu_threads = p.value();
      }
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], int64_t(i + 1));
  EXPECT_GE(batches, 2) << "20 steps over >0.4 s should span several 200 ms batches";
  ASSERT_EQ(loss_by_step.size(), 20u);
  for (const auto& [step, n] : loss_by_step) EXPECT_EQ(n, 1) << "step " << step;
  EXPECT_EQ(cpu_threads, 4);  // 8 cores / 2 slots × 1 slot taken

  const auto& first = coord_.received().front().msg;
  ASSERT_TRUE(first.has_event());
  EXPECT_EQ(first.event().kind(), v1::TrialEvent::STARTED);
  const auto& last = coord_.received().back().msg;
  ASSERT_TRUE(last.has_event());
  EXPECT_EQ(last.event().kind(), v1::TrialEvent::FINISHED);
  EXPECT_EQ(last.event().status(), "ok");
  EXPECT_EQ(last.event().step(), 20);
  EXPECT_TRUE(coord_.HasEvent(3, v1::TrialEvent::CHECKPOINTED));
  EXPECT_NE(last.event().log_tail().find("CUDA_VISIBLE_DEVICES=[] ABLATE_CPU_THREADS=[4]"),
            std::string::npos)
      << last.event().log_tail();
  EXPECT_EQ(last.event().log_tail().find("resuming"), std::string::npos);

  // The attempt folder: the config as assigned, the trainer's stderr; the spool is gone.
  const std::string dir = AttemptDir(3, 1);
  EXPECT_EQ(ReadAll(dir + "/config.yaml"), config);
  EXPECT_NE(ReadAll(dir + "/stderr.log").find("ABLATE_CPU_THREADS=[4]"), std::string::npos);
  EXPECT_FALSE(FileExists(dir + "/spool"));
}

TEST_F(WorkerAgentTest, BrokenStreamReplaysUnackedReportsAfterReconnect) {
  // First connection: ack seqs 1 and 2 only, cut the stream after the 4th report.
  coord_.ack_policy = [](int conn, const v1::WorkerMessage& m) {
    return conn > 1 || SeqOf(m) <= 2;
  };
  coord_.break_policy = [](int conn, int reports) { return conn == 1 && reports == 4; };
  coord_.Assign(Assignment(5, 2, R"({"mode": "ok", "steps": 30, "sleep": 0.03})"));
  Start(Options());
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.FinalOf(5, 2) != nullptr; }, 20000));
  ASSERT_TRUE(testing::WaitFor([&] { return agent_->stats().running == 0; }, 5000));
  DrainAndWait();

  std::lock_guard<std::mutex> l(coord_.mu());
  ASSERT_GE(coord_.registers().size(), 2u);
  // The re-registration lists the attempt (its trainer was still running or its final event
  // unacknowledged), so the coordinator can re-adopt it.
  const auto& reg2 = coord_.registers()[1];
  ASSERT_EQ(reg2.running_size(), 1);
  EXPECT_EQ(reg2.running(0).trial_id(), 5);
  EXPECT_EQ(reg2.running(0).attempt(), 2);

  std::map<int64_t, std::vector<const Received*>> by_seq;
  for (const auto& r : coord_.received()) by_seq[SeqOf(r.msg)].push_back(&r);
  // Contiguous seqs.
  int64_t expect = 1;
  for (const auto& [seq, rs] : by_seq) EXPECT_EQ(seq, expect++);
  // Acked on the first connection: never resent. Unacked (3, 4): resent once, identical.
  EXPECT_EQ(by_seq[1].size(), 1u);
  EXPECT_EQ(by_seq[2].size(), 1u);
  for (int64_t s : {3, 4}) {
    ASSERT_EQ(by_seq[s].size(), 2u) << "seq " << s;
    EXPECT_EQ(by_seq[s][0]->conn, 1);
    EXPECT_EQ(by_seq[s][1]->conn, 2);
    EXPECT_EQ(by_seq[s][0]->msg.SerializeAsString(), by_seq[s][1]->msg.SerializeAsString());
  }
  for (const auto& [seq, rs] : by_seq) {
    if (seq > 4) {
      EXPECT_EQ(rs.size(), 1u) << "seq " << seq;
    }
  }
  // On the second connection the resent reports come first, in seq order.
  std::vector<int64_t> conn2;
  for (const auto& r : coord_.received()) {
    if (r.conn == 2) conn2.push_back(SeqOf(r.msg));
  }
  ASSERT_GE(conn2.size(), 2u);
  EXPECT_EQ(conn2[0], 3);
  EXPECT_EQ(conn2[1], 4);
  EXPECT_TRUE(std::is_sorted(conn2.begin(), conn2.end()));
  // After deduplication by seq every step's loss is there exactly once.
  std::map<int64_t, int> loss_by_step;
  for (const auto& [seq, rs] : by_seq) {
    if (!rs[0]->msg.has_metrics()) continue;
    for (const auto& p : rs[0]->msg.metrics().points()) {
      if (p.name() == "loss") ++loss_by_step[p.step()];
    }
  }
  ASSERT_EQ(loss_by_step.size(), 30u);
  for (const auto& [step, n] : loss_by_step) EXPECT_EQ(n, 1) << "step " << step;
  EXPECT_EQ(coord_.FinalOf(5, 2)->kind(), v1::TrialEvent::FINISHED);
  // What --metrics exports: the resent batches (3 and 4 at least) and the reconnect.
  const auto m = agent_->metrics_snapshot();
  EXPECT_GE(m.registrations, 2);
  EXPECT_GE(m.batches.batches_replayed, 2);
  EXPECT_EQ(m.batches.batches_acked, m.batches.batches_spooled);
  EXPECT_EQ(m.finished.at("succeeded"), 1);
  EXPECT_EQ(m.unacked_reports, 0);
}

TEST_F(WorkerAgentTest, RestartResendsSpooledReportsAndReportsLostTrainers) {
  // What a killed worker process leaves behind: attempt 9/2 was running (STARTED and one batch,
  // nothing acknowledged, its trainer still alive); attempt 8/1 had finished but its final event
  // was never acknowledged.
  auto make_event = [](int64_t trial, int32_t attempt, int64_t seq, v1::TrialEvent::Kind k) {
    v1::WorkerMessage m;
    auto* e = m.mutable_event();
    e->set_trial_id(trial);
    e->set_attempt(attempt);
    e->set_seq(seq);
    e->set_kind(k);
    if (k == v1::TrialEvent::FINISHED) e->set_status("ok");
    return m;
  };
  {
    ASSERT_TRUE(MakeDirs(AttemptDir(9, 2)).ok());
    auto s = Spool::Open(AttemptDir(9, 2) + "/spool");
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Append(make_event(9, 2, 1, v1::TrialEvent::STARTED)).ok());
    v1::WorkerMessage b;
    b.mutable_metrics()->set_trial_id(9);
    b.mutable_metrics()->set_attempt(2);
    b.mutable_metrics()->set_seq(2);
    auto* p = b.mutable_metrics()->add_points();
    p->set_step(1);
    p->set_name("loss");
    p->set_value(4.5);
    ASSERT_TRUE((*s)->Append(b).ok());
  }
  // Its trainer still runs (orphaned; here our child, so the test can reap it).
  const std::string dir9 = AttemptDir(9, 2);
  testing::WriteAll(dir9 + "/config.yaml", R"({"mode": "sleep"})");
  SpawnSpec spec;
  spec.program = trainer_;
  spec.args = {"--config", dir9 + "/config.yaml", "--out", dir9};
  spec.cwd = dir9;
  spec.stderr_path = dir9 + "/stderr.log";
  spec.env = {{"CUDA_VISIBLE_DEVICES", "orphan"}};
  auto orphan = RealSpawner()->Spawn(spec);
  ASSERT_TRUE(orphan.ok()) << orphan.status().ToString();
  ASSERT_TRUE(testing::WaitFor(
      [&] { return ReadAll(dir9 + "/grandchild.pid").find('\n') != std::string::npos; }, 5000));
  const int grandchild = std::stoi(ReadAll(dir9 + "/grandchild.pid"));
  testing::WriteAll(dir9 + "/trainer.pid", std::to_string((*orphan)->pid()) + "\n");
  {
    ASSERT_TRUE(MakeDirs(AttemptDir(8, 1)).ok());
    auto s8 = Spool::Open(AttemptDir(8, 1) + "/spool");
    ASSERT_TRUE(s8.ok());
    ASSERT_TRUE((*s8)->Append(make_event(8, 1, 1, v1::TrialEvent::STARTED)).ok());
    ASSERT_TRUE((*s8)->Append(make_event(8, 1, 2, v1::TrialEvent::FINISHED)).ok());
    ASSERT_TRUE((*s8)->Ack(1).ok());
  }
  Start(Options());
  ASSERT_TRUE(coord_.WaitUntil(
      [&] { return coord_.FinalOf(9, 2) != nullptr && coord_.FinalOf(8, 1) != nullptr; }));
  ASSERT_TRUE(testing::WaitFor([&] { return agent_->stats().running == 0; }, 5000));
  DrainAndWait();

  std::lock_guard<std::mutex> l(coord_.mu());
  ASSERT_EQ(coord_.registers().size(), 1u);
  std::set<std::pair<int64_t, int32_t>> running;
  for (const auto& r : coord_.registers()[0].running()) running.insert({r.trial_id(), r.attempt()});
  EXPECT_EQ(running, (std::set<std::pair<int64_t, int32_t>>{{8, 1}, {9, 2}}));

  std::vector<int64_t> seqs9, seqs8;
  for (const auto& r : coord_.received()) {
    (TrialOf(r.msg) == 9 ? seqs9 : seqs8).push_back(SeqOf(r.msg));
  }
  EXPECT_EQ(seqs9, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(seqs8, (std::vector<int64_t>{2}));
  const v1::TrialEvent* lost = coord_.FinalOf(9, 2);
  EXPECT_EQ(lost->kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(lost->reason(),
            "trainer lost: the worker restarted while it ran (its leftover processes were killed)");
  EXPECT_EQ(lost->exit_code(), -9);
  EXPECT_NE(lost->log_tail().find("CUDA_VISIBLE_DEVICES=[orphan]"), std::string::npos)
      << lost->log_tail();
  EXPECT_TRUE(testing::WaitFor([&] { return (*orphan)->TryWait().has_value(); }, 3000));
  EXPECT_TRUE(testing::WaitFor([&] { return testing::ProcessGone(grandchild); }, 3000));
  EXPECT_EQ(coord_.FinalOf(8, 1)->kind(), v1::TrialEvent::FINISHED);
  EXPECT_FALSE(FileExists(AttemptDir(9, 2) + "/spool"));
  EXPECT_FALSE(FileExists(AttemptDir(8, 1) + "/spool"));
  // The recovered batch (seq 2 of 9/2) counts as replayed; the orphan as lost; nothing started.
  const auto m = agent_->metrics_snapshot();
  EXPECT_EQ(m.batches.batches_replayed, 1);
  EXPECT_EQ(m.batches.batches_acked, 1);
  EXPECT_EQ(m.batches.batches_spooled, 0);
  EXPECT_EQ(m.finished.at("lost"), 1);
  EXPECT_EQ(m.trials_started, 0);
}

TEST_F(WorkerAgentTest, CancelFromTheCoordinatorOnAGpuWorker) {
  AgentOptions o = Options();
  o.cpu_slots = 0;
  o.gemm_tuning = "/hosts/h100.json";  // handed to every trial given a GPU
  o.gpus.resize(2);
  for (int i = 0; i < 2; ++i) {
    o.gpus[i].set_index(i);
    o.gpus[i].set_uuid("GPU-fake-" + std::to_string(i));
  }
  auto a = Assignment(6, 1, R"({"mode": "sleep"})");
  a.set_cpu_slots(0);
  a.add_gpu_indices(0);
  a.add_gpu_indices(1);
  coord_.Assign(a);
  Start(o);
  // Wait for the first batch (the start line comes after the environment went to stderr).
  ASSERT_TRUE(coord_.WaitUntil([&] {
    for (const auto& r : coord_.received()) {
      if (r.msg.has_metrics() && r.msg.metrics().trial_id() == 6) return true;
    }
    return false;
  }));
  {
    std::lock_guard<std::mutex> l(coord_.mu());
    EXPECT_EQ(coord_.registers()[0].gpus_size(), 2);
    EXPECT_EQ(coord_.registers()[0].gpus(1).uuid(), "GPU-fake-1");
  }
  {
    const auto m = agent_->metrics_snapshot();
    ASSERT_EQ(m.running.size(), 1u);
    EXPECT_EQ(m.running[0].gpus, (std::vector<int>{0, 1}));
    EXPECT_TRUE(m.running[0].cpu_slots.empty());
    EXPECT_EQ(m.cpu_slots_busy, 0);
  }
  v1::CoordinatorMessage cancel;
  cancel.mutable_cancel()->set_trial_id(6);
  cancel.mutable_cancel()->set_attempt(1);
  cancel.mutable_cancel()->set_reason("canceled by the user");
  ASSERT_TRUE(coord_.Send(cancel));
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.FinalOf(6, 1) != nullptr; }));
  DrainAndWait();
  std::lock_guard<std::mutex> l(coord_.mu());
  const v1::TrialEvent* e = coord_.FinalOf(6, 1);
  EXPECT_EQ(e->kind(), v1::TrialEvent::CANCELED);
  EXPECT_EQ(e->reason(), "canceled by the user (killed by signal 15 (SIGTERM))");
  EXPECT_EQ(agent_->metrics_snapshot().finished.at("canceled"), 1);
  EXPECT_TRUE(agent_->metrics_snapshot().running.empty());
  EXPECT_NE(e->log_tail().find(
                "CUDA_VISIBLE_DEVICES=[0,1] ABLATE_CPU_THREADS=[8] CUDA_DEVICE_ORDER=[PCI_BUS_ID]"),
            std::string::npos)
      << e->log_tail();
  EXPECT_NE(e->log_tail().find("/config.yaml --out " + work_ +
                               "/trials/6/attempt-1 --gemm-tuning "
                               "/hosts/h100.json]"),
            std::string::npos)
      << e->log_tail();
}

// A CPU trial does not get the worker's GEMM tuning table (it has no cuBLASLt GEMMs).
TEST_F(WorkerAgentTest, TheGemmTuningTableGoesToGpuTrialsOnly) {
  AgentOptions o = Options();
  o.gemm_tuning = "/hosts/h100.json";
  coord_.Assign(Assignment(7, 1, R"({"mode": "exit3"})"));
  Start(o);
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.FinalOf(7, 1) != nullptr; }));
  DrainAndWait();
  std::lock_guard<std::mutex> l(coord_.mu());
  const std::string tail = coord_.FinalOf(7, 1)->log_tail();
  EXPECT_NE(tail.find("args [--config "), std::string::npos) << tail;
  EXPECT_EQ(tail.find("--gemm-tuning"), std::string::npos) << tail;
}

TEST_F(WorkerAgentTest, DrainFinishesRunningTrialsAndRefusesNewOnes) {
  coord_.Assign(Assignment(7, 1, R"({"mode": "ok", "steps": 10, "sleep": 0.05})"));
  Start(Options());
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.HasEvent(7, v1::TrialEvent::STARTED); }));
  agent_->Drain();
  ASSERT_TRUE(coord_.WaitUntil([&] {
    for (const auto& h : coord_.heartbeats()) {
      if (h.draining()) return true;
    }
    return false;
  }));
  coord_.Assign(Assignment(70, 1, R"({"mode": "ok"})"));  // raced with the drain
  ASSERT_EQ(run_.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  EXPECT_TRUE(run_.get().ok());
  std::lock_guard<std::mutex> l(coord_.mu());
  ASSERT_NE(coord_.FinalOf(7, 1), nullptr);
  EXPECT_EQ(coord_.FinalOf(7, 1)->kind(), v1::TrialEvent::FINISHED);
  ASSERT_NE(coord_.FinalOf(70, 1), nullptr);
  EXPECT_EQ(coord_.FinalOf(70, 1)->kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(coord_.FinalOf(70, 1)->reason(), "worker is draining");
  EXPECT_FALSE(FileExists(AttemptDir(70, 1) + "/stderr.log"));  // never started
  const auto m = agent_->metrics_snapshot();
  EXPECT_TRUE(m.draining);
  EXPECT_EQ(m.trials_started, 1);
  EXPECT_EQ(m.finished.at("succeeded"), 1);
  EXPECT_EQ(m.finished.at("refused"), 1);
}

// --data-root checks a corpus's real path against each root with a trailing '/': a root of "/"
// itself became "//" and refused every corpus as outside it.
TEST_F(WorkerAgentTest, DataRootOfTheWholeFileSystemAllowsEveryCorpus) {
  testing::WriteAll(dir_.path() + "/corpus.txt", "some text\n");
  const std::string config =
      R"({"mode": "ok", "steps": 2, "data": {"corpus": ")" + dir_.path() + R"(/corpus.txt"}})";
  ASSERT_TRUE(MakeDirs(dir_.path() + "/elsewhere").ok());
  char elsewhere[PATH_MAX];
  ASSERT_NE(::realpath((dir_.path() + "/elsewhere").c_str(), elsewhere), nullptr);
  AgentOptions o = Options();
  o.data_roots = {"/", elsewhere};
  coord_.Assign(Assignment(5, 1, config));
  Start(o);
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.FinalOf(5, 1) != nullptr; }));
  {
    std::lock_guard<std::mutex> l(coord_.mu());
    EXPECT_EQ(coord_.FinalOf(5, 1)->kind(), v1::TrialEvent::FINISHED)
        << coord_.FinalOf(5, 1)->reason();
  }
  DrainAndWait();
}

TEST_F(WorkerAgentTest, StopKillsRunningTrainers) {
  coord_.Assign(Assignment(4, 3, R"({"mode": "sleep"})"));
  Start(Options());
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.HasEvent(4, v1::TrialEvent::STARTED); }));
  agent_->Stop();
  ASSERT_EQ(run_.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(run_.get().ok());
  std::lock_guard<std::mutex> l(coord_.mu());
  const v1::TrialEvent* e = coord_.FinalOf(4, 3);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind(), v1::TrialEvent::FAILED);
  EXPECT_EQ(e->reason(), "worker stopped: killed by signal 9 (SIGKILL)");
  EXPECT_EQ(e->exit_code(), -9);
}

// With the real trainer: set ABLATE_TEST_TRAINER to an ablate-train binary (skipped otherwise, so
// that this unit test does not depend on the trainer's build). Runs a tiny CPU trial, then a
// second attempt that resumes from the first one's step-3 checkpoint.
TEST_F(WorkerAgentTest, RealTrainerRunAndResume) {
  const char* real = std::getenv("ABLATE_TEST_TRAINER");
#ifdef ABLATE_TRAIN_BIN
  if (!real || !*real) real = ABLATE_TRAIN_BIN;  // the one this build made
#endif
  if (!real || !*real) GTEST_SKIP() << "ABLATE_TEST_TRAINER is not set";
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + ". ";
  testing::WriteAll(dir_.path() + "/corpus.txt", text);
  const std::string config =
      R"({"seed": 1, "data": {"corpus": ")" + dir_.path() +
      R"(/corpus.txt", "val_fraction": 0.1,)"
      R"( "eval_batches": 1}, "model": {"seq_len": 32, "layers": 1, "d_model": 32, "heads": 2},)"
      R"( "train": {"steps": 6, "tokens_per_step": 256, "micro_batch": 8, "warmup": 1,)"
      R"( "eval_every": 3, "diagnostics_every": 3, "checkpoint_every": 3}, "device": "cpu"})";
  AgentOptions o = Options();
  o.trainer_path = real;
  char root[PATH_MAX];
  ASSERT_NE(::realpath(dir_.path().c_str(), root), nullptr);
  o.data_roots = {root};
  coord_.Assign(Assignment(20, 1, config));
  Start(o);
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.FinalOf(20, 1) != nullptr; }, 60000));
  std::string ckpt3;
  {
    std::lock_guard<std::mutex> l(coord_.mu());
    const v1::TrialEvent* f = coord_.FinalOf(20, 1);
    EXPECT_EQ(f->kind(), v1::TrialEvent::FINISHED) << f->reason() << "\n" << f->log_tail();
    EXPECT_EQ(f->status(), "ok");
    EXPECT_EQ(f->step(), 6);
    std::set<int64_t> loss_steps;
    bool diag = false;
    for (const auto& r : coord_.received()) {
      if (r.msg.has_event() && r.msg.event().kind() == v1::TrialEvent::CHECKPOINTED &&
          r.msg.event().step() == 3) {
        ckpt3 = r.msg.event().checkpoint_path();
      }
      if (!r.msg.has_metrics()) continue;
      for (const auto& p : r.msg.metrics().points()) {
        if (p.name() == "loss") loss_steps.insert(p.step());
        if (p.name() == "attn.0.dq.cos") diag = true;
      }
    }
    EXPECT_EQ(loss_steps, (std::set<int64_t>{1, 2, 3, 4, 5, 6}));
    EXPECT_TRUE(diag);
  }
  ASSERT_FALSE(ckpt3.empty());
  EXPECT_EQ(ckpt3.rfind(AttemptDir(20, 1) + "/checkpoints/", 0), 0u) << ckpt3;
  EXPECT_TRUE(FileExists(ckpt3));

  auto a2 = Assignment(20, 2, config);
  a2.set_resume_checkpoint(ckpt3);
  coord_.Assign(a2);
  ASSERT_TRUE(coord_.WaitUntil([&] { return coord_.FinalOf(20, 2) != nullptr; }, 60000));
  std::lock_guard<std::mutex> l(coord_.mu());
  EXPECT_EQ(coord_.FinalOf(20, 2)->kind(), v1::TrialEvent::FINISHED);
  double resumed = -1;
  std::set<int64_t> loss_steps;
  for (const auto& r : coord_.received()) {
    if (!r.msg.has_metrics() || r.msg.metrics().attempt() != 2) continue;
    for (const auto& p : r.msg.metrics().points()) {
      if (p.name() == "resumed_from_step") resumed = p.value();
      if (p.name() == "loss") loss_steps.insert(p.step());
    }
  }
  EXPECT_EQ(resumed, 3);
  EXPECT_EQ(loss_steps, (std::set<int64_t>{4, 5, 6}));
}

}  // namespace
}  // namespace ablate::agent
