// ablate-attention-bench: times the CUDA attention kernels (FPA and SageBwd) forward, backward and
// forward+backward on the shapes of kernels/bench/README.md.
//
// Timing: CUDA events around each iteration on one stream, `--warmup` untimed iterations, the
// median of `--iters` (>= 20) timed ones, enqueued back to back (--sync-each: the host waits for
// each before the next; see TimeMs). Backward alone is timed after one forward (its saved
// lse / O stay valid); fwd+bwd times both launchers back to back. SageBwd's numbers include its
// quantization and smoothing kernels (they run inside SageForwardCuda / SageBackwardCuda).
// FLOPs (kernels/ALGORITHMS.md §1): forward 4 B H N^2 D, halved when causal; backward 2.5x;
// fwd+bwd 3.5x. INT8 work is counted with the same formula (reported in the same column, TOPS for
// SageBwd).
//
// Output: a markdown table on stdout and a JSON file (--json, default attention_bench.json):
//   {"device": ..., "results": [{"impl", "B", "H", "N", "D", "causal", "pass", "ms", "tflops"}]}
// Usage: ablate-attention-bench [--json PATH] [--iters N] [--warmup N] [--impl fpa|sage|all]
//          [--shape B,H,N,D] [--causal yes|no] [--deterministic yes|no|both] [--sync-each]
//          [--precision default|all]
// --deterministic both (the default) times each backward both ways: impl "fpa" / "sagebwd" with
// dQ's atomics, "fpa-det" / "sagebwd-det" with the deterministic reduction (no forward rows: the
// forward is the same).
// --shape / --causal restrict the run to one shape / one masking (for a profiler such as ncu).
// --precision all adds SageBwd's backward precision switches (atomics' dQ; forward unchanged):
// "sagebwd+int8dp" (dP = dO V^T in INT8), "sagebwd+dsbf16" (dQ, dK with bf16 dS: the INT8 pass,
// then the FPA kernel on the codes for dQ and dK) and "sagebwd+int8dp+dsbf16"; default: none.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attention/cuda/attention_cuda.h"

namespace {

using ablate::Status;
using ablate::kernels::AttnShape;
using bf16 = __nv_bfloat16;

#define CHECK_CUDA(expr)                                                                   \
  do {                                                                                     \
    cudaError_t _e = (expr);                                                               \
    if (_e != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                   \
                   cudaGetErrorString(_e));                                                \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

void CheckStatus(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

// Approximately N(0, 1) values (sum of 4 hashed uniforms, rescaled), deterministic per index.
__global__ void FillNormalish(bf16* x, int64_t n, uint32_t seed) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.f;
  uint32_t h = uint32_t(i) * 2654435761u ^ seed;
  for (int r = 0; r < 4; ++r) {
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    acc += float(h) * (1.f / 4294967296.f);
  }
  x[i] = __float2bfloat16_rn((acc - 2.f) * 1.7320508f);  // var of sum of 4 U(0,1) = 1/3
}

struct Result {
  std::string impl;
  AttnShape s;
  std::string pass;
  double ms;
  double tflops;
};

double FwdFlops(const AttnShape& s) {
  const double f = 4.0 * s.B * s.H * double(s.N) * s.N * s.D;
  return s.causal ? f / 2 : f;
}

// Median milliseconds of `iters` timed runs of fn after `warmup` untimed ones. Each run sits
// between two events; by default the runs are enqueued back to back and the host waits once at
// the end, so an event pair measures the GPU's time for one run and not the host's time to
// launch it (the host stays ahead while a run takes longer on the GPU than its launches on the
// CPU). sync_each (--sync-each, the method earlier): the host waits for each run before
// enqueueing the next, so each run also includes the wait for its first launch.
double TimeMs(const std::function<void()>& fn, int warmup, int iters, cudaStream_t stream,
              bool sync_each) {
  for (int i = 0; i < warmup; ++i) fn();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> ev(2 * iters);
  for (cudaEvent_t& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  std::vector<float> t(iters);
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(ev[2 * i], stream));
    fn();
    CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], stream));
    if (sync_each) CHECK_CUDA(cudaEventSynchronize(ev[2 * i + 1]));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  for (int i = 0; i < iters; ++i) CHECK_CUDA(cudaEventElapsedTime(&t[i], ev[2 * i], ev[2 * i + 1]));
  CHECK_CUDA(cudaGetLastError());
  for (cudaEvent_t& e : ev) CHECK_CUDA(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
}

}  // namespace


