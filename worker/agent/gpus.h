// GPU discovery and the --gpus flag.
//
// Discovery loads NVML (libnvidia-ml.so.1, part of the driver) with dlopen at run time, so the
// worker never links CUDA and runs unchanged on machines without a GPU: no library, or an NVML that
// fails to initialize, means no GPUs. Indices are NVML's, which match CUDA_VISIBLE_DEVICES when
// CUDA_DEVICE_ORDER=PCI_BUS_ID (the order nvidia-smi shows).
// Thread safety: GpuProber implementations are safe to call from any thread; the rest are pure.
#pragma once

#include <string>
#include <vector>

#include "ablate/status.h"
#include "proto/ablate.pb.h"

namespace ablate::agent {

// --gpus: "all" (every GPU found), "none" (a CPU worker), or a list of indices "0,1,3".
struct GpuSelection {
  enum class Kind { kAll, kNone, kList };
  Kind kind = Kind::kAll;
  std::vector<int> indices;  // kList: sorted, no duplicates
};

// InvalidArgument (naming the bad item) for anything else, negative or repeated indices.
StatusOr<GpuSelection> ParseGpuFlag(const std::string& flag);

// The GPUs of `found` that `sel` names. InvalidArgument when the list names a GPU that is not there
// ("--gpus: no GPU with index 3 (found 0, 1)").
StatusOr<std::vector<v1::GpuInfo>> SelectGpus(const std::vector<v1::GpuInfo>& found,
                                              const GpuSelection& sel);

class GpuProber {
 public:
  virtual ~GpuProber() = default;
  // Every GPU on this host, by index. An empty list when there is no driver.
  virtual std::vector<v1::GpuInfo> Probe() = 0;
  // Why Probe() found nothing, for the log ("libnvidia-ml.so.1: cannot open shared object file").
  virtual std::string last_error() const = 0;
  // Each GPU's memory now (used and total bytes, by index); empty when it cannot be read. Cheap
  // enough to call every second (the library stays loaded after the first call).
  virtual std::vector<v1::GpuMemory> ReadMemory() { return {}; }
};

// NVML through dlopen. Never null; not owned.
GpuProber* NvmlProber();

}  // namespace ablate::agent
