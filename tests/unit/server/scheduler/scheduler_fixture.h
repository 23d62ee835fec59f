// The scheduler tests' fixture: a real Store (a temporary SQLite file), a fake clock and fake
// worker links that record what the scheduler sends.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "scheduler/scheduler.h"
#include "temp_dir.h"

namespace ablate::server::testing_util {

class FakeLink : public WorkerLink {
 public:
  void Send(const v1::CoordinatorMessage& m) override {
    std::lock_guard<std::mutex> l(mu);
    msgs.push_back(m);
  }
  std::vector<v1::CoordinatorMessage> Of(v1::CoordinatorMessage::MsgCase c) {
    std::lock_guard<std::mutex> l(mu);
    std::vector<v1::CoordinatorMessage> out;
    for (const auto& m : msgs)
      if (m.msg_case() == c) out.push_back(m);
    return out;
  }
  size_t Count(v1::CoordinatorMessage::MsgCase c) { return Of(c).size(); }
  std::mutex mu;
  std::vector<v1::CoordinatorMessage> msgs;
};

template <typename F>
bool WaitFor(F pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    Open();
  }
  void Open() {
    Store::Options o;
    o.path = dir_ + "/ablate.db";
    auto s = Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    SchedulerOptions so;
    so.lease_s = 30;
    so.quarantine_after = 3;
    sched_ = std::make_unique<Scheduler>(store_.get(), &clock_, so);
    ASSERT_TRUE(sched_->Recover().ok());
  }
  void Reopen() {
    sched_.reset();
    store_.reset();
    Open();
  }
  int64_t Submit(const std::string& name, int n, int gpus = 0, int priority = 0,
                 int max_attempts = 3, int cpu_slots = 1) {
    SweepRecord s;
    s.name = name;
    s.priority = priority;
    s.max_attempts = max_attempts;
    s.gpus = gpus;
    s.cpu_slots = gpus == 0 ? cpu_slots : 0;
    s.axes = {"i"};
    std::vector<TrialRecord> trials;
    for (int i = 0; i < n; ++i) {
      TrialRecord r;
      r.config_hash = name + std::to_string(i);
      r.config_json = "{\"i\":" + std::to_string(i) + "}";
      r.axes = {{"i", std::to_string(i)}};
      r.order_key = i;
      r.gpus = gpus;
      r.cpu_slots = s.cpu_slots;
      r.max_attempts = max_attempts;
      r.total_steps = 10;
      trials.push_back(r);
    }
    auto out = sched_->Submit(s, trials);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? out->sweep_id : 0;
  }
  std::shared_ptr<FakeLink> Connect(const std::string& id, int cpu_slots, int gpus = 0,
                                    std::vector<v1::AttemptRef> running = {},
                                    int64_t gpu_memory_bytes = 0) {
    auto link = std::make_shared<FakeLink>();
    v1::Register reg;
    reg.set_worker_id(id);
    reg.set_hostname("host-" + id);
    reg.set_cpu_slots(cpu_slots);
    for (int g = 0; g < gpus; ++g) {
      auto* info = reg.add_gpus();
      info->set_index(g);
      info->set_uuid("GPU-" + id + "-" + std::to_string(g));
      info->set_memory_bytes(gpu_memory_bytes);
    }
    for (const auto& r : running) *reg.add_running() = r;
    sched_->Register(reg, link);
    return link;
  }
  // A sweep as the services build it, for the cases Submit() does not cover.
  int64_t SubmitRecords(SweepRecord s, std::vector<TrialRecord> trials) {
    for (auto& t : trials) {
      t.gpus = s.gpus;
      t.cpu_slots = s.cpu_slots;
      t.gpu_share = s.gpu_share;
      t.max_attempts = s.max_attempts;
    }
    auto out = sched_->Submit(s, trials);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? out->sweep_id : 0;
  }
  v1::TrialEvent Event(const v1::Assignment& a, v1::TrialEvent::Kind kind, int64_t seq,
                       const std::string& status = "ok", int exit_code = 0) {
    v1::TrialEvent e;
    e.set_trial_id(a.trial_id());
    e.set_attempt(a.attempt());
    e.set_seq(seq);
    e.set_kind(kind);
    e.set_status(status);
    e.set_exit_code(exit_code);
    e.set_reason(exit_code ? "exit code " + std::to_string(exit_code) : "");
    return e;
  }
  std::string State(int64_t trial_id) {
    EXPECT_TRUE(store_->Flush().ok());
    auto t = store_->GetTrial(trial_id);
    return t.ok() ? std::string(TrialStateName(t->trial.state)) : "?";
  }

  ::ablate::testing::TempDir tmp_{"ablate_sched"};  // first: removed after the store closes
  std::string dir_;
  FakeClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Scheduler> sched_;
};

using MC = v1::CoordinatorMessage;

}  // namespace ablate::server::testing_util
