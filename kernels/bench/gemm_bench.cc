// ablate-gemm-bench: the GPT training step's GEMMs, timed as the trainer calls them (LtGemm, the
// cuBLASLt heuristic's first algorithm), and what GEMM tuning makes of each (LtGemm::Tune, the
// tuner of ablate-train --tune-gemm: the heuristic's first K candidates timed on scratch operands,
// the fastest kept unless within kGemmTuneMinGain of the first; then the same call again through
// an LtGemm running the chosen algorithm), so the step profile's GEMM gap against PyTorch
// (docs/bench/gpu_train.md) can be split into "a better algorithm exists" and "the problem itself
// (output type, epilogue, layout) costs more". gemm_ref.py times the same shapes in PyTorch.
//
//   ablate-gemm-bench [--tokens N] [--d-model C] [--vocab V] [--layers L] [--candidates K]
//                     [--reps R] [--json FILE]
//
// Defaults: GPT-2 small's step (N 16384, C 768, V 50304, L 12), K 8, R 20. Each row is one call of
// worker/trainer/cuda/gpt_cuda.cc (a per-layer call counts L times in the step's total): its
// cuBLASLt problem, LtGemm's median ms, the tuner's timings of the heuristic's first and of its
// choice, and the tuned LtGemm's median ms. bf16 operands in [-1, 1) from a fixed LCG; CUDA events
// around R back-to-back runs after 3 warm-up runs, median of 5 such rounds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "layers/cuda/gemm_cuda.h"

namespace {

using ablate::kernels::cuda::LtGemm;
using ablate::kernels::cuda::OutType;

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// `bytes` of bf16 values in [-1, 1) from a fixed LCG (inputs), or zeros (outputs).
void* Zeros(size_t bytes) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, 0, bytes));
  return p;
}

void* Buffer(size_t bytes) {
  void* p = Zeros(bytes);
  std::vector<__nv_bfloat16> h(size_t(1) << 20);  // one 2 MB pattern, copied across the buffer
  uint32_t x = 12345;
  for (auto& v : h) {
    x = x * 1664525u + 1013904223u;
    v = __float2bfloat16(float(int(x >> 9) - (1 << 22)) / float(1 << 22));
  }
  for (size_t off = 0; off < bytes; off += h.size() * 2) {
    CK(cudaMemcpy(static_cast<char*>(p) + off, h.data(), std::min(h.size() * 2, bytes - off),
                  cudaMemcpyHostToDevice));
  }
  return p;
}

