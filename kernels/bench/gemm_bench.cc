// ablate-gemm-bench: the GPT training step's GEMMs, timed as the trainer calls them (LtGemm, the
// cuBLASLt heuristic's first algorithm) and against the fastest of the heuristic's first K
// candidates for the same problem, so the step profile's GEMM gap against PyTorch
// (docs/bench/gpu_train.md) can be split into "a better algorithm exists" and "the problem itself
// (output type, epilogue, layout) costs more". gemm_ref.py times the same shapes in PyTorch.
//
//   ablate-gemm-bench [--tokens N] [--d-model C] [--vocab V] [--layers L] [--candidates K]
//                     [--reps R] [--json FILE]
//
// Defaults: GPT-2 small's step (N 16384, C 768, V 50304, L 12), K 8, R 20. Each row is one call of
// worker/trainer/cuda/gpt_cuda.cc (a per-layer call counts L times in the step's total): its
// cuBLASLt problem (column-major m x n x k, transposes, output type, beta, epilogue), LtGemm's
// median ms, the best candidate's and the candidate count. bf16 operands from N(0, 1)-like
// values; CUDA events around R back-to-back runs after 3 warm-up runs, median of 5 such rounds.
#include <cublasLt.h>
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
#define LK(x)                                                                           \
  do {                                                                                  \
    cublasStatus_t s_ = (x);                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                  \
      std::fprintf(stderr, "%s:%d: cublasLt status %d\n", __FILE__, __LINE__, int(s_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
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

// One cuBLASLt problem as LtGemm::Run poses it: column-major D (m, n) = alpha op(A) op(B) +
// beta C, A / B bf16, C / D fp32 or bf16, with an optional GELU_AUX / DGELU epilogue whose aux
// matrix is bf16 (m, n).
struct Problem {
  bool ta, tb;
  int64_t m, n, k;
  bool f32_out;
  float beta;
  int epilogue;
};

// The heuristic's first `want` algorithms for p: the fastest one's ms, the first one's (the
// algorithm LtGemm runs for the same problem, if the two pose it alike), how many it offered and
// how many of those ran (a candidate whose matmul is refused is skipped).
struct Candidates {
  double best_ms = 0, first_ms = 0;
  int found = 0, ran = 0;
};
Candidates BestCandidate(cublasLtHandle_t h, const Problem& p, const void* A, const void* B,
                         void* D, void* aux, void* ws, size_t ws_bytes, int want, int reps,
                         cudaStream_t s) {
  cublasLtMatmulDesc_t desc;
  LK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t oa = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                          ob = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
  LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const cublasLtEpilogue_t ep = cublasLtEpilogue_t(p.epilogue);
    const int64_t ld = p.m;
    const int32_t at = CUDA_R_16BF;
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &at,
                                      sizeof at));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                      sizeof aux));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.ta ? p.k : p.m, p.ta ? p.m : p.k,
                                p.ta ? p.k : p.m));
  LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.tb ? p.n : p.k, p.tb ? p.k : p.n,
                                p.tb ? p.n : p.k));
  LK(cublasLtMatrixLayoutCreate(&lc, p.f32_out ? CUDA_R_32F : CUDA_R_16BF, p.m, p.n, p.m));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t wsb = ws_bytes;
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                          sizeof wsb));
  // The operands' alignments, as LtGemm states them (every buffer here is cudaMalloc's, 256).
  uint32_t al = 256;
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    LK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> res(want);
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, want, res.data(), &found));
  const float alpha = 1.f;
  Candidates c;
  c.found = found;
  c.best_ms = 1e30;
  for (int i = 0; i < found; ++i) {
    const auto& algo = res[i].algo;
    auto run = [&] {
      return cublasLtMatmul(h, desc, &alpha, A, la, B, lb, &p.beta, D, lc, D, lc, &algo, ws,
                            ws_bytes, s);
    };
    const cublasStatus_t st = run();
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "candidate %d of %lld x %lld x %lld refused (cublasLt status %d)\n", i,
                   (long long)p.m, (long long)p.n, (long long)p.k, int(st));
      continue;
    }
    const double ms = Time([&] { LK(run()); }, reps, s);
    if (i == 0) c.first_ms = ms;
    c.best_ms = std::min(c.best_ms, ms);
    ++c.ran;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  return c;
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
  cublasLtHandle_t h;
  LK(cublasLtCreate(&h));
  const size_t ws_bytes = size_t(32) << 20;
  void* ws = nullptr;
  CK(cudaMalloc(&ws, ws_bytes));

  const int64_t W = std::max<int64_t>(V, 4 * C);  // widest activation
  auto* x = static_cast<__nv_bfloat16*>(Buffer(size_t(N) * W * 2));
  auto* y = static_cast<__nv_bfloat16*>(Buffer(size_t(N) * W * 2));
  auto* aux = static_cast<__nv_bfloat16*>(Buffer(size_t(N) * W * 2));
  auto* w = static_cast<__nv_bfloat16*>(Buffer(size_t(W) * 4 * C * 2));
  void* out = Zeros(size_t(N) * W * 4);
  auto* dw = static_cast<float*>(Zeros(size_t(W) * 4 * C * 4));

  // name, count per step, the cuBLASLt problem (as LtGemm poses it), the trainer's call.
  struct Row {
    const char* name;
    int count;
    Problem p;
    std::function<void()> call;
  };
  const int NE = CUBLASLT_EPILOGUE_DEFAULT, GA = CUBLASLT_EPILOGUE_GELU_AUX,
            DG = CUBLASLT_EPILOGUE_DGELU;  // (the default epilogue is 1, not 0)
  auto check = [](const ablate::Status& st) {
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      std::exit(1);
    }
  };
  // Forward (N, IC) x (OC, IC)^T: column-major m = OC, n = N, k = IC, A transposed.
  auto fwd = [&](int IC, int OC, OutType t, float beta) {
    return
        [&, IC, OC, t, beta] { check(gemm.Forward(out, t, x, w, N, IC, OC, 1.f, beta, out, s)); };
  };
  auto bwd_data = [&](int IC, int OC, OutType t) {
    return [&, IC, OC, t] { check(gemm.BackwardData(out, t, y, w, N, IC, OC, 1.f, 0.f, s)); };
  };
  auto bwd_w = [&](int IC, int OC) {
    return [&, IC, OC] { check(gemm.BackwardWeight(dw, y, x, N, IC, OC, 1.f, 1.f, s)); };
  };
  std::vector<Row> rows = {
      {"fwd qkv", L, {true, false, 3 * C, N, C, false, 0.f, NE}, fwd(C, 3 * C, OutType::kBF16, 0.f)},
      {"fwd attn out (+res, f32)",
       L,
       {true, false, C, N, C, true, 1.f, NE},
       fwd(C, C, OutType::kF32, 1.f)},
      {"fwd mlp up + gelu",
       L,
       {true, false, 4 * C, N, C, false, 0.f, GA},
       [&] {
         check(gemm.ForwardGelu(static_cast<__nv_bfloat16*>(out), aux, x, w, N, C, 4 * C, s));
       }},
      {"fwd mlp down (+res, f32)",
       L,
       {true, false, C, N, 4 * C, true, 1.f, NE},
       fwd(4 * C, C, OutType::kF32, 1.f)},
      {"fwd head", 1, {true, false, V, N, C, false, 0.f, NE}, fwd(C, V, OutType::kBF16, 0.f)},
      {"bwd head data (f32)",
       1,
       {false, false, C, N, V, true, 0.f, NE},
       bwd_data(C, V, OutType::kF32)},
      {"bwd head weight", 1, {false, true, C, V, N, true, 1.f, NE}, bwd_w(C, V)},
      {"bwd mlp down data + dgelu",
       L,
       {false, false, 4 * C, N, C, false, 0.f, DG},
       [&] {
         check(gemm.BackwardDataDGelu(static_cast<__nv_bfloat16*>(out), y, w, aux, N, 4 * C, C, s));
       }},
      {"bwd mlp down weight", L, {false, true, 4 * C, C, N, true, 1.f, NE}, bwd_w(4 * C, C)},
      {"bwd mlp up data (f32)",
       L,
       {false, false, C, N, 4 * C, true, 0.f, NE},
       bwd_data(C, 4 * C, OutType::kF32)},
      {"bwd mlp up weight", L, {false, true, C, 4 * C, N, true, 1.f, NE}, bwd_w(C, 4 * C)},
      {"bwd attn out data",
       L,
       {false, false, C, N, C, false, 0.f, NE},
       bwd_data(C, C, OutType::kBF16)},
      {"bwd attn out weight", L, {false, true, C, C, N, true, 1.f, NE}, bwd_w(C, C)},
      {"bwd qkv data (f32)",
       L,
       {false, false, C, N, 3 * C, true, 0.f, NE},
       bwd_data(C, 3 * C, OutType::kF32)},
      {"bwd qkv weight", L, {false, true, C, 3 * C, N, true, 1.f, NE}, bwd_w(C, 3 * C)},
  };

  std::printf(
      "GEMMs of one step: N %lld tokens, d_model %d, vocab %d, %d layers; best of the "
      "heuristic's first %d candidates\n\n",
      (long long)N, C, V, L, K);
  std::printf(
      "| call | x/step | m x n x k | LtGemm ms | TFLOP/s | first ms | best ms | candidates (ran) | "
      "best / LtGemm |\n|---|---:|---|---:|---:|---:|---:|---:|---:|\n");
  std::string js = "[";
  double tot_lt = 0, tot_best = 0, tot_flop = 0;
  for (const auto& r : rows) {
    const double lt = Time(r.call, reps, s);
    // The operands as LtGemm passes them: forward A = w, B = x; backward data A = w, B = dy;
    // backward weight (the only tb) A = x, B = dy, D = the fp32 gradient.
    const void* A = r.p.tb ? static_cast<const void*>(x) : static_cast<const void*>(w);
    const void* B = r.p.ta ? static_cast<const void*>(x) : static_cast<const void*>(y);
    void* D = r.p.tb ? static_cast<void*>(dw) : out;
    const Candidates cand = BestCandidate(h, r.p, A, B, D, aux, ws, ws_bytes, K, reps, s);
    // LtGemm again after the candidates (an order effect would show as a difference).
    std::fprintf(stderr, "%s: LtGemm %.4f ms, again %.4f ms\n", r.name, lt, Time(r.call, reps, s));
    const double best = cand.ran > 0 ? cand.best_ms : lt;
    const double flop = 2.0 * double(r.p.m) * double(r.p.n) * double(r.p.k);
    tot_lt += lt * r.count;
    tot_best += std::min(best, lt) * r.count;
    tot_flop += flop * r.count;
    std::printf("| %s | %d | %lld x %lld x %lld | %.3f | %.0f | %.3f | %.3f | %d (%d) | %.3f |\n",
                r.name, r.count, (long long)r.p.m, (long long)r.p.n, (long long)r.p.k, lt,
                flop / lt / 1e9, cand.first_ms, best, cand.found, cand.ran, best / lt);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s{\"call\": \"%s\", \"count\": %d, \"m\": %lld, \"n\": %lld, \"k\": %lld, "
                  "\"ta\": %d, \"tb\": %d, \"f32_out\": %d, \"beta\": %g, \"epilogue\": %d, "
                  "\"ltgemm_ms\": %.5f, \"first_ms\": %.5f, \"best_ms\": %.5f, "
                  "\"candidates\": %d, \"ran\": %d}",
                  js.size() > 1 ? ", " : "", r.name, r.count, (long long)r.p.m, (long long)r.p.n,
                  (long long)r.p.k, r.p.ta, r.p.tb, r.p.f32_out, r.p.beta, r.p.epilogue, lt,
                  cand.first_ms, best, cand.found, cand.ran);
    js += buf;
  }
  js += "]\n";
  std::printf("| **step total** | | | %.2f | %.0f | %.2f | | %.3f |\n", tot_lt,
              tot_flop / tot_lt / 1e9, tot_best, tot_best / tot_lt);
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
