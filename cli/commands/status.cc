#include "commands/status.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "render/progress.h"

namespace ablate::cli {
namespace {

constexpr size_t kShortReason = 48;

// Protobuf maps iterate in no particular order; print axes sorted so output is stable.
std::map<std::string, std::string> SortedAxes(const v1::TrialSummary& t) {
  return {t.axes().begin(), t.axes().end()};
}

// The commit's first 12 characters, keeping a "-dirty" suffix (a build from a modified tree).
std::string ShortCommit(const std::string& c) {
  const std::string dirty = "-dirty";
  const bool is_dirty = c.size() > dirty.size() &&
                        c.compare(c.size() - dirty.size(), dirty.size(), dirty) == 0;
  const std::string hash = is_dirty ? c.substr(0, c.size() - dirty.size()) : c;
  return hash.substr(0, 12) + (is_dirty ? dirty : "");
}

// The build that ran an attempt: "0.4.0 1a2b3c4d5e6f numerics 1"; "" when it was not reported.
std::string BuildText(const v1::BuildInfo& b) {
  if (b.version().empty() && b.commit().empty() && b.numerics().empty()) return "";
  return (b.version().empty() ? "?" : b.version()) + " " +
         (b.commit().empty() ? "?" : ShortCommit(b.commit())) + " numerics " +
         (b.numerics().empty() ? "?" : b.numerics());
}

nlohmann::ordered_json BuildJson(const v1::BuildInfo& b) {
  if (BuildText(b).empty()) return nullptr;
  return {{"version", b.version()}, {"commit", b.commit()}, {"numerics", b.numerics()}};
}

Status ShowTrial(Client& client, int64_t trial_id, const StatusOptions& options, const Io& io) {
  v1::GetTrialRequest req;
  req.set_trial_id(trial_id);
  v1::GetTrialResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::GetTrial, req, &resp));
  const v1::TrialSummary& t = resp.trial();

  if (options.format != Format::kTable) {
    // One trial is one object; the attempts and metrics nest inside it.
    nlohmann::ordered_json j;
    j["trial_id"] = t.trial_id();
    j["sweep"] = resp.sweep_name();
    j["state"] = std::string(TrialStateName(t.state()));
    j["attempt"] = t.attempt();
    // Absent values are null, as in every other listing (cli/README.md).
    auto text_or_null = [](const std::string& v) {
      return v.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
    };
    j["worker"] = text_or_null(t.worker_id());
    j["step"] = t.step();
    j["total_steps"] = t.total_steps();
    j["loss"] = std::isfinite(t.loss()) ? nlohmann::ordered_json(t.loss()) : nullptr;
    j["val_loss"] = std::isfinite(t.val_loss()) ? nlohmann::ordered_json(t.val_loss()) : nullptr;
    j["reason"] = text_or_null(t.reason());
    j["config_hash"] = t.config_hash();
    j["tags"] = nlohmann::ordered_json(std::vector<std::string>(t.tags().begin(), t.tags().end()));
    j["note"] = text_or_null(t.note());
    j["axes"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : SortedAxes(t)) j["axes"][k] = v;
    j["config"] = nlohmann::ordered_json::parse(t.config_json(), nullptr, false);
    if (j["config"].is_discarded()) j["config"] = nullptr;
    j["attempts"] = nlohmann::ordered_json::array();
    for (const v1::AttemptInfo& a : resp.attempts()) {
      j["attempts"].push_back({{"attempt", a.attempt()},
                               {"worker", a.worker_id()},
                               {"state", a.state()},
                               {"started_at", a.started_at()},
                               {"ended_at", a.ended_at()},
                               {"exit_code", a.exit_code()},
                               {"reason", text_or_null(a.reason())},
                               {"checkpoint_step", a.checkpoint_step()},
                               {"build", BuildJson(a.build())}});
    }
    j["decisions"] = nlohmann::ordered_json::parse(
        RenderJson(DecisionsTable(resp.decisions())), nullptr, false);
    j["latest"] = nlohmann::ordered_json::object();
    for (const v1::MetricPoint& m : resp.latest()) {
      j["latest"][m.name()] = {
          {"step", m.step()},
          {"value", std::isfinite(m.value()) ? nlohmann::ordered_json(m.value())
                                             : nlohmann::ordered_json(nullptr)}};
    }
    if (options.format == Format::kJson) {
      *io.out << j.dump(2) << "\n";
    } else {
      // CSV has no nesting: the trial's own fields only.
      Table row;
      std::vector<Cell> cells;
      for (const auto& [k, v] : j.items()) {
        if (v.is_structured()) continue;
        row.AddColumn(k);
        if (v.is_null()) {
          cells.push_back(Cell());
        } else if (v.is_number_integer()) {
          cells.push_back(Cell::Int(v.get<int64_t>()));
        } else if (v.is_number()) {
          cells.push_back(Cell::Real(v.get<double>()));
        } else {
          cells.push_back(Cell::Text(v.get<std::string>()));
        }
      }
      row.AddRow(std::move(cells));
      *io.out << RenderCsv(row);
    }
    return Status::Ok();
  }

