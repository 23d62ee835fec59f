// The scheduler against a real Store (a temporary SQLite file), a fake clock and fake worker links:
// placement, acks after commit, fencing, leases, retries, cancel, recovery.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "scheduler_fixture.h"

namespace ablate::server {
namespace {

using namespace testing_util;  // NOLINT: the fixture

TEST_F(SchedulerTest, AssignsUpToFreeSlotsAfterCommit) {
  Submit("s", 3);
  auto link = Connect("w1", 2);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
  auto msgs = link->msgs;
  EXPECT_EQ(msgs[0].msg_case(), MC::kRegistered);  // registered before any assignment
  auto a = link->Of(MC::kAssign)[0].assign();
  EXPECT_EQ(a.attempt(), 1);
  EXPECT_EQ(a.sweep_name(), "s");
  EXPECT_EQ(a.cpu_slots(), 1);
  EXPECT_EQ(State(a.trial_id()), "running");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kAssign), 2u);  // the third waits for a slot
}

TEST_F(SchedulerTest, FinishFreesTheSlotAndAcksAfterCommit) {
  Submit("s", 2);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto a = link->Of(MC::kAssign)[0].assign();
  v1::MetricBatch b;
  b.set_trial_id(a.trial_id());
  b.set_attempt(1);
  b.set_seq(1);
  for (int i = 0; i < 5; ++i) {
    auto* p = b.add_points();
    p->set_step(i);
    p->set_name("loss");
    p->set_value(5.0 - i);
  }
  sched_->OnMetrics("w1", b);
  sched_->OnMetrics("w1", b);  // a replay
  sched_->OnEvent("w1", Event(a, v1::TrialEvent::FINISHED, 2));
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAck) == 3; }));
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
  EXPECT_EQ(State(a.trial_id()), "succeeded");
  auto series = store_->GetSeries(a.trial_id(), "loss");
  ASSERT_TRUE(series.ok());
  EXPECT_EQ(series->size(), 5u);  // stored once
  EXPECT_EQ(sched_->counters().duplicate_reports, 1);
}

TEST_F(SchedulerTest, LeaseExpiryRequeuesAndFencesTheOldAttempt) {
  Submit("s", 1);
  auto l1 = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return l1->Count(MC::kAssign) == 1; }));
  auto a1 = l1->Of(MC::kAssign)[0].assign();
  sched_->Disconnect("w1", l1.get());
  auto l2 = Connect("w2", 1);
  clock_.AdvanceSeconds(31);
  sched_->Tick();
  ASSERT_TRUE(WaitFor([&] { return l2->Count(MC::kAssign) == 1; }));
  auto a2 = l2->Of(MC::kAssign)[0].assign();
  EXPECT_EQ(a2.trial_id(), a1.trial_id());
  EXPECT_EQ(a2.attempt(), 2);
  // w1 comes back and replays attempt 1: fenced (acked, not stored) and told to stop.
  auto l1b = Connect("w1", 1, 0, {[&] {
                       v1::AttemptRef r;
                       r.set_trial_id(a1.trial_id());
                       r.set_attempt(1);
                       return r;
                     }()});
  auto reg = l1b->Of(MC::kRegistered)[0].registered();
  ASSERT_EQ(reg.stop_size(), 1);
  EXPECT_EQ(reg.stop(0).attempt(), 1);
  v1::MetricBatch stale;
  stale.set_trial_id(a1.trial_id());
  stale.set_attempt(1);
  stale.set_seq(7);
  auto* p = stale.add_points();
  p->set_name("loss");
  p->set_value(1);
  sched_->OnMetrics("w1", stale);
  ASSERT_TRUE(WaitFor([&] { return l1b->Count(MC::kAck) == 1; }));
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_TRUE(store_->GetSeries(a1.trial_id(), "loss")->empty());
  auto attempts = store_->GetAttempts(a1.trial_id());
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ((*attempts)[0].state, "lost");
}

