// Data parallel training (device: cuda, gpus: 2) against one GPU with the same tokens per step
// (RunTrial, the same config and seed, a generated toy corpus, tiny model, 2 micro-batches per
// rank = 4 on one GPU):
//   * step 1 (identical weights, the same tokens): the loss within 1e-5 and the gradient norm
//     within 1e-4 relative; only the summation order differs ((g0+g1)+(g2+g3) vs g0+g1+g2+g3),
//     so a wrong split of the batch (other tokens on a rank) fails here.
//   * fpa + AdamW, 20 steps: every step's loss and the final validation loss within 2e-3 nats of
//     the 1-GPU run's (measured: 4e-4), the final weights (read back from the final checkpoints)
//     within 1e-2 relative L2 (measured: 3e-4).
//   * sagebwd + spectral p = 0.5 is chaotic: SageBwd's int8 quantization turns last-bit
//     differences into rounding flips and the spectral root amplifies them, so the loss
//     difference grows from ~1e-4 (steps 1-8) to ~1e-2 (steps 12-20; measured on an H200 with
//     the kernels of 2026-11-21). Bounds: steps 1-8 within 2e-3, every step and the final
//     validation loss within 3e-2, final weights within 1e-2 relative L2 (measured: 2.8e-3).
//     Two 1-GPU runs are compared as the baseline (bit-identical on an H200).
//     Writing the 2-GPU checkpoint also checks that both replicas hold bitwise identical weights
//     (the backend refuses otherwise).
//   * a 2-GPU checkpoint resumes on 1 GPU and a 1-GPU checkpoint on 2 GPUs; both continue the
//     original run within the same loss tolerance.
//   * more GPUs than visible is refused with FailedPrecondition (needs 1 GPU).
// The rest skips unless at least 2 CUDA devices are visible.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "ablate/trial_config.h"
#include "gpu/gpu_test_util.h"
#include "temp_dir.h"
#include "trainer/cuda/cuda_backend.h"
#include "trainer/loop/checkpoint.h"
#include "trainer/loop/train_loop.h"
#include "trainer_run_util.h"

namespace ablate::trainer {
namespace {

using ablate::trainer::testing::MaxLossDiff;
using ablate::trainer::testing::RunLog;
using ablate::trainer::testing::ToyCorpus;
using ablate::trainer::testing::Train;

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

#define SKIP_WITHOUT_TWO_GPUS() \
  if (DeviceCount() < 2) GTEST_SKIP() << "needs 2 CUDA devices, found " << DeviceCount()

constexpr double kLossTol = 2e-3;  // fpa + AdamW; sagebwd + spectral steps 1-8; the resume tests
constexpr double kChaoticLossTol = 3e-2;  // sagebwd + spectral, steps 9-20 and validation
constexpr double kWeightTol = 1e-2;

class DataParallel : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    cuda::RegisterCudaBackend();
    tmp_ = new ::ablate::testing::TempDir("ablate_dp_test");
    dir_ = new std::string(tmp_->path());
    std::ofstream(*dir_ + "/toy.txt") << ToyCorpus(200000, 777);
  }
  static config::TrialConfig Config(const std::string& extra, int gpus) {
    auto c =
        config::ParseTrialConfig("data: {corpus: " + *dir_ + "/toy.txt, val_fraction: 0.1}\n" +
                             "device: cuda\ngpus: " + std::to_string(gpus) + "\n" + kModel + extra,
                         "data_parallel_test");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return *c;
  }
  static constexpr const char* kModel = R"(
seed: 5
model: {seq_len: 64, layers: 2, d_model: 128, heads: 2}
train: {steps: 20, tokens_per_step: 2048, micro_batch: 8, warmup: 3, eval_every: 10,
        diagnostics_every: 10, checkpoint_every: 10, grad_clip: 1.0}
)";
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static ::ablate::testing::TempDir* tmp_;
  static std::string* dir_;
};
::ablate::testing::TempDir* DataParallel::tmp_ = nullptr;
std::string* DataParallel::dir_ = nullptr;

