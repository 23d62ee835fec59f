// Shared by the tests that run the training loop in-process (the CPU golden tests, the CUDA backend
// and data-parallel tests): a deterministic toy corpus and RunTrial with every emitted line kept.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ablate/trial_config.h"
#include "trainer/loop/train_loop.h"

namespace ablate::trainer::testing {

// Sentences from a toy grammar, at least `min_bytes` long; integer-seeded, identical on every
// machine (std::mt19937 is specified bit for bit).
inline std::string ToyCorpus(size_t min_bytes, uint32_t seed) {
  const char* subj[] = {"the cat", "a dog", "my friend", "the old man", "every child", "she", "he"};
  const char* verb[] = {"sees", "likes", "finds", "wants", "carries", "paints", "follows"};
  const char* obj[] = {"the ball", "a red house", "the river", "some bread", "the moon", "a song"};
  const char* tail[] = {".", " today.", " again.", " in the morning.", " with joy."};
  std::mt19937 rng(seed);
  std::string text;
  while (text.size() < min_bytes) {
    text += subj[rng() % 7];
    text += ' ';
    text += verb[rng() % 7];
    text += ' ';
    text += obj[rng() % 6];
    text += tail[rng() % 5];
    text += (rng() % 5 == 0) ? "\n" : " ";
  }
  return text;
}

// Every JSON line a run emitted, and its result.
struct RunLog {
  std::vector<nlohmann::json> lines;
  StatusOr<RunResult> result = Status(StatusCode::kInternal, "not run");

  std::vector<nlohmann::json> Of(const std::string& type) const {
    std::vector<nlohmann::json> out;
    for (const auto& l : lines)
      if (l["type"] == type) out.push_back(l);
    return out;
  }
  // step -> training loss
  std::map<int, double> Losses() const {
    std::map<int, double> m;
    for (const auto& s : Of("step")) m[s["step"].get<int>()] = s["loss"].get<double>();
    return m;
  }
};

inline RunLog Train(const config::TrialConfig& cfg, const std::string& out,
                    const std::string& resume = "",
                    std::shared_ptr<const GemmTuning> gemm_tuning = nullptr) {
  RunLog r;
  RunOptions o;
  o.out_dir = out;
  o.resume_path = resume;
  o.gemm_tuning = std::move(gemm_tuning);
  o.emit = [&](const nlohmann::json& j) { r.lines.push_back(j); };
  r.result = RunTrial(cfg, o);
  return r;
}

// max |loss_a - loss_b| over the steps after from_step that both runs have (at least one).
inline double MaxLossDiff(const RunLog& a, const RunLog& b, int from_step = 0) {
  auto la = a.Losses(), lb = b.Losses();
  double m = 0;
  int matched = 0;
  for (const auto& [step, loss] : lb) {
    if (step <= from_step || !la.count(step)) continue;
    m = std::max(m, std::fabs(la[step] - loss));
    ++matched;
  }
  EXPECT_GT(matched, 0);
  return m;
}

}  // namespace ablate::trainer::testing