// A partition drops packets without closing the stream: the worker's link stays, its heartbeats
// stop. Its expired trial must go to another worker, not back to it, until it is heard from again.
TEST_F(SchedulerTest, ACutOffWorkerGetsNoTrialsUntilHeardFromAgain) {
  Submit("s", 1);
  auto l1 = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return l1->Count(MC::kAssign) == 1; }));
  auto a1 = l1->Of(MC::kAssign)[0].assign();
  clock_.AdvanceSeconds(31);  // no heartbeat from w1 for a whole lease
  sched_->Tick();
  EXPECT_EQ(l1->Count(MC::kCancel), 1u);  // fenced
  clock_.AdvanceSeconds(5);  // past the retry backoff
  sched_->Tick();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(l1->Count(MC::kAssign), 1u);
  ASSERT_EQ(sched_->Workers().size(), 1u);
  EXPECT_EQ(sched_->Workers()[0].state(), "lost");
  auto l2 = Connect("w2", 1);
  ASSERT_TRUE(WaitFor([&] { return l2->Count(MC::kAssign) == 1; }));
  EXPECT_EQ(l2->Of(MC::kAssign)[0].assign().trial_id(), a1.trial_id());
  EXPECT_EQ(l2->Of(MC::kAssign)[0].assign().attempt(), 2);
  // w1 heartbeats again (the partition healed on the same stream): it gets work again.
  sched_->OnHeartbeat("w1", v1::Heartbeat());
  Submit("t", 1);
  ASSERT_TRUE(WaitFor([&] { return l1->Count(MC::kAssign) == 2; }));
}

TEST_F(SchedulerTest, FailuresRetryUpToMaxAttemptsAndConfigErrorsDoNot) {
  Submit("s", 2, 0, 0, 2);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto a1 = link->Of(MC::kAssign)[0].assign();
  sched_->OnEvent("w1", Event(a1, v1::TrialEvent::FAILED, 1, "", 1));
  // The retry waits out its backoff (1 s, doubling) and the other trial goes first.
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
  EXPECT_NE(link->Of(MC::kAssign)[1].assign().trial_id(), a1.trial_id());
  auto other = link->Of(MC::kAssign)[1].assign();
  sched_->OnEvent("w1", Event(other, v1::TrialEvent::FINISHED, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kAssign), 2u);  // still backing off
  clock_.AdvanceSeconds(1.5);
  sched_->Tick();
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 3; }));
  auto a2 = link->Of(MC::kAssign)[2].assign();
  EXPECT_EQ(a2.trial_id(), a1.trial_id());
  EXPECT_EQ(a2.attempt(), 2);
  sched_->OnEvent("w1", Event(a2, v1::TrialEvent::FAILED, 1, "", 1));
  EXPECT_EQ(State(a1.trial_id()), "failed");
  EXPECT_EQ(store_->GetTrial(a1.trial_id())->trial.attempts, 2);
  EXPECT_NE(store_->GetTrial(a1.trial_id())->trial.reason.find("gave up after 2 attempts"),
            std::string::npos);
}

// A worker that re-registers reporting an older attempt of a trial whose current attempt it was
// assigned: the stale one is stopped, and the current one, which it does not run, is lost at once
// (it was counted as running there until its lease expired, since only the trial id was compared).
TEST_F(SchedulerTest, AStaleAttemptReportDoesNotHideTheLossOfTheCurrentOne) {
  Submit("s", 1, 0, 0, 3);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto a1 = link->Of(MC::kAssign)[0].assign();
  sched_->OnEvent("w1", Event(a1, v1::TrialEvent::FAILED, 1, "", 1));
  clock_.AdvanceSeconds(1.5);  // past the retry's backoff
  sched_->Tick();
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
  ASSERT_EQ(link->Of(MC::kAssign)[1].assign().attempt(), 2);
  v1::AttemptRef stale;
  stale.set_trial_id(a1.trial_id());
  stale.set_attempt(1);
  auto l2 = Connect("w1", 1, 0, {stale});
  auto reg = l2->Of(MC::kRegistered)[0].registered();
  EXPECT_EQ(reg.adopted_size(), 0);
  ASSERT_EQ(reg.stop_size(), 1);
  EXPECT_EQ(reg.stop(0).attempt(), 1);
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ((*store_->GetAttempts(a1.trial_id()))[1].state, "lost");
  clock_.AdvanceSeconds(10);  // past the lost attempt's backoff, well inside the 30 s lease
  sched_->Tick();
  ASSERT_TRUE(WaitFor([&] { return l2->Count(MC::kAssign) == 1; }));
  EXPECT_EQ(l2->Of(MC::kAssign)[0].assign().attempt(), 3);
}