  std::string axes;
  for (const auto& [k, v] : SortedAxes(t)) axes += (axes.empty() ? "" : " ") + k + "=" + v;
  *io.out << "trial " << t.trial_id() << " of sweep " << resp.sweep_name() << ": "
          << TrialStateName(t.state()) << (t.reason().empty() ? "" : " (" + t.reason() + ")") << "\n"
          << "  axes     " << (axes.empty() ? "-" : axes) << "\n"
          << "  hash     " << t.config_hash() << "\n"
          << "  step     " << t.step() << "/" << t.total_steps() << "   loss "
          << FormatFixed(t.loss(), 4) << "   val_loss " << FormatFixed(t.val_loss(), 4) << "\n";
  if (t.tags_size() > 0) {
    std::string tags;
    for (const std::string& tag : t.tags()) tags += (tags.empty() ? "" : ", ") + tag;
    *io.out << "  tags     " << tags << "\n";
  }
  if (!t.note().empty()) *io.out << "  note     " << t.note() << "\n";
  if (!resp.attempts().empty()) {
    Table at;
    at.AddColumn("attempt");
    at.AddColumn("worker");
    at.AddColumn("state");
    at.AddColumn("gpus");
    at.AddColumn("checkpoint");
    at.AddColumn("exit");
    at.AddColumn("reason");
    at.AddColumn("build");
    for (const v1::AttemptInfo& a : resp.attempts()) {
      std::string gpus;
      for (int g : a.gpu_indices()) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
      at.AddRow({Cell::Int(a.attempt()), Cell::Text(a.worker_id()), Cell::Text(a.state()),
                 gpus.empty() ? Cell() : Cell::Text(gpus),
                 a.checkpoint_path().empty() ? Cell() : Cell::Int(a.checkpoint_step()),
                 a.state() == "running" ? Cell() : Cell::Int(a.exit_code()),
                 a.reason().empty() ? Cell() : Cell::Text(a.reason()),
                 BuildText(a.build()).empty() ? Cell() : Cell::Text(BuildText(a.build()))});
    }
    *io.out << "\n" << RenderText(at);
  }
  if (!resp.decisions().empty()) {
    *io.out << "\nearly-stopping judgments of its configuration:\n"
            << RenderText(DecisionsTable(resp.decisions()));
  }
  if (!resp.latest().empty()) {
    Table mt;
    mt.AddColumn("metric");
    mt.AddColumn("step");
    mt.AddColumn("value");
    for (const v1::MetricPoint& m : resp.latest()) {
      mt.AddRow({Cell::Text(m.name()), Cell::Int(m.step()), Cell::Real(m.value(), Cell::kGeneral)});
    }
    *io.out << "\n" << RenderText(mt);
  }
  return Status::Ok();
}

}  // namespace

