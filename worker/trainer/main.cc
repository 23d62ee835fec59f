// ablate-train: trains one trial config on this machine and prints its metrics as JSON lines.
//   ablate-train --config trial.yaml [--out DIR] [--resume CHECKPOINT] [--gemm-tuning TABLE]
//   ablate-train --config trial.yaml --tune-gemm TABLE   (common/ablate/gemm_tuning.h)
// Exit codes: 0 the run ended (status ok or diverged, see the final line); 2 a bad config or bad
// command line; 1 any other error (unreadable data, corrupt checkpoint, ...); 75 preempted: SIGUSR1
// asked it to stop, it finished the current step, wrote a checkpoint (its "checkpoint" line came
// before the final line, status "preempted") and exited; --resume continues bit-identically;
// 76 its CUDA context died of a fatal device error (an illegal address, a launch failure, an
// MPS error, ...): its own fault, or on a GPU shared under MPS maybe another client's, which ends
// every client of that GPU with the same error (the coordinator then reruns the trial alone).
// Messages go to stderr.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ablate/files.h"
#include "ablate/gemm_tuning.h"
#include "ablate/trial_config.h"
#include "trainer/loop/checkpoint.h"
#include "trainer/loop/train_loop.h"
#include "trainer/model/step_profile.h"
#include "trainer/probe/probe.h"
#if ABLATE_TRAINER_HAVE_CUDA
#include "trainer/cuda/cuda_backend.h"
#include <cuda_runtime_api.h>
#endif

namespace {

bool CpuHas(const std::string& flags, const char* flag) {
  return flags.find(std::string(" ") + flag + " ") != std::string::npos ||
         flags.find(std::string(" ") + flag + "\n") != std::string::npos;
}

// OpenMP and OpenBLAS read their tuning from the environment when they load, before main runs.
// Two settings matter on small CPU boxes (measured ~2x tokens/s on 2 cores): idle OpenMP threads must
// sleep instead of spinning against OpenBLAS's threads, and OpenBLAS 0.3.21 does not recognise some
// AVX-512 CPUs (AMD Zen 4) and falls back to AVX2 kernels. When the user has set neither, set them
// and re-execute this binary once. ABLATE_NO_REEXEC=1 turns this off.
void TuneEnvironmentAndReexec(char** argv) {
  if (std::getenv("ABLATE_NO_REEXEC") || std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("flags", 0) != 0) continue;
      line += "\n";
      if (CpuHas(line, "avx512f") && CpuHas(line, "avx512bw") && CpuHas(line, "avx512dq") &&
          CpuHas(line, "avx512vl")) {
        setenv("OPENBLAS_CORETYPE", "SKYLAKEX", 1);
      }
      break;
    }
  }
  ::execv("/proc/self/exe", argv);
  // execv failed (no /proc): carry on with the environment as it was loaded.
}

