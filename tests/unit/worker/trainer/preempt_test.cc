// ablate-train's preemption path, on the real binary: SIGUSR1 mid-run → the current step finishes,
// a checkpoint of it is written and announced, the final line says "preempted", the exit code is
// 75;
// --resume from that checkpoint then continues bit-identically to an uninterrupted run (same step
// losses, byte-identical final checkpoint).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "temp_dir.h"
#include "train_process.h"
#include "trainer/loop/checkpoint.h"

namespace {

// step → the loss exactly as printed.
std::map<int, std::string> StepLosses(const std::vector<nlohmann::json>& lines) {
  std::map<int, std::string> out;
  for (const auto& j : lines) {
    if (j["type"] == "step") out[j["step"].get<int>()] = j["loss"].dump();
  }
  return out;
}

class PreemptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ + "/trial.yaml")
        << "seed: 3\n"
           "model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n"
           "attention: {kind: sagebwd}\n"
           "optimizer: {kind: spectral, p: 0.5, lr: 0.003}\n"
           "train: {steps: 400, tokens_per_step: 256, micro_batch: 8, warmup: 5, eval_every: 50,\n"
           "        diagnostics_every: 0, checkpoint_every: 1000, threads: 1}\n";
  }
  ::ablate::testing::TempDir tmp_{"ablate_preempt"};
  const std::string dir_ = tmp_.path();
};

TEST_F(PreemptTest, Sigusr1CheckpointsAndResumeIsBitIdentical) {
  const std::string cfg = dir_ + "/trial.yaml";
  // The uninterrupted reference.
  ASSERT_EQ(Wait(Start({"--config", cfg, "--out", dir_ + "/full"}, dir_ + "/full.out")), 0);
  const auto full = Lines(dir_ + "/full.out");

  // Preempt once some steps ran (so it is mid-run, and the handler is installed).
  const pid_t pid = Start({"--config", cfg, "--out", dir_ + "/run"}, dir_ + "/pre.out");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const std::string text = ReadAll(dir_ + "/pre.out");
    if (text.find("\"step\":20,") != std::string::npos) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no step 20 line:\n" << text;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(::kill(pid, SIGUSR1), 0);
  ASSERT_EQ(Wait(pid), 75) << ReadAll(dir_ + "/pre.out");

  const auto pre = Lines(dir_ + "/pre.out");
  ASSERT_GE(pre.size(), 3u);
  const auto& fin = pre.back();
  EXPECT_EQ(fin["type"], "final");
  EXPECT_EQ(fin["status"], "preempted");
  const int stop = fin["step"].get<int>();
  EXPECT_GE(stop, 20);
  EXPECT_LT(stop, 400);
  EXPECT_EQ(fin["reason"], "preempted: checkpointed at step " + std::to_string(stop));
  // The line before the final one announces the checkpoint of that very step.
  const auto& ck = pre[pre.size() - 2];
  ASSERT_EQ(ck["type"], "checkpoint");
  EXPECT_EQ(ck["step"].get<int>(), stop);
  const std::string ck_path = ck["path"].get<std::string>();
  ASSERT_EQ(::access(ck_path.c_str(), R_OK), 0) << ck_path;
  // Every step up to the stop was printed, and only those.
  const auto pre_steps = StepLosses(pre);
  EXPECT_EQ(pre_steps.size(), size_t(stop));

  // Resume: a fresh start line from the checkpoint, then the rest of the run.
  ASSERT_EQ(Wait(Start({"--config", cfg, "--out", dir_ + "/run", "--resume", ck_path},
                       dir_ + "/resumed.out")),
            0);
  const auto resumed = Lines(dir_ + "/resumed.out");
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed.front()["resumed_from_step"].get<int>(), stop);
  EXPECT_EQ(resumed.back()["status"], "ok");

  auto joined = pre_steps;
  for (const auto& [s, l] : StepLosses(resumed)) {
    EXPECT_FALSE(joined.count(s)) << "step " << s << " ran twice";
    joined[s] = l;
  }
  EXPECT_EQ(joined, StepLosses(full));
  EXPECT_EQ(resumed.back()["final_val_loss"].dump(), full.back()["final_val_loss"].dump());
  // Same weights, optimizer state and sampler position: the final checkpoints hold the same state
  // (only the wall time spent training, which the resumed run carries on, differs).
  auto a = ablate::trainer::ReadCheckpoint(dir_ + "/full/checkpoints/step_00000400.ckpt");
  auto b = ablate::trainer::ReadCheckpoint(dir_ + "/run/checkpoints/step_00000400.ckpt");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(ablate::trainer::SameState(*a, *b)) << "final checkpoints differ";
  EXPECT_GT(b->header["loop"].value("train_time_s", 0.0), 0.0);
}

// A model too large for the memory it may use (a 4 GB address space here; 12 x 4 x 8192^2 weights
// alone are 12.9 GB): a readable reason and exit 1, where the trainer aborted on std::bad_alloc
// (SIGABRT) before and the worker's log had only the C++ runtime's text.
TEST_F(PreemptTest, OutOfHostMemoryIsAReadableErrorNotAnAbort) {
  std::ofstream(dir_ + "/huge.yaml")
      << "model: {seq_len: 32, layers: 4, d_model: 8192, heads: 64}\n"
         "train: {steps: 2, tokens_per_step: 256, micro_batch: 8, warmup: 1, threads: 1}\n"
         "device: cpu\n";
  const int code = Wait(Start({"--config", dir_ + "/huge.yaml", "--out", dir_ + "/huge"},
                              dir_ + "/huge.out", dir_ + "/huge.err", rlim_t(4) << 30));
  EXPECT_EQ(code, 1) << ReadAll(dir_ + "/huge.err");
  EXPECT_NE(ReadAll(dir_ + "/huge.err")
                .find("ablate-train: out of host memory (model: 4 layers, d_model 8192; "
                      "micro_batch 8 x seq_len 32)"),
            std::string::npos)
      << ReadAll(dir_ + "/huge.err");
}

}  // namespace
