// The training loop with device: cuda against device: cpu (RunTrial, the same config and seed, a
// generated toy corpus): losses agree over 50 steps (fpa + AdamW, sagebwd + AdamW; tolerance
// max |loss_gpu - loss_cpu| <= 0.06 nats, final validation loss within 0.06), the JSON lines carry
// the same keys (step, eval, diagnostics with the CPU's metric names), and checkpoints cross
// backends: saved on the GPU and resumed on the CPU, and the other way round, the resumed run
// continues the original within the same tolerance. Identical GPU reruns (attention.deterministic,
// the default; sequence length 1024, so dQ sums 8-16 key blocks) give the same bits of every
// step's loss and of the final validation loss, for fpa and sagebwd. --profile on the GPU (CUDA
// events): every kind of work the GPU model does has time, the kinds add up to the steps' time,
// and profiling does not change the run's losses. Skips without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "ablate/trial_config.h"
#include "gpu/gpu_test_util.h"
#include "temp_dir.h"
#include "trainer/cuda/cuda_backend.h"
#include "trainer/loop/train_loop.h"
#include "trainer_run_util.h"

namespace ablate::trainer {
namespace {

using ablate::trainer::testing::MaxLossDiff;
using ablate::trainer::testing::RunLog;
using ablate::trainer::testing::ToyCorpus;
using ablate::trainer::testing::Train;

class TrainCuda : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    cuda::RegisterCudaBackend();
    tmp_ = new ::ablate::testing::TempDir("ablate_train_cuda");
    dir_ = new std::string(tmp_->path());
    std::ofstream(*dir_ + "/toy.txt") << ToyCorpus(200000, 12345);
  }
  static config::TrialConfig Config(const std::string& yaml, const std::string& device) {
    auto c = config::ParseTrialConfig("data: {corpus: " + *dir_ + "/toy.txt, val_fraction: 0.1}\n" +
                                  "device: " + device + "\n" + yaml,
                              "train_cuda_test");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static ::ablate::testing::TempDir* tmp_;
  static std::string* dir_;
};
::ablate::testing::TempDir* TrainCuda::tmp_ = nullptr;
std::string* TrainCuda::dir_ = nullptr;

const char* kModel = R"(
seed: 3
model: {seq_len: 64, layers: 2, d_model: 128, heads: 2}
optimizer: {kind: adamw, lr: 3.0e-3, lr_vector: 3.0e-3, weight_decay: 0.01}
train: {steps: 50, tokens_per_step: 1024, micro_batch: 8, warmup: 5, eval_every: 25,
        diagnostics_every: 25, checkpoint_every: 0, grad_clip: 1.0}
)";

