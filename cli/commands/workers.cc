#include "commands/workers.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "render/progress.h"

namespace ablate::cli {

std::string GpuSummary(const v1::WorkerInfo& w) {
  if (w.gpus().empty()) return "-";
  // Group equal names, keeping first-seen order.
  std::vector<std::pair<std::string, int>> groups;
  for (const v1::GpuInfo& g : w.gpus()) {
    const std::string name = g.name().empty() ? "GPU" : g.name();
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& p) { return p.first == name; });
    if (it == groups.end()) {
      groups.emplace_back(name, 1);
    } else {
      ++it->second;
    }
  }
  std::string s;
  for (const auto& [name, n] : groups) {
    s += (s.empty() ? "" : ", ") + std::to_string(n) + "× " + name;
  }
  return s;
}

Table WorkersTable(const v1::ListWorkersResponse& resp, double now) {
  Table t;
  t.AddColumn("id", "worker_id");
  t.AddColumn("host", "hostname");
  t.AddColumn("state");
  t.AddColumn("gpus", "", Column::Show::kTextOnly);
  t.AddColumn("gpus", "gpus", Column::Show::kMachineOnly);
  t.AddColumn("gpu_names", "gpu_names", Column::Show::kMachineOnly);
  t.AddColumn("cpu slots", "cpu_slots");
  t.AddColumn("busy", "", Column::Show::kTextOnly);
  t.AddColumn("busy_gpus", "busy_gpus", Column::Show::kMachineOnly);
  t.AddColumn("busy_cpu_slots", "busy_cpu_slots", Column::Show::kMachineOnly);
  t.AddColumn("running", "", Column::Show::kTextOnly);
  t.AddColumn("running", "running", Column::Show::kMachineOnly);
  t.AddColumn("per gpu", "", Column::Show::kTextOnly);
  t.AddColumn("gpu_load", "gpu_load", Column::Show::kMachineOnly);
  t.AddColumn("failures");
  t.AddColumn("last seen", "", Column::Show::kTextOnly);
  t.AddColumn("last_seen_at", "last_seen_at", Column::Show::kMachineOnly);
  for (const v1::WorkerInfo& w : resp.workers()) {
    nlohmann::json names = nlohmann::json::array();
    for (const v1::GpuInfo& g : w.gpus()) names.push_back(g.name());
    nlohmann::json busy_gpus = nlohmann::json::array();
    for (int g : w.busy_gpus()) busy_gpus.push_back(g);
    nlohmann::json running = nlohmann::json::array();
    std::string running_text;
    for (const v1::AttemptRef& a : w.running()) {
      running.push_back({{"trial_id", a.trial_id()}, {"attempt", a.attempt()}});
      // "12#2": trial 12, attempt 2.
      running_text += (running_text.empty() ? "" : " ") + std::to_string(a.trial_id()) + "#" +
                      std::to_string(a.attempt());
    }
    std::string busy;
    nlohmann::json load = nlohmann::json::array();
    std::string load_text;
    for (const v1::GpuLoad& g : w.gpu_load()) {
      nlohmann::json ids = nlohmann::json::array();
      for (int64_t id : g.trial_ids()) ids.push_back(id);
      load.push_back({{"index", g.index()},
                      {"trial_ids", ids},
                      {"share", g.share()},
                      {"estimated_bytes", g.estimated_bytes()},
                      {"used_bytes", g.used_bytes()},
                      {"total_bytes", g.total_bytes()}});
      if (g.trial_ids().empty() && g.used_bytes() == 0) continue;
      // "0: 3 trials 41/80 GiB": GPU 0 holds 3 trials, NVML sees 41 of its 80 GiB used.
      char mem[64] = "";
      if (g.total_bytes() > 0) {
        std::snprintf(mem, sizeof mem, " %.0f/%.0f GiB", double(g.used_bytes()) / (1 << 30),
                      double(g.total_bytes()) / (1 << 30));
      }
      load_text += (load_text.empty() ? "" : "; ") + std::to_string(g.index()) + ": " +
                   std::to_string(g.trial_ids_size()) +
                   (g.trial_ids_size() == 1 ? " trial" : " trials") + mem;
    }
    if (!w.gpus().empty()) {
      busy = std::to_string(w.busy_gpus_size()) + "/" + std::to_string(w.gpus_size()) + " gpus";
    } else if (w.cpu_slots() > 0) {
      busy = std::to_string(w.busy_cpu_slots()) + "/" + std::to_string(w.cpu_slots()) + " slots";
    }
    t.AddRow({Cell::Text(w.worker_id()), Cell::Text(w.hostname()), Cell::Text(w.state()),
              Cell::Text(GpuSummary(w)), Cell::Int(w.gpus_size()), Cell::Json(names.dump()),
              Cell::Int(w.cpu_slots()), busy.empty() ? Cell() : Cell::Text(busy),
              Cell::Json(busy_gpus.dump()), Cell::Int(w.busy_cpu_slots()),
              running_text.empty() ? Cell() : Cell::Text(running_text), Cell::Json(running.dump()),
              load_text.empty() ? Cell() : Cell::Text(load_text), Cell::Json(load.dump()),
              Cell::Int(w.failures()), Cell::Text(FormatAge(now, w.last_seen_at())),
              TimeCell(w.last_seen_at())});
  }
  return t;
}

Status ListWorkers(Client& client, const WorkersOptions& options, const Io& io) {
  v1::ListWorkersResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::ListWorkers,
                                     v1::ListWorkersRequest(), &resp));
  *io.out << Render(WorkersTable(resp, io.now()), options.format);
  if (resp.workers().empty() && options.format == Format::kTable) {
    *io.err << "no workers have registered; start one with: ablate-worker --coordinator "
            << client.options().coordinator << " --token-file F\n";
  }
  return Status::Ok();
}

void AddWorkersCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<WorkersOptions>();
  auto format = std::make_shared<std::string>("table");
  CLI::App* sub = app.add_subcommand("workers", "List workers, their GPUs and running trials");
  AddFormatOption(sub, format.get());
  sub->callback([opts, format, selected] {
    *selected = [opts, format](CommandEnv& env) -> Status {
      opts->format = *ParseFormat(*format);
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return ListWorkers(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