std::vector<float> CheckpointWeights(const std::string& path) {
  auto ck = ReadCheckpoint(path);
  EXPECT_TRUE(ck.ok()) << ck.status().ToString();
  if (!ck.ok() || ck->sections.empty()) return {};
  std::vector<float> w(ck->sections[0].size() / sizeof(float));
  std::memcpy(w.data(), ck->sections[0].data(), w.size() * sizeof(float));
  return w;
}

double WeightRelL2(const std::string& a, const std::string& b) {
  std::vector<float> wa = CheckpointWeights(a), wb = CheckpointWeights(b);
  EXPECT_EQ(wa.size(), wb.size());
  if (wa.empty() || wa.size() != wb.size()) return INFINITY;
  return gputest::RelL2(wb, gputest::ToDouble(wa));
}

// Losses within kLossTol up to step `tight_steps` and within loss_tol after it.
void TwoGpusMatchOne(const std::string& extra, const std::string& name, int tight_steps,
                     double loss_tol) {
  const std::string d = *DataParallel::dir_ + "/" + name;
  RunLog one = Train(DataParallel::Config(extra, 1), d + "/one");
  RunLog again = Train(DataParallel::Config(extra, 1), d + "/again");
  RunLog two = Train(DataParallel::Config(extra, 2), d + "/two");
  ASSERT_TRUE(one.result.ok()) << one.result.status().ToString();
  ASSERT_TRUE(again.result.ok()) << again.result.status().ToString();
  ASSERT_TRUE(two.result.ok()) << two.result.status().ToString();
  EXPECT_EQ(two.result->status, "ok");
  ASSERT_EQ(two.Of("step").size(), 20u);
  const auto start = two.Of("start")[0];
  EXPECT_EQ(start["gpus"], 2);
  EXPECT_EQ(start["devices"].size(), 2u);
  EXPECT_EQ(start["accumulation_steps"], 2);
  EXPECT_EQ(one.Of("start")[0]["accumulation_steps"], 4);
  EXPECT_EQ(start["tokens_per_step"], 2048);
  EXPECT_EQ(two.Of("diagnostics").size(), 2u);
  EXPECT_EQ(two.Of("eval").size(), 2u);

  const std::string final_ck = "/checkpoints/step_00000020.ckpt";
  const double d_two = MaxLossDiff(one, two), d_again = MaxLossDiff(one, again);
  const double w_two = WeightRelL2(d + "/one" + final_ck, d + "/two" + final_ck);
  const double w_again = WeightRelL2(d + "/one" + final_ck, d + "/again" + final_ck);
  const double dval = std::fabs(two.result->final_val_loss - one.result->final_val_loss);
  double dnorm = 0;
  auto so = one.Of("step"), st = two.Of("step");
  ASSERT_EQ(so.size(), st.size());
  for (size_t i = 0; i < so.size(); ++i) {
    dnorm = std::max(
        dnorm, std::fabs(so[i]["grad_norm"].get<double>() - st[i]["grad_norm"].get<double>()) /
                   so[i]["grad_norm"].get<double>());
  }
  const double loss1 = std::fabs(so[0]["loss"].get<double>() - st[0]["loss"].get<double>());
  const double norm1 =
      std::fabs(so[0]["grad_norm"].get<double>() - st[0]["grad_norm"].get<double>()) /
      so[0]["grad_norm"].get<double>();
  std::string per_step;
  for (size_t i = 0; i < so.size(); ++i) {
    char b[32];
    std::snprintf(b, sizeof b, " %.1e",
                  std::fabs(so[i]["loss"].get<double>() - st[i]["loss"].get<double>()));
    per_step += b;
  }
  std::printf("%s: step 1: |dloss| %.2e, rel. grad-norm diff %.2e; |dloss| per step:%s\n",
              name.c_str(), loss1, norm1, per_step.c_str());
  EXPECT_LE(loss1, 1e-5);
  EXPECT_LE(norm1, 1e-4);
  double early = 0;
  for (size_t i = 0; i < so.size() && int(i) < tight_steps; ++i) {
    early = std::max(early, std::fabs(so[i]["loss"].get<double>() - st[i]["loss"].get<double>()));
  }
  EXPECT_LE(early, kLossTol) << "over steps 1-" << tight_steps;
  std::printf(
      "%s: 2 GPUs vs 1 GPU over 20 steps: max |dloss| %.2e (1 GPU vs 1 GPU: %.2e), max "
      "rel. grad-norm diff %.2e, final weights rel. L2 %.2e (1 GPU vs 1 GPU: %.2e), "
      "|dval| %.2e; final train %.5f / %.5f; data_parallel: %s\n",
      name.c_str(), d_two, d_again, dnorm, w_two, w_again, dval, one.result->final_train_loss,
      two.result->final_train_loss, start["data_parallel"].dump().c_str());
  EXPECT_LE(d_two, loss_tol);
  EXPECT_LE(w_two, kWeightTol);
  EXPECT_LE(dval, loss_tol);
  EXPECT_LT(two.result->final_train_loss, one.Losses()[1] - 0.5);  // it learned
}

