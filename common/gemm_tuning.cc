// GEMM tuning tables: see gemm_tuning.h.
#include "ablate/gemm_tuning.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "ablate/files.h"
#include "ablate/hash.h"

namespace ablate {
namespace {

constexpr const char* kFormat = "ablate-gemm-tuning/1";

const char* EpilogueName(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::kNone:
      return "none";
    case GemmEpilogue::kGeluAux:
      return "gelu_aux";
    case GemmEpilogue::kDGelu:
      return "dgelu";
  }
  return "?";
}

std::string AlgoHex(const std::array<uint64_t, 8>& a) {
  std::string s;
  char buf[17];
  for (uint64_t w : a) {
    std::snprintf(buf, sizeof buf, "%016" PRIx64, w);
    s += buf;
  }
  return s;
}

bool ParseAlgoHex(const std::string& s, std::array<uint64_t, 8>* out) {
  if (s.size() != 128) return false;
  for (int w = 0; w < 8; ++w) {
    uint64_t v = 0;
    for (int i = 0; i < 16; ++i) {
      const char c = s[size_t(16) * size_t(w) + size_t(i)];
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else {
        return false;
      }
      v = (v << 4) | uint64_t(d);
    }
    (*out)[size_t(w)] = v;
  }
  return true;
}

}  // namespace

std::string GemmProblem::Key() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%c%c m%" PRId64 " n%" PRId64 " k%" PRId64 " lda%" PRId64 " ldb%" PRId64
                " ldd%" PRId64 " %s c%d align%d,%d,%d,%d,%d %s",
                ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, lda, ldb, ldd, f32_out ? "f32" : "bf16",
                accumulate ? 1 : 0, align_a, align_b, align_c, align_d, align_aux,
                EpilogueName(epilogue));
  return buf;
}

std::string GemmTuning::Digest() const {
  uint64_t h = Fnv1a64(device);
  h = Fnv1a64(std::to_string(cublaslt_version), Fnv1a64("\n", h));
  for (const auto& [problem, choice] : entries) {
    h = Fnv1a64("\n" + problem + "=" + AlgoHex(choice.algo), h);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

std::string FormatGemmTuning(const GemmTuning& t) {
  std::string s = "{\"format\": \"" + std::string(kFormat) +
                  "\",\n \"device\": " + nlohmann::json(t.device).dump() +
                  ",\n \"cublaslt\": " + std::to_string(t.cublaslt_version) + ",\n \"entries\": [";
  bool first = true;
  for (const auto& [problem, c] : t.entries) {
    nlohmann::ordered_json e = {{"problem", problem},
                                {"algo", AlgoHex(c.algo)},
                                {"candidate", c.candidate},
                                {"candidates", c.candidates},
                                {"ms", c.ms},
                                {"heuristic_ms", c.heuristic_ms}};
    s += (first ? "\n  " : ",\n  ") + e.dump();
    first = false;
  }
  s += "\n ]}\n";
  return s;
}

StatusOr<GemmTuning> ParseGemmTuning(std::string_view text, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return InvalidArgument(where + ": not a GEMM tuning table (ablate-train --tune-gemm): " + what);
  };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not valid JSON");
  if (!j.is_object()) return bad("the top level is not an object");
  if (!j.contains("format") || j["format"] != kFormat) {
    return bad("\"format\" is not \"" + std::string(kFormat) + "\"");
  }
  GemmTuning t;
  if (!j.contains("device") || !j["device"].is_string() || j["device"].get<std::string>().empty()) {
    return bad("\"device\" must be the CUDA device's name");
  }
  t.device = j["device"].get<std::string>();
  if (!j.contains("cublaslt") || !j["cublaslt"].is_number_integer() ||
      j["cublaslt"].get<int64_t>() <= 0) {
    return bad("\"cublaslt\" must be cuBLASLt's version number");
  }
  t.cublaslt_version = j["cublaslt"].get<int64_t>();
  if (!j.contains("entries") || !j["entries"].is_array()) return bad("\"entries\" must be a list");
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    const nlohmann::json& e = j["entries"][i];
    const std::string at = "entry " + std::to_string(i);
    if (!e.is_object()) return bad(at + " is not an object");
    if (!e.contains("problem") || !e["problem"].is_string() ||
        e["problem"].get<std::string>().empty()) {
      return bad(at + ": \"problem\" must be the problem's key");
    }
    const std::string problem = e["problem"].get<std::string>();
    GemmChoice c;
    if (!e.contains("algo") || !e["algo"].is_string() ||
        !ParseAlgoHex(e["algo"].get<std::string>(), &c.algo)) {
      return bad(at + " (" + problem + "): \"algo\" must be 128 lower-case hex digits");
    }
    for (const char* key : {"candidate", "candidates"}) {
      if (!e.contains(key) || !e[key].is_number_integer() || e[key].get<int64_t>() < 0 ||
          e[key].get<int64_t>() > 1'000'000) {
        return bad(at + " (" + problem + "): \"" + key + "\" must be a count");
      }
    }
    c.candidate = e["candidate"].get<int>();
    c.candidates = e["candidates"].get<int>();
    for (const char* key : {"ms", "heuristic_ms"}) {
      if (!e.contains(key) || !e[key].is_number() || !std::isfinite(e[key].get<double>()) ||
          e[key].get<double>() < 0) {
        return bad(at + " (" + problem + "): \"" + key + "\" must be a time in ms");
      }
    }
    c.ms = e["ms"].get<double>();
    c.heuristic_ms = e["heuristic_ms"].get<double>();
    if (!t.entries.emplace(problem, c).second) {
      return bad(at + ": problem \"" + problem + "\" is listed twice");
    }
  }
  return t;
}

StatusOr<GemmTuning> LoadGemmTuning(const std::string& path) {
  ABLATE_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseGemmTuning(text, path);
}

StatusOr<GemmTuning> MergeGemmTuning(const GemmTuning& existing, const GemmTuning& fresh,
                                     const std::string& where) {
  if (existing.device != fresh.device || existing.cublaslt_version != fresh.cublaslt_version) {
    return FailedPrecondition(where + " holds a GEMM tuning of " + existing.device +
                              " with cuBLASLt " + std::to_string(existing.cublaslt_version) +
                              "; this one is of " + fresh.device + " with cuBLASLt " +
                              std::to_string(fresh.cublaslt_version) +
                              " (one table per device and cuBLASLt: write another file)");
  }
  GemmTuning merged = existing;
  for (const auto& [problem, choice] : fresh.entries) merged.entries[problem] = choice;
  return merged;
}

Status SaveGemmTuning(const GemmTuning& tuning, const std::string& path) {
  return WriteFileAtomic(path, FormatGemmTuning(tuning));
}

}  // namespace ablate
