// See data_parallel.h.
#include "trainer/cuda/data_parallel.h"

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "trainer/cuda/cuda_backend.h"
#include "ablate/cuda_status.h"
#include "ablate/memory_estimate.h"
#include "trainer/cuda/gpt_cuda.h"
#include "trainer/cuda/device_optimizer.h"

#if ABLATE_HAVE_NCCL
#include <nccl.h>
#endif

namespace ablate::trainer::cuda {

#if !ABLATE_HAVE_NCCL

bool HaveNccl() { return false; }

StatusOr<std::unique_ptr<TrainBackend>> CreateDataParallelBackend(const config::TrialConfig& config,
                                                                  Gpt<float>) {
  return FailedPrecondition("gpus: " + std::to_string(config.gpus) +
                            ": this ablate-train was built without NCCL; data parallel training "
                            "needs it (the CUDA trainer runs gpus: 1)");
}

#else

bool HaveNccl() { return true; }

namespace {

Status NcclCheck(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return Status::Ok();
  return Internal("NCCL " + what + ": " + ncclGetErrorString(r));
}

// One host thread bound to one CUDA device, running posted tasks in order. Keeping every call on a
// rank's own thread means the current device never has to be switched, and the ranks' host-side
// launch work (hundreds of kernels per micro-batch) runs concurrently.
class RankThread {
 public:
  explicit RankThread(int device) : device_(device), thread_([this] { Loop(); }) {}
  ~RankThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  RankThread(const RankThread&) = delete;
  RankThread& operator=(const RankThread&) = delete;

  // Queues `task`; it is skipped when an earlier task failed and Wait has not yet reported it.
  void Post(std::function<Status()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  // Blocks until every posted task has run; returns (and clears) the first error since the last
  // Wait.
  Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
    Status s = error_;
    error_ = Status::Ok();
    return s;
  }

 private:
  void Loop() {
    const cudaError_t set = cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    if (set != cudaSuccess) {
      error_ = Internal("CUDA cudaSetDevice(" + std::to_string(device_) +
                        "): " + cudaGetErrorString(set));
    }
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      std::function<Status()> task = std::move(queue_.front());
      queue_.pop_front();
      if (error_.ok()) {
        busy_ = true;
        lock.unlock();
        Status s = task();
        task = nullptr;  // release captured buffers off the lock
        lock.lock();
        busy_ = false;
        if (!s.ok() && error_.ok()) {
          error_ = s.WithPrefix("GPU " + std::to_string(device_));
        }
      }
      if (queue_.empty()) done_cv_.notify_all();
    }
  }

  const int device_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<Status()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  Status error_;
  std::thread thread_;  // last: starts after the members it uses exist
};

struct Rank {
  std::unique_ptr<GptCuda> model;
  std::unique_ptr<DeviceOptimizer> opt;
  bool mirror_by_opt = false;  // the optimizer writes the model's bf16 weight mirror
  ncclComm_t comm = nullptr;
  double loss = 0;
  double norm = 0;
  OptimizerStats stats;
  std::unique_ptr<RankThread> thread;  // last: destroyed (joined) first
};

class DataParallelBackend : public TrainBackend {
 public:
  explicit DataParallelBackend(int micro_per_rank) : micro_per_rank_(micro_per_rank) {}

  ~DataParallelBackend() override {
    // Each rank's device objects are released on its own thread (its device current), once the
    // queued work is done; the communicators are destroyed by all ranks at the same time (NCCL may
    // synchronize the ranks of one clique while tearing it down).
    for (auto& r : ranks_) {
      if (r.thread) (void)r.thread->Wait();
    }
    for (auto& r : ranks_) {
      if (!r.thread) continue;
      Rank* p = &r;
      r.thread->Post([p] {
        p->opt.reset();
        p->model.reset();
        if (p->comm) ncclCommDestroy(p->comm);
        p->comm = nullptr;
        return Status::Ok();
      });
    }
    for (auto& r : ranks_) {
      if (r.thread) (void)r.thread->Wait();
    }
  }

