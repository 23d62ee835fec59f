// GEMM tuning: a recorded choice of cuBLASLt algorithm for each GEMM problem a model runs, made
// once per machine by timing cuBLASLt's candidates (`ablate-train --tune-gemm FILE`) and replayed
// by every later run there (`ablate-train --gemm-tuning FILE`, `ablate-worker --gemm-tuning FILE`).
// Without a table LtGemm (kernels/layers/cuda/gemm_cuda.h) runs the heuristic's first algorithm. A
// run never chooses by its own timings: that would make the algorithm, and so the summation order
// and the bits, depend on timing noise, and reruns of a deterministic config must be bit-identical.
// With one table the choice is fixed, so they stay so; the table's digest joins the run's numerics
// version (provenance) because another table may give other bits.
//
// The file is JSON:
//   {"format": "ablate-gemm-tuning/1", "device": "<CUDA device name>", "cublaslt": <version>,
//    "entries": [{"problem": "<GemmProblem::Key()>", "algo": "<128 hex digits>",
//                 "candidate": i, "candidates": n, "ms": t, "heuristic_ms": t0}, ...]}
// `algo` is cuBLASLt's cublasLtMatmulAlgo_t (eight 64-bit words), which cuBLASLt documents as
// serializable for reuse with the same library version. A table therefore applies only on a device
// of the same name with the same cuBLASLt version (LtGemm ignores it elsewhere and says so), and
// each recorded algorithm is checked against its problem (cublasLtMatmulAlgoCheck) before use.
// `candidate` is the algorithm's rank in the heuristic's list (0: the heuristic's own choice),
// `ms` / `heuristic_ms` the timings that chose it, for the reader; only the algorithms are hashed.
//
// Plain C++ (no CUDA), in common/ because the worker checks a table it is given before passing it
// on, and CPU builds parse, write and test tables too; LtGemm measures and replays them.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "ablate/status.h"

namespace ablate {

// The tuner's defaults (LtGemm::Tune; ablate-train --tune-gemm): the heuristic's first 8
// algorithms per problem, each timed as the median of 5 rounds of 20 back-to-back calls, and the
// heuristic's own choice kept unless another is at least 2% faster (timing noise between
// near-equal algorithms must not pick).
inline constexpr int kGemmTuneCandidates = 8;
inline constexpr int kGemmTuneReps = 20;
inline constexpr double kGemmTuneMinGain = 0.02;

enum class GemmEpilogue { kNone, kGeluAux, kDGelu };

// One cuBLASLt problem as LtGemm poses it: column-major D (m, n) = alpha op(A) op(B) + beta C,
// bf16 A and B with leading dimensions lda / ldb, D (and C) of ldd in fp32 or bf16. Everything that
// can change which algorithms are valid or fastest is here, the operands' pointer alignments too.
struct GemmProblem {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  bool f32_out = false;
  bool accumulate = false;  // beta != 0: C is read
  // Bytes (a power of two, at most 256) dividing each pointer: A, B, C, D and the epilogue's aux.
  int align_a = 256, align_b = 256, align_c = 256, align_d = 256, align_aux = 256;
  GemmEpilogue epilogue = GemmEpilogue::kNone;

  // The problem as one line, the table's key, e.g.
  // "TN m2304 n16384 k768 lda768 ldb768 ldd2304 bf16 c0 align256,256,256,256,256 none".
  std::string Key() const;
  auto operator<=>(const GemmProblem&) const = default;
};

struct GemmChoice {
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t::data
  int candidate = 0;
  int candidates = 0;
  double ms = 0, heuristic_ms = 0;
};

struct GemmTuning {
  std::string device;            // cudaDeviceProp::name of the device it was measured on
  int64_t cublaslt_version = 0;  // cublasLtGetVersion() there
  std::map<std::string, GemmChoice> entries;  // by GemmProblem::Key()

  // 16 hex digits over the device, the version and every (problem, algorithm): equal tables,
  // equal digests, whatever their timings.
  std::string Digest() const;
};

// The file's text (sorted by problem, one entry per line) and its parse. Parse errors say what is
// wrong and where (`where` names the source, e.g. the file's path, and the entry's index).
std::string FormatGemmTuning(const GemmTuning& tuning);
StatusOr<GemmTuning> ParseGemmTuning(std::string_view text, const std::string& where);
StatusOr<GemmTuning> LoadGemmTuning(const std::string& path);
// Written atomically (a reader never sees half a table).
Status SaveGemmTuning(const GemmTuning& tuning, const std::string& path);

// `fresh` added to `existing` (its entries replace those of the same problems), so one table can
// hold the problems of several configs; FailedPrecondition when the two were measured on different
// devices or cuBLASLt versions (`where` names the existing table).
StatusOr<GemmTuning> MergeGemmTuning(const GemmTuning& existing, const GemmTuning& fresh,
                                     const std::string& where);

}  // namespace ablate
