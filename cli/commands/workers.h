// ablate workers [--format table|json|csv]
//
// Every worker: id, host, state (idle | busy | draining | quarantined | lost), GPUs (count and
// names), CPU slots, what is busy, the attempts it runs, consecutive failures and when it was last
// seen.
#pragma once

#include "commands/command.h"

namespace ablate::cli {

struct WorkersOptions {
  Format format = Format::kTable;
};

Status ListWorkers(Client& client, const WorkersOptions& options, const Io& io);
void AddWorkersCommand(CLI::App& app, Action* selected);

// "2× NVIDIA H100 80GB HBM3", "1× A100, 1× H100", "-" for none.
std::string GpuSummary(const v1::WorkerInfo& w);
Table WorkersTable(const v1::ListWorkersResponse& resp, double now);

}  // namespace ablate::cli
