// GPU sharing in the scheduler with a fake GPU inventory (workers registered with GPUs of a given
// memory, no real GPU): shares 1/k per GPU, spreading, memory-aware packing refined by reported
// peaks and NVML readings, whole-GPU trials kept off shared GPUs, and fatal device errors on a
// shared GPU (the trial runs alone next, its attempt given back).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "ablate/memory_estimate.h"
#include "ablate/trial_config.h"
#include "scheduler_fixture.h"

namespace ablate::server {
namespace {

using namespace testing_util;  // NOLINT: the fixture

constexpr int64_t kGiB = int64_t(1) << 30;

// A real trial config (its memory estimate is what the scheduler computes).
std::string ConfigJson(int micro_batch) {
  config::TrialConfig c;
  c.train.micro_batch = micro_batch;
  return config::ToJson(c).dump();
}

int64_t EstimateOf(int micro_batch) {
  config::TrialConfig c;
  c.train.micro_batch = micro_batch;
  return config::EstimateDeviceBytes(c);
}

class PlacementTest : public SchedulerTest {
 protected:
  // A sweep of n trials taking 1/share of a GPU each (share 1: whole GPUs).
  int64_t SubmitShared(const std::string& name, int n, int share, int micro_batch = 16) {
    SweepRecord s;
    s.name = name;
    s.gpus = 1;
    s.gpu_share = share;
    s.max_attempts = 3;
    s.axes = {"i"};
    std::vector<TrialRecord> trials;
    for (int i = 0; i < n; ++i) {
      TrialRecord r;
      r.config_hash = name + std::to_string(i);
      r.config_json = ConfigJson(micro_batch);
      r.axes = {{"i", std::to_string(i)}};
      r.order_key = i;
      r.total_steps = 10;
      trials.push_back(r);
    }
    return SubmitRecords(s, trials);
  }
  // GPU index -> trials assigned there.
  static std::map<int, int> PerGpu(FakeLink& link) {
    std::map<int, int> out;
    for (const auto& m : link.Of(MC::kAssign)) {
      for (int g : m.assign().gpu_indices()) out[g]++;
    }
    return out;
  }
};

TEST_F(PlacementTest, KTrialsShareEachGpuAndSpreadBeforeTheyPack) {
  SubmitShared("s", 10, 4);
  auto link = Connect("w", 0, 2, {}, 80 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 8; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kAssign), 8u);  // 2 GPUs x 4 shares; 2 trials wait
  EXPECT_EQ(PerGpu(*link), (std::map<int, int>{{0, 4}, {1, 4}}));
  // Spread: the first two trials went to different GPUs.
  auto assigns = link->Of(MC::kAssign);
  EXPECT_NE(assigns[0].assign().gpu_indices(0), assigns[1].assign().gpu_indices(0));
  for (const auto& m : assigns) {
    EXPECT_EQ(m.assign().gpu_share(), 4);
    EXPECT_EQ(m.assign().memory_bytes(), EstimateOf(16));
    EXPECT_EQ(m.assign().gpu_indices_size(), 1);
  }
  auto workers = sched_->Workers();
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(workers[0].gpu_load_size(), 2);
  for (const auto& g : workers[0].gpu_load()) {
    EXPECT_EQ(g.trial_ids_size(), 4);
    EXPECT_DOUBLE_EQ(g.share(), 1.0);
    EXPECT_EQ(g.estimated_bytes(), 4 * EstimateOf(16));
    EXPECT_EQ(g.total_bytes(), 80 * kGiB);
  }
  EXPECT_EQ(workers[0].busy_gpus_size(), 2);  // each GPU once, however many trials it holds

  // One finishes: its share goes to the next queued trial, on the GPU it freed.
  const auto& done = assigns[0].assign();
  sched_->OnEvent("w", Event(done, v1::TrialEvent::FINISHED, 1));
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 9; }));
  EXPECT_EQ(link->Of(MC::kAssign)[8].assign().gpu_indices(0), done.gpu_indices(0));
}