Table DecisionsTable(const google::protobuf::RepeatedPtrField<v1::StopDecision>& decisions) {
  Table t;
  t.AddColumn("id");
  t.AddColumn("rule");
  t.AddColumn("step");
  t.AddColumn("rung");
  t.AddColumn("config");
  t.AddColumn("group");
  t.AddColumn("trials", "", Column::Show::kTextOnly);
  t.AddColumn("trial_ids", "trial_ids", Column::Show::kMachineOnly);
  t.AddColumn("metric");
  t.AddColumn("value");
  t.AddColumn("compared", "", Column::Show::kTextOnly);
  t.AddColumn("compared", "compared", Column::Show::kMachineOnly);
  t.AddColumn("threshold");
  t.AddColumn("decision");
  for (const v1::StopDecision& d : decisions) {
    std::string trials;
    nlohmann::json ids = nlohmann::json::array();
    for (int64_t id : d.trial_ids()) {
      trials += (trials.empty() ? "" : ",") + std::to_string(id);
      ids.push_back(id);
    }
    nlohmann::json compared = nlohmann::json::array();
    for (int i = 0; i < d.compared_configs_size() && i < d.compared_values_size(); ++i) {
      const double v = d.compared_values(i);
      compared.push_back({{"config", d.compared_configs(i)},
                          {"value", std::isfinite(v) ? nlohmann::json(v) : nlohmann::json()}});
    }
    t.AddRow({Cell::Int(d.id()), Cell::Text(d.rule()), Cell::Int(d.step()), Cell::Int(d.rung()),
              Cell::Text(d.config()), d.group().empty() ? Cell() : Cell::Text(d.group()),
              Cell::Text(trials), Cell::Json(ids.dump()), Cell::Text(d.metric()),
              Cell::Real(d.value(), Cell::kGeneral), Cell::Int(d.compared_configs_size()),
              Cell::Json(compared.dump()),
              std::isfinite(d.threshold()) ? Cell::Real(d.threshold(), Cell::kGeneral) : Cell(),
              Cell::Text(d.decision())});
  }
  return t;
}

Table SweepsTable(const v1::ListSweepsResponse& resp, bool show_archived) {
  Table t;
  t.AddColumn("id");
  t.AddColumn("name");
  if (show_archived) t.AddColumn("archived");
  for (const char* state :
       {"total", "queued", "running", "succeeded", "failed", "diverged", "canceled"}) {
    t.AddColumn(state);
  }
  // Only sweeps with early stopping have stopped trials: the text shows the column when one does.
  bool any_stopped = false;
  for (const v1::SweepInfo& s : resp.sweeps()) any_stopped |= StateCount(s, "stopped") > 0;
  t.AddColumn("stopped", "stopped", any_stopped ? Column::Show::kAll : Column::Show::kMachineOnly);
  t.AddColumn("progress", "", Column::Show::kTextOnly).align = Column::Align::kRight;
  t.AddColumn("progress_pct", "progress_pct", Column::Show::kMachineOnly);
  t.AddColumn("waiting_reason", "waiting_reason", Column::Show::kMachineOnly);
  for (const v1::SweepInfo& s : resp.sweeps()) {
    std::vector<Cell> row{Cell::Int(s.sweep_id()), Cell::Text(s.name())};
    if (show_archived) row.push_back(s.archived() ? Cell::Text("archived") : Cell());
    row.push_back(Cell::Int(s.total()));
    for (const char* state :
         {"queued", "running", "succeeded", "failed", "diverged", "canceled", "stopped"}) {
      row.push_back(Cell::Int(StateCount(s, state)));
    }
    const double fraction = s.total() > 0 ? double(FinishedCount(s)) / s.total() : 0;
    row.push_back(Cell::Text(FormatPercent(fraction)));
    // Floored like the text: 100 only when every trial has finished.
    row.push_back(Cell::Int(static_cast<int64_t>(std::floor(fraction * 100 + 1e-9))));
    row.push_back(s.waiting_reason().empty() ? Cell() : Cell::Text(s.waiting_reason()));
    t.AddRow(std::move(row));
  }
  return t;
}

