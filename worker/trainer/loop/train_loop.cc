#include "trainer/loop/train_loop.h"

#include <cblas.h>
#include <dirent.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "ablate/build_info.h"
#include "ablate/files.h"
#include "ablate/memory_estimate.h"
#include "numerics_version.h"
#include "trainer/data/dataset.h"
#include "trainer/loop/backend.h"
#include "trainer/loop/checkpoint.h"
#include "trainer/loop/schedule.h"
#include "trainer/model/gpt.h"
#include "trainer/optim/optimizer.h"

namespace ablate::trainer {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The nominal fp32 peak of `threads` cores of this CPU: clock x FMA width. An estimate; the start
// line says how it was made, and train.peak_tflops overrides it.
std::pair<double, std::string> CpuPeakFlops(int threads) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  double mhz = 0;
  while (std::getline(in, line)) {
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::atof(line.substr(line.find(':') + 1).c_str());
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  if (mhz <= 0) mhz = 2500;
  int per_cycle = 8;  // SSE: 4-wide mul + add
  std::string isa = "SSE";
  if (flags.find(" avx512f") != std::string::npos) {
    per_cycle = 64, isa = "AVX-512 FMA";
  } else if (flags.find(" avx2") != std::string::npos && flags.find(" fma") != std::string::npos) {
    per_cycle = 32, isa = "AVX2 FMA";
  }
  double peak = threads * mhz * 1e6 * per_cycle;
  std::ostringstream os;
  os << "estimate: " << threads << " cores x " << mhz / 1000 << " GHz x " << per_cycle
     << " fp32 FLOP/cycle (" << isa << ")";
  return {peak, os.str()};
}

// Keys a resumed run may change without breaking the computation it continues.
nlohmann::json ResumeComparable(nlohmann::json j) {
  j.erase("name");
  j.erase("device");  // an execution setting: a checkpoint resumes on either backend
  j.erase("gpus");    // so is the rank count: the global batch and the result do not depend on it
  for (const char* k : {"steps", "eval_every", "diagnostics_every", "checkpoint_every", "threads",
                        "peak_tflops"}) {
    j["train"].erase(k);
  }
  return j;
}

std::string DiffKeys(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix) {
  std::string out;
  for (auto it = a.begin(); it != a.end(); ++it) {
    std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (!b.contains(it.key())) {
      out += (out.empty() ? "" : ", ") + path;
    } else if (it->is_object()) {
      std::string sub = DiffKeys(*it, b[it.key()], path);
      if (!sub.empty()) out += (out.empty() ? "" : ", ") + sub;
    } else if (*it != b[it.key()]) {
      out += (out.empty() ? "" : ", ") + path + " (" + b[it.key()].dump() + " -> " + it->dump() + ")";
    }
  }
  return out;
}

std::string Bytes(const float* p, size_t n) {
  return std::string(reinterpret_cast<const char*>(p), n * sizeof(float));
}

// Removes step checkpoints older than the newest `keep` (by name: step_00000100.ckpt sorts by step).
void PruneCheckpoints(const std::string& dir, size_t keep) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("step_", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == ".ckpt") {
      names.push_back(n);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (size_t i = 0; i + keep < names.size(); ++i) ::unlink((dir + "/" + names[i]).c_str());
}

std::map<std::string, TrainBackendFactory>& Registry() {
  static std::map<std::string, TrainBackendFactory> registry;
  return registry;
}

// The CPU backend: Gpt<float> and Optimizer on host memory (the reference every backend mirrors).
class CpuBackend : public TrainBackend {
 public:
  CpuBackend(Gpt<float> model, std::unique_ptr<Optimizer> optimizer, int threads)
      : model_(std::move(model)), optimizer_(std::move(optimizer)), threads_(threads) {}

  size_t num_params() const override { return model_.num_params(); }
  double FlopsPerToken() const override { return model_.FlopsPerToken(); }
  std::pair<double, std::string> PeakFlops() const override { return CpuPeakFlops(threads_); }
  nlohmann::json StartInfo() const override { return {{"backend", "cpu"}, {"threads", threads_}}; }
  size_t optimizer_state_bytes() const override { return optimizer_->state_bytes(); }
  size_t optimizer_state_bytes_fp32() const override { return optimizer_->state_bytes_fp32(); }
  int spectral_tensors() const override { return optimizer_->spectral_tensors(); }