  // Builds the replicas and communicators (see CreateDataParallelBackend).
  Status Init(const config::TrialConfig& config, const Gpt<float>& model) {
    const int k = config.gpus;
    ranks_.resize(k);
    for (int r = 0; r < k; ++r) ranks_[r].thread = std::make_unique<RankThread>(r);
    // Replicas are built one rank at a time (Create reads the shared host model).
    for (int r = 0; r < k; ++r) {
      Rank* p = &ranks_[r];
      ABLATE_RETURN_IF_ERROR(Run(r, [&, p]() -> Status {
        ABLATE_ASSIGN_OR_RETURN(p->model, GptCuda::Create(model));
        ABLATE_ASSIGN_OR_RETURN(
            p->opt, DeviceOptimizer::Create(config.optimizer, p->model->params(),
                                            p->model->num_params(), p->model->stream()));
        p->opt->SetBf16Mirror(p->model->bf16_weights());
        p->mirror_by_opt = p->model->bf16_weights() != nullptr;
        return Status::Ok();
      }));
      cudaDeviceProp prop{};
      cudaGetDeviceProperties(&prop, r);
      device_names_.push_back(prop.name);
    }
    std::vector<ncclComm_t> comms(k);
    std::vector<int> devs(k);
    for (int r = 0; r < k; ++r) devs[r] = r;
    ABLATE_RETURN_IF_ERROR(NcclCheck(ncclCommInitAll(comms.data(), k, devs.data()),
                                     "ncclCommInitAll over " + std::to_string(k) + " GPUs"));
    for (int r = 0; r < k; ++r) ranks_[r].comm = comms[r];
    cudaSetDevice(0);  // ncclCommInitAll may leave another device current on this thread
    int v = 0;
    ncclGetVersion(&v);
    nccl_version_ = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                    std::to_string(v % 100);
    return Status::Ok();
  }

  size_t num_params() const override { return ranks_[0].model->num_params(); }
  double FlopsPerToken() const override { return ranks_[0].model->FlopsPerToken(); }
  std::pair<double, std::string> PeakFlops() const override {
    // MFU of the whole job: k GPUs' peak (the loop's tokens/s counts every rank's tokens).
    auto [peak, source] = GpuPeakFlops();
    const int k = int(ranks_.size());
    return {peak * k, std::to_string(k) + " x " + source};
  }
  int64_t DeviceMemoryBytes() const override {
    // One process drives every rank: its allocations split evenly over them.
    return DeviceBytesAllocated().load() / std::max(1, int(ranks_.size())) + config::kContextBytes;
  }
  nlohmann::json StartInfo() const override {
    return {{"backend", "cuda"},
            {"device", device_names_[0]},
            {"devices", device_names_},
            {"gpus", ranks_.size()},
            {"data_parallel", "nccl " + nccl_version_ +
                                  ": fp32 gradient all-reduce (sum of pre-scaled micro-batch "
                                  "gradients), optimizer replicated on every rank"},
            {"precision",
             "bf16 GEMM operands and activations, fp32 master weights, grads, "
             "residual stream and reductions"},
            {"optimizer_device", "cuda"}};
  }
  size_t optimizer_state_bytes() const override { return ranks_[0].opt->state_bytes(); }
  size_t optimizer_state_bytes_fp32() const override { return ranks_[0].opt->state_bytes_fp32(); }
  int spectral_tensors() const override { return ranks_[0].opt->spectral_tensors(); }

  Status ZeroGrad() override {
    micro_ = 0;
    return ForAll([](Rank& r) { return r.model->ZeroGrad(); });
  }

  Status TrainMicroStep(const int32_t* inputs, const int32_t* targets, int mb,
                        float grad_scale) override {
    const int r = micro_ / micro_per_rank_;
    if (r >= int(ranks_.size())) {
      return Internal("data parallel: more than accumulation_steps x gpus = " +
                      std::to_string(micro_per_rank_ * ranks_.size()) +
                      " micro-batches in one step");
    }
    ++micro_;
    // The loop reuses its token buffers for the next micro-batch: the task gets its own copy.
    const size_t n = size_t(mb) * ranks_[r].model->config().seq_len;
    auto tokens = std::make_shared<std::vector<int32_t>>(2 * n);
    std::memcpy(tokens->data(), inputs, n * sizeof(int32_t));
    std::memcpy(tokens->data() + n, targets, n * sizeof(int32_t));
    Rank* p = &ranks_[r];
    p->thread->Post([p, tokens, n, mb, grad_scale]() -> Status {
      ABLATE_RETURN_IF_ERROR(p->model->Forward(tokens->data(), tokens->data() + n, mb));
      return p->model->Backward(grad_scale);
    });
    return Status::Ok();
  }

