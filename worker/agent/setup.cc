#include "agent/setup.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "ablate/endpoint.h"
#include "ablate/gemm_tuning.h"
#include "ablate/token.h"
#include "agent/agent.h"
#include "agent/gpus.h"
#include "agent/util.h"
#ifdef ABLATE_WORKER_METRICS
#include "agent/metrics.h"
#endif

#ifndef ABLATE_VERSION
#define ABLATE_VERSION "dev"
#endif

namespace ablate::agent {
namespace {

bool IsExecutableFile(const std::string& p) {
  return !p.empty() && ::access(p.c_str(), X_OK) == 0 && FileExists(p) &&
         ::access((p + "/.").c_str(), F_OK) != 0;  // not a folder
}

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string Hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "worker";
  return buf;
}

StatusOr<std::string> AbsolutePath(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return ErrnoToStatus(errno, "realpath " + p);
  return std::string(buf);
}

}  // namespace

StatusOr<std::string> LoadOrCreateWorkerId(const std::string& work_dir,
                                           const std::string& hostname) {
  const std::string path = work_dir + "/worker_id";
  auto existing = ReadFile(path);
  if (existing.ok()) {
    const std::string id = Trim(*existing);
    if (id.empty() || id.size() > 200 || id.find_first_of(" \t\r\n") != std::string::npos) {
      return InvalidArgument(path +
                             ": expected one worker id (no spaces, at most 200 characters); "
                             "delete the file to get a new id");
    }
    return id;
  }
  if (existing.status().code() != StatusCode::kNotFound) return existing.status();
  std::random_device rd;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%06x", unsigned(rd()) & 0xFFFFFFu);
  std::string host = hostname.empty() ? "worker" : hostname;
  for (char& c : host) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = '_';
  }
  const std::string id = host.substr(0, 180) + "-" + suffix;
  ABLATE_RETURN_IF_ERROR(WriteFileAtomic(path, id + "\n"));
  return id;
}

StatusOr<std::string> FindTrainer(const std::string& flag, const std::string& self_exe,
                                  const std::string& path_env) {
  if (!flag.empty()) {
    if (!IsExecutableFile(flag)) {
      return NotFound("--trainer " + flag + ": not an executable file");
    }
    return flag;
  }
  std::vector<std::string> tried;
  if (!self_exe.empty()) {
    const std::string dir = DirName(self_exe);
    const std::string c = dir + "/ablate-train";
    tried.push_back(c);
    if (IsExecutableFile(c)) return c;
  }
  std::stringstream in(path_env);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    const std::string c = dir + "/ablate-train";
    if (IsExecutableFile(c)) return c;
  }
  tried.push_back("ablate-train on PATH");
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  return NotFound("cannot find the trainer (tried " + list + "); pass --trainer PATH");
}