  Status ZeroGrad() override {
    model_.ZeroGrad();
    return Status::Ok();
  }
  StatusOr<StepProfiler*> StepProfile() override {
    if (!profiler_) {
      profiler_ = std::make_unique<HostStepProfiler>();
      model_.set_profiler(profiler_.get());
    }
    return profiler_.get();
  }
  Status TrainMicroStep(const int32_t* inputs, const int32_t* targets, int mb,
                        float grad_scale) override {
    loss_sum_ += model_.Forward(inputs, targets, mb);
    model_.Backward(grad_scale);
    return Status::Ok();
  }
  StatusOr<double> TakeTrainLoss() override {
    const double v = loss_sum_;
    loss_sum_ = 0;
    return v;
  }
  StatusOr<double> GradNormAndClip(double max_norm) override {
    ProfileMark(profiler_.get(), StepPhase::kGradNorm);
    float* g = model_.grads();
    const size_t n = model_.num_params();
    double sq = 0;
    for (size_t i = 0; i < n; ++i) sq += double(g[i]) * g[i];
    const double grad_norm = std::sqrt(sq);
    if (std::isfinite(grad_norm) && max_norm > 0 && grad_norm > max_norm) {
      const float s = float(max_norm / grad_norm);
      for (size_t i = 0; i < n; ++i) g[i] *= s;
    }
    return grad_norm;
  }
  Status OptimizerStep(int64_t step, double lr_scale, double p, OptimizerStats* stats) override {
    ProfileMark(profiler_.get(), StepPhase::kOptimizer);
    return optimizer_->Step(model_.weights(), model_.grads(), step, lr_scale, p, stats);
  }
  StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int mb) override {
    return double(model_.Loss(inputs, targets, mb));
  }
  StatusOr<std::vector<Gpt<float>::LayerDiagnostics>> Diagnostics() override {
    return model_.AttentionDiagnostics();
  }
  StatusOr<std::string> SaveWeights() override {
    return Bytes(model_.weights(), model_.num_params());
  }
  StatusOr<std::string> SaveOptimizer() override { return optimizer_->Save(); }
  Status LoadWeights(const std::string& bytes) override {
    if (bytes.size() != model_.num_params() * sizeof(float)) {
      return DataLoss("checkpoint weights do not match the model");
    }
    std::memcpy(model_.weights(), bytes.data(), bytes.size());
    return Status::Ok();
  }
  Status LoadOptimizer(const std::string& blob) override { return optimizer_->Load(blob); }

 private:
  Gpt<float> model_;
  std::unique_ptr<Optimizer> optimizer_;
  int threads_;
  double loss_sum_ = 0;
  std::unique_ptr<HostStepProfiler> profiler_;
};

}  // namespace

ModelConfig ToModelConfig(const config::TrialConfig& c, int vocab) {
  ModelConfig m;
  m.vocab_size = vocab;
  m.seq_len = c.model.seq_len;
  m.layers = c.model.layers;
  m.d_model = c.model.d_model;
  m.heads = c.model.heads;
  m.mlp = c.model.mlp == "relu2" ? MlpKind::kRelu2 : MlpKind::kGelu;
  m.tie_embeddings = c.model.tie_embeddings;
  m.qk_norm = c.attention.qk_norm;
  m.attention.kind =
      c.attention.kind == "fpa" ? kernels::AttnKind::kFpa : kernels::AttnKind::kSageBwd;
  m.attention.smooth_k = c.attention.smooth_k;
  m.attention.smooth_q = c.attention.smooth_q;
  m.attention.int8_dp = c.attention.int8_dp;
  m.attention.ds_bf16 = c.attention.ds_bf16;
  m.attention.dq_kmean_correction = c.attention.dq_correction;
  m.attention.deterministic = c.attention.deterministic;
  // Both backends run the GPU kernels' tiles, so that a CPU run computes what a GPU run does.
  if (c.model.heads > 0)
    m.attention = kernels::SageGpuTiles(m.attention, c.model.d_model / c.model.heads);
  m.init_std = float(c.model.init_std);
  m.k_offset = float(c.attention.k_offset);
  return m;
}

void RegisterTrainBackend(const std::string& device, TrainBackendFactory factory) {
  Registry()[device] = std::move(factory);
}

bool HaveTrainBackend(const std::string& device) { return Registry().count(device) > 0; }