// Set by SIGUSR1 (preemption: checkpoint and leave); the loop reads it once per step.
std::atomic<bool> g_preempt{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
void OnPreemptSignal(int) { g_preempt.store(true); }

// The exit code of a preempted run (EX_TEMPFAIL: try again later, from the checkpoint).
constexpr int kExitPreempted = 75;
// The exit code of a run whose CUDA context died (server/scheduler/scheduler.h).
constexpr int kExitDeviceFault = 76;

// The CUDA errors after which the context is unusable (the process must exit), by name as
// CudaStatus writes them.
bool IsFatalDeviceError(const std::string& message) {
  for (const char* name :
       {"cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorHardwareStackError",
        "cudaErrorIllegalInstruction", "cudaErrorMisalignedAddress", "cudaErrorInvalidAddressSpace",
        "cudaErrorInvalidPc", "cudaErrorECCUncorrectable", "cudaErrorMps"}) {
    if (message.find(name) != std::string::npos) return true;
  }
  return false;
}

// --probe: the config is --config's, else the checkpoint's, else the defaults.
int RunProbe(const std::string& what, const std::string& config_path, const std::string& resume,
             std::string out_dir, int batches, uint64_t seed) {
  ablate::StatusOr<ablate::config::TrialConfig> config = ablate::config::TrialConfig{};
  if (!config_path.empty()) {
    config = ablate::config::LoadTrialConfig(config_path);
  } else if (!resume.empty()) {
    config = ablate::trainer::probe::ConfigOfCheckpoint(resume);
  } else {
    ablate::config::Normalize(&*config);
  }
  if (!config.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", config.status().message().c_str());
    return 2;
  }
  ablate::trainer::probe::ProbeOptions opt;
  opt.what = what;
  opt.checkpoint = resume;
  opt.batches = batches;
  opt.seed = seed;
  auto result = ablate::trainer::probe::RunProbes(*config, opt, std::cout);
  std::cout << std::flush;
  if (!result.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", result.status().message().c_str());
    return result.status().code() == ablate::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (out_dir.empty()) out_dir = "ablate-runs/probe-" + ablate::config::ConfigHash(*config);
  if (auto st = ablate::MakeDirs(out_dir); !st.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", st.message().c_str());
    return 1;
  }
  const std::string path = out_dir + "/probe.json";
  (*result)["config_hash"] = ablate::config::ConfigHash(*config);
  (*result)["checkpoint"] = resume;
  if (auto st = ablate::WriteFileAtomic(path, result->dump(2) + "\n"); !st.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("\nwrote %s\n", path.c_str());
  return 0;
}

// The "profile" line as a table on stderr (stdout carries only JSON lines): each kind of work's
// time per step (profile.<kind>_ms) and share, largest first.
void PrintProfile(const nlohmann::json& j) {
  using ablate::trainer::StepPhase;
  std::vector<std::pair<double, std::string>> rows;
  for (int i = 0; i < static_cast<int>(StepPhase::kCount); ++i) {
    const auto p = static_cast<StepPhase>(i);
    rows.push_back(
        {j.value(ablate::trainer::StepPhaseMetric(p), 0.0), ablate::trainer::StepPhaseName(p)});
  }
  std::sort(rows.rbegin(), rows.rend());
  const double total = j.value("profile.step_ms", 0.0);
  const int first = j.value("profile.first_step", 0);
  std::fprintf(stderr, "ablate-train: profile of steps %d-%d (%.0f tokens/s)\n", first,
               first + j.value("profile.steps", 0) - 1, j.value("profile.tokens_per_s", 0.0));
  std::fprintf(stderr, "| kind of work | ms per step | share |\n|---|---:|---:|\n");
  for (const auto& [ms, name] : rows) {
    std::fprintf(stderr, "| %s | %.3f | %.1f%% |\n", name.c_str(), ms,
                 total > 0 ? 100 * ms / total : 0.0);
  }
  std::fprintf(stderr, "| step | %.3f | 100%% |\n", total);
}

// device: auto trains on the GPU when one is visible (the worker narrows the view to the trial's
// GPUs with CUDA_VISIBLE_DEVICES, and a CPU-slot trial sees none), else on the CPU.
void ResolveAutoDevice(ablate::config::TrialConfig* config) {
#if ABLATE_TRAINER_HAVE_CUDA
  if (config->device == "auto") {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) config->device = "cuda";
  }
#else
  (void)config;
#endif
}

// --tune-gemm: the table, written to `path` and printed (one row per GEMM problem).
int TuneGemm(const ablate::config::TrialConfig& config, const std::string& path, int candidates) {
  // A table already at `path` is added to (it keeps its other configs' problems); one that does not
  // parse is refused before the GPU work, and nothing overwrites it.
  std::optional<ablate::GemmTuning> existing;
  if (ablate::FileExists(path)) {
    auto e = ablate::LoadGemmTuning(path);
    if (!e.ok()) {
      std::fprintf(stderr, "ablate-train: --tune-gemm: %s\n", e.status().message().c_str());
      return 2;
    }
    existing = *std::move(e);
  }
  ablate::trainer::GemmTuneOptions opt;
  opt.candidates = candidates;
  auto table = ablate::trainer::TuneTrialGemms(config, opt);
  if (!table.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", table.status().message().c_str());
    return table.status().code() == ablate::StatusCode::kInvalidArgument ||
                   table.status().code() == ablate::StatusCode::kFailedPrecondition
               ? 2
               : 1;
  }
  std::printf("GEMM tuning of %s, cuBLASLt %lld (%zu problems; ms per call)\n\n",
              table->device.c_str(), static_cast<long long>(table->cublaslt_version),
              table->entries.size());
  std::printf(
      "| problem | heuristic ms | chosen ms | chosen candidate | candidates |\n"
      "|---|---:|---:|---:|---:|\n");
  double before = 0, after = 0;
  for (const auto& [problem, c] : table->entries) {
    std::printf("| %s | %.4f | %.4f | %d | %d |\n", problem.c_str(), c.heuristic_ms, c.ms,
                c.candidate, c.candidates);
    before += c.heuristic_ms;
    after += c.ms;
  }
  std::printf("\nsum over the problems (one call each): %.3f ms -> %.3f ms\n", before, after);
  ablate::GemmTuning out = *std::move(table);
  if (existing) {
    auto merged = ablate::MergeGemmTuning(*existing, out, path);
    if (!merged.ok()) {
      std::fprintf(stderr, "ablate-train: --tune-gemm: %s\n", merged.status().message().c_str());
      return 2;
    }
    out = *std::move(merged);
  }
  if (auto st = ablate::SaveGemmTuning(out, path); !st.ok()) {
    std::fprintf(stderr, "ablate-train: --tune-gemm: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s: %zu problems%s (digest %s)\n", path.c_str(), out.entries.size(),
              existing ? ", the table's earlier ones included" : "", out.Digest().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto process_start = std::chrono::steady_clock::now();
  TuneEnvironmentAndReexec(argv);
#if ABLATE_TRAINER_HAVE_CUDA
  ablate::trainer::cuda::RegisterCudaBackend();  // device: cuda
#endif
  {
    struct sigaction sa {};
    sa.sa_handler = OnPreemptSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
  }
  CLI::App app{"ablate-train: the built-in training loop (GPT, fpa/sagebwd attention, AdamW and "
               "spectral optimizers). Prints one JSON object per line."};
  std::string config_path, out_dir, resume, probe;
  bool print_config = false;
  int probe_batches = 32;
  uint64_t probe_seed = 1;
  int profile_steps = 0;
  app.add_option("--config", config_path,
                 "trial config (YAML); every key has a default (required unless --probe takes "
                 "the config of its --resume checkpoint)");
  app.add_option("--out", out_dir,
                 "output folder: checkpoints/ and metrics.jsonl (default: ablate-runs/<config hash>)");
  app.add_option("--resume", resume, "checkpoint to continue from");
  app.add_flag("--print-config", print_config,
               "print the resolved config (every key, as JSON) and its hash, then exit");
  app.add_option(
      "--probe", probe,
      "run a mechanism probe instead of training (sigma | decompose | granularity | smoothing | "
      "bias-noise | all; docs/probes.md): tables on stdout, JSON in OUT/probe.json");
  app.add_option("--probe-batches", probe_batches, "bias-noise: micro-batches to sample");
  app.add_option("--probe-seed", probe_seed, "the probes' synthetic inputs and batches");
  app.add_option("--profile", profile_steps,
                 "profile N training steps after up to 5 warm-up steps: where each step's time "
                 "goes by kind of work (a \"profile\" line, and a table on stderr; the trial "
                 "config's train.profile_steps)")
      ->check(CLI::Range(1, 1000000));
  std::string gemm_tuning_path, tune_gemm_path;
  int tune_candidates = ablate::kGemmTuneCandidates;
  app.add_option("--gemm-tuning", gemm_tuning_path,
                 "replay this GEMM tuning table (written by --tune-gemm on a machine like this "
                 "one): the recorded cuBLASLt algorithm for each GEMM instead of the heuristic's; "
                 "a table of another GPU or cuBLASLt is not used (the start line says so)");
  app.add_option("--tune-gemm", tune_gemm_path,
                 "instead of training: run one step of --config's model on the GPU, time "
                 "cuBLASLt's candidate algorithms for each of its GEMMs, write the fastest to "
                 "this file (a GEMM tuning table) and print them")
      ->excludes("--gemm-tuning");
  app.add_option("--tune-candidates", tune_candidates,
                 "--tune-gemm: how many of the heuristic's algorithms to time per GEMM")
      ->check(CLI::Range(1, 64));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  if (!probe.empty())
    return RunProbe(probe, config_path, resume, out_dir, probe_batches, probe_seed);
  if (config_path.empty()) {
    std::fprintf(stderr, "ablate-train: --config is required\n");
    return 2;
  }
  auto config = ablate::config::LoadTrialConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", config.status().message().c_str());
    return 2;
  }
  if (print_config) {
    nlohmann::json j = ablate::config::ToJson(*config);
    std::cout << nlohmann::json{{"config_hash", ablate::config::ConfigHash(*config)},
                                {"config", j}}
                     .dump(2)
              << "\n";
    return 0;
  }
  if (profile_steps > 0) config->train.profile_steps = profile_steps;  // not part of the identity
  if (!tune_gemm_path.empty()) {
    ResolveAutoDevice(&*config);
    return TuneGemm(*config, tune_gemm_path, tune_candidates);
  }
  std::shared_ptr<const ablate::GemmTuning> gemm_tuning;
  if (!gemm_tuning_path.empty()) {
    auto table = ablate::LoadGemmTuning(gemm_tuning_path);
    if (!table.ok()) {
      std::fprintf(stderr, "ablate-train: --gemm-tuning: %s\n", table.status().message().c_str());
      return 2;
    }
    gemm_tuning = std::make_shared<const ablate::GemmTuning>(*std::move(table));
  }
  if (out_dir.empty()) out_dir = "ablate-runs/" + ablate::config::ConfigHash(*config);
  if (auto st = ablate::MakeDirs(out_dir); !st.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", st.message().c_str());
    return 1;
  }
  // metrics.jsonl gets the same lines as stdout; a resumed run appends to it.
  std::ofstream log(out_dir + "/metrics.jsonl", std::ios::app);

  ablate::trainer::RunOptions options;
  options.out_dir = out_dir;
  options.resume_path = resume;
  options.preempt = &g_preempt;
  options.emit = [&](const nlohmann::json& j) {
    if (j.value("type", "") == "profile") PrintProfile(j);
    if (j.contains("gemm_tuning") && j["gemm_tuning"].contains("not_used")) {
      std::fprintf(stderr, "ablate-train: --gemm-tuning %s is not used: %s\n",
                   gemm_tuning_path.c_str(),
                   j["gemm_tuning"]["not_used"].get<std::string>().c_str());
    }
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (log) log << line << '\n' << std::flush;
  };
#if ABLATE_TRAINER_HAVE_CUDA
  ResolveAutoDevice(&*config);
  // Creating the CUDA context takes a few hundred ms: start it now, beside the corpus load and
  // the model's initialization in RunTrial (its first CUDA call waits for it if need be).
  std::thread cuda_start;
  std::atomic<double> context_s{-1};
  if (config->device == "cuda") {
    cuda_start = std::thread([&context_s] {
      const auto t0 = std::chrono::steady_clock::now();
      (void)cudaFree(nullptr);
      context_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  options.device_context_s = &context_s;
  struct Join {
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join_cuda_start{cuda_start};
#endif
  options.gemm_tuning = gemm_tuning;
  // Out of host memory (a model or batch larger than the machine, or other trials' memory on
  // it): a readable reason for the worker's log and exit 1 (retried elsewhere), not an abort.
  ablate::StatusOr<ablate::trainer::RunResult> result = ablate::Internal("not run");
  options.before_run_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - process_start).count();
  try {
    result = ablate::trainer::RunTrial(*config, options);
  } catch (const std::bad_alloc&) {
    const auto& m = config->model;
    std::fprintf(stderr,
                 "ablate-train: out of host memory (model: %d layers, d_model %d; micro_batch %d "
                 "x seq_len %d); reduce the model or micro_batch, or run it on a machine with "
                 "more memory\n",
                 m.layers, m.d_model, config->train.micro_batch, m.seq_len);
    return 1;
  }
  if (!result.ok()) {
    std::fprintf(stderr, "ablate-train: %s\n", result.status().message().c_str());
    if (IsFatalDeviceError(result.status().message())) return kExitDeviceFault;
    return result.status().code() == ablate::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (result->status == "preempted") return kExitPreempted;
  return 0;
}