Table TrialsTable(const v1::SweepInfo& sweep,
                  const google::protobuf::RepeatedPtrField<v1::TrialSummary>& trials) {
  Table t;
  t.AddColumn("id", "trial_id");
  for (const std::string& axis : sweep.axes()) t.AddColumn(axis);
  t.AddColumn("state");
  t.AddColumn("attempt");
  t.AddColumn("worker");
  t.AddColumn("step", "", Column::Show::kTextOnly).align = Column::Align::kRight;
  t.AddColumn("step", "step", Column::Show::kMachineOnly);
  t.AddColumn("total_steps", "total_steps", Column::Show::kMachineOnly);
  t.AddColumn("loss");
  t.AddColumn("val_loss");
  t.AddColumn("reason", "", Column::Show::kTextOnly);
  t.AddColumn("reason", "reason", Column::Show::kMachineOnly);
  // Annotations (ablate annotate): in the text only when a trial has one.
  bool annotated = false;
  for (const v1::TrialSummary& tr : trials) annotated |= tr.tags_size() > 0 || !tr.note().empty();
  if (annotated) t.AddColumn("tags", "", Column::Show::kTextOnly);
  t.AddColumn("tags", "tags", Column::Show::kMachineOnly);
  t.AddColumn("note", "note", Column::Show::kMachineOnly);
  for (const v1::TrialSummary& tr : trials) {
    std::vector<Cell> row{Cell::Int(tr.trial_id())};
    for (const std::string& axis : sweep.axes()) {
      auto it = tr.axes().find(axis);
      row.push_back(it == tr.axes().end() ? Cell() : Cell::Text(it->second));
    }
    row.push_back(Cell::Text(std::string(TrialStateName(tr.state()))));
    row.push_back(tr.attempt() > 0 ? Cell::Int(tr.attempt()) : Cell());
    row.push_back(tr.worker_id().empty() ? Cell() : Cell::Text(tr.worker_id()));
    row.push_back(
        tr.total_steps() > 0 || tr.step() > 0
            ? Cell::Text(std::to_string(tr.step()) + "/" + std::to_string(tr.total_steps()))
            : Cell());
    row.push_back(Cell::Int(tr.step()));
    row.push_back(Cell::Int(tr.total_steps()));
    row.push_back(LossCell(tr.loss()));
    row.push_back(LossCell(tr.val_loss()));
    // The first line of the reason, cut to fit; the full text goes to the machine formats.
    std::string reason = tr.reason().substr(0, tr.reason().find('\n'));
    row.push_back(reason.empty() ? Cell() : Cell::Text(Truncate(reason, kShortReason)));
    row.push_back(tr.reason().empty() ? Cell() : Cell::Text(tr.reason()));
    std::string tags;
    for (const std::string& tag : tr.tags()) tags += (tags.empty() ? "" : ",") + tag;
    if (annotated) {
      const std::string shown = tags + (tr.note().empty() ? "" : (tags.empty() ? "" : " ") +
                                                                     std::string("(note)"));
      row.push_back(shown.empty() ? Cell() : Cell::Text(shown));
    }
    row.push_back(tags.empty() ? Cell() : Cell::Text(tags));
    row.push_back(tr.note().empty() ? Cell() : Cell::Text(tr.note()));
    t.AddRow(std::move(row));
  }
  return t;
}

