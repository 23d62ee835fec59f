// The mechanism probes (trainer/probe/probe.h) on small inputs:
//  - sigma: the synthetic table's dQ / dK errors grow with sigma, dS's upstream error with them;
//    the GPU test's shape is there too;
//  - decompose: no INT8 product leaves exact attention, every single product errs less than all
//    of them, and the dominant product is named (the logits' S at sigma 8);
//  - live and bias-noise from a real checkpoint of a tiny CPU trial: one row per layer, the noise
//    falls as 1 / sqrt(tokens per step), the figures are finite and the JSON holds them;
//  - smoothing: K-smoothing removes a shared key offset's error (O, dK; dQ without its correction);
//  - bad requests are InvalidArgument naming the probe.
#include "trainer/probe/probe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "ablate/trial_config.h"
#include "temp_dir.h"
#include "trainer_run_util.h"

namespace ablate::trainer::probe {
namespace {

config::TrialConfig Config(const std::string& yaml) {
  auto c = config::ParseTrialConfig(yaml, "probe_test");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

TEST(ProbeTest, SigmaAndDecompositionOnSyntheticInputs) {
  const config::TrialConfig c = Config("model: {seq_len: 128, d_model: 128, heads: 2}\n");
  std::ostringstream tables;
  ProbeOptions opt;
  opt.what = "all";  // no checkpoint: the synthetic probes only
  auto r = RunProbes(c, opt, tables);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& sigma = (*r)["sigma"];
  ASSERT_EQ(sigma.size(), 6u);
  for (size_t i = 1; i < sigma.size(); ++i) {
    EXPECT_GT(sigma[i]["dq"].get<double>(), sigma[i - 1]["dq"].get<double>()) << i;
    EXPECT_GT(sigma[i]["dk"].get<double>(), sigma[i - 1]["dk"].get<double>()) << i;
  }
  EXPECT_GT(sigma[5]["dq"].get<double>(), 5 * sigma[0]["dq"].get<double>());
  EXPECT_LT(sigma[0]["dq"].get<double>(), 0.03);  // the published accuracy at sigma 1
  EXPECT_EQ((*r)["sigma_gpu_test_shape"].size(), 5u);
  EXPECT_FALSE(r->contains("bias_noise"));
  EXPECT_EQ((*r)["granularity"].size(), 3u * 7u);  // sigma 1, 3, 8 x seven group choices
  // Keys with a shared offset: 2 sigmas x 4 offsets x 4 smoothing choices. At offset 0 smoothing
  // changes little; at 10 sigma the unsmoothed error of O and dK is several times the smoothed one,
  // and K-smoothing brings them back to their offset-free level, dQ included; the dQ correction
  // (off by default) carries the offset into dQ.
  const auto& sm = (*r)["smoothing"];
  ASSERT_EQ(sm.size(), 2u * 4u * 4u);
  const auto at = [&](double sigma, double offset, const std::string& how) {
    for (const auto& row : sm) {
      if (row["sigma"] == sigma && row["offset_sd"] == offset && row["smoothing"] == how)
        return row;
    }
    ADD_FAILURE() << "no smoothing row " << sigma << " " << offset << " " << how;
    return nlohmann::json::object();
  };
  for (const char* out : {"o", "dk"}) {
    const double none = at(1, 10, "none")[out], ksm = at(1, 10, "K")[out],
                 base = at(1, 0, "K")[out];
    EXPECT_GT(none, 2.5 * ksm) << out;
    EXPECT_LT(ksm, 1.1 * base) << out;
  }
  EXPECT_LT(at(1, 10, "K")["dq"].get<double>(), 1.1 * at(1, 0, "K")["dq"].get<double>());
  EXPECT_GT(at(1, 10, "K with dQ correction")["dq"].get<double>(),
            3 * at(1, 10, "K")["dq"].get<double>());
  const auto& dec = (*r)["decompose"];
  ASSERT_EQ(dec.size(), 2u);
  for (const auto& d : dec) {
    const auto& rows = d["rows"];
    ASSERT_EQ(rows.size(), 9u);
    const double all_dq = rows[0]["dq"].get<double>(), all_dk = rows[0]["dk"].get<double>();
    EXPECT_LT(rows[7]["dq"].get<double>(), 1e-9);  // none: exact (bf16 inputs, bf16 dP exact)
    for (size_t i = 1; i < 6; ++i) {
      EXPECT_LE(rows[i]["dq"].get<double>(), all_dq * 1.05) << rows[i]["products"];
      EXPECT_LE(rows[i]["dk"].get<double>(), all_dk * 1.05) << rows[i]["products"];
    }
    EXPECT_FALSE(d["dominant_dq"].get<std::string>().empty());
  }
  // The dS products in bf16 remove their own rounding: less dQ error at sigma 1.
  EXPECT_LT(dec[0]["rows"][8]["dq"].get<double>(), dec[0]["rows"][0]["dq"].get<double>());
  EXPECT_EQ(dec[1]["dominant_dq"], "S = Q K^T only");  // sigma 8: the logits' quantization
  EXPECT_EQ(dec[1]["dominant_dk"], "S = Q K^T only");
  EXPECT_NE(tables.str().find("| synthetic sigma 8 |"), std::string::npos) << tables.str();
}

TEST(ProbeTest, LiveTensorsAndBiasNoiseFromACheckpoint) {
  const ::ablate::testing::TempDir scratch("ablate_probe");
  const std::string dir = scratch.path();
  std::ofstream(dir + "/toy.txt") << testing::ToyCorpus(60000, 7);
  const config::TrialConfig c = Config("data: {corpus: " + dir +
                                       "/toy.txt, val_fraction: 0.1}\n"
                                       "model: {seq_len: 64, layers: 2, d_model: 64, heads: 1}\n"
                                       "attention: {kind: sagebwd}\n"
                                       "optimizer: {kind: adamw, lr: 0.003}\n"
                                       "train: {steps: 12, tokens_per_step: 512, micro_batch: 8,"
                                       " eval_every: 0, checkpoint_every: 12, threads: 1}\n");
  testing::RunLog run = testing::Train(c, dir + "/run");
  ASSERT_TRUE(run.result.ok()) << run.result.status().ToString();
  const std::string ck = dir + "/run/checkpoints/step_00000012.ckpt";
  auto stored = ConfigOfCheckpoint(ck);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(config::ConfigHash(*stored), config::ConfigHash(c));

  std::ostringstream tables;
  ProbeOptions opt;
  opt.what = "all";
  opt.checkpoint = ck;
  opt.batches = 8;
  auto r = RunProbes(*stored, opt, tables);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["sigma_live"].size(), 2u * 3u);  // two layers, three scales
  EXPECT_EQ((*r)["decompose"].size(), 2u + 2u);   // sigma 1, 8 and two layers
  const auto& bn = (*r)["bias_noise"];
  ASSERT_TRUE(bn.is_object()) << tables.str();
  EXPECT_EQ(bn["micro_batches"], 8);
  EXPECT_EQ(bn["tokens_per_micro_batch"].get<double>(), 8.0 * 64);
  const double noise0 = bn["noise_sd_per_micro_batch"].get<double>();
  EXPECT_TRUE(std::isfinite(noise0) && noise0 > 0);
  EXPECT_GT(bn["diff_sd_per_micro_batch"].get<double>(), 0);  // SageBwd's gradients differ
  const auto& rows = bn["rows"];
  ASSERT_GE(rows.size(), 4u);
  for (size_t i = 1; i < rows.size(); ++i) {
    const double t0 = rows[i - 1]["tokens_per_step"], t1 = rows[i]["tokens_per_step"];
    EXPECT_NEAR(rows[i]["noise"].get<double>() / rows[i - 1]["noise"].get<double>(),
                std::sqrt(t0 / t1), 1e-9);
  }
  EXPECT_NE(tables.str().find("tokens per step"), std::string::npos);

  ProbeOptions bad;
  bad.what = "entropy";
  auto unknown = RunProbes(c, bad, tables);
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("--probe entropy"), std::string::npos);
  bad.what = "bias-noise";
  auto no_ck = RunProbes(c, bad, tables);
  EXPECT_EQ(no_ck.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_ck.status().message().find("checkpoint"), std::string::npos);
  // A checkpoint of another model: refused, naming the counts.
  config::TrialConfig other = c;
  other.model.d_model = 128;
  ProbeOptions live = opt;
  live.what = "sigma";
  auto mismatch = RunProbes(other, live, tables);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("weights"), std::string::npos);
}

}  // namespace
}  // namespace ablate::trainer::probe
