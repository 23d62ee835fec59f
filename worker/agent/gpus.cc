#include "agent/gpus.h"

#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <sstream>

namespace ablate::agent {

StatusOr<GpuSelection> ParseGpuFlag(const std::string& flag) {
  GpuSelection sel;
  if (flag == "all" || flag.empty()) return sel;
  if (flag == "none") {
    sel.kind = GpuSelection::Kind::kNone;
    return sel;
  }
  sel.kind = GpuSelection::Kind::kList;
  std::stringstream in(flag);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(' ');
    const auto e = item.find_last_not_of(' ');
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    bool digits =
        !item.empty() && item.size() <= 6 &&
        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
      return InvalidArgument("--gpus: '" + item +
                             "' is not a GPU index; expected all, none or a "
                             "comma-separated list of indices such as 0,1");
    }
    const int idx = std::stoi(item);
    if (std::find(sel.indices.begin(), sel.indices.end(), idx) != sel.indices.end()) {
      return InvalidArgument("--gpus: GPU " + item + " is listed twice");
    }
    sel.indices.push_back(idx);
  }
  if (!flag.empty() && flag.back() == ',') {
    return InvalidArgument("--gpus: '" + flag + "' ends with a comma");
  }
  std::sort(sel.indices.begin(), sel.indices.end());
  return sel;
}

StatusOr<std::vector<v1::GpuInfo>> SelectGpus(const std::vector<v1::GpuInfo>& found,
                                              const GpuSelection& sel) {
  if (sel.kind == GpuSelection::Kind::kAll) return found;
  std::vector<v1::GpuInfo> out;
  if (sel.kind == GpuSelection::Kind::kNone) return out;
  for (int idx : sel.indices) {
    auto it = std::find_if(found.begin(), found.end(),
                           [&](const v1::GpuInfo& g) { return g.index() == idx; });
    if (it == found.end()) {
      std::string have;
      for (const auto& g : found) have += (have.empty() ? "" : ", ") + std::to_string(g.index());
      return InvalidArgument("--gpus: no GPU with index " + std::to_string(idx) + " (found " +
                             (have.empty() ? std::string("none") : have) + ")");
    }
    out.push_back(*it);
  }
  return out;
}

namespace {

// The few NVML entry points the worker needs, declared here so that nothing of CUDA is linked.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetMemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);

class DlopenNvml : public GpuProber {
 public:
  std::vector<v1::GpuInfo> Probe() override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<v1::GpuInfo> out;
    void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = ::dlerror();
      error_ = e ? e : "dlopen libnvidia-ml.so.1 failed";
      return out;
    }
    auto sym = [&](const char* name) { return ::dlsym(lib, name); };
    auto init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
    auto shutdown = reinterpret_cast<ShutdownFn>(sym("nvmlShutdown"));
    auto count_fn = reinterpret_cast<GetCountFn>(sym("nvmlDeviceGetCount_v2"));
    auto handle_fn = reinterpret_cast<GetHandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
    auto uuid_fn = reinterpret_cast<GetStringFn>(sym("nvmlDeviceGetUUID"));
    auto name_fn = reinterpret_cast<GetStringFn>(sym("nvmlDeviceGetName"));
    auto mem_fn = reinterpret_cast<GetMemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
    if (!init || !shutdown || !count_fn || !handle_fn || !uuid_fn || !name_fn || !mem_fn) {
      error_ = "libnvidia-ml.so.1 lacks an NVML function the worker needs";
      ::dlclose(lib);
      return out;
    }
    if (int rc = init(); rc != 0) {
      error_ = "nvmlInit_v2 failed with NVML error " + std::to_string(rc);
      ::dlclose(lib);
      return out;
    }
    unsigned int count = 0;
    if (int rc = count_fn(&count); rc != 0) {
      error_ = "nvmlDeviceGetCount_v2 failed with NVML error " + std::to_string(rc);
      count = 0;
    }
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      if (handle_fn(i, &dev) != 0) continue;
      char buf[256] = {0};
      v1::GpuInfo g;
      g.set_index(int(i));
      if (uuid_fn(dev, buf, sizeof buf) == 0) g.set_uuid(buf);
      buf[0] = 0;
      if (name_fn(dev, buf, sizeof buf) == 0) g.set_name(buf);
      nvmlMemory_t mem{};
      if (mem_fn(dev, &mem) == 0) g.set_memory_bytes(int64_t(mem.total));
      out.push_back(std::move(g));
    }
    shutdown();
    ::dlclose(lib);
    return out;
  }

  std::string last_error() const override {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }

  std::vector<v1::GpuMemory> ReadMemory() override {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<v1::GpuMemory> out;
    if (!mem_lib_) {
      if (mem_failed_) return out;
      // Loaded once and kept (nvmlInit is reference-counted; this one is never shut down).
      mem_lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
      auto init = mem_lib_ ? reinterpret_cast<InitFn>(::dlsym(mem_lib_, "nvmlInit_v2")) : nullptr;
      if (mem_lib_) {
        mem_count_ = reinterpret_cast<GetCountFn>(::dlsym(mem_lib_, "nvmlDeviceGetCount_v2"));
        mem_handle_ =
            reinterpret_cast<GetHandleFn>(::dlsym(mem_lib_, "nvmlDeviceGetHandleByIndex_v2"));
        mem_read_ = reinterpret_cast<GetMemoryFn>(::dlsym(mem_lib_, "nvmlDeviceGetMemoryInfo"));
      }
      if (!init || !mem_count_ || !mem_handle_ || !mem_read_ || init() != 0) {
        mem_failed_ = true;
        mem_lib_ = nullptr;
        return out;
      }
    }
    unsigned int count = 0;
    if (mem_count_(&count) != 0) return out;
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t dev = nullptr;
      nvmlMemory_t mem{};
      if (mem_handle_(i, &dev) != 0 || mem_read_(dev, &mem) != 0) continue;
      v1::GpuMemory m;
      m.set_index(int(i));
      m.set_used_bytes(int64_t(mem.used));
      m.set_total_bytes(int64_t(mem.total));
      out.push_back(m);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::string error_;  // GUARDED_BY(mu_)
  void* mem_lib_ = nullptr;  // GUARDED_BY(mu_): ReadMemory's handle, kept open
  bool mem_failed_ = false;
  GetCountFn mem_count_ = nullptr;
  GetHandleFn mem_handle_ = nullptr;
  GetMemoryFn mem_read_ = nullptr;
};

}  // namespace

GpuProber* NvmlProber() {
  static DlopenNvml* p = new DlopenNvml();
  return p;
}

}  // namespace ablate::agent