TEST_F(DataParallel, FpaAdamWTwoGpusMatchOne) {
  SKIP_WITHOUT_TWO_GPUS();
  TwoGpusMatchOne(R"(
attention: {kind: fpa}
optimizer: {kind: adamw, lr: 3.0e-3, lr_vector: 3.0e-3, weight_decay: 0.01}
)",
                  "fpa_adamw", 20, kLossTol);
}

TEST_F(DataParallel, SageBwdSpectralTwoGpusMatchOne) {
  SKIP_WITHOUT_TWO_GPUS();
  TwoGpusMatchOne(R"(
attention: {kind: sagebwd}
optimizer: {kind: spectral, p: 0.5, lr: 1.0e-2, lr_vector: 3.0e-3, weight_decay: 0.01}
)",
                  "sage_spectral", 8, kChaoticLossTol);
}

// A checkpoint written with 2 GPUs resumes on 1 GPU, and one written on 1 GPU resumes on 2.
TEST_F(DataParallel, CheckpointsResumeWithAnyGpuCount) {
  SKIP_WITHOUT_TWO_GPUS();
  const std::string extra = R"(
attention: {kind: fpa}
optimizer: {kind: adamw, lr: 3.0e-3, lr_vector: 3.0e-3, weight_decay: 0.01}
)";
  for (int first : {2, 1}) {
    const int second = 3 - first;
    const std::string d = *dir_ + "/resume_" + std::to_string(first);
    RunLog a = Train(Config(extra, first), d + "/a");
    ASSERT_TRUE(a.result.ok()) << a.result.status().ToString();
    const std::string ck = d + "/a/checkpoints/step_00000010.ckpt";
    ASSERT_EQ(::access(ck.c_str(), R_OK), 0) << ck;
    RunLog b = Train(Config(extra, second), d + "/b", ck);
    ASSERT_TRUE(b.result.ok()) << b.result.status().ToString();
    EXPECT_EQ(b.Of("start")[0]["resumed_from_step"], 10);
    ASSERT_EQ(b.Of("step").size(), 10u);
    const double diff = MaxLossDiff(a, b, 10);
    std::printf("saved with %d GPU(s), resumed with %d: max |dloss| over steps 11-20 %.2e\n", first,
                second, diff);
    EXPECT_LE(diff, kLossTol);
  }
}

TEST_F(DataParallel, RefusesMoreGpusThanVisible) {
  SKIP_WITHOUT_GPU();
  const int k = DeviceCount() + 1;
  config::TrialConfig c = Config("attention: {kind: fpa}\n", 1);
  c.gpus = k;
  c.train.tokens_per_step = int64_t(8) * 64 * k;
  RunLog r = Train(c, *dir_ + "/too_many");
  EXPECT_EQ(r.result.status().code(), StatusCode::kFailedPrecondition)
      << r.result.status().ToString();
  std::printf("gpus: %d -> %s\n", k, r.result.status().ToString().c_str());
}

}  // namespace
}  // namespace ablate::trainer