std::set<std::string> Keys(const nlohmann::json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

void Agree(const std::string& attention_yaml, const std::string& dir) {
  const std::string yaml = std::string(kModel) + attention_yaml;
  RunLog cpu = Train(TrainCuda::Config(yaml, "cpu"), dir + "/cpu");
  RunLog gpu = Train(TrainCuda::Config(yaml, "cuda"), dir + "/gpu");
  ASSERT_TRUE(cpu.result.ok()) << cpu.result.status().ToString();
  ASSERT_TRUE(gpu.result.ok()) << gpu.result.status().ToString();
  EXPECT_EQ(gpu.result->status, "ok");
  EXPECT_EQ(gpu.Of("step").size(), 50u);
  const double d = MaxLossDiff(cpu, gpu);
  std::printf("%s: max |loss gpu - loss cpu| over 50 steps %.4f; final train %.4f / %.4f, val "
              "%.4f / %.4f\n",
              attention_yaml.c_str(), d, cpu.result->final_train_loss,
              gpu.result->final_train_loss, cpu.result->final_val_loss,
              gpu.result->final_val_loss);
  EXPECT_LE(d, 0.06);
  EXPECT_NEAR(gpu.result->final_val_loss, cpu.result->final_val_loss, 0.06);
  EXPECT_LT(gpu.result->final_val_loss, 3.0);  // it learned (ln 256 = 5.5 at init)
  EXPECT_EQ(Keys(cpu.Of("step").back()), Keys(gpu.Of("step").back()));
  EXPECT_EQ(Keys(cpu.Of("eval").back()), Keys(gpu.Of("eval").back()));
  auto dc = cpu.Of("diagnostics"), dg = gpu.Of("diagnostics");
  ASSERT_EQ(dc.size(), 2u);
  ASSERT_EQ(dg.size(), 2u);
  std::set<std::string> kc = Keys(dc[0]), kg = Keys(dg[0]);
  EXPECT_EQ(kc, kg);
  std::printf("diagnostics step 25 cpu / gpu: attn.0.dq.rel_l2 %.4f / %.4f, attn.0.p.cos %.6f / "
              "%.6f, attn.0.max_logit %.3f / %.3f, time %.3f / %.3f s\n",
              dc[0]["attn.0.dq.rel_l2"].get<double>(), dg[0]["attn.0.dq.rel_l2"].get<double>(),
              dc[0]["attn.0.p.cos"].get<double>(), dg[0]["attn.0.p.cos"].get<double>(),
              dc[0]["attn.0.max_logit"].get<double>(), dg[0]["attn.0.max_logit"].get<double>(),
              dc[0]["diagnostics_time_s"].get<double>(), dg[0]["diagnostics_time_s"].get<double>());
  auto start = gpu.Of("start")[0];
  EXPECT_EQ(start["backend"], "cuda");
  std::printf("gpu start: device %s, peak %s, optimizer on %s\n", start["device"].dump().c_str(),
              start["peak_source"].dump().c_str(), start["optimizer_device"].dump().c_str());
}

TEST_F(TrainCuda, FpaAdamWAgreesWithCpu) {
  SKIP_WITHOUT_GPU();
  Agree("attention: {kind: fpa}\n", *dir_ + "/fpa");
}

TEST_F(TrainCuda, SageBwdAdamWAgreesWithCpu) {
  SKIP_WITHOUT_GPU();
  Agree("attention: {kind: sagebwd}\n", *dir_ + "/sage");
}

// Two runs of one config on the GPU: every logged loss, gradient norm and the final validation
// loss equal to the last bit (the JSON lines print them with 17 digits).
TEST_F(TrainCuda, RerunsBitIdentical) {
  SKIP_WITHOUT_GPU();
  for (const char* kind : {"fpa", "sagebwd"}) {
    const std::string yaml = std::string(R"(
seed: 5
model: {seq_len: 1024, layers: 2, d_model: 128, heads: 2}
optimizer: {kind: spectral, lr: 2.0e-2, lr_vector: 3.0e-3}
train: {steps: 30, tokens_per_step: 8192, micro_batch: 8, warmup: 3, eval_every: 30,
        diagnostics_every: 0, checkpoint_every: 0}
)") + "attention: {kind: " + kind +
                             "}\n";
    const std::string d = *dir_ + "/rerun_" + kind;
    RunLog a = Train(Config(yaml, "cuda"), d + "/a");
    RunLog b = Train(Config(yaml, "cuda"), d + "/b");
    ASSERT_TRUE(a.result.ok()) << a.result.status().ToString();
    ASSERT_TRUE(b.result.ok()) << b.result.status().ToString();
    const auto sa = a.Of("step"), sb = b.Of("step");
    ASSERT_EQ(sa.size(), 30u);
    ASSERT_EQ(sb.size(), 30u);
    int same = 0;
    for (size_t i = 0; i < sa.size(); ++i) {
      same += sa[i]["loss"] == sb[i]["loss"] && sa[i]["grad_norm"] == sb[i]["grad_norm"];
    }
    std::printf(
        "%s: %d of 30 steps with the same loss and gradient norm bits; final val loss "
        "%.17g / %.17g\n",
        kind, same, a.result->final_val_loss, b.result->final_val_loss);
    EXPECT_EQ(same, 30) << kind;
    EXPECT_EQ(a.result->final_val_loss, b.result->final_val_loss) << kind;
  }
}

// ablate-train --tune-gemm, then --gemm-tuning (TuneTrialGemms, RunOptions::gemm_tuning): the
// table covers the GEMM problems of a step and an evaluation, the run replays it for every one of
// them, two replays give the same bits, the numerics version names the table, and the losses stay
// those of the heuristic's algorithms up to summation order.
TEST_F(TrainCuda, GemmTuningReplaysBitIdentically) {
  SKIP_WITHOUT_GPU();
  const config::TrialConfig cfg = Config(std::string(kModel) + "attention: {kind: fpa}\n", "cuda");
  GemmTuneOptions opt;
  opt.reps = 5;
  auto table = TuneTrialGemms(cfg, opt);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  ASSERT_GT(table->entries.size(), 3u);
  int moved = 0;
  for (const auto& [problem, c] : table->entries) {
    EXPECT_GT(c.heuristic_ms, 0) << problem;
    EXPECT_LE(c.ms, c.heuristic_ms) << problem;
    EXPECT_LT(c.candidate, c.candidates) << problem;
    moved += c.candidate != 0;
    std::printf("%s: candidate %d of %d, %.4f ms (heuristic %.4f)\n", problem.c_str(), c.candidate,
                c.candidates, c.ms, c.heuristic_ms);
  }
  std::printf("%d of %zu problems left the heuristic's choice\n", moved, table->entries.size());
  auto shared = std::make_shared<const GemmTuning>(*table);
  const std::string d = *dir_ + "/gemm_tuning";
  RunLog plain = Train(cfg, d + "/plain");
  RunLog a = Train(cfg, d + "/a", "", shared);
  RunLog b = Train(cfg, d + "/b", "", shared);
  ASSERT_TRUE(plain.result.ok()) << plain.result.status().ToString();
  ASSERT_TRUE(a.result.ok()) << a.result.status().ToString();
  ASSERT_TRUE(b.result.ok()) << b.result.status().ToString();
  const auto start = a.Of("start")[0];
  EXPECT_FALSE(start["gemm_tuning"].contains("not_used")) << start["gemm_tuning"].dump();
  EXPECT_EQ(start["gemm_tuning"]["digest"], table->Digest());
  EXPECT_EQ(
      start["build"]["numerics"].get<std::string>(),
      plain.Of("start")[0]["build"]["numerics"].get<std::string>() + "+gemm." + table->Digest());
  const auto use = a.Of("final")[0];
  EXPECT_EQ(use["gemm_tuned"].get<size_t>(), table->entries.size()) << use.dump();
  EXPECT_EQ(use["gemm_rejected"], 0) << use.dump();
  EXPECT_GE(use["gemm_problems"].get<size_t>(), table->entries.size()) << use.dump();
  EXPECT_FALSE(plain.Of("final")[0].contains("gemm_tuned"));
  const auto sa = a.Of("step"), sb = b.Of("step");
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i]["loss"], sb[i]["loss"]) << i;
    EXPECT_EQ(sa[i]["grad_norm"], sb[i]["grad_norm"]) << i;
  }
  EXPECT_EQ(a.result->final_val_loss, b.result->final_val_loss);
  const double diff = MaxLossDiff(plain, a);
  std::printf("max |loss tuned - loss heuristic| over 50 steps %.5f\n", diff);
  EXPECT_LE(diff, 0.02);
}