int main(int argc, char** argv) {
  std::string json_path = "attention_bench.json", impl = "all";
  int iters = 30, warmup = 5;
  int only_causal = -1;  // -1: both, 0: non-causal only, 1: causal only
  bool sync_each = false;
  bool all_precisions = false;
  std::vector<bool> det_modes = {false, true};
  struct Sh { int B, H, N, D; };
  std::vector<Sh> shapes = {{4, 16, 2048, 128}, {2, 16, 8192, 128}, {8, 16, 1024, 64}};
  const char* usage =
      "usage: %s [--json PATH] [--iters N>=20] [--warmup N] [--impl fpa|sage|all] "
      "[--shape B,H,N,D] [--causal yes|no] [--deterministic yes|no|both] [--sync-each] "
      "[--precision default|all]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--json") json_path = next();
    else if (a == "--iters") iters = std::max(20, std::atoi(next().c_str()));
    else if (a == "--warmup") warmup = std::max(1, std::atoi(next().c_str()));
    else if (a == "--impl") impl = next();
    else if (a == "--sync-each") sync_each = true;
    else if (a == "--precision") {
      const std::string c = next();
      if (c != "default" && c != "all") {
        std::fprintf(stderr, "--precision takes default or all, not '%s'\n", c.c_str());
        return 2;
      }
      all_precisions = c == "all";
    } else if (a == "--deterministic") {
      const std::string c = next();
      if (c != "yes" && c != "no" && c != "both") {
        std::fprintf(stderr, "--deterministic takes yes, no or both, not '%s'\n", c.c_str());
        return 2;
      }
      det_modes = c == "both" ? std::vector<bool>{false, true} : std::vector<bool>{c == "yes"};
    } else if (a == "--causal") {
      const std::string c = next();
      if (c != "yes" && c != "no") {
        std::fprintf(stderr, "--causal takes yes or no, not '%s'\n", c.c_str());
        return 2;
      }
      only_causal = c == "yes" ? 1 : 0;
    } else if (a == "--shape") {
      const std::string v = next();
      Sh sh{};
      char tail = 0;
      if (std::sscanf(v.c_str(), "%d,%d,%d,%d%c", &sh.B, &sh.H, &sh.N, &sh.D, &tail) != 4 ||
          sh.B < 1 || sh.H < 1 || sh.N < 1 || (sh.D != 64 && sh.D != 128)) {
        std::fprintf(stderr, "--shape takes B,H,N,D (positive, D 64 or 128), not '%s'\n",
                     v.c_str());
        return 2;
      }
      shapes = {sh};
    } else {
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));

  std::vector<Result> results;

  for (const Sh& sh : shapes) {
    for (bool causal : {false, true}) {
      if (only_causal >= 0 && causal != (only_causal == 1)) continue;
      AttnShape s;
      s.B = sh.B;
      s.H = sh.H;
      s.N = sh.N;
      s.D = sh.D;
      s.causal = causal;
      const size_t numel = size_t(s.numel()), rows = size_t(s.rows());
      bf16 *q, *k, *v, *o, *dO, *dq, *dk, *dv;
      float* lse;
      for (bf16** p : {&q, &k, &v, &o, &dO, &dq, &dk, &dv}) CHECK_CUDA(cudaMalloc(p, numel * 2));
      CHECK_CUDA(cudaMalloc(&lse, rows * 4));
      size_t ws_bytes = ablate::kernels::FpaWorkspaceBytes(s);
      ws_bytes = std::max(ws_bytes, ablate::kernels::SageWorkspaceBytes(s));
      void* ws;
      CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
      ablate::kernels::AttnOptions det_opt;
      det_opt.deterministic = true;
      const size_t det_bytes = std::max(ablate::kernels::FpaDetScratchBytes(s),
                                        ablate::kernels::SageDetScratchBytes(s, det_opt));
      void* det_ws;
      CHECK_CUDA(cudaMalloc(&det_ws, det_bytes));
      uint32_t seed = 1;
      for (bf16* p : {q, k, v, dO}) {
        FillNormalish<<<unsigned((numel + 255) / 256), 256, 0, stream>>>(p, int64_t(numel), seed++);
      }
      CHECK_CUDA(cudaGetLastError());

      const double ff = FwdFlops(s);
      auto add = [&](const char* name, const char* pass, double ms, double flops) {
        results.push_back({name, s, pass, ms, flops / (ms * 1e-3) / 1e12});
      };

      for (const bool det : det_modes) {
      ablate::kernels::AttnOptions sopt;
      sopt.deterministic = det;
      void* const dws = det ? det_ws : nullptr;
      if (impl == "all" || impl == "fpa") {
        namespace c = ablate::kernels;
        const char* name = det ? "fpa-det" : "fpa";
        auto fwd = [&] {
          CheckStatus(c::FpaForwardCuda(s, q, k, v, o, lse, stream), "fpa fwd");
        };
        auto bwd = [&] {
          CheckStatus(c::FpaBackwardCuda(s, q, k, v, o, lse, dO, dq, dk, dv, ws, ws_bytes, stream,
                                         dws, det_bytes),
                      "fpa bwd");
        };
        if (!det) add(name, "fwd", TimeMs(fwd, warmup, iters, stream, sync_each), ff);
        fwd();
        add(name, "bwd", TimeMs(bwd, warmup, iters, stream, sync_each), 2.5 * ff);
        add(name, "fwd+bwd", TimeMs([&] { fwd(); bwd(); }, warmup, iters, stream, sync_each),
            3.5 * ff);
      }
      if (impl == "all" || impl == "sage") {
        namespace kk = ablate::kernels;
        const char* name = det ? "sagebwd-det" : "sagebwd";
        auto fwd = [&] {
          CheckStatus(kk::SageForwardCuda(s, sopt, q, k, v, o, lse, ws, ws_bytes, stream), "sage fwd");
        };
        auto bwd = [&] {
          CheckStatus(kk::SageBackwardCuda(s, sopt, q, k, v, o, lse, dO, dq, dk, dv, ws, ws_bytes,
                                           stream, dws, det_bytes),
                      "sage bwd");
        };
        if (!det) add(name, "fwd", TimeMs(fwd, warmup, iters, stream, sync_each), ff);
        fwd();
        add(name, "bwd", TimeMs(bwd, warmup, iters, stream, sync_each), 2.5 * ff);
        add(name, "fwd+bwd", TimeMs([&] { fwd(); bwd(); }, warmup, iters, stream, sync_each),
            3.5 * ff);
        struct Precision {
          const char* name;
          bool int8_dp, ds_bf16;
        };
        const Precision precisions[] = {{"sagebwd+int8dp", true, false},
                                        {"sagebwd+dsbf16", false, true},
                                        {"sagebwd+int8dp+dsbf16", true, true}};
        for (const Precision& pr : precisions) {
          if (det || !all_precisions) break;
          kk::AttnOptions popt = sopt;
          popt.int8_dp = pr.int8_dp;
          popt.ds_bf16 = pr.ds_bf16;
          auto pfwd = [&] {
            CheckStatus(kk::SageForwardCuda(s, popt, q, k, v, o, lse, ws, ws_bytes, stream),
                        "sage fwd");
          };
          auto pbwd = [&] {
            CheckStatus(kk::SageBackwardCuda(s, popt, q, k, v, o, lse, dO, dq, dk, dv, ws, ws_bytes,
                                             stream, nullptr, 0),
                        pr.name);
          };
          pfwd();
          add(pr.name, "bwd", TimeMs(pbwd, warmup, iters, stream, sync_each), 2.5 * ff);
          add(pr.name, "fwd+bwd",
              TimeMs(
                  [&] {
                    pfwd();
                    pbwd();
                  },
                  warmup, iters, stream, sync_each),
              3.5 * ff);
        }
      }
      }
      CHECK_CUDA(cudaStreamSynchronize(stream));
      for (void* p : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)dO, (void*)dq, (void*)dk,
                      (void*)dv, (void*)lse, ws, det_ws}) {
        CHECK_CUDA(cudaFree(p));
      }
    }
  }

  std::printf("device: %s (%d SMs); median of %d iterations after %d warm-up, %s; SageBwd "
              "includes quantization/smoothing; TFLOP/s (TOPS for sagebwd) with 4BHN^2d fwd, /2 "
              "causal, x2.5 bwd, x3.5 fwd+bwd\n\n",
              prop.name, prop.multiProcessorCount, iters, warmup,
              sync_each ? "each waited for" : "back to back");
  std::printf("| impl | B | H | N | D | causal | pass | ms | TFLOP/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    std::printf("| %s | %d | %d | %d | %d | %s | %s | %.3f | %.1f |\n", r.impl.c_str(), r.s.B,
                r.s.H, r.s.N, r.s.D, r.s.causal ? "yes" : "no", r.pass.c_str(), r.ms, r.tflops);
  }
  FILE* f = std::fopen(json_path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::fprintf(f, "{\"source\": \"ablate-attention-bench\", \"device\": \"%s\", \"iters\": %d, "
                  "\"timing\": \"%s\", \"results\": [\n",
               prop.name, iters, sync_each ? "sync-each" : "back-to-back");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(f,
                 "  {\"impl\": \"%s\", \"B\": %d, \"H\": %d, \"N\": %d, \"D\": %d, \"causal\": %s, "
                 "\"pass\": \"%s\", \"ms\": %.5f, \"tflops\": %.3f}%s\n",
                 r.impl.c_str(), r.s.B, r.s.H, r.s.N, r.s.D, r.s.causal ? "true" : "false",
                 r.pass.c_str(), r.ms, r.tflops, i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
  std::printf("\nwrote %s\n", json_path.c_str());
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}