int WorkerMain(int argc, char** argv) {
  CLI::App app{
      "ablate-worker: the per-node agent. Registers with the coordinator, runs assigned "
      "trials as ablate-train processes and reports their metrics."};
  const char* env_work = std::getenv("ABLATE_WORK_DIR");
  EndpointFlags endpoint_flags;  // unset: ResolveEndpoint (ablate/endpoint.h), as the CLI does
  std::string gpus_flag = "all", trainer_flag, worker_id_flag;
  std::string work_dir = env_work && *env_work ? env_work : "./ablate-worker";
  std::string tls_ca, tls_cert, tls_key;
  int cpu_slots = -1;
  int keepalive_ms = 30000;
  bool drain = false;
  app.add_option("--coordinator", endpoint_flags.coordinator,
                 "coordinator gRPC address HOST:PORT (default: $ABLATE_COORDINATOR, else "
                 "$ABLATE_DATA_DIR/ablated.addr, else 127.0.0.1:7070)");
  app.add_option("--token-file", endpoint_flags.token_file,
                 "file holding the coordinator's bearer token (default: $ABLATE_TOKEN_FILE, else "
                 "$ABLATE_DATA_DIR/token, else ~/.ablate/token)");
  app.add_option("--gpus", gpus_flag, "GPUs to use: all, none, or indices such as 0,1");
  app.add_option("--cpu-slots", cpu_slots,
                 "concurrent CPU trials (default 1 when the worker has no GPU, else 0)");
  app.add_option("--work-dir", work_dir,
                 "attempt folders, spools and the worker id (default: $ABLATE_WORK_DIR or "
                 "./ablate-worker)");
  app.add_option("--trainer", trainer_flag,
                 "the ablate-train binary (default: next to ablate-worker, else on PATH)");
  app.add_option("--worker-id", worker_id_flag,
                 "worker id (default: generated once and kept in <work-dir>/worker_id)");
  app.add_flag("--drain", drain, "take no new trials: resend what the spools hold, then exit");
  bool preempt_on_term = false;
  app.add_flag("--preempt-on-term", preempt_on_term,
               "the first SIGINT/SIGTERM preempts (trainers checkpoint now and stop, trials are "
               "requeued) instead of draining; for batch schedulers (Slurm) that kill the job soon "
               "after SIGTERM. SIGUSR1 always preempts");
  std::vector<std::string> data_roots;
  app.add_option("--data-root", data_roots,
                 "folder a trial's data.corpus may read from (repeatable; the built-in corpora "
                 "brown and nlp are always allowed, nothing else by default)");
  app.add_option("--keepalive-ms", keepalive_ms,
                 "HTTP/2 keepalive ping period towards the coordinator, 0 = off (default 30000)");
  std::string metrics_addr;
  bool metrics_public = false;
  auto* metrics_opt = app.add_option(
      "--metrics", metrics_addr,
      "serve Prometheus /metrics on HOST:PORT (port 0 picks one; the bound address is written to "
      "<work-dir>/worker.metrics); scrapes need the --token-file token as a bearer token");
  app.add_flag("--metrics-public", metrics_public,
               "serve /metrics without the bearer token (bind it to a private address)")
      ->needs(metrics_opt);
  std::string gemm_tuning;
  app.add_option("--gemm-tuning", gemm_tuning,
                 "a GEMM tuning table (ablate-train --tune-gemm, measured on this machine's GPU "
                 "model) for every trial given a GPU to replay: cuBLASLt's fastest algorithms "
                 "instead of its heuristic's, the same ones for every run (docs/bench/gemm.md)");
  std::string mps_mode = "auto";
  app.add_option("--mps", mps_mode,
                 "CUDA MPS for the trials that share a GPU (resources.gpus: 1/k): auto (join the "
                 "host's daemon, else start one in <work-dir>/mps if nvidia-cuda-mps-control is "
                 "on PATH, else share without MPS), own, host or off (default auto)");
  app.add_option("--tls-ca", tls_ca, "PEM CA certificate: connect with TLS");
  app.add_option("--tls-cert", tls_cert, "PEM client certificate (mutual TLS)");
  app.add_option("--tls-key", tls_key, "PEM client key (mutual TLS)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto fail = [](int code, const std::string& msg) {
    std::fprintf(stderr, "ablate-worker: %s\n", msg.c_str());
    return code;
  };

  auto resolved = ResolveEndpoint(endpoint_flags, ProcessEnv());
  if (!resolved.ok()) return fail(2, resolved.status().message());
  const std::string& coordinator = resolved->coordinator;
  auto token = ReadToken(resolved->token_file);
  if (!token.ok()) {
    const std::string& from = resolved->token_source;
    return fail(2, (from == "default" ? std::string("the default token file (no --token-file, "
                                                    "$ABLATE_TOKEN_FILE or $ABLATE_DATA_DIR given)")
                                      : from) +
                       ": " + token.status().message());
  }
  auto sel = ParseGpuFlag(gpus_flag);
  if (!sel.ok()) return fail(2, sel.status().message());
  if (cpu_slots < -1 || cpu_slots > 4096) {
    return fail(2, "--cpu-slots " + std::to_string(cpu_slots) + ": expected 0..4096");
  }
  if ((!tls_cert.empty() || !tls_key.empty()) && tls_ca.empty()) {
    return fail(2, "--tls-cert/--tls-key need --tls-ca");
  }

  std::vector<v1::GpuInfo> found;
  if (sel->kind != GpuSelection::Kind::kNone) {
    found = NvmlProber()->Probe();
    if (found.empty() && sel->kind == GpuSelection::Kind::kList) {
      return fail(2,
                  "--gpus " + gpus_flag + ": no GPUs found (" + NvmlProber()->last_error() + ")");
    }
  }
  auto gpus = SelectGpus(found, *sel);
  if (!gpus.ok()) return fail(2, gpus.status().message());
  if (cpu_slots < 0) cpu_slots = gpus->empty() ? 1 : 0;
  if (gpus->empty() && cpu_slots == 0) {
    return fail(2, "this worker has no GPU and --cpu-slots 0: it could run nothing");
  }

  if (Status st = MakeDirs(work_dir); !st.ok()) return fail(1, "--work-dir: " + st.message());
  auto abs_work = AbsolutePath(work_dir);
  if (!abs_work.ok()) return fail(1, abs_work.status().message());
  // One worker per work dir: a second one would share the worker id (one registration for two
  // processes), and its restart recovery would kill the other's trainers as orphans. The lock is
  // held until this process ends (the descriptor is closed on exec: trainers do not hold it).
  const std::string lock_path = *abs_work + "/worker.lock";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0)
    return fail(1, "--work-dir: cannot open " + lock_path + ": " + std::strerror(errno));
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    const ssize_t n = ::pread(lock_fd, pid, sizeof pid - 1, 0);
    std::string holder = n > 0 ? std::string(pid, size_t(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return fail(2, "--work-dir " + *abs_work + " is in use by another ablate-worker" +
                       (holder.empty() ? "" : " (pid " + holder + ")") +
                       "; give each worker its own --work-dir");
  }
  const std::string pid_line = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd, 0) != 0 ||
      ::pwrite(lock_fd, pid_line.data(), pid_line.size(), 0) != ssize_t(pid_line.size())) {
    return fail(1, "--work-dir: cannot write " + lock_path + ": " + std::strerror(errno));
  }
  const std::string hostname = Hostname();
  std::string worker_id = worker_id_flag;
  if (worker_id.empty()) {
    auto id = LoadOrCreateWorkerId(*abs_work, hostname);
    if (!id.ok()) return fail(1, id.status().message());
    worker_id = *id;
  }
  auto self = AbsolutePath("/proc/self/exe");
  const char* path_env = std::getenv("PATH");
  auto trainer = FindTrainer(trainer_flag, self.ok() ? *self : "", path_env ? path_env : "");
  if (!trainer.ok()) return fail(2, trainer.status().message());
  auto abs_trainer = AbsolutePath(*trainer);
  if (!abs_trainer.ok()) return fail(2, abs_trainer.status().message());

  // SIGINT/SIGTERM are taken by a dedicated thread (sigtimedwait), never by a handler, so the agent
  // is told in ordinary code. Block them before any thread (gRPC's included) exists so that every
  // thread inherits the mask; children get a clean mask back (process.cc).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);  // preemption
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  if (keepalive_ms < 0) return fail(2, "--keepalive-ms must be >= 0");
#ifndef ABLATE_WORKER_METRICS
  if (!metrics_addr.empty()) {
    return fail(2, "--metrics: this ablate-worker was built without prometheus-cpp/cpp-httplib");
  }