TEST_F(PlacementTest, WholeGpuTrialsNeverLandOnASharedGpu) {
  SubmitShared("shared", 1, 2);
  auto link = Connect("w", 0, 2, {}, 80 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 1; }));
  const int shared_gpu = link->Of(MC::kAssign)[0].assign().gpu_indices(0);
  SubmitShared("whole", 2, 1);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kAssign), 2u);  // the second whole-GPU trial waits
  const auto whole = link->Of(MC::kAssign)[1].assign();
  EXPECT_EQ(whole.gpu_share(), 0);
  EXPECT_EQ(whole.gpu_indices_size(), 1);
  EXPECT_NE(whole.gpu_indices(0), shared_gpu);
  // And a shared trial never joins a whole-GPU trial: a second shared trial takes the free half.
  SubmitShared("shared2", 2, 2);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 3; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kAssign), 3u);
  EXPECT_EQ(link->Of(MC::kAssign)[2].assign().gpu_indices(0), shared_gpu);
}

TEST_F(PlacementTest, PacksByMemoryWithAMarginAndTheRestWait) {
  // An 8 GiB GPU and trials of about 1 GiB each (the estimate): the shares would allow 8, the
  // memory (8 GiB less the 512 MiB margin) fewer.
  const int64_t est = EstimateOf(16);
  const int64_t gpu = 8 * kGiB;
  const int fit = int((gpu - (int64_t(512) << 20)) / est);
  ASSERT_LT(fit, 8) << "the estimate is smaller than this test assumes: " << est;
  SubmitShared("s", 8, 8);
  auto link = Connect("w", 0, 1, {}, gpu);
  ASSERT_TRUE(WaitFor([&] { return int(link->Count(MC::kAssign)) == fit; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(int(link->Count(MC::kAssign)), fit);

  // The trainers report their real peaks, well below the estimate: the waiting trials fit now.
  int64_t seq = 100;
  for (const auto& m : link->Of(MC::kAssign)) {
    v1::MetricBatch b;
    b.set_trial_id(m.assign().trial_id());
    b.set_attempt(m.assign().attempt());
    b.set_seq(++seq);
    auto* p = b.add_points();
    p->set_step(1);
    p->set_name("gpu_mem_peak_bytes");
    p->set_value(double(est / 4));
    sched_->OnMetrics("w", b);
  }
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 8; }));
}

// A shared trial larger than any GPU, even empty, waits forever: the sweep's waiting reason says
// why, in GiB; a GPU that can hold it clears the reason.
TEST_F(PlacementTest, ATrialNoGpuCanHoldSaysSoInTheWaitingReason) {
  const int64_t est = EstimateOf(64);
  const int64_t small = est / 2;  // below the estimate itself
  const int64_t id = SubmitShared("big", 2, 4, 64);
  auto link = Connect("w", 0, 1, {}, small);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(link->Count(MC::kAssign), 0u);
  const std::string why = sched_->WaitingReason(id);
  EXPECT_NE(why.find("GiB of GPU memory each (the config's estimate)"), std::string::npos) << why;
  EXPECT_NE(why.find("at most"), std::string::npos) << why;
  auto big = Connect("w2", 0, 1, {}, 80 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return big->Count(MC::kAssign) == 2; }));
}

TEST_F(PlacementTest, ANvmlReadingAboveTheEstimatesKeepsTrialsOut) {
  // Another process holds most of the GPU: the worker's heartbeat says so, and nothing more is
  // packed beside it.
  auto link = Connect("w", 0, 1, {}, 16 * kGiB);
  v1::Heartbeat hb;
  auto* m = hb.add_gpu_memory();
  m->set_index(0);
  m->set_used_bytes(15 * kGiB);
  m->set_total_bytes(16 * kGiB);
  sched_->OnHeartbeat("w", hb);
  SubmitShared("s", 2, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(link->Count(MC::kAssign), 0u);
  m->set_used_bytes(1 * kGiB);  // it went away
  sched_->OnHeartbeat("w", hb);
  sched_->Tick();
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 2; }));
}

