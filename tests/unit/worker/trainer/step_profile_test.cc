// The step profile (trainer/model/step_profile.h): the ledger's accounting on given timestamps,
// and train.profile_steps (ablate-train --profile) on the CPU backend through RunTrial (a real
// tiny run); it leaves the trial's identity alone.
#include "trainer/model/step_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "ablate/trial_config.h"
#include "temp_dir.h"
#include "trainer_run_util.h"

namespace ablate::trainer {
namespace {

TEST(PhaseLedger, CountsEachIntervalToTheMarkThatOpenedIt) {
  PhaseLedger l;
  l.Mark(StepPhase::kGemm, 1.0);  // step 1
  l.Mark(StepPhase::kAttentionForward, 1.5);
  l.Mark(StepPhase::kGemm, 1.75);
  l.EndStep(2.0);
  l.Mark(StepPhase::kGemm, 2.25);  // step 2: 0.25 s between the steps
  l.Mark(StepPhase::kHost, 2.5);   // a batch inside the step: 0.5 s
  l.Mark(StepPhase::kGemm, 3.0);
  l.EndStep(3.25);
  l.Break();                      // an evaluation: left out
  l.Mark(StepPhase::kGemm, 9.0);  // step 3
  l.EndStep(9.5);                 // its between-steps interval stays open
  EXPECT_DOUBLE_EQ(l.seconds(StepPhase::kGemm), 0.5 + 0.25 + 0.25 + 0.25 + 0.5);
  EXPECT_DOUBLE_EQ(l.seconds(StepPhase::kAttentionForward), 0.25);
  EXPECT_DOUBLE_EQ(l.seconds(StepPhase::kHost), 0.25 + 0.5);
  const nlohmann::json j = l.ToJson();
  EXPECT_EQ(j["profile.steps"], 3);
  EXPECT_DOUBLE_EQ(j["profile.gemm_ms"].get<double>(), 1e3 * 1.75 / 3);
  EXPECT_DOUBLE_EQ(j["profile.attention_fwd_ms"].get<double>(), 1e3 * 0.25 / 3);
  // Inside the steps 0.5 s over 3 steps, between them 0.25 s over its one closed interval.
  EXPECT_DOUBLE_EQ(j["profile.between_steps_ms"].get<double>(), 250.0);
  EXPECT_DOUBLE_EQ(j["profile.host_ms"].get<double>(), 1e3 * 0.5 / 3 + 250.0);
  EXPECT_DOUBLE_EQ(j["profile.optimizer_ms"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["profile.step_ms"].get<double>(), 1e3 * (1.75 + 0.25 + 0.5) / 3 + 250.0);
  double kinds = 0;
  for (int i = 0; i < static_cast<int>(StepPhase::kCount); ++i) {
    kinds +=
        j[std::string("profile.") + StepPhaseName(static_cast<StepPhase>(i)) + "_ms"].get<double>();
  }
  EXPECT_DOUBLE_EQ(kinds, j["profile.step_ms"].get<double>());
  EXPECT_EQ(j.size(), 3u + size_t(StepPhase::kCount));  // all numbers: each a stored metric
}

TEST(PhaseLedger, InactiveProfilerMarksNothing) {
  HostStepProfiler p;
  p.Mark(StepPhase::kGemm);
  p.Pause();
  p.Mark(StepPhase::kLoss);
  EXPECT_EQ(p.ledger().seconds(StepPhase::kGemm), 0.0);
  p.Resume();
  p.Mark(StepPhase::kGemm);
  ASSERT_TRUE(p.EndStep().ok());
  EXPECT_EQ(p.ledger().steps(), 1);
  EXPECT_GE(p.ledger().seconds(StepPhase::kGemm), 0.0);
  EXPECT_EQ(p.ledger().seconds(StepPhase::kLoss), 0.0);
}

// --profile on the CPU: one profile line after the profiled steps (after 5 warm-up steps), every
// kind of work the CPU model does has time, the batch uploads have none, and the kinds add up to
// the steps' own time (but for the time between steps, which the step time does not include).
TEST(StepProfile, CpuRunReportsWhereTheStepGoes) {
  const ::ablate::testing::TempDir scratch("ablate_profile");
  const std::string dir = scratch.path();
  std::ofstream(dir + "/toy.txt") << testing::ToyCorpus(60000, 7);
  auto c = config::ParseTrialConfig(
      "data: {corpus: " + dir +
          "/toy.txt, val_fraction: 0.1}\n"
          "model: {seq_len: 64, layers: 2, d_model: 64, heads: 2}\n"
          "attention: {kind: sagebwd}\n"
          "optimizer: {kind: adamw, lr: 1.0e-3, lr_vector: 1.0e-3}\n"
          "train: {steps: 14, tokens_per_step: 512, micro_batch: 4, warmup: 2, eval_every: 8,\n"
          "        diagnostics_every: 0, checkpoint_every: 0, threads: 1, profile_steps: 6}\n",
      "step_profile_test");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  config::TrialConfig plain = *c;
  plain.train.profile_steps = 0;
  EXPECT_EQ(config::ConfigHash(*c), config::ConfigHash(plain));  // how it runs, not what
  const testing::RunLog log = testing::Train(*c, dir + "/run");
  ASSERT_TRUE(log.result.ok()) << log.result.status().ToString();
  const auto profiles = log.Of("profile");
  ASSERT_EQ(profiles.size(), 1u);
  const nlohmann::json& p = profiles[0];
  EXPECT_EQ(p["profile.first_step"], 6);
  EXPECT_EQ(p["step"], 11);
  EXPECT_EQ(p["profile.steps"], 6);  // steps 6..11; step 8's evaluation is left out
  for (const char* busy : {"gemm", "attention_fwd", "attention_bwd", "norm_rope", "embedding",
                           "elementwise", "loss", "grad_norm", "optimizer"}) {
    EXPECT_GT(p[std::string("profile.") + busy + "_ms"].get<double>(), 0.0) << busy;
  }
  EXPECT_EQ(p["profile.copy_ms"].get<double>(), 0.0);
  std::vector<double> step_ms;
  for (const auto& s : log.Of("step")) {
    const int step = s["step"].get<int>();
    if (step >= 6 && step <= 11) step_ms.push_back(1e3 * s["step_time_s"].get<double>());
  }
  ASSERT_EQ(step_ms.size(), 6u);
  double mean = 0;
  for (double v : step_ms) mean += v / 6;
  const double work =
      p["profile.step_ms"].get<double>() - p["profile.between_steps_ms"].get<double>();
  EXPECT_NEAR(work, mean, 0.2 * mean) << p.dump();
  EXPECT_GT(p["profile.tokens_per_s"].get<double>(), 0.0);
}

}  // namespace
}  // namespace ablate::trainer
