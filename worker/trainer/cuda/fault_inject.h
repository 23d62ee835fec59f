// A real device fault on demand, for the tests of GPU sharing (a trainer that crashes on a shared
// GPU must fail alone; tests/gpu/worker). ablate-train triggers it when the environment variable
// ABLATE_INJECT_DEVICE_FAULT_AT_STEP is a step number (and ABLATE_INJECT_DEVICE_FAULT_TRIAL, when
// set, equals this trainer's ABLATE_TRIAL_ID, so that one trial of a worker's faults): at that
// optimizer step the CUDA backend launches a kernel that writes to an unmapped device address,
// which ends the CUDA context with cudaErrorIllegalAddress (a sticky error: the process must
// exit). Nothing else reads them.
// Thread safety: any thread with the trial's device current.
#pragma once

#include <cstdint>

#include "ablate/status.h"

namespace ablate::trainer::cuda {

// The step of ABLATE_INJECT_DEVICE_FAULT_AT_STEP (read once), or 0 when unset or not a number.
int64_t InjectedFaultStep();

// Launches the faulting kernel and synchronizes: returns the fault as a Status.
Status InjectDeviceFault();

}  // namespace ablate::trainer::cuda