// Median ms per call of f over 5 rounds of R back-to-back calls.
double Time(const std::function<void()>& f, int reps, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) f();
  CK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int round = 0; round < 5; ++round) {
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(double(t) / reps);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Arg(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::printf(
          "usage: ablate-gemm-bench [--tokens N] [--d-model C] [--vocab V] [--layers L] "
          "[--candidates K] [--reps R] [--json FILE]\n");
      return 0;
    }
  }
  const int64_t N = Arg(argc, argv, "--tokens", 16384);
  const int C = Arg(argc, argv, "--d-model", 768);
  const int V = Arg(argc, argv, "--vocab", 50304);
  const int L = Arg(argc, argv, "--layers", 12);
  const int K = Arg(argc, argv, "--candidates", 8);
  const int reps = Arg(argc, argv, "--reps", 20);
  const char* json = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--json") == 0) json = argv[i + 1];

  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  auto gemm_or = LtGemm::Create();
  if (!gemm_or.ok()) {
    std::fprintf(stderr, "%s\n", gemm_or.status().message().c_str());
    return 1;
  }
  LtGemm& gemm = **gemm_or;

  const int64_t W = std::max<int64_t>(V, 4 * C);  // widest activation
  auto* x = static_cast<__nv_bfloat16*>(Buffer(size_t(N) * W * 2));
  auto* y = static_cast<__nv_bfloat16*>(Buffer(size_t(N) * W * 2));
  auto* aux = static_cast<__nv_bfloat16*>(Buffer(size_t(N) * W * 2));
  auto* w = static_cast<__nv_bfloat16*>(Buffer(size_t(W) * 4 * C * 2));
  void* out = Zeros(size_t(N) * W * 4);
  auto* dw = static_cast<float*>(Zeros(size_t(W) * 4 * C * 4));

  // name, count per step, m x n x k of the cuBLASLt problem (as LtGemm poses it), the trainer's
  // call on a given LtGemm.
  using Call = std::function<void(LtGemm&)>;
  struct Row {
    const char* name;
    int count;
    int64_t m, n, k;
    Call call;
  };
  auto check = [](const ablate::Status& st) {
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
  };
  // Forward (N, IC) x (OC, IC)^T: column-major m = OC, n = N, k = IC, A transposed.
  auto fwd = [&](int IC, int OC, OutType t, float beta) -> Call {
    return [&, IC, OC, t, beta](LtGemm& g) {
      check(g.Forward(out, t, x, w, N, IC, OC, 1.f, beta, out, s));
    };
  };
  auto bwd_data = [&](int IC, int OC, OutType t) -> Call {
    return
        [&, IC, OC, t](LtGemm& g) { check(g.BackwardData(out, t, y, w, N, IC, OC, 1.f, 0.f, s)); };
  };
  auto bwd_w = [&](int IC, int OC) -> Call {
    return [&, IC, OC](LtGemm& g) { check(g.BackwardWeight(dw, y, x, N, IC, OC, 1.f, 1.f, s)); };
  };
  const Call gelu = [&](LtGemm& g) {
    check(g.ForwardGelu(static_cast<__nv_bfloat16*>(out), aux, x, w, N, C, 4 * C, s));
  };
  const Call dgelu = [&](LtGemm& g) {
    check(g.BackwardDataDGelu(static_cast<__nv_bfloat16*>(out), y, w, aux, N, 4 * C, C, s));
  };
  const std::vector<Row> rows = {
      {"fwd qkv", L, 3 * C, N, C, fwd(C, 3 * C, OutType::kBF16, 0.f)},
      {"fwd attn out (+res, f32)", L, C, N, C, fwd(C, C, OutType::kF32, 1.f)},
      {"fwd mlp up + gelu", L, 4 * C, N, C, gelu},
      {"fwd mlp down (+res, f32)", L, C, N, 4 * C, fwd(4 * C, C, OutType::kF32, 1.f)},
      {"fwd head", 1, V, N, C, fwd(C, V, OutType::kBF16, 0.f)},
      {"bwd head data (f32)", 1, C, N, V, bwd_data(C, V, OutType::kF32)},
      {"bwd head weight", 1, C, V, N, bwd_w(C, V)},
      {"bwd mlp down data + dgelu", L, 4 * C, N, C, dgelu},
      {"bwd mlp down weight", L, 4 * C, C, N, bwd_w(4 * C, C)},
      {"bwd mlp up data (f32)", L, C, N, 4 * C, bwd_data(C, 4 * C, OutType::kF32)},
      {"bwd mlp up weight", L, C, 4 * C, N, bwd_w(C, 4 * C)},
      {"bwd attn out data", L, C, N, C, bwd_data(C, C, OutType::kBF16)},
      {"bwd attn out weight", L, C, C, N, bwd_w(C, C)},
      {"bwd qkv data (f32)", L, C, N, 3 * C, bwd_data(C, 3 * C, OutType::kF32)},
      {"bwd qkv weight", L, C, 3 * C, N, bwd_w(C, 3 * C)},
  };

  std::printf(
      "GEMMs of one step: N %lld tokens, d_model %d, vocab %d, %d layers; tuned over the "
      "heuristic's first %d candidates\n\n",
      (long long)N, C, V, L, K);
  std::printf(
      "| call | x/step | m x n x k | LtGemm ms | TFLOP/s | first ms | chosen ms | chosen (of) | "
      "tuned LtGemm ms | tuned / LtGemm |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  std::string js = "[";
  double tot_lt = 0, tot_tuned = 0, tot_flop = 0;
  for (const auto& r : rows) {
    const double lt = Time([&] { r.call(gemm); }, reps, s);
    // A fresh LtGemm that has run only this call: its one problem, tuned as --tune-gemm does.
    auto tuner_or = LtGemm::Create();
    check(tuner_or.status());
    LtGemm& tuner = **tuner_or;
    r.call(tuner);
    auto table = tuner.Tune(K, reps, ablate::kGemmTuneMinGain, s);
    check(table.status());
    if (table->entries.size() != 1) {
      std::fprintf(stderr, "%s: the tuner returned %zu problems, not 1\n", r.name,
                   table->entries.size());
      return 1;
    }
    const std::string& key = table->entries.begin()->first;  // "TN m... ": the transposes first
    const ablate::GemmChoice& c = table->entries.begin()->second;
    const double tuned = Time([&] { r.call(tuner); }, reps, s);
    // LtGemm again after the tuner (an order effect would show as a difference).
    std::fprintf(stderr, "%s: LtGemm %.4f ms, again %.4f ms\n", r.name, lt,
                 Time([&] { r.call(gemm); }, reps, s));
    const double flop = 2.0 * double(r.m) * double(r.n) * double(r.k);
    tot_lt += lt * r.count;
    tot_tuned += tuned * r.count;
    tot_flop += flop * r.count;
    std::printf(
        "| %s | %d | %lld x %lld x %lld | %.3f | %.0f | %.3f | %.3f | %d (%d) | %.3f | %.3f |\n",
        r.name, r.count, (long long)r.m, (long long)r.n, (long long)r.k, lt, flop / lt / 1e9,
        c.heuristic_ms, c.ms, c.candidate, c.candidates, tuned, tuned / lt);
    char buf[768];
    std::snprintf(
        buf, sizeof buf,
        "%s{\"call\": \"%s\", \"count\": %d, \"m\": %lld, \"n\": %lld, \"k\": %lld, "
        "\"ta\": %d, \"tb\": %d, \"problem\": \"%s\", \"ltgemm_ms\": %.5f, \"first_ms\": %.5f, "
        "\"chosen_ms\": %.5f, \"candidate\": %d, \"candidates\": %d, "
        "\"tuned_ms\": %.5f}",
        js.size() > 1 ? ", " : "", r.name, r.count, (long long)r.m, (long long)r.n, (long long)r.k,
        key[0] == 'T', key[1] == 'T', key.c_str(), lt, c.heuristic_ms, c.ms, c.candidate,
        c.candidates, tuned);
    js += buf;
  }
  js += "]\n";
  std::printf("| **step total** | | | %.2f | %.0f | | | | %.2f | %.3f |\n", tot_lt,
              tot_flop / tot_lt / 1e9, tot_tuned, tot_tuned / tot_lt);
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json);
      return 1;
    }
    std::fputs(js.c_str(), f);
    std::fclose(f);
  }
  return 0;
}
