// Early stopping through the scheduler: judgments taken from stored points, stored with the
// stopped trials in one transaction, checkpoint-and-stop sent to the workers, queued seeds never
// started, nothing judged twice across a restart, and retry --stopped.
#include <gtest/gtest.h>

#include "scheduler_fixture.h"

namespace ablate::server {
namespace {

using namespace testing_util;  // NOLINT: the fixture

class SchedulerEarlyStopTest : public SchedulerTest {
 protected:
  // Three learning rates x two seeds, seeds adjacent (as the expansion orders them with
  // early_stop), CPU trials, ASHA with reduction 2 and its first rung at step 10.
  int64_t SubmitLrSweep() {
    EarlyStopRule rule;
    rule.rule = "asha";
    rule.metric = "val_loss";
    rule.grace_steps = 10;
    rule.reduction = 2;
    rule.max_steps = 100;
    SweepRecord s;
    s.name = "lr";
    s.cpu_slots = 1;
    s.max_attempts = 3;
    s.axes = {"optimizer.lr", "seed"};
    s.early_stop_json = rule.ToJson();
    std::vector<TrialRecord> trials;
    int order = 0;
    for (const char* lr : {"0.001", "0.01", "1"}) {
      for (const char* seed : {"0", "1"}) {
        TrialRecord r;
        r.config_hash = std::string(lr) + "/" + seed;
        r.config_json = "{}";
        r.axes = {{"optimizer.lr", lr}, {"seed", seed}};
        r.order_key = order++;
        r.total_steps = 100;
        trials.push_back(r);
      }
    }
    return SubmitRecords(s, trials);
  }
  void Report(FakeLink& link, const std::string& worker, int64_t trial, int64_t step,
              double val_loss) {
    for (const auto& m : link.Of(MC::kAssign)) {
      if (m.assign().trial_id() != trial) continue;
      v1::MetricBatch b;
      b.set_trial_id(trial);
      b.set_attempt(m.assign().attempt());
      b.set_seq(++seq_);
      auto* p = b.add_points();
      p->set_step(step);
      p->set_name("val_loss");
      p->set_value(val_loss);
      sched_->OnMetrics(worker, b);
    }
  }
  // Step 10 (rung 0) of the first two configurations' seeds: lr 0.001 (3.0, 3.2) ahead of lr 0.01
  // (4.0, 4.4), so the ASHA rule stops lr 0.01 (trials 3 and 4).
  void ReportRungZero(FakeLink& link) {
    Report(link, "w", 1, 10, 3.0);
    Report(link, "w", 2, 10, 3.2);
    Report(link, "w", 3, 10, 4.0);
    Report(link, "w", 4, 10, 4.4);
  }
  int64_t seq_ = 1000;
};

TEST_F(SchedulerEarlyStopTest, StopsAConfigurationsSeedsTogetherAndRecordsWhy) {
  const int64_t sweep = SubmitLrSweep();
  auto link = Connect("w", 4);  // trials 1-4 run (lr 0.001 and 0.01); 5, 6 (lr 1) wait
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  Report(*link, "w", 1, 10, 3.0);
  Report(*link, "w", 2, 10, 3.2);  // lr 0.001 judged: first at the rung, continues
  Report(*link, "w", 3, 10, 4.0);
  Report(*link, "w", 4, 10, 4.4);  // lr 0.01: mean 4.2 worse than 3.1, k = 1: stops
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kCancel) == 2; }));
  for (const auto& m : link->Of(MC::kCancel)) {
    EXPECT_TRUE(m.cancel().checkpoint());  // checkpoint first, so it can be resumed
    EXPECT_TRUE(m.cancel().trial_id() == 3 || m.cancel().trial_id() == 4);
  }
  EXPECT_EQ(State(3), "stopped");
  EXPECT_EQ(State(4), "stopped");
  EXPECT_EQ(State(1), "running");
  auto decisions = store_->GetStopDecisions(sweep);
  ASSERT_TRUE(decisions.ok());
  ASSERT_EQ(decisions->size(), 2u);
  const auto& d = decisions->at(1);
  EXPECT_EQ(d.config, "optimizer.lr=0.01");
  EXPECT_EQ(d.decision, "stop");
  EXPECT_EQ(d.rule, "asha");
  EXPECT_EQ(d.step, 10);
  EXPECT_DOUBLE_EQ(d.value, 4.2);
  EXPECT_DOUBLE_EQ(d.threshold, 3.1);
  EXPECT_EQ(d.trial_ids, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(d.compared.size(), 2u);
  EXPECT_EQ(d.compared[0].first, "optimizer.lr=0.001");
  auto t3 = store_->GetTrial(3);
  EXPECT_NE(t3->trial.reason.find("stopped early by asha at step 10"), std::string::npos)
      << t3->trial.reason;

  // The stopped trainers checkpoint and exit; their attempts end "stopped", their slots go to
  // the next configuration.
  for (int64_t t : {3, 4}) {
    for (const auto& m : link->Of(MC::kAssign)) {
      if (m.assign().trial_id() == t) {
        sched_->OnEvent("w", Event(m.assign(), v1::TrialEvent::CANCELED, 50));
      }
    }
  }
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 6; }));
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(store_->GetAttempts(3)->back().state, "stopped");
  EXPECT_EQ(State(3), "stopped");
  EXPECT_EQ(sched_->counters().stop_decisions, 2);
}