TEST_F(SchedulerTest, ConfigErrorsAreFinal) {
  Submit("s", 1, 0, 0, 3);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto b = link->Of(MC::kAssign)[0].assign();
  sched_->OnEvent("w1", Event(b, v1::TrialEvent::FAILED, 1, "", 2));  // exit 2: bad config
  EXPECT_EQ(State(b.trial_id()), "failed");
  EXPECT_EQ(store_->GetTrial(b.trial_id())->trial.attempts, 1);
}

TEST_F(SchedulerTest, QuarantineAfterRepeatedFailuresOfDifferentTrials) {
  Submit("s", 4, 0, 0, 1);
  auto link = Connect("w1", 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == size_t(i + 1); }));
    auto a = link->Of(MC::kAssign)[i].assign();
    sched_->OnEvent("w1", Event(a, v1::TrialEvent::FAILED, 1, "", 1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kAssign), 3u);  // quarantined: no fourth assignment
  auto workers = sched_->Workers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].state(), "quarantined");
  clock_.AdvanceSeconds(601);
  sched_->Tick();
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
}

TEST_F(SchedulerTest, CancelRunningSendsCancelAndEnds) {
  int64_t sweep = Submit("s", 3);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto a = link->Of(MC::kAssign)[0].assign();
  auto n = sched_->CancelSweep(sweep);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3);
  ASSERT_EQ(link->Count(MC::kCancel), 1u);
  EXPECT_EQ(State(a.trial_id()), "canceled");
  sched_->OnEvent("w1", Event(a, v1::TrialEvent::CANCELED, 1));
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAck) == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(link->Count(MC::kAssign), 1u);  // nothing else runs
  EXPECT_EQ((*store_->GetAttempts(a.trial_id()))[0].state, "canceled");
  // An earlier store operation that failed (anyone's) is no error of the retry's: it failed with
  // it before.
  TrialUpdate unrelated;
  unrelated.trial_id = 999999;
  unrelated.state = v1::QUEUED;
  store_->UpdateTrial(unrelated);
  // Retry brings canceled trials back; --failed only would not.
  auto none = sched_->Retry(sweep, Scheduler::RetryWhich::kFailed);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0);
  auto all = sched_->Retry(sweep, Scheduler::RetryWhich::kFailedAndCanceled);
  EXPECT_EQ(*all, 3);
  ASSERT_TRUE(store_->Flush().ok());
  // The fresh budget of attempts is stored, so a restart keeps it.
  EXPECT_EQ(store_->GetTrial(a.trial_id())->trial.max_attempts, 1 + 3);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
}