  StatusOr<double> TakeTrainLoss() override {
    ABLATE_RETURN_IF_ERROR(ForAll([](Rank& r) -> Status {
      ABLATE_ASSIGN_OR_RETURN(r.loss, r.model->TakeLoss());
      return Status::Ok();
    }));
    double sum = 0;
    for (const Rank& r : ranks_) sum += r.loss;
    return sum;
  }

  StatusOr<double> GradNormAndClip(double max_norm) override {
    // Every rank must reach the all-reduce, or the others would wait in it forever: check that
    // the step fed each rank its share and that no rank has a pending error first.
    if (micro_ != micro_per_rank_ * int(ranks_.size())) {
      return Internal("data parallel: " + std::to_string(micro_) +
                      " micro-batches in this step, expected accumulation_steps x gpus = " +
                      std::to_string(micro_per_rank_ * ranks_.size()));
    }
    for (Rank& r : ranks_) ABLATE_RETURN_IF_ERROR(r.thread->Wait());
    ABLATE_RETURN_IF_ERROR(ForAll([max_norm](Rank& r) -> Status {
      float* g = r.model->grads();
      ABLATE_RETURN_IF_ERROR(NcclCheck(
          ncclAllReduce(g, g, r.model->num_params(), ncclFloat, ncclSum, r.comm, r.model->stream()),
          "gradient all-reduce"));
      ABLATE_ASSIGN_OR_RETURN(r.norm, r.model->GradNormAndClip(max_norm));
      return Status::Ok();
    }));
    return ranks_[0].norm;
  }

  Status OptimizerStep(int64_t step, double lr_scale, double p, OptimizerStats* stats) override {
    ABLATE_RETURN_IF_ERROR(ForAll([=](Rank& r) -> Status {
      r.stats = OptimizerStats();
      ABLATE_RETURN_IF_ERROR(r.opt->Step(r.model->weights(), r.model->grads(), step, lr_scale, p,
                                         stats ? &r.stats : nullptr));
      return r.model->WeightsUpdated(r.mirror_by_opt);
    }));
    if (stats) *stats = ranks_[0].stats;
    return Status::Ok();
  }

  // Every replica replays the same table or none: their weights must stay bit-identical.
  Status SetGemmTuning(std::shared_ptr<const GemmTuning> tuning) override {
    tuned_ = false;
    Status st = ForAll([&](Rank& r) { return r.model->SetGemmTuning(tuning); });
    if (!st.ok()) {
      ABLATE_RETURN_IF_ERROR(ForAll([](Rank& r) { return r.model->SetGemmTuning(nullptr); }));
      return st;
    }
    tuned_ = tuning != nullptr;
    return Status::Ok();
  }
  // Rank 0's problems (every rank runs the same shapes); the table is for SetGemmTuning.
  StatusOr<GemmTuning> TuneGemms(int candidates, int reps, double min_gain) override {
    GemmTuning table;
    ABLATE_RETURN_IF_ERROR(Run(0, [&]() -> Status {
      ABLATE_ASSIGN_OR_RETURN(table, ranks_[0].model->TuneGemms(candidates, reps, min_gain));
      return Status::Ok();
    }));
    return table;
  }
  nlohmann::json GemmTuningUse() const override {
    return tuned_ ? GemmUseJson(ranks_[0].model->GemmUse()) : nlohmann::json();
  }

  StatusOr<double> EvalLoss(const int32_t* inputs, const int32_t* targets, int mb) override {
    double loss = 0;
    ABLATE_RETURN_IF_ERROR(Run(0, [&]() -> Status {
      ABLATE_ASSIGN_OR_RETURN(loss, ranks_[0].model->Loss(inputs, targets, mb));
      return Status::Ok();
    }));
    return loss;
  }

  StatusOr<std::vector<Gpt<float>::LayerDiagnostics>> Diagnostics() override {
    std::vector<Gpt<float>::LayerDiagnostics> out;
    const int last = int(ranks_.size()) - 1;
    ABLATE_RETURN_IF_ERROR(Run(last, [&]() -> Status {
      ABLATE_ASSIGN_OR_RETURN(out, ranks_[last].model->AttentionDiagnostics(1));
      return Status::Ok();
    }));
    return out;
  }