StatusOr<RunResult> RunTrial(const config::TrialConfig& cfg, const RunOptions& options) {
  // device: auto runs on the CPU here; ablate-train resolves auto to cuda when a GPU is visible.
  const bool on_cuda = cfg.device == "cuda";
  if (on_cuda && !HaveTrainBackend("cuda")) {
    return FailedPrecondition(
        "device: cuda: this ablate-train was built without the CUDA backend; use device: cpu or auto");
  }
  if (!on_cuda && cfg.gpus != 1) {
    return FailedPrecondition("gpus: " + std::to_string(cfg.gpus) +
                              ": data parallel needs the CUDA backend; the CPU trainer runs one rank");
  }
  auto emit = [&](const nlohmann::json& j) {
    if (options.emit) options.emit(j);
  };
  // train.threads, else the worker's share of this machine (ABLATE_CPU_THREADS), else every core.
  int threads = cfg.train.threads;
  if (threads <= 0) {
    const char* env = std::getenv("ABLATE_CPU_THREADS");
    threads = env ? std::atoi(env) : 0;
  }
  if (threads <= 0) threads = omp_get_num_procs();
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  const auto t_data = Clock::now();
  DataConfig dc;
  dc.corpus = cfg.data.corpus;
  dc.val_fraction = cfg.data.val_fraction;
  dc.vocab_size = cfg.data.vocab_size;
  ABLATE_ASSIGN_OR_RETURN(Dataset data, LoadDataset(dc));

  const auto t_model = Clock::now();
  const ModelConfig mc = ToModelConfig(cfg, data.vocab_size);
  ABLATE_ASSIGN_OR_RETURN(Gpt<float> model, Gpt<float>::Create(mc));
  model.Init(cfg.seed);
  ABLATE_RETURN_IF_ERROR(model.CheckTokens(data.train.data(), int64_t(data.train.size()))
                             .WithPrefix("training split of " + data.description));
  ABLATE_RETURN_IF_ERROR(model.CheckTokens(data.val.data(), int64_t(data.val.size()))
                             .WithPrefix("validation split of " + data.description));
  const auto t_backend = Clock::now();
  std::unique_ptr<TrainBackend> backend;
  if (on_cuda) {
    ABLATE_ASSIGN_OR_RETURN(backend, Registry()["cuda"](cfg, std::move(model)));
  } else {
    ABLATE_ASSIGN_OR_RETURN(auto optimizer,
                            Optimizer::Create(cfg.optimizer, model.params(), model.num_params()));
    backend = std::make_unique<CpuBackend>(std::move(model), std::move(optimizer), threads);
  }
  const auto t_after_backend = Clock::now();
  std::string numerics(kernels::kNumericsVersion);
  nlohmann::json gemm_tuning;
  if (const auto& t = options.gemm_tuning) {
    gemm_tuning = {{"digest", t->Digest()},
                   {"entries", t->entries.size()},
                   {"device", t->device},
                   {"cublaslt", t->cublaslt_version}};
    if (Status st = backend->SetGemmTuning(t); st.ok()) {
      numerics += "+gemm." + t->Digest();
    } else {
      gemm_tuning["not_used"] = st.message();
    }
  }
  auto sampler_or = BatchSampler::Create(&data.train, cfg.model.seq_len, cfg.seed);
  if (!sampler_or.ok()) return sampler_or.status().WithPrefix("training split of " + data.description);
  BatchSampler sampler = std::move(sampler_or).value();
  const int mb = cfg.train.micro_batch;
  ABLATE_ASSIGN_OR_RETURN(EvalBatches eval,
                          EvalBatches::Create(&data.val, cfg.model.seq_len, mb,
                                              cfg.data.eval_batches));

  const std::string hash = config::ConfigHash(cfg);
  const nlohmann::json config_json = ToJson(cfg);
  int start_step = 0;
  double last_val = NAN, best_val = NAN, last_train = NAN;
  double prior_train_s = 0;  // wall time of the attempts before the resumed checkpoint

  if (!options.resume_path.empty()) {
    ABLATE_ASSIGN_OR_RETURN(Checkpoint ck, ReadCheckpoint(options.resume_path));
    const auto& h = ck.header;
    std::string diff = DiffKeys(ResumeComparable(config_json),
                                ResumeComparable(h.value("config", nlohmann::json::object())), "");
    if (!diff.empty()) {
      return FailedPrecondition(options.resume_path +
                                ": the checkpoint was written by a different config; changed: " +
                                diff);
    }
    if (ck.sections.size() != 2 ||
        ck.sections[0].size() != backend->num_params() * sizeof(float)) {
      return DataLoss(options.resume_path + ": checkpoint weights do not match the model (" +
                      std::to_string(backend->num_params()) + " parameters)");
    }
    ABLATE_RETURN_IF_ERROR(backend->LoadWeights(ck.sections[0]).WithPrefix(options.resume_path));
    ABLATE_RETURN_IF_ERROR(
        backend->LoadOptimizer(ck.sections[1]).WithPrefix(options.resume_path));
    BatchSampler::State s;
    s.epoch = h["sampler"]["epoch"].get<uint64_t>();
    s.index = h["sampler"]["index"].get<uint64_t>();
    ABLATE_RETURN_IF_ERROR(sampler.set_state(s).WithPrefix(options.resume_path));
    start_step = h["step"].get<int>();
    auto num = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; };
    last_val = num(h["loop"]["last_val_loss"]);
    best_val = num(h["loop"]["best_val_loss"]);
    last_train = num(h["loop"]["last_train_loss"]);
    // Older checkpoints lack it: the time before the checkpoint is then unknown and counted as 0.
    prior_train_s = h["loop"].value("train_time_s", 0.0);
  }

  const std::string ckpt_dir = options.out_dir.empty() ? "" : options.out_dir + "/checkpoints";
  if (!ckpt_dir.empty()) ABLATE_RETURN_IF_ERROR(MakeDirs(ckpt_dir));

  auto [device_peak, peak_source] = backend->PeakFlops();
  const double peak = cfg.train.peak_tflops > 0 ? cfg.train.peak_tflops * 1e12 : device_peak;
  if (cfg.train.peak_tflops > 0) peak_source = "train.peak_tflops";
  const double flops_per_token = backend->FlopsPerToken();
  const int accum = cfg.accumulation_steps();
  // Micro-batches per optimizer step over all ranks: the loop draws the whole global batch from the
  // one sampler (a data-parallel backend hands call i to rank i / accum), so any gpus value sees
  // the same tokens in the same order as gpus: 1.
  const int micro_steps = accum * cfg.gpus;
  const int64_t tokens_per_step = cfg.train.tokens_per_step;

  nlohmann::json start = {
      {"type", "start"},
      {"build",
       {{"version", std::string(BuildVersion())},
        {"commit", std::string(BuildCommit())},
        {"numerics", numerics}}},
      {"config_hash", hash},
      {"resumed_from_step", start_step},
      {"params", backend->num_params()},
      {"vocab_size", data.vocab_size},
      {"data", data.description},
      {"train_tokens", data.train.size()},
      {"val_tokens", data.val.size()},
      {"unigram_entropy", UnigramEntropyNats(data.train, data.vocab_size)},
      {"accumulation_steps", accum},
      {"tokens_per_step", tokens_per_step},
      {"flops_per_token", flops_per_token},
      {"peak_flops", peak},
      {"peak_source", peak_source},
      {"optimizer_state_bytes", backend->optimizer_state_bytes()},
      {"optimizer_state_bytes_fp32", backend->optimizer_state_bytes_fp32()},
      {"optimizer_state_saved",
       1.0 - double(backend->optimizer_state_bytes()) /
                 double(std::max<size_t>(1, backend->optimizer_state_bytes_fp32()))},
      {"spectral_tensors", backend->spectral_tensors()}};
  start.update(backend->StartInfo());
  if (!gemm_tuning.is_null()) start["gemm_tuning"] = gemm_tuning;
  // Where the start-up went (seconds): main to RunTrial, the corpus, the model's initialization on
  // the host, the backend (device copies, buffers; it waits for the CUDA context when that is
  // still being created), the rest (resume, evaluation batches), and the context itself (created
  // beside the corpus load, so it overlaps the others).
  // (Top-level numbers, so the worker stores them as metrics at step 0.)
  start["start_before_run_s"] = options.before_run_s;
  start["start_data_s"] = Seconds(t_data, t_model);
  start["start_model_init_s"] = Seconds(t_model, t_backend);
  start["start_backend_s"] = Seconds(t_backend, t_after_backend);
  start["start_rest_s"] = Seconds(t_after_backend, Clock::now());
  if (options.device_context_s && options.device_context_s->load() >= 0) {
    start["start_cuda_context_s"] = options.device_context_s->load();
  }
  emit(start);

  std::vector<int32_t> inputs(size_t(mb) * cfg.model.seq_len), targets(inputs.size());
  const auto run_start = Clock::now();

  auto evaluate = [&](int step) -> Status {
    const auto e0 = Clock::now();
    double sum = 0;
    for (int i = 0; i < eval.num_batches(); ++i) {
      eval.Get(i, inputs.data(), targets.data());
      ABLATE_ASSIGN_OR_RETURN(double l, backend->EvalLoss(inputs.data(), targets.data(), mb));
      sum += l;
    }
    last_val = sum / eval.num_batches();
    if (std::isnan(best_val) || last_val < best_val) best_val = last_val;
    nlohmann::json j = {{"type", "eval"},
                        {"step", step},
                        {"val_loss", last_val},
                        {"eval_time_s", Seconds(e0, Clock::now())}};
    if (data.vocab_size == 256) j["val_bpb"] = last_val / std::log(2.0);
    emit(j);
    return Status::Ok();
  };

  auto checkpoint = [&](int step) -> Status {
    if (ckpt_dir.empty()) return Status::Ok();
    const auto c0 = Clock::now();
    Checkpoint ck;
    auto st = sampler.state();
    auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    ck.header = {{"step", step},
                 {"config_hash", hash},
                 {"config", config_json},
                 {"sampler", {{"epoch", st.epoch}, {"index", st.index}}},
                 {"loop",
                  {{"last_val_loss", num(last_val)},
                   {"best_val_loss", num(best_val)},
                   {"last_train_loss", num(last_train)},
                   {"train_time_s", prior_train_s + Seconds(run_start, Clock::now())}}}};
    ABLATE_ASSIGN_OR_RETURN(std::string weights, backend->SaveWeights());
    ABLATE_ASSIGN_OR_RETURN(std::string opt_state, backend->SaveOptimizer());
    ck.sections.push_back(std::move(weights));
    ck.sections.push_back(std::move(opt_state));
    char name[64];
    std::snprintf(name, sizeof name, "/step_%08d.ckpt", step);
    std::string path = ckpt_dir + name;
    ABLATE_RETURN_IF_ERROR(WriteCheckpointAtomic(path, ck));
    PruneCheckpoints(ckpt_dir, 2);
    emit({{"type", "checkpoint"},
          {"step", step},
          {"path", path},
          {"checkpoint_time_s", Seconds(c0, Clock::now())}});
    return Status::Ok();
  };

  auto finish = [&](const std::string& status, int step, const std::string& reason) {
    RunResult r;
    r.status = status;
    r.steps_done = step;
    r.final_train_loss = last_train;
    r.final_val_loss = last_val;
    nlohmann::json j = {{"type", "final"},
                        {"status", status},
                        {"step", step},
                        {"final_train_loss", last_train},
                        {"final_val_loss", last_val},
                        {"best_val_loss", best_val},
                        {"elapsed_s", Seconds(run_start, Clock::now())}};
    if (!reason.empty()) j["reason"] = reason;
    // Top-level numbers: the worker stores them with the trial's metrics.
    if (nlohmann::json use = backend->GemmTuningUse(); !use.is_null()) j.update(use);
    emit(j);
    return r;
  };

  const int steps = cfg.train.steps;
  int64_t reported_memory = 0;
  // train.profile_steps N: steps [prof_first, prof_last] of this run, after up to 5 warm-up steps.
  StepProfiler* profiler = nullptr;
  int prof_first = 0, prof_last = -1;
  std::vector<double> prof_tps;
  if (const int n = cfg.train.profile_steps; n > 0) {
    ABLATE_ASSIGN_OR_RETURN(profiler, backend->StepProfile());
    const int left = steps - start_step;
    prof_first = start_step + 1 + std::clamp(left - n, 0, 5);
    prof_last = std::min(steps, prof_first + n - 1);
  }
  for (int step = start_step + 1; step <= steps; ++step) {
    const bool profiled = profiler != nullptr && step >= prof_first && step <= prof_last;
    if (profiled) profiler->Resume();
    const auto t0 = Clock::now();
    ABLATE_RETURN_IF_ERROR(backend->ZeroGrad());
    for (int a = 0; a < micro_steps; ++a) {
      ProfileMark(profiler, StepPhase::kHost);
      sampler.Next(mb, inputs.data(), targets.data());
      ABLATE_RETURN_IF_ERROR(
          backend->TrainMicroStep(inputs.data(), targets.data(), mb, 1.0f / float(micro_steps)));
    }
    ABLATE_ASSIGN_OR_RETURN(double loss, backend->TakeTrainLoss());
    loss /= micro_steps;
    last_train = loss;
    if (!std::isfinite(loss) || loss > cfg.train.max_loss) {
      emit({{"type", "step"}, {"step", step}, {"loss", loss}});
      std::ostringstream why;
      why << "train loss " << loss << " at step " << step
          << (std::isfinite(loss) ? " exceeds train.max_loss " + std::to_string(cfg.train.max_loss)
                                  : std::string(" is not finite"));
      return finish("diverged", step, why.str());
    }
    ABLATE_ASSIGN_OR_RETURN(const double grad_norm, backend->GradNormAndClip(cfg.train.grad_clip));
    if (!std::isfinite(grad_norm)) {
      emit({{"type", "step"}, {"step", step}, {"loss", loss}, {"grad_norm", grad_norm}});
      return finish("diverged", step, "gradient norm is not finite at step " + std::to_string(step));
    }
    const double lr_scale = LrMultiplier(cfg.train.schedule, step, steps, cfg.train.warmup,
                                         cfg.train.min_lr_ratio, cfg.train.decay_fraction);
    const double p = PowerAt(cfg.optimizer.p_schedule, step, steps, cfg.optimizer.p,
                             cfg.optimizer.p_end);
    OptimizerStats os;
    ABLATE_RETURN_IF_ERROR(backend->OptimizerStep(step, lr_scale, p, &os));
    if (profiled) ABLATE_RETURN_IF_ERROR(profiler->EndStep());
    const double dt = Seconds(t0, Clock::now());
    const double tps = tokens_per_step / dt;
    if (profiled) prof_tps.push_back(tps);
    nlohmann::json line = {{"type", "step"},
                           {"step", step},
                           {"loss", loss},
                           {"lr", cfg.optimizer.lr * lr_scale},
                           {"lr_vector", cfg.optimizer.lr_vector * lr_scale},
                           {"grad_norm", grad_norm},
                           {"tokens", int64_t(step) * tokens_per_step},
                           {"tokens_per_s", tps},
                           {"mfu", flops_per_token * tps / peak},
                           {"step_time_s", dt},
                           {"train_time_s", prior_train_s + Seconds(run_start, Clock::now())}};
    if (cfg.optimizer.kind == "spectral") {
      line["p"] = p;
      line["update_rms_spectral"] = os.update_rms_spectral;
      if (os.newton_residual > 0) line["newton_residual"] = os.newton_residual;
    }
    line["update_rms_adamw"] = os.update_rms_adamw;
    emit(line);
    // The device memory once it is known, and again whenever it grew (a first evaluation or
    // diagnostics step may allocate), for the GPU-sharing placement.
    if (const int64_t mem = backend->DeviceMemoryBytes(); mem > reported_memory) {
      reported_memory = mem;
      emit({{"type", "memory"},
            {"step", step},
            {"gpu_mem_peak_bytes", mem},
            {"gpu_mem_estimate_bytes", config::EstimateDeviceBytes(cfg)}});
    }

    const bool diagnose =
        cfg.train.diagnostics_every > 0 && step % cfg.train.diagnostics_every == 0;
    const bool eval =
        (cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0) || step == steps;
    const bool checkpointed =
        (cfg.train.checkpoint_every > 0 && step % cfg.train.checkpoint_every == 0) || step == steps;
    if (profiler != nullptr && (diagnose || eval || checkpointed || step == prof_last)) {
      profiler->Pause();  // the profile leaves them out (they have their own *_time_s)
    }
    if (profiled && step == prof_last) {
      nlohmann::json j = profiler->ledger().ToJson();
      j["type"] = "profile";
      j["step"] = step;
      j["profile.first_step"] = prof_first;
      std::sort(prof_tps.begin(), prof_tps.end());
      j["profile.tokens_per_s"] = prof_tps[prof_tps.size() / 2];  // the profiled steps' median
      emit(j);
    }
    if (diagnose) {
      const auto d0 = Clock::now();
      nlohmann::json dj = {{"type", "diagnostics"}, {"step", step}};
      ABLATE_ASSIGN_OR_RETURN(auto layers, backend->Diagnostics());
      for (const auto& L : layers) {
        std::string pre = "attn." + std::to_string(L.layer) + ".";
        auto put = [&](const char* name, const kernels::ErrorStats& e) {
          dj[pre + name + ".cos"] = e.cosine;
          dj[pre + name + ".rel_l2"] = e.rel_l2;
        };
        put("o", L.o);
        put("dq", L.dq);
        put("dk", L.dk);
        put("dv", L.dv);
        put("p", L.p);
        put("ds", L.ds);
        dj[pre + "max_logit"] = L.max_logit;
        if (cfg.attention.qk_norm) {
          dj[pre + "q_gain"] = L.q_gain_mean;
          dj[pre + "k_gain"] = L.k_gain_mean;
        }
      }
      dj["diagnostics_time_s"] = Seconds(d0, Clock::now());
      emit(dj);
    }
    if (eval) ABLATE_RETURN_IF_ERROR(evaluate(step));
    if (checkpointed) {
      ABLATE_RETURN_IF_ERROR(checkpoint(step));
    }
    if (options.preempt && options.preempt->load() && step < steps) {
      // Preempted: keep this step's work. Without a checkpoint directory there is nothing to keep.
      if (!checkpointed) ABLATE_RETURN_IF_ERROR(checkpoint(step));
      return finish("preempted", step,
                    ckpt_dir.empty() ? "preempted at step " + std::to_string(step) + " (no --out)"
                                     : "preempted: checkpointed at step " + std::to_string(step));
    }
  }
  if (start_step >= steps && std::isnan(last_val)) ABLATE_RETURN_IF_ERROR(evaluate(steps));
  return finish("ok", std::max(start_step, steps), "");
}