TEST_F(SchedulerTest, GpuPlacementKeepsMultiGpuTrialsOnOneWorker) {
  Submit("two", 1, 2);
  Submit("one", 2, 1);
  auto w1 = Connect("w1", 0, 1);  // one GPU: only 1-GPU trials fit
  auto w2 = Connect("w2", 0, 2);
  ASSERT_TRUE(WaitFor([&] { return w1->Count(MC::kAssign) == 1 && w2->Count(MC::kAssign) >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  for (const auto& m : w1->Of(MC::kAssign)) EXPECT_EQ(m.assign().gpu_indices_size(), 1);
  int gpus_on_w2 = 0;
  for (const auto& m : w2->Of(MC::kAssign)) gpus_on_w2 += m.assign().gpu_indices_size();
  EXPECT_LE(gpus_on_w2, 2);
}

// Why no connected worker can take a sweep's queued trials: said for none connected, all
// draining, GPU trials on CPU-only workers or on too few GPUs, CPU trials on GPU-only workers or on
// too few slots; nothing when some worker has the capacity (even if it is busy) or nothing waits.
TEST_F(SchedulerTest, WaitingReasonSaysWhyNoConnectedWorkerCanTakeTheQueuedTrials) {
  const int64_t cpu = Submit("cpu", 3);
  const int64_t gpu = Submit("gpu", 2, /*gpus=*/2);
  const int64_t wide = Submit("wide", 1, /*gpus=*/0, 0, 3, /*cpu_slots=*/4);
  EXPECT_EQ(sched_->WaitingReason(cpu), "no worker is connected; start an ablate-worker");
  EXPECT_EQ(sched_->WaitingReason(gpu), "no worker is connected; start an ablate-worker");
  EXPECT_EQ(sched_->WaitingReason(12345), "");  // no such sweep

  auto c1 = Connect("c1", 2);  // CPU only, two slots: takes two of "cpu"'s trials
  ASSERT_TRUE(WaitFor([&] { return c1->Count(MC::kAssign) == 2; }));
  EXPECT_EQ(sched_->WaitingReason(cpu), "");  // one queued trial waits for a free slot: normal
  EXPECT_EQ(sched_->WaitingReason(gpu),
            "the queued trials need 2 GPUs each; the connected workers have only CPU slots");
  EXPECT_EQ(sched_->WaitingReason(wide),
            "the queued trials need 4 CPU slots each; the connected workers have at most 2");

  auto g1 = Connect("g1", 0, 1);  // one GPU, no CPU slots
  EXPECT_EQ(sched_->WaitingReason(gpu),
            "the queued trials need 2 GPUs each; the connected workers have at most 1");
  sched_->Disconnect("c1", c1.get());
  EXPECT_EQ(sched_->WaitingReason(cpu),
            "the queued trials run on CPU slots; the connected workers have only GPUs (start one "
            "with --cpu-slots N)");
  auto g2 = Connect("g2", 0, 2);
  ASSERT_TRUE(WaitFor([&] { return g2->Count(MC::kAssign) == 1; }));
  EXPECT_EQ(sched_->WaitingReason(gpu), "");  // the other trial waits for g2's GPUs

  sched_->Disconnect("g1", g1.get());
  sched_->Disconnect("g2", g2.get());
  auto link = std::make_shared<FakeLink>();
  v1::Register reg;
  reg.set_worker_id("d1");
  reg.set_cpu_slots(8);
  reg.set_draining(true);
  sched_->Register(reg, link);
  EXPECT_EQ(sched_->WaitingReason(wide),
            "no connected worker takes new trials (1 is draining or quarantined)");
  reg.set_draining(false);
  sched_->Register(reg, link);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(sched_->WaitingReason(wide), "");
  EXPECT_EQ(sched_->WaitingReason(cpu), "");
}

TEST_F(SchedulerTest, PriorityFirstThenFairnessAcrossSweeps) {
  Submit("low", 4, 0, 0);
  Submit("high", 2, 0, 5);
  Submit("low2", 4, 0, 0);
  auto link = Connect("w1", 6);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 6; }));
  auto as = link->Of(MC::kAssign);
  EXPECT_EQ(as[0].assign().sweep_name(), "high");
  EXPECT_EQ(as[1].assign().sweep_name(), "high");
  int low = 0, low2 = 0;
  for (size_t i = 2; i < 6; ++i) {
    low += as[i].assign().sweep_name() == "low";
    low2 += as[i].assign().sweep_name() == "low2";
  }
  EXPECT_EQ(low, 2);
  EXPECT_EQ(low2, 2);
}

