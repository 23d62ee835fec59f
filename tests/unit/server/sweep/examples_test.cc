// Every spec in examples/sweeps/ expands; the CPU specs run on the CPU as its README promises, the
// gpu_* specs ask for GPUs. The papers' settings (examples/paper/) expand to their trial counts
// on GPUs over llm.c shards (the e2e test also dry-runs them through a coordinator).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "sweep/sweep.h"

namespace ablate::server {
namespace {

std::vector<std::filesystem::path> ExampleSpecs() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(ABLATE_EXAMPLES_SWEEPS_DIR)) {
    if (e.path().extension() == ".yaml") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool IsGpuSpec(const std::filesystem::path& p) {
  return p.filename().string().rfind("gpu_", 0) == 0;
}

// Every spec expands cleanly and is named after its file.
TEST(ExampleSweeps, EveryFileExpands) {
  std::vector<std::filesystem::path> specs = ExampleSpecs();
  ASSERT_GE(specs.size(), 5u) << "examples/sweeps/ should hold the five CPU example specs";
  for (const auto& path : specs) {
    SCOPED_TRACE(path.string());
    auto r = ExpandSweep(Read(path), path.filename().string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    const ExpandedSweep& s = r.value();
    EXPECT_EQ(s.name + ".yaml", path.filename().string()) << "name the file after the sweep";
    EXPECT_FALSE(s.trials.empty());
    EXPECT_TRUE(s.warnings.empty()) << s.warnings[0];
  }
}

// The CPU specs (every file not named gpu_*) run on a CPU-only box, one slot per trial, small.
TEST(ExampleSweeps, CpuSpecsExpandToSmallCpuTrials) {
  int cpu_specs = 0;
  for (const auto& path : ExampleSpecs()) {
    if (IsGpuSpec(path)) continue;
    ++cpu_specs;
    SCOPED_TRACE(path.string());
    auto r = ExpandSweep(Read(path), path.filename().string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    const ExpandedSweep& s = r.value();
    EXPECT_EQ(s.gpus, 0);  // runnable on a CPU-only box
    EXPECT_EQ(s.cpu_slots, 1);
    for (const auto& t : s.trials) {
      EXPECT_EQ(t.config.device, "cpu");
      EXPECT_EQ(t.config.train.threads, 1);  // one trial per CPU slot
      EXPECT_GT(t.config.train.eval_every, 0);
      EXPECT_GT(t.config.train.diagnostics_every, 0);
      EXPECT_LE(t.config.train.steps, 150);
      EXPECT_LE(t.config.model.seq_len, 128);
    }
  }
  EXPECT_GE(cpu_specs, 5);
}

// The GPU specs (gpu_*) ask for GPUs and the CUDA backend (scripts/gpu_sweeps.sh runs them).
TEST(ExampleSweeps, GpuSpecsAskForGpus) {
  for (const auto& path : ExampleSpecs()) {
    if (!IsGpuSpec(path)) continue;
    SCOPED_TRACE(path.string());
    auto r = ExpandSweep(Read(path), path.filename().string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_GE(r->gpus, 1);
    for (const auto& t : r->trials) {
      EXPECT_EQ(t.config.device, "cuda");
      EXPECT_GT(t.config.train.eval_every, 0);
    }
  }
}

// The counts the README states.
TEST(ExampleSweeps, Counts) {
  std::map<std::string, size_t> expect = {{"qknorm_tokens", 16},
                                          {"smoothing", 8},
                                          {"optimizer_p", 16},
                                          {"state_bits", 8},
                                          {"quick", 8},
                                          {"lr_early_stop", 8},
                                          {"smoothing_offset", 40},
                                          {"gpu_study_smoothing", 48},
                                          {"gpu_study_attention", 96},
                                          {"gpu_study_spectral_p", 128}};
  for (const auto& [name, count] : expect) {
    std::filesystem::path p = std::filesystem::path(ABLATE_EXAMPLES_SWEEPS_DIR) / (name + ".yaml");
    auto r = ExpandSweep(Read(p), p.filename().string());
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(r->trials.size(), count) << name;
  }
}

// The studies (gpu_study_*, docs/RESULTS.md): the scale the issue sets for them (10-30M
// parameters, seq_len 1024, the GPT-2 BPE mix with its own held-out split, 4 or more seeds), every
// arm at two or more learning rates (the best-over-lr comparison), deterministic, and within two
// GPU calls' reach on one H200 (at most 128 trials of at most 8.4M tokens each: ~7.5 s of GPU
// time per trial at two or four per GPU, docs/RESULTS.md).
TEST(ExampleSweeps, StudiesHaveTheirScaleSeedsAndLearningRateGrids) {
  int studies = 0;
  for (const auto& path : ExampleSpecs()) {
    if (path.filename().string().rfind("gpu_study_", 0) != 0) continue;
    ++studies;
    SCOPED_TRACE(path.string());
    auto r = ExpandSweep(Read(path), path.filename().string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_LE(r->trials.size(), 128u);
    std::map<std::string, std::set<double>> lrs_of_arm;  // arm (axes but lr and seed) -> lrs
    std::set<std::string> seeds;
    for (const auto& t : r->trials) {
      const auto& c = t.config;
      EXPECT_EQ(c.model.seq_len, 1024);
      EXPECT_EQ(c.data.vocab_size, 50257);
      EXPECT_EQ(c.data.val_fraction, 0);  // the shards' own held-out documents
      EXPECT_NE(c.data.corpus.find("mix_train_"), std::string::npos);
      EXPECT_TRUE(c.attention.deterministic);
      EXPECT_LE(c.train.steps * c.train.tokens_per_step, 8400000);
      const int64_t L = c.model.layers, C = c.model.d_model;
      const int64_t params = 12 * L * C * C + int64_t(c.data.vocab_size) * C;
      EXPECT_GE(params, 10000000);
      EXPECT_LE(params, 30000000);
      std::string arm;
      for (const auto& [axis, value] : t.axes) {
        if (axis == "seed") seeds.insert(value);
        if (axis != "seed" && axis != "optimizer.lr") arm += axis + "=" + value + ";";
      }
      lrs_of_arm[arm].insert(c.optimizer.lr);
    }
    EXPECT_GE(seeds.size(), 4u);
    const bool lr_is_an_axis = std::any_of(
        r->axes.begin(), r->axes.end(), [](const std::string& a) { return a == "optimizer.lr"; });
    if (path.filename() == "gpu_study_state_bits.yaml") {
      // Paired with the 32-bit arm at the rate the other studies found best: one rate per row.
      EXPECT_TRUE(lr_is_an_axis);
      continue;
    }
    for (const auto& [arm, lrs] : lrs_of_arm) EXPECT_GE(lrs.size(), 2u) << arm;
  }
  EXPECT_GE(studies, 4);
}

// examples/paper/: the papers' own settings, as the specs' comments state them.
TEST(ExamplePaperSpecs, ExpandToThePapersSettings) {
  struct Want {
    const char* name;
    size_t trials;
    int seq_len;
    int64_t params_m;  // millions, as the comment says
  };
  const Want wants[] = {{"sagebwd_tps", 4, 4096, 328},
                        {"beyondmuon_gpt2", 8, 1024, 124},
                        {"muon8bit_1p6b", 6, 2048, 1613}};
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(ABLATE_EXAMPLES_PAPER_DIR)) {
    files += e.path().extension() == ".yaml";
  }
  EXPECT_EQ(files, 3);
  for (const Want& w : wants) {
    SCOPED_TRACE(w.name);
    const std::filesystem::path p =
        std::filesystem::path(ABLATE_EXAMPLES_PAPER_DIR) / (std::string(w.name) + ".yaml");
    auto r = ExpandSweep(Read(p), p.filename().string());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->name, w.name);
    EXPECT_EQ(r->trials.size(), w.trials);
    EXPECT_EQ(r->gpus, 8);
    for (const auto& t : r->trials) {
      EXPECT_EQ(t.config.device, "cuda");
      EXPECT_EQ(t.config.model.seq_len, w.seq_len);
      EXPECT_EQ(t.config.data.val_fraction, 0);  // the shards' own _val_ split
      EXPECT_NE(t.config.data.corpus.find("_train_"), std::string::npos);
      // 12 L C^2 + V C with the GPT-2 vocabulary padded to 50304, as the comment counts it.
      const int64_t L = t.config.model.layers, C = t.config.model.d_model;
      EXPECT_EQ((12 * L * C * C + 50304 * C + 500000) / 1000000, w.params_m);
    }
  }
}

}  // namespace
}  // namespace ablate::server