TEST_F(TrainCuda, ProfileCoversTheStepAndChangesNothing) {
  SKIP_WITHOUT_GPU();
  const std::string yaml = std::string(kModel) + "attention: {kind: sagebwd}\n";
  const ::ablate::testing::TempDir scratch("ablate_profile_cuda");
  const std::string dir = scratch.path();
  RunLog plain = Train(Config(yaml, "cuda"), dir + "/plain");
  config::TrialConfig profiled = Config(yaml, "cuda");
  profiled.train.profile_steps = 10;
  RunLog prof = Train(profiled, dir + "/prof");
  ASSERT_TRUE(plain.result.ok()) << plain.result.status().ToString();
  ASSERT_TRUE(prof.result.ok()) << prof.result.status().ToString();
  EXPECT_EQ(plain.Losses(), prof.Losses());
  const auto lines = prof.Of("profile");
  ASSERT_EQ(lines.size(), 1u);
  const nlohmann::json& p = lines[0];
  std::printf("profile: %s\n", p.dump().c_str());
  EXPECT_EQ(p["profile.first_step"], 6);
  EXPECT_EQ(p["profile.steps"], 10);
  for (const char* busy : {"copy", "embedding", "norm_rope", "gemm", "attention_fwd",
                           "attention_bwd", "loss", "grad_norm", "optimizer", "elementwise"}) {
    EXPECT_GT(p[std::string("profile.") + busy + "_ms"].get<double>(), 0.0) << busy;
  }
  double mean = 0;
  for (const auto& s : prof.Of("step")) {
    const int step = s["step"].get<int>();
    if (step >= 6 && step <= 15) mean += 1e3 * s["step_time_s"].get<double>() / 10;
  }
  const double work =
      p["profile.step_ms"].get<double>() - p["profile.between_steps_ms"].get<double>();
  EXPECT_NEAR(work, mean, 0.25 * mean) << p.dump();
}

// Checkpoint at step 10 on one backend, resume to step 20 on the other.
TEST_F(TrainCuda, CheckpointsResumeAcrossBackends) {
  SKIP_WITHOUT_GPU();
  const std::string yaml = std::string(kModel) + "attention: {kind: fpa}\n";
  auto config = [&](const std::string& device) {
    config::TrialConfig c = Config(yaml, device);
    c.train.steps = 20;
    c.train.checkpoint_every = 10;
    c.train.eval_every = 0;
    c.train.diagnostics_every = 0;
    return c;
  };
  for (const char* first : {"cuda", "cpu"}) {
    const std::string second = std::string(first) == "cuda" ? "cpu" : "cuda";
    const std::string d = *dir_ + "/ck_" + first;
    RunLog a = Train(config(first), d + "/a");
    ASSERT_TRUE(a.result.ok()) << a.result.status().ToString();
    const std::string ck = d + "/a/checkpoints/step_00000010.ckpt";
    ASSERT_EQ(::access(ck.c_str(), R_OK), 0) << ck;
    RunLog b = Train(config(second), d + "/b", ck);
    ASSERT_TRUE(b.result.ok()) << b.result.status().ToString();
    EXPECT_EQ(b.Of("start")[0]["resumed_from_step"], 10);
    ASSERT_EQ(b.Of("step").size(), 10u);
    const double diff = MaxLossDiff(a, b, 10);
    std::printf("saved on %s, resumed on %s: max loss difference over steps 11-20 %.4f\n", first,
                second.c_str(), diff);
    EXPECT_LE(diff, 0.06);
  }
}

}  // namespace
}  // namespace ablate::trainer