  StatusOr<std::string> SaveWeights() override {
    const size_t n = num_params();
    std::vector<std::vector<float>> w(ranks_.size(), std::vector<float>(n));
    ABLATE_RETURN_IF_ERROR(
        ForAll([&](Rank& r) { return r.model->GetWeights(w[&r - &ranks_[0]].data()); }));
    // The replicas must be identical (same reduced gradients, same deterministic optimizer); a
    // difference is a bug that would make the checkpoint depend on which rank wrote it.
    for (size_t r = 1; r < ranks_.size(); ++r) {
      if (std::memcmp(w[0].data(), w[r].data(), n * sizeof(float)) != 0) {
        size_t i = 0;
        while (i < n && std::memcmp(&w[0][i], &w[r][i], sizeof(float)) == 0) ++i;
        return Internal("data parallel: the weights of GPU " + std::to_string(r) +
                        " differ from GPU 0's (first at parameter " + std::to_string(i) + ": " +
                        std::to_string(w[r][i]) + " vs " + std::to_string(w[0][i]) +
                        "); the replicas diverged");
      }
    }
    return std::string(reinterpret_cast<const char*>(w[0].data()), n * sizeof(float));
  }

  StatusOr<std::string> SaveOptimizer() override {
    std::string blob;
    ABLATE_RETURN_IF_ERROR(Run(0, [&]() -> Status {
      blob = ranks_[0].opt->Save();
      return Status::Ok();
    }));
    return blob;
  }

  Status LoadWeights(const std::string& bytes) override {
    if (bytes.size() != num_params() * sizeof(float)) {
      return DataLoss("checkpoint weights do not match the model");
    }
    // Copied out first: the string's buffer may not be suitably aligned for float.
    std::vector<float> w(num_params());
    std::memcpy(w.data(), bytes.data(), bytes.size());
    return ForAll([&](Rank& r) { return r.model->SetWeights(w.data()); });
  }

  Status LoadOptimizer(const std::string& blob) override {
    return ForAll([&](Rank& r) { return r.opt->Load(blob); });
  }

 private:
  // Runs fn(rank) on every rank concurrently and waits for all; the first error (lowest rank).
  Status ForAll(const std::function<Status(Rank&)>& fn) {
    for (Rank& r : ranks_) {
      Rank* p = &r;
      r.thread->Post([p, &fn] { return fn(*p); });
    }
    Status first;
    for (Rank& r : ranks_) {
      Status s = r.thread->Wait();
      if (!s.ok() && first.ok()) first = s;
    }
    return first;
  }
  Status Run(int rank, std::function<Status()> fn) {
    ranks_[rank].thread->Post(std::move(fn));
    return ranks_[rank].thread->Wait();
  }

  const int micro_per_rank_;
  int micro_ = 0;
  std::vector<Rank> ranks_;
  bool tuned_ = false;  // a GEMM tuning table is in use on every rank
  std::vector<std::string> device_names_;
  std::string nccl_version_;
};

}  // namespace

StatusOr<std::unique_ptr<TrainBackend>> CreateDataParallelBackend(const config::TrialConfig& config,
                                                                  Gpt<float> model) {
  const int k = config.gpus;
  if (k < 2) return InvalidArgument("data parallel needs gpus >= 2, got " + std::to_string(k));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (count < k) {
    return FailedPrecondition("gpus: " + std::to_string(k) + ": only " + std::to_string(count) +
                              " CUDA device(s) visible to this process (CUDA_VISIBLE_DEVICES)");
  }
  const int micro_per_rank = config.accumulation_steps();
  if (micro_per_rank < 1) {
    return InvalidArgument("data parallel: tokens_per_step gives no micro-batch per rank");
  }
  auto backend = std::make_unique<DataParallelBackend>(micro_per_rank);
  ABLATE_RETURN_IF_ERROR(backend->Init(config, model));
  return std::unique_ptr<TrainBackend>(std::move(backend));
}

#endif  // ABLATE_HAVE_NCCL

}  // namespace ablate::trainer::cuda