StatusOr<GemmTuning> TuneTrialGemms(const config::TrialConfig& cfg,
                                    const GemmTuneOptions& options) {
  if (cfg.device != "cuda" || !HaveTrainBackend("cuda")) {
    return FailedPrecondition(
        "--tune-gemm: the GEMMs it tunes are cuBLASLt's, on the CUDA backend, and this config runs "
        "on " +
        std::string(cfg.device == "cuda" ? "a trainer built without CUDA"
                                         : "the CPU (device: " + cfg.device +
                                               "; auto means cuda only where a GPU is visible)"));
  }
  DataConfig dc;
  dc.corpus = cfg.data.corpus;
  dc.val_fraction = cfg.data.val_fraction;
  dc.vocab_size = cfg.data.vocab_size;
  ABLATE_ASSIGN_OR_RETURN(Dataset data, LoadDataset(dc));
  ABLATE_ASSIGN_OR_RETURN(Gpt<float> model,
                          Gpt<float>::Create(ToModelConfig(cfg, data.vocab_size)));
  model.Init(cfg.seed);
  ABLATE_ASSIGN_OR_RETURN(std::unique_ptr<TrainBackend> backend,
                          Registry()["cuda"](cfg, std::move(model)));
  auto sampler_or = BatchSampler::Create(&data.train, cfg.model.seq_len, cfg.seed);
  if (!sampler_or.ok())
    return sampler_or.status().WithPrefix("training split of " + data.description);
  const int mb = cfg.train.micro_batch;
  ABLATE_ASSIGN_OR_RETURN(EvalBatches eval, EvalBatches::Create(&data.val, cfg.model.seq_len, mb,
                                                                cfg.data.eval_batches));
  std::vector<int32_t> inputs(size_t(mb) * cfg.model.seq_len), targets(inputs.size());
  // A whole step's micro-batches (a data-parallel backend expects them all, micro-batch i on rank
  // i / accum), then one evaluation batch.
  ABLATE_RETURN_IF_ERROR(backend->ZeroGrad());
  const int micro_steps = cfg.accumulation_steps() * cfg.gpus;
  for (int i = 0; i < micro_steps; ++i) {
    sampler_or->Next(mb, inputs.data(), targets.data());
    ABLATE_RETURN_IF_ERROR(
        backend->TrainMicroStep(inputs.data(), targets.data(), mb, 1.0f / float(micro_steps)));
  }
  ABLATE_RETURN_IF_ERROR(backend->TakeTrainLoss().status());
  if (eval.num_batches() > 0) {
    eval.Get(0, inputs.data(), targets.data());
    ABLATE_RETURN_IF_ERROR(backend->EvalLoss(inputs.data(), targets.data(), mb).status());
  }
  return backend->TuneGemms(options.candidates, options.reps, options.min_gain);
}

}  // namespace ablate::trainer