TEST_F(PlacementTest, AFatalDeviceErrorOnASharedGpuIsolatesTheTrialsWithoutCountingIt) {
  SubmitShared("s", 3, 2);
  auto link = Connect("w", 0, 2, {}, 80 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 3; }));
  // GPU 0 holds trials 1 and 3 (spread: 1 on GPU 0, 2 on GPU 1, 3 on GPU 0).
  std::map<int64_t, v1::Assignment> by_trial;
  for (const auto& m : link->Of(MC::kAssign)) by_trial[m.assign().trial_id()] = m.assign();
  ASSERT_EQ(by_trial[1].gpu_indices(0), by_trial[3].gpu_indices(0));
  // Trial 1 faults; under MPS the server ends trial 3 with the same error: both exit 76, and
  // nothing tells which one faulted.
  sched_->OnEvent("w", Event(by_trial[1], v1::TrialEvent::FAILED, 1, "gpu_fault",
                             kTrainerExitDeviceFault));
  sched_->OnEvent("w", Event(by_trial[3], v1::TrialEvent::FAILED, 1, "gpu_fault",
                             kTrainerExitDeviceFault));
  ASSERT_TRUE(store_->Flush().ok());
  for (int64_t t : {1, 3}) {
    auto r = store_->GetTrial(t);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(IsActive(r->trial.state)) << t;
    EXPECT_EQ(r->trial.max_attempts, 4) << t;  // the attempt given back
    EXPECT_EQ(r->trial.gpu_share, 1) << t;     // alone from now on
    auto atts = store_->GetAttempts(t);
    EXPECT_EQ(atts->at(0).state, "lost");
    EXPECT_NE(atts->at(0).reason.find("runs alone next"), std::string::npos);
  }
  EXPECT_EQ(sched_->counters().shared_gpu_faults, 2);
  EXPECT_EQ(sched_->Workers()[0].failures(), 0);  // nothing held against the worker
  // GPU 0 is free again: one of them takes it whole; the other waits for a whole GPU (GPU 1 still
  // holds trial 2).
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(link->Count(MC::kAssign), 4u);
  const auto alone = link->Of(MC::kAssign)[3].assign();
  EXPECT_EQ(alone.gpu_share(), 0);  // a whole GPU
  // Alone, the faulting trial faults again: now it is its own failure and counts.
  sched_->OnEvent("w", Event(alone, v1::TrialEvent::FAILED, 1, "gpu_fault",
                             kTrainerExitDeviceFault));
  ASSERT_TRUE(store_->Flush().ok());
  EXPECT_EQ(store_->GetTrial(alone.trial_id())->trial.max_attempts, 4);
  EXPECT_EQ(sched_->Workers()[0].failures(), 1);
}

TEST_F(PlacementTest, AGpuShareSurvivesARestart) {
  SubmitShared("s", 4, 4);
  {
    auto link = Connect("w", 0, 1, {}, 80 * kGiB);
    ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  }
  auto before = store_->GetAttempts(1);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->at(0).gpu_share, 4);
  Reopen();
  // The worker comes back with its four trainers: all adopted, the GPU full again.
  std::vector<v1::AttemptRef> running;
  for (int64_t t = 1; t <= 4; ++t) {
    v1::AttemptRef r;
    r.set_trial_id(t);
    r.set_attempt(1);
    running.push_back(r);
  }
  auto link = Connect("w", 0, 1, running, 80 * kGiB);
  auto w = sched_->Workers();
  ASSERT_EQ(w[0].gpu_load_size(), 1);
  EXPECT_EQ(w[0].gpu_load(0).trial_ids_size(), 4);
  EXPECT_DOUBLE_EQ(w[0].gpu_load(0).share(), 1.0);
}


TEST_F(PlacementTest, AfterAFaultEveryTrialOfTheGpuRunsAloneInTurn) {
  // One GPU, four trials sharing it; MPS ends all four with the fault of one (trial 1).
  SubmitShared("s", 4, 4);
  auto link = Connect("w", 0, 1, {}, 80 * kGiB);
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 4; }));
  for (const auto& m : link->Of(MC::kAssign)) {
    sched_->OnEvent("w", Event(m.assign(), v1::TrialEvent::FAILED, 1, "gpu_fault",
                               kTrainerExitDeviceFault));
  }
  // Trial 1 runs alone first and faults again; the three others then run alone in turn.
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 5; }));
  auto alone = link->Of(MC::kAssign)[4].assign();
  EXPECT_EQ(alone.trial_id(), 1);
  EXPECT_EQ(alone.gpu_share(), 0);
  sched_->OnEvent("w", Event(alone, v1::TrialEvent::FAILED, 1, "gpu_fault", kTrainerExitDeviceFault));
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 6; }))
      << "nothing placed after the isolated trial failed";
  auto next = link->Of(MC::kAssign)[5].assign();
  EXPECT_EQ(next.trial_id(), 2);
  sched_->OnEvent("w", Event(next, v1::TrialEvent::FINISHED, 1));
  ASSERT_TRUE(WaitFor([&] { return link->Count(MC::kAssign) == 7; }));
}

}  // namespace
}  // namespace ablate::server