TEST_F(SchedulerEarlyStopTest, QueuedSeedsOfAStoppedConfigurationNeverStart) {
  SubmitLrSweep();
  auto link = Connect("w", 5);  // trials 1-5 run; trial 6 (lr 1, seed 1) waits
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 5; }));
  Report(*link, "w", 1, 10, 3.0);
  Report(*link, "w", 2, 10, 3.0);
  Report(*link, "w", 5, 10, 9.0);  // lr 1 seed 0 alone: its seed 1 has not started, so it waits
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kCancel), 0u);
  // Trial 1 finishes; trial 6 starts, reports: now lr 1 is judged on both seeds and stopped.
  for (const auto& m : link->Of(MC::kAssign)) {
    if (m.assign().trial_id() == 1) sched_->OnEvent("w", Event(m.assign(), v1::TrialEvent::FINISHED, 60));
  }
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 6; }));
  Report(*link, "w", 6, 10, 8.0);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kCancel) == 2; }));
  EXPECT_EQ(State(5), "stopped");
  EXPECT_EQ(State(6), "stopped");
}

TEST_F(SchedulerEarlyStopTest, ARestartNeitherLosesNorRepeatsAJudgment) {
  const int64_t sweep = SubmitLrSweep();
  {
    auto link = Connect("w", 4);
    ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
    Report(*link, "w", 1, 10, 3.0);
    Report(*link, "w", 2, 10, 3.2);
    ASSERT_TRUE(WaitFor([&] { return sched_->counters().stop_decisions == 1; }));
    ASSERT_TRUE(store_->Flush().ok());
    // Points stored without a judgment: the coordinator died between their commit and the
    // judgment (the store takes them directly here, as that commit did).
    store_->AppendMetrics(3, 1, 500, {{10, "val_loss", 4.0}}, nullptr);
    store_->AppendMetrics(4, 1, 500, {{10, "val_loss", 4.4}}, nullptr);
    ASSERT_TRUE(store_->Flush().ok());
  }
  Reopen();  // Recover: restores judgment 1, takes the due one for lr 0.01
  ASSERT_TRUE(store_->Flush().ok());
  auto decisions = store_->GetStopDecisions(sweep);
  ASSERT_TRUE(decisions.ok());
  ASSERT_EQ(decisions->size(), 2u);
  EXPECT_EQ(decisions->at(0).config, "optimizer.lr=0.001");
  EXPECT_EQ(decisions->at(1).config, "optimizer.lr=0.01");
  EXPECT_EQ(decisions->at(1).decision, "stop");
  EXPECT_EQ(State(3), "stopped");
  // The running attempts of the stopped trials are not adopted when their worker comes back.
  std::vector<v1::AttemptRef> running;
  for (int64_t t = 1; t <= 4; ++t) {
    v1::AttemptRef r;
    r.set_trial_id(t);
    r.set_attempt(1);
    running.push_back(r);
  }
  auto link = Connect("w", 4, 0, running);
  auto reg = link->Of(MC::kRegistered);
  ASSERT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg[0].registered().adopted_size(), 2);
  EXPECT_EQ(reg[0].registered().stop_size(), 2);
  // The same points again (a worker resending) judge nothing anew.
  Reopen();
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(store_->GetStopDecisions(sweep)->size(), 2u);
}