TEST_F(SchedulerTest, RestartRecoversAndReadoptsRunningAttempts) {
  Submit("s", 2);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto a = link->Of(MC::kAssign)[0].assign();
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();  // the coordinator restarts
  v1::AttemptRef ref;
  ref.set_trial_id(a.trial_id());
  ref.set_attempt(a.attempt());
  auto l2 = Connect("w1", 1, 0, {ref});
  auto reg = l2->Of(MC::kRegistered)[0].registered();
  ASSERT_EQ(reg.adopted_size(), 1);
  EXPECT_EQ(reg.stop_size(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(l2->Count(MC::kAssign), 0u);  // its one slot is still busy with the adopted attempt
  sched_->OnEvent("w1", Event(a, v1::TrialEvent::FINISHED, 5));
  ASSERT_TRUE(WaitFor([&] { return l2->Count(MC::kAssign) == 1; }));
  EXPECT_EQ(State(a.trial_id()), "succeeded");
}

// A running trial canceled just before the coordinator stops: the trial is recorded as canceled
// at once, its attempt only when the worker reports the end. After a restart that report is
// fenced (the trial is no longer active), so the attempt must be closed by the recovery; before,
// it stayed "running" for good.
TEST_F(SchedulerTest, RestartClosesTheAttemptOfATrialCanceledWhileRunning) {
  Submit("s", 1);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto a = link->Of(MC::kAssign)[0].assign();
  ASSERT_TRUE(sched_->CancelTrial(a.trial_id()).ok());
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();
  EXPECT_EQ(State(a.trial_id()), "canceled");
  auto attempts = store_->GetAttempts(a.trial_id());
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 1u);
  EXPECT_EQ((*attempts)[0].state, "canceled");
  EXPECT_GT((*attempts)[0].ended_at, 0);
  // The worker still running it is told to stop.
  v1::AttemptRef ref;
  ref.set_trial_id(a.trial_id());
  ref.set_attempt(a.attempt());
  auto l2 = Connect("w1", 1, 0, {ref});
  auto reg = l2->Of(MC::kRegistered)[0].registered();
  EXPECT_EQ(reg.adopted_size(), 0);
  EXPECT_EQ(reg.stop_size(), 1);
}

TEST_F(SchedulerTest, WorkerThatLostItsAttemptsGetsThemRequeued) {
  Submit("s", 1);
  auto link = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  auto a = link->Of(MC::kAssign)[0].assign();
  auto l2 = Connect("w1", 1);  // restarted worker, no running attempts
  ASSERT_TRUE(WaitFor([&] { return l2->Count(MC::kAssign) == 1; }));
  EXPECT_EQ(l2->Of(MC::kAssign)[0].assign().attempt(), 2);
  EXPECT_EQ(l2->Of(MC::kAssign)[0].assign().trial_id(), a.trial_id());
}

// Preemption (the worker's host is being taken away; its trainer checkpointed on SIGUSR1): the
// trial is requeued at once from that checkpoint; the attempt does not count against max_attempts.
TEST_F(SchedulerTest, PreemptedAttemptIsRequeuedFromItsCheckpointWithoutUsingAnAttempt) {
  Submit("s", 1, 0, 0, /*max_attempts=*/1);
  auto l1 = Connect("w1", 1);
  ASSERT_TRUE(WaitFor([&] { return l1->Count(MC::kAssign) == 1; }));
  auto a1 = l1->Of(MC::kAssign)[0].assign();
  // The worker is told to preempt: it drains first, then its trainer checkpoints and stops.
  v1::Heartbeat hb;
  hb.set_draining(true);
  *hb.add_running() = [&] {
    v1::AttemptRef r;
    r.set_trial_id(a1.trial_id());
    r.set_attempt(1);
    return r;
  }();
  sched_->OnHeartbeat("w1", hb);
  v1::TrialEvent ck = Event(a1, v1::TrialEvent::CHECKPOINTED, 1, "");
  ck.set_step(40);
  ck.set_checkpoint_path("/work/trials/1/attempt-1/checkpoints/step_00000040.ckpt");
  sched_->OnEvent("w1", ck);
  v1::TrialEvent pre = Event(a1, v1::TrialEvent::FAILED, 2, "preempted", 75);
  pre.set_reason("preempted: checkpointed at step 40 (exit code 75)");
  sched_->OnEvent("w1", pre);
  ASSERT_TRUE(WaitFor([&] { return l1->Count(MC::kAck) == 2; }));
  EXPECT_EQ(State(a1.trial_id()), "queued");  // not failed, although max_attempts is 1

  // Another worker picks it up at once (no retry backoff), resuming from the checkpoint.
  auto l2 = Connect("w2", 1);
  ASSERT_TRUE(WaitFor([&] { return l2->Count(MC::kAssign) == 1; }));
  auto a2 = l2->Of(MC::kAssign)[0].assign();
  EXPECT_EQ(a2.trial_id(), a1.trial_id());
  EXPECT_EQ(a2.attempt(), 2);
  EXPECT_EQ(a2.resume_checkpoint(), ck.checkpoint_path());
  EXPECT_EQ(l1->Count(MC::kAssign), 1u);  // never back to the draining worker
  sched_->OnEvent("w2", Event(a2, v1::TrialEvent::FINISHED, 1));
  EXPECT_EQ(State(a1.trial_id()), "succeeded");

  auto trial = store_->GetTrial(a1.trial_id());
  ASSERT_TRUE(trial.ok());
  EXPECT_EQ(trial->trial.attempts, 2);
  EXPECT_EQ(trial->trial.max_attempts, 2);  // the preempted attempt was given back
  auto attempts = store_->GetAttempts(a1.trial_id());
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ((*attempts)[0].state, "lost");
  EXPECT_EQ((*attempts)[0].exit_code, 75);
  EXPECT_EQ((*attempts)[0].reason.rfind("preempted", 0), 0u) << (*attempts)[0].reason;
  EXPECT_EQ((*attempts)[1].state, "succeeded");
  // Not held against the worker.
  for (const auto& w : sched_->Workers()) EXPECT_EQ(w.failures(), 0) << w.worker_id();
}

TEST_F(SchedulerTest, PreemptionIsRecognisedByStatusOrExitCodeAndSurvivesARestart) {
  Submit("s", 2, 0, 0, /*max_attempts=*/1);
  auto link = Connect("w1", 2);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
  auto a = link->Of(MC::kAssign)[0].assign();
  auto b = link->Of(MC::kAssign)[1].assign();
  // Exit code 75 alone (a trainer preempted by someone else's SIGUSR1).
  sched_->OnEvent("w1", Event(a, v1::TrialEvent::FAILED, 1, "", 75));
  // Status alone (killed by a signal while the worker was preempting).
  v1::TrialEvent e = Event(b, v1::TrialEvent::FAILED, 1, "preempted", -15);
  e.set_reason("killed by signal 15 (SIGTERM)");
  sched_->OnEvent("w1", e);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  EXPECT_EQ(State(a.trial_id()), "running");
  EXPECT_EQ(State(b.trial_id()), "running");
  auto attempts = store_->GetAttempts(b.trial_id());
  ASSERT_TRUE(attempts.ok());
  EXPECT_EQ((*attempts)[0].reason, "preempted: killed by signal 15 (SIGTERM)");
  // An ordinary failure of the second attempts still ends the trials: their budget is 1 + 1.
  ASSERT_TRUE(store_->Flush().ok());
  Reopen();
  auto l2 = Connect("w1", 2, 0, [&] {
    std::vector<v1::AttemptRef> refs;
    for (const auto& m : link->Of(MC::kAssign)) {
      if (m.assign().attempt() != 2) continue;
      v1::AttemptRef r;
      r.set_trial_id(m.assign().trial_id());
      r.set_attempt(2);
      refs.push_back(r);
    }
    return refs;
  }());
  ASSERT_EQ(l2->Of(MC::kRegistered)[0].registered().adopted_size(), 2);
  a.set_attempt(2);
  sched_->OnEvent("w1", Event(a, v1::TrialEvent::FAILED, 5, "", 1));
  EXPECT_EQ(State(a.trial_id()), "failed");
  EXPECT_NE(store_->GetTrial(a.trial_id())->trial.reason.find("gave up after 2 attempts"),
            std::string::npos);
}

}  // namespace
}  // namespace ablate::server