#endif
  auto connector =
      MakeGrpcConnector(coordinator, *token, TlsFiles{tls_ca, tls_cert, tls_key}, keepalive_ms);
  if (!connector.ok()) return fail(2, connector.status().message());

  AgentOptions options;
  options.worker_id = worker_id;
  options.hostname = hostname;
  options.gpus = *gpus;
  options.cpu_slots = cpu_slots;
  options.work_dir = *abs_work;
  options.trainer_path = *abs_trainer;
  options.version = ABLATE_VERSION;
  options.start_draining = drain;
  for (const auto& r : data_roots) {
    char buf[PATH_MAX];
    struct stat st;
    if (!::realpath(r.c_str(), buf)) return fail(2, "--data-root " + r + ": no such folder");
    if (::stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
      return fail(2, "--data-root " + r + ": not a folder");
    }
    options.data_roots.push_back(buf);
  }
  if (!gemm_tuning.empty()) {
    char buf[PATH_MAX];
    if (!::realpath(gemm_tuning.c_str(), buf)) {
      return fail(2, "--gemm-tuning " + gemm_tuning + ": no such file");
    }
    if (auto table = LoadGemmTuning(buf); !table.ok()) {
      return fail(2, "--gemm-tuning: " + table.status().message());
    }
    options.gemm_tuning = buf;
  }
  // MPS only matters to a worker with GPUs; a CPU worker never starts a daemon.
  MpsOptions mps_options;
  mps_options.mode = gpus->empty() && MpsControl::ValidMode(mps_mode) ? "off" : mps_mode;
  mps_options.work_dir = *abs_work;
  mps_options.log = [](const std::string& line) {
    std::fprintf(stderr, "ablate-worker: %s\n", line.c_str());
  };
  auto mps = MpsControl::Create(mps_options);
  if (!mps.ok()) return fail(2, mps.status().message());
  AgentEnv env;
  env.connector = connector->get();
  env.spawner = RealSpawner();
  env.clock = SystemClock();
  env.gpu_prober = gpus->empty() ? nullptr : NvmlProber();
  env.mps = mps->get();
  Agent agent(options, env);

  // The Prometheus endpoint. Its address goes to <work-dir>/worker.metrics (removed first, so a
  // stale file never names an old port), for scripts and tests started with port 0.
  const std::string metrics_file = *abs_work + "/worker.metrics";
  ::unlink(metrics_file.c_str());
  std::string metrics_bound;
