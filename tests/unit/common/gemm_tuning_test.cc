// GEMM tuning tables (ablate/gemm_tuning.h): the problem key, the file's round trip, the digest's
// scope (the choices, not the timings) and the parse errors, which say what and where.
#include "ablate/gemm_tuning.h"

#include <gtest/gtest.h>

#include <string>

#include "temp_dir.h"

namespace ablate {
namespace {

GemmProblem Qkv() {
  return {.ta = true, .m = 2304, .n = 16384, .k = 768, .lda = 768, .ldb = 768, .ldd = 2304};
}

GemmTuning Table() {
  GemmTuning t;
  t.device = "NVIDIA H100 80GB HBM3";
  t.cublaslt_version = 130100;
  GemmChoice c;
  for (int i = 0; i < 8; ++i) c.algo[size_t(i)] = 0x0123456789abcdefull * uint64_t(i + 1);
  c.candidate = 3;
  c.candidates = 8;
  c.ms = 0.0791;
  c.heuristic_ms = 0.0862;
  t.entries[Qkv().Key()] = c;
  GemmProblem d = Qkv();
  d.f32_out = true;
  d.accumulate = true;
  d.align_c = d.align_d = 16;
  d.epilogue = GemmEpilogue::kDGelu;
  c.candidate = 0;
  c.ms = c.heuristic_ms = 0.2;
  c.algo[0] = 7;
  t.entries[d.Key()] = c;
  return t;
}

TEST(GemmTuningTest, TheKeyNamesEveryPartOfTheProblem) {
  EXPECT_EQ(Qkv().Key(),
            "TN m2304 n16384 k768 lda768 ldb768 ldd2304 bf16 c0 align256,256,256,256,256 none");
  GemmProblem p = Qkv();
  p.tb = true;
  p.f32_out = true;
  p.accumulate = true;
  p.align_a = 8;
  p.align_aux = 2;
  p.epilogue = GemmEpilogue::kGeluAux;
  EXPECT_EQ(p.Key(),
            "TT m2304 n16384 k768 lda768 ldb768 ldd2304 f32 c1 align8,256,256,256,2 gelu_aux");
  // Problems that differ anywhere have different keys (the table cannot confuse them).
  GemmProblem q = Qkv();
  q.align_d = 128;
  EXPECT_NE(q.Key(), Qkv().Key());
  EXPECT_NE(q, Qkv());
}

TEST(GemmTuningTest, TheFileRoundTripsExactly) {
  const GemmTuning t = Table();
  const std::string text = FormatGemmTuning(t);
  auto back = ParseGemmTuning(text, "t.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->device, t.device);
  EXPECT_EQ(back->cublaslt_version, t.cublaslt_version);
  ASSERT_EQ(back->entries.size(), 2u);
  for (const auto& [problem, c] : t.entries) {
    ASSERT_TRUE(back->entries.count(problem)) << problem;
    const GemmChoice& b = back->entries.at(problem);
    EXPECT_EQ(b.algo, c.algo) << problem;
    EXPECT_EQ(b.candidate, c.candidate);
    EXPECT_EQ(b.candidates, c.candidates);
    EXPECT_DOUBLE_EQ(b.ms, c.ms);
    EXPECT_DOUBLE_EQ(b.heuristic_ms, c.heuristic_ms);
  }
  EXPECT_EQ(FormatGemmTuning(*back), text);
  EXPECT_EQ(back->Digest(), t.Digest());
}

TEST(GemmTuningTest, SaveAndLoadAFile) {
  ::ablate::testing::TempDir tmp("ablate_gemm_tuning");
  const std::string dir = tmp.path();
  const std::string path = dir + "/h100.json";
  ASSERT_TRUE(SaveGemmTuning(Table(), path).ok());
  auto back = LoadGemmTuning(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Digest(), Table().Digest());
  auto missing = LoadGemmTuning(dir + "/none.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(dir + "/none.json"), std::string::npos);
}

TEST(GemmTuningTest, TheDigestCoversTheChoicesNotTheTimings) {
  const GemmTuning t = Table();
  EXPECT_EQ(t.Digest().size(), 16u);
  GemmTuning timings = t;
  for (auto& [problem, c] : timings.entries) {
    c.ms *= 1.5;
    c.heuristic_ms *= 0.5;
    c.candidates = 4;
  }
  EXPECT_EQ(timings.Digest(), t.Digest());
  GemmTuning algo = t;
  algo.entries.begin()->second.algo[7] ^= 1;
  EXPECT_NE(algo.Digest(), t.Digest());
  GemmTuning device = t;
  device.device = "NVIDIA H200";
  EXPECT_NE(device.Digest(), t.Digest());
  GemmTuning version = t;
  version.cublaslt_version += 1;
  EXPECT_NE(version.Digest(), t.Digest());
  GemmTuning fewer = t;
  fewer.entries.erase(fewer.entries.begin());
  EXPECT_NE(fewer.Digest(), t.Digest());
}

// One table for several configs: a later tuning adds its problems and replaces the ones it
// measured again; a table of another device or cuBLASLt is not mixed in.
TEST(GemmTuningTest, MergingAddsAndReplacesProblemsOfOneDevice) {
  const GemmTuning t = Table();
  GemmTuning fresh;
  fresh.device = t.device;
  fresh.cublaslt_version = t.cublaslt_version;
  GemmChoice c;
  c.algo[0] = 99;
  c.candidates = 8;
  c.candidate = 5;
  fresh.entries[Qkv().Key()] = c;  // measured again
  GemmProblem other = Qkv();
  other.m = 3072;
  fresh.entries[other.Key()] = c;  // new
  auto merged = MergeGemmTuning(t, fresh, "h100.json");
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ(merged->entries.size(), 3u);
  EXPECT_EQ(merged->entries.at(Qkv().Key()).algo[0], 99u);
  EXPECT_EQ(merged->entries.at(other.Key()).candidate, 5);
  for (const auto& [problem, choice] : t.entries) {
    if (problem != Qkv().Key()) {
      EXPECT_EQ(merged->entries.at(problem).algo, choice.algo);
    }
  }
  fresh.device = "NVIDIA H200";
  auto refused = MergeGemmTuning(t, fresh, "h100.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      refused.status().message().find("h100.json holds a GEMM tuning of NVIDIA H100 80GB HBM3"),
      std::string::npos)
      << refused.status().message();
  fresh.device = t.device;
  fresh.cublaslt_version = t.cublaslt_version + 100;
  EXPECT_FALSE(MergeGemmTuning(t, fresh, "h100.json").ok());
}

// Each broken table is refused with the source's name and what is wrong (and which entry).
TEST(GemmTuningTest, BrokenTablesSayWhatAndWhere) {
  const std::string good = FormatGemmTuning(Table());
  auto refused = [](const std::string& text, const std::string& what) {
    auto r = ParseGemmTuning(text, "cluster/h100.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("cluster/h100.json"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  };
  refused("{", "not valid JSON");
  refused("[]", "top level");
  refused(R"({"format": "ablate-gemm-tuning/2", "device": "x", "cublaslt": 1, "entries": []})",
          "\"format\"");
  refused(R"({"format": "ablate-gemm-tuning/1", "cublaslt": 1, "entries": []})", "\"device\"");
  refused(R"({"format": "ablate-gemm-tuning/1", "device": "x", "cublaslt": 0, "entries": []})",
          "\"cublaslt\"");
  refused(R"({"format": "ablate-gemm-tuning/1", "device": "x", "cublaslt": 1})", "\"entries\"");
  auto entry = [](const std::string& e) {
    return R"({"format": "ablate-gemm-tuning/1", "device": "x", "cublaslt": 1, "entries": [)" + e +
           "]}";
  };
  const std::string algo(128, 'a');
  const std::string ok_rest = R"(, "candidate": 0, "candidates": 1, "ms": 1, "heuristic_ms": 1)";
  refused(entry(R"({"problem": "", "algo": ")" + algo + "\"" + ok_rest + "}"), "entry 0");
  refused(entry(R"({"problem": "p", "algo": ")" + std::string(127, 'a') + "\"" + ok_rest + "}"),
          "entry 0 (p): \"algo\"");
  refused(entry(R"({"problem": "p", "algo": ")" + std::string(128, 'A') + "\"" + ok_rest + "}"),
          "\"algo\"");
  refused(entry(R"({"problem": "p", "algo": ")" + algo +
                R"(", "candidate": -1, "candidates": 1, "ms": 1, "heuristic_ms": 1})"),
          "\"candidate\"");
  refused(entry(R"({"problem": "p", "algo": ")" + algo +
                R"(", "candidate": 0, "candidates": 1, "ms": -2, "heuristic_ms": 1})"),
          "\"ms\"");
  const std::string one = R"({"problem": "p", "algo": ")" + algo + "\"" + ok_rest + "}";
  refused(entry(one + ", " + one), "entry 1: problem \"p\" is listed twice");
  EXPECT_TRUE(ParseGemmTuning(entry(one), "t").ok());
  EXPECT_TRUE(ParseGemmTuning(good, "t").ok());
}

}  // namespace
}  // namespace ablate