TEST_F(SchedulerEarlyStopTest, RetryStoppedResumesAndIsLeftAlone) {
  const int64_t sweep = SubmitLrSweep();
  auto link = Connect("w", 4);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  // Trial 3 checkpoints at step 10 before its configuration is judged.
  for (const auto& m : link->Of(MC::kAssign)) {
    if (m.assign().trial_id() != 3) continue;
    auto e = Event(m.assign(), v1::TrialEvent::CHECKPOINTED, 40);
    e.set_step(10);
    e.set_checkpoint_path("/w/trials/3/attempt-1/checkpoints/step_00000010.ckpt");
    sched_->OnEvent("w", e);
  }
  ReportRungZero(*link);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kCancel) == 2; }));
  for (const auto& m : link->Of(MC::kAssign)) {
    if (m.assign().trial_id() == 3 || m.assign().trial_id() == 4) {
      sched_->OnEvent("w", Event(m.assign(), v1::TrialEvent::CANCELED, 50));
    }
  }
  ASSERT_TRUE(WaitFor([&] { return State(3) == "stopped" && State(4) == "stopped"; }));
  auto n = sched_->Retry(sweep, Scheduler::RetryWhich::kStopped);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  ASSERT_TRUE(store_->Flush().ok());
  auto t3 = store_->GetTrial(3);
  EXPECT_TRUE(t3->trial.early_stop_exempt);
  // The retried trial resumes from its checkpoint once a slot frees.
  for (const auto& m : link->Of(MC::kAssign)) {
    if (m.assign().trial_id() == 1) sched_->OnEvent("w", Event(m.assign(), v1::TrialEvent::FINISHED, 60));
  }
  bool resumed = false;
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& m : link->Of(MC::kAssign)) {
      if (m.assign().trial_id() == 3 && m.assign().attempt() == 2) {
        resumed = m.assign().resume_checkpoint() ==
                  "/w/trials/3/attempt-1/checkpoints/step_00000010.ckpt";
        return true;
      }
    }
    return false;
  }));
  EXPECT_TRUE(resumed);
  // Its later points judge nothing: it runs to the end.
  const size_t before = store_->GetStopDecisions(sweep)->size();
  Report(*link, "w", 3, 20, 9.0);
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(store_->GetStopDecisions(sweep)->size(), before);
}

// retry --stopped while the stopped trials' trainers are still writing their checkpoints (the
// attempts have not ended): requeued once they end, and exempt all the same.
TEST_F(SchedulerEarlyStopTest, RetryStoppedBeforeTheAttemptsEndIsExemptToo) {
  const int64_t sweep = SubmitLrSweep();
  auto link = Connect("w", 4);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  ReportRungZero(*link);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kCancel) == 2; }));
  ASSERT_TRUE(WaitFor([&] { return State(3) == "stopped" && State(4) == "stopped"; }));
  auto n = sched_->Retry(sweep, Scheduler::RetryWhich::kStopped);  // attempts still running
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  for (const auto& m : link->Of(MC::kAssign)) {
    if (m.assign().trial_id() == 3 || m.assign().trial_id() == 4) {
      sched_->OnEvent("w", Event(m.assign(), v1::TrialEvent::CANCELED, 50));
    }
  }
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_TRUE(store_->GetTrial(3)->trial.early_stop_exempt);
  EXPECT_TRUE(store_->GetTrial(4)->trial.early_stop_exempt);
  // Requeued after their attempts ended: they start again once the slots are theirs.
  ASSERT_TRUE(WaitFor([&] {
    int again = 0;
    for (const auto& m : link->Of(MC::kAssign)) again += m.assign().attempt() == 2;
    return again == 2;
  }));
  const size_t before = store_->GetStopDecisions(sweep)->size();
  Report(*link, "w", 3, 20, 9.0);
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(store_->GetStopDecisions(sweep)->size(), before);
}

TEST_F(SchedulerEarlyStopTest, AStoppedTrialLostOnItsWayOutCountsNothingAgainstItsWorker) {
  // Found on the GPU machine: the worker restarted while two stopped trainers were checkpointing;
  // their attempts came back FAILED ("trainer lost") and, counted as failures, quarantined the
  // worker with the next real failure.
  SubmitLrSweep();
  auto link = Connect("w", 4);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  ReportRungZero(*link);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kCancel) == 2; }));
  for (const auto& m : link->Of(MC::kAssign)) {
    if (m.assign().trial_id() == 3 || m.assign().trial_id() == 4) {
      auto e = Event(m.assign(), v1::TrialEvent::FAILED, 70, "", 0);
      e.set_reason("trainer lost: the worker restarted while it ran");
      sched_->OnEvent("w", e);
    }
  }
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(State(3), "stopped");
  EXPECT_EQ(store_->GetAttempts(3)->back().state, "stopped");
  EXPECT_EQ(sched_->Workers()[0].failures(), 0);
}

}  // namespace
}  // namespace ablate::server