#ifdef ABLATE_WORKER_METRICS
  std::unique_ptr<WorkerMetrics> metrics;
  std::unique_ptr<MetricsEndpoint> endpoint;
  std::unique_ptr<MetricsServer> metrics_server;  // declared last: stopped first
  if (!metrics_addr.empty()) {
    metrics = std::make_unique<WorkerMetrics>(
        WorkerMetricsOptions{worker_id, ABLATE_VERSION, *gpus, cpu_slots});
    endpoint = std::make_unique<MetricsEndpoint>(*token, metrics_public, [&agent, &metrics] {
      metrics->Update(agent.metrics_snapshot());
      return metrics->Exposition();
    });
    metrics_server = std::make_unique<MetricsServer>(endpoint.get());
    auto bound = metrics_server->Start(metrics_addr);
    if (!bound.ok()) {
      return fail(bound.status().code() == StatusCode::kInvalidArgument ? 2 : 1,
                  bound.status().message());
    }
    metrics_bound = *bound;
    if (Status st = WriteFileAtomic(metrics_file, metrics_bound + "\n"); !st.ok()) {
      return fail(1, st.message());
    }
  }
#endif

  std::string gpu_list;
  for (const auto& g : *gpus) {
    gpu_list += (gpu_list.empty() ? "" : ", ") + std::to_string(g.index()) + " " + g.name();
  }
  std::fprintf(stderr,
               "ablate-worker %s: id %s, coordinator %s, %s, %d CPU slot(s), trainer %s, work dir "
               "%s%s\n",
               ABLATE_VERSION, worker_id.c_str(), coordinator.c_str(),
               gpus->empty() ? "no GPU" : ("GPUs " + gpu_list).c_str(), cpu_slots,
               abs_trainer->c_str(), abs_work->c_str(),
               gpus->empty() ? "" : (", MPS " + (*mps)->Describe()).c_str());
  if (!metrics_bound.empty()) {
    std::fprintf(stderr, "ablate-worker: Prometheus metrics on http://%s/metrics (%s)\n",
                 metrics_bound.c_str(), metrics_public ? "public" : "bearer token required");
  }

  std::atomic<bool> done{false};
  std::thread signals([&] {
    int count = 0;
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&sigs, nullptr, &tick);
      if (sig <= 0) continue;
      if (sig == SIGUSR1 || (preempt_on_term && count == 0)) {
        std::fprintf(
            stderr, "ablate-worker: %s: preempting: trainers checkpoint and stop, then exit%s\n",
            SignalName(sig).c_str(), sig == SIGUSR1 ? "" : " (send it again to kill the trials)");
        agent.Preempt();
        if (sig != SIGUSR1) ++count;
        continue;
      }
      if (++count == 1) {
        std::fprintf(stderr, "ablate-worker: %s: draining (send it again to kill the trials)\n",
                     SignalName(sig).c_str());
        agent.Drain();
      } else {
        agent.Stop();
      }
    }
  });
  const Status st = agent.Run();
  done = true;
  signals.join();
  (*mps)->Shutdown();  // every trainer has ended
  if (!metrics_bound.empty()) ::unlink(metrics_file.c_str());
  if (!st.ok()) return fail(1, st.message());
  return 0;
}

}  // namespace ablate::agent
