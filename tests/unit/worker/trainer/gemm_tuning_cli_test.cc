// ablate-train's GEMM tuning flags on the real binary with a CPU config (the GPU side:
// tests/gpu/worker/trainer/gemm_tuning_gpu_test.cc): --gemm-tuning names the table in the start
// line and says why the CPU backend does not use it, without changing a number or the numerics
// version; broken tables and --tune-gemm without a GPU are refused before anything is written.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "ablate/gemm_tuning.h"
#include "temp_dir.h"
#include "train_process.h"

namespace {

class GemmTuningCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ + "/trial.yaml")
        << "seed: 5\ndevice: cpu\n"
           "model: {seq_len: 32, layers: 1, d_model: 32, heads: 2}\n"
           "train: {steps: 6, tokens_per_step: 128, micro_batch: 4, warmup: 2, eval_every: 3,\n"
           "        diagnostics_every: 0, checkpoint_every: 1000, threads: 1}\n";
    table_.device = "NVIDIA H100 80GB HBM3";
    table_.cublaslt_version = 130100;
    ablate::GemmChoice c;
    c.algo[0] = 42;
    c.candidates = 8;
    c.ms = c.heuristic_ms = 0.1;
    table_.entries["TN m96 n128 k32 lda32 ldb32 ldd96 bf16 c0 align256,256,256,256,256 none"] = c;
    ASSERT_TRUE(ablate::SaveGemmTuning(table_, dir_ + "/table.json").ok());
  }
  ::ablate::testing::TempDir tmp_{"ablate_gemm_cli"};
  const std::string dir_ = tmp_.path();
  ablate::GemmTuning table_;
};

TEST_F(GemmTuningCliTest, TheCpuBackendNamesTheTableAndLeavesItUnused) {
  const std::string cfg = dir_ + "/trial.yaml";
  ASSERT_EQ(Wait(Start({"--config", cfg, "--out", dir_ + "/plain"}, dir_ + "/plain.out")), 0);
  ASSERT_EQ(
      Wait(Start({"--config", cfg, "--out", dir_ + "/tuned", "--gemm-tuning", dir_ + "/table.json"},
                 dir_ + "/tuned.out", dir_ + "/tuned.err")),
      0);
  const auto plain = Lines(dir_ + "/plain.out");
  const auto tuned = Lines(dir_ + "/tuned.out");
  ASSERT_FALSE(plain.empty());
  ASSERT_EQ(plain.size(), tuned.size());
  const auto& start = tuned.front();
  ASSERT_EQ(start["type"], "start");
  ASSERT_TRUE(start.contains("gemm_tuning")) << start.dump();
  EXPECT_EQ(start["gemm_tuning"]["digest"], table_.Digest());
  EXPECT_EQ(start["gemm_tuning"]["entries"], 1);
  EXPECT_EQ(start["gemm_tuning"]["device"], table_.device);
  EXPECT_NE(start["gemm_tuning"]["not_used"].get<std::string>().find("only the CUDA backend"),
            std::string::npos);
  // Not used, so not part of the provenance, and no number moves.
  EXPECT_EQ(start["build"]["numerics"], plain.front()["build"]["numerics"]);
  EXPECT_EQ(start["build"]["numerics"].get<std::string>().find("+gemm"), std::string::npos);
  EXPECT_FALSE(plain.front().contains("gemm_tuning"));
  for (size_t i = 1; i < plain.size(); ++i) {
    if (plain[i]["type"] != "step" && plain[i]["type"] != "eval") continue;
    EXPECT_EQ(plain[i].value("loss", 0.0), tuned[i].value("loss", 0.0)) << i;
    EXPECT_EQ(plain[i].value("val_loss", 0.0), tuned[i].value("val_loss", 0.0)) << i;
  }
  EXPECT_FALSE(tuned.back().contains("gemm_tuned"));
  EXPECT_NE(ReadAll(dir_ + "/tuned.err").find("table.json is not used"), std::string::npos);
}

TEST_F(GemmTuningCliTest, ABrokenTableIsRefusedBeforeTraining) {
  std::ofstream(dir_ + "/broken.json") << R"({"format": "ablate-gemm-tuning/1", "device": "x"})";
  EXPECT_EQ(Wait(Start({"--config", dir_ + "/trial.yaml", "--out", dir_ + "/run", "--gemm-tuning",
                        dir_ + "/broken.json"},
                       dir_ + "/run.out", dir_ + "/run.err")),
            2);
  const std::string err = ReadAll(dir_ + "/run.err");
  EXPECT_NE(err.find(dir_ + "/broken.json"), std::string::npos) << err;
  EXPECT_NE(err.find("\"cublaslt\""), std::string::npos) << err;
  EXPECT_TRUE(ReadAll(dir_ + "/run.out").empty());
  EXPECT_NE(::access((dir_ + "/run").c_str(), F_OK), 0);  // no output folder either
}

TEST_F(GemmTuningCliTest, TuningNeedsTheCudaBackend) {
  const std::string out = dir_ + "/new.json";
  EXPECT_EQ(Wait(Start({"--config", dir_ + "/trial.yaml", "--tune-gemm", out}, dir_ + "/t.out",
                       dir_ + "/t.err")),
            2);
  EXPECT_NE(ReadAll(dir_ + "/t.err").find("--tune-gemm: the GEMMs it tunes are cuBLASLt's"),
            std::string::npos)
      << ReadAll(dir_ + "/t.err");
  EXPECT_TRUE(ReadAll(out).empty());
  // A file already there that is not a table is refused before anything else, and kept.
  std::ofstream(dir_ + "/notes.txt") << "my notes\n";
  EXPECT_EQ(Wait(Start({"--config", dir_ + "/trial.yaml", "--tune-gemm", dir_ + "/notes.txt"},
                       dir_ + "/t1.out", dir_ + "/t1.err")),
            2);
  EXPECT_NE(ReadAll(dir_ + "/t1.err").find("notes.txt: not a GEMM tuning table"), std::string::npos)
      << ReadAll(dir_ + "/t1.err");
  EXPECT_EQ(ReadAll(dir_ + "/notes.txt"), "my notes\n");
  // A table already there stays as it was when the tuning cannot run.
  const std::string before = ReadAll(dir_ + "/table.json");
  EXPECT_EQ(Wait(Start({"--config", dir_ + "/trial.yaml", "--tune-gemm", dir_ + "/table.json"},
                       dir_ + "/t3.out", dir_ + "/t3.err")),
            2);
  EXPECT_EQ(ReadAll(dir_ + "/table.json"), before);
  // It replaces training: it cannot be combined with replaying a table.
  EXPECT_EQ(Wait(Start({"--config", dir_ + "/trial.yaml", "--tune-gemm", out, "--gemm-tuning",
                        dir_ + "/table.json"},
                       dir_ + "/t2.out", dir_ + "/t2.err")),
            2);
  EXPECT_NE(ReadAll(dir_ + "/t2.err").find("excludes"), std::string::npos)
      << ReadAll(dir_ + "/t2.err");
}

}  // namespace