Status ShowStatus(Client& client, const StatusOptions& options, const Io& io) {
  if (!options.target) {
    v1::ListSweepsRequest req;
    req.set_include_archived(true);  // to count the hidden ones
    v1::ListSweepsResponse all, resp;
    ABLATE_RETURN_IF_ERROR(
        client.Call(&v1::ControlService::StubInterface::ListSweeps, req, &all));
    int hidden = 0;
    for (const v1::SweepInfo& s : all.sweeps()) {
      if (s.archived() && !options.archived) {
        ++hidden;
      } else {
        *resp.add_sweeps() = s;
      }
    }
    *io.out << Render(SweepsTable(resp, options.archived), options.format);
    if (options.format == Format::kTable) {
      if (resp.sweeps().empty() && hidden == 0) {
        *io.err << "no sweeps yet; submit one with: ablate submit SPEC.yaml\n";
      }
      if (hidden > 0) {
        *io.err << hidden << " archived sweep" << (hidden == 1 ? "" : "s")
                << " not listed (ablate status --archived)\n";
      }
    }
    if (options.format == Format::kTable) {
      for (const v1::SweepInfo& s : resp.sweeps()) {
        if (!s.waiting_reason().empty()) {
          *io.out << "sweep " << s.name() << " is waiting: " << s.waiting_reason() << "\n";
        }
      }
    }
    return Status::Ok();
  }
  ABLATE_ASSIGN_OR_RETURN(Target target, ParseTarget(*options.target));
  // A bare number names a sweep here (status takes a sweep); only trial:ID names a trial.
  if (target.is_trial && options.target->rfind("trial:", 0) != 0) {
    target.is_trial = false;
    target.sweep = *options.target;
  }
  if (target.is_trial) return ShowTrial(client, target.trial_id, options, io);

  v1::GetSweepRequest req;
  req.set_sweep(target.sweep);
  v1::GetSweepResponse resp;
  ABLATE_RETURN_IF_ERROR(client.Call(&v1::ControlService::StubInterface::GetSweep, req, &resp));
  const v1::SweepInfo& s = resp.sweep();
  if (options.format == Format::kTable) {
    *io.out << "sweep " << s.name() << " (id " << s.sweep_id() << "): " << s.total() << " trials, "
            << StateCount(s, "queued") << " queued, " << StateCount(s, "running") << " running, "
            << StateCount(s, "succeeded") << " succeeded, " << StateCount(s, "failed")
            << " failed, " << StateCount(s, "diverged") << " diverged, "
            << StateCount(s, "canceled") << " canceled"
            << (StateCount(s, "stopped") > 0
                    ? ", " + std::to_string(StateCount(s, "stopped")) + " stopped early"
                    : std::string())
            << " ("
            << FormatPercent(s.total() > 0 ? double(FinishedCount(s)) / s.total() : 0)
            << " done)" << (s.archived() ? " [archived]" : "") << "\n";
    if (!s.waiting_reason().empty()) *io.out << "waiting: " << s.waiting_reason() << "\n";
    if (!s.early_stop_json().empty()) {
      const auto rule = nlohmann::json::parse(s.early_stop_json(), nullptr, false);
      int stops = 0;
      for (const auto& d : resp.decisions()) stops += d.decision() == "stop";
      *io.out << "early stopping: "
              << (rule.is_object() ? rule.value("rule", std::string("?")) + " on " +
                                         rule.value("metric", std::string("?"))
                                   : std::string("?"))
              << ", " << resp.decisions_size() << " judgment"
              << (resp.decisions_size() == 1 ? "" : "s") << ", " << stops << " stop"
              << (stops == 1 ? "" : "s")
              << (options.decisions ? "" : " (ablate status " + s.name() + " --decisions)")
              << "\n";
    }
    *io.out << "\n";
  }
  if (options.decisions) {
    *io.out << Render(DecisionsTable(resp.decisions()), options.format);
    return Status::Ok();
  }
  *io.out << Render(TrialsTable(s, resp.trials()), options.format);
  return Status::Ok();
}

void AddStatusCommand(CLI::App& app, Action* selected) {
  auto opts = std::make_shared<StatusOptions>();
  auto format = std::make_shared<std::string>("table");
  CLI::App* sub = app.add_subcommand(
      "status", "List sweeps, or one sweep's trials (SWEEP), or one trial (trial:ID)");
  sub->add_option("sweep", opts->target, "Sweep name, sweep:ID, or trial:ID");
  sub->add_flag("--archived", opts->archived, "List archived sweeps too (marked)");
  sub->add_flag("--decisions", opts->decisions,
                "SWEEP: its early-stopping judgments (every one, continue and stop) instead of "
                "its trials");
  AddFormatOption(sub, format.get());
  sub->callback([opts, format, selected] {
    *selected = [opts, format](CommandEnv& env) -> Status {
      opts->format = *ParseFormat(*format);
      if (opts->target) {
        ABLATE_RETURN_IF_ERROR(ParseTarget(*opts->target).status());  // before any connection
      }
      ABLATE_ASSIGN_OR_RETURN(Client * client, env.client());
      return ShowStatus(*client, *opts, env.io);
    };
  });
}

}  // namespace ablate::cli
