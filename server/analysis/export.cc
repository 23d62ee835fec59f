// See export.h.
#include "analysis/export.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace ablate::analysis {

using nlohmann::json;

namespace {

// NaN and infinities as null; whole numbers (steps, token counts) without a ".0".
json Num(double v) {
  if (!std::isfinite(v)) return json(nullptr);
  if (v == std::trunc(v) && std::fabs(v) < 9.007199254740992e15) return json(int64_t(v));
  return json(v);
}

}  // namespace

json TypedAxisValue(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  // A number only when the whole text is one (JSON's grammar: no "inf", no hex, no leading '+').
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_number()) return j;
  return text;
}

StatusOr<Table> ExportTrials(server::Store& store, int64_t sweep_id) {
  ABLATE_ASSIGN_OR_RETURN(server::SweepSummary sweep, store.GetSweep(std::to_string(sweep_id)));
  ABLATE_ASSIGN_OR_RETURN(std::vector<server::TrialStatus> trials, store.GetTrials(sweep_id, {.progress = false}));
  ABLATE_ASSIGN_OR_RETURN(auto metrics, store.SweepLatestMetrics(sweep_id));
  ABLATE_ASSIGN_OR_RETURN(auto builds, store.SweepBuilds(sweep_id));

  std::vector<std::string> axes;
  for (const auto& a : sweep.sweep.axes) {
    if (a != "seed") axes.push_back(a);
  }
  std::set<std::string> known(axes.begin(), axes.end());
  for (const auto& t : trials) {  // axes a trial has that the sweep does not list (older sweeps)
    for (const auto& [k, v] : t.trial.axes) {
      if (k != "seed" && known.insert(k).second) axes.push_back(k);
    }
  }
  std::set<std::string> names;
  std::map<int64_t, std::map<std::string, double>> value_of;
  for (const auto& m : metrics) {
    names.insert(m.name);
    value_of[m.trial_id][m.name] = m.value;
  }
  struct Prov {
    server::Store::AttemptBuild latest;
    std::set<std::string> distinct;
  };
  std::map<int64_t, Prov> prov_of;
  for (const auto& b : builds) {
    if (!b.reported()) continue;
    Prov& p = prov_of[b.trial_id];
    p.latest = b;  // by attempt: the last one wins
    p.distinct.insert(b.Key());
  }

  Table out;
  out.columns = {"trial_id",     "state", "attempt", "seed", "build_version", "build_commit",
                 "numerics_version", "builds", "tags", "note"};
  for (const auto& a : axes) out.columns.push_back(a);
  for (const auto& n : names) out.columns.push_back(n);
  for (const auto& t : trials) {
    std::vector<json> row;
    row.reserve(out.columns.size());
    row.push_back(t.trial.id);
    row.push_back(std::string(TrialStateName(t.trial.state)));
    row.push_back(t.trial.attempts);
    std::map<std::string, std::string> ax(t.trial.axes.begin(), t.trial.axes.end());
    if (auto s = ax.find("seed"); s != ax.end()) {
      row.push_back(TypedAxisValue(s->second));
    } else {
      json cfg = json::parse(t.trial.config_json, nullptr, false);
      row.push_back(cfg.is_object() && cfg.contains("seed") ? cfg["seed"] : json(nullptr));
    }
    auto p = prov_of.find(t.trial.id);
    if (p != prov_of.end()) {
      row.push_back(p->second.latest.build_version);
      row.push_back(p->second.latest.build_commit);
      row.push_back(p->second.latest.numerics_version);
      row.push_back(int(p->second.distinct.size()));
    } else {
      row.insert(row.end(), {json(nullptr), json(nullptr), json(nullptr), 0});
    }
    row.push_back(t.trial.tags);
    row.push_back(t.trial.note);
    for (const auto& a : axes) {
      auto it = ax.find(a);
      row.push_back(it == ax.end() ? json(nullptr) : TypedAxisValue(it->second));
    }
    const auto& vals = value_of[t.trial.id];
    for (const auto& n : names) {
      auto it = vals.find(n);
      row.push_back(it == vals.end() ? json(nullptr) : Num(it->second));
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

StatusOr<Table> ExportSeries(server::Store& store, int64_t sweep_id,
                             const std::vector<std::string>& metrics) {
  if (metrics.empty()) return InvalidArgument("export: --metrics names no metric");
  std::vector<std::string> names = metrics;
  const bool has_tokens = std::find(names.begin(), names.end(), "tokens") != names.end();
  if (!has_tokens) names.push_back("tokens");
  ABLATE_ASSIGN_OR_RETURN(auto points, store.SweepSeries(sweep_id, names));
  std::map<std::pair<int64_t, int64_t>, double> tokens;
  for (const auto& p : points) {
    if (p.name == "tokens") tokens[{p.trial_id, p.step}] = p.value;
  }
  Table out;
  out.columns = {"trial_id", "step", "tokens", "name", "value"};
  for (const auto& p : points) {
    if (p.name == "tokens" && !has_tokens) continue;
    auto t = tokens.find({p.trial_id, p.step});
    out.rows.push_back({p.trial_id, p.step, t == tokens.end() ? json(nullptr) : Num(t->second),
                        p.name, Num(p.value)});
  }
  return out;
}

StatusOr<ExportFormat> ParseExportFormat(const std::string& name) {
  if (name == "csv") return ExportFormat::kCsv;
  if (name == "jsonl") return ExportFormat::kJsonl;
  return InvalidArgument("export format '" + name + "': expected csv or jsonl");
}

namespace {

std::string CsvField(const json& v) {
  std::string s;
  if (v.is_null()) return s;
  if (v.is_string()) {
    s = v.get<std::string>();
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) {
      s += (i ? ";" : "") + (v[i].is_string() ? v[i].get<std::string>() : v[i].dump());
    }
  } else {
    s = v.dump();
  }
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string Render(const Table& table, ExportFormat format) {
  std::string out;
  if (format == ExportFormat::kCsv) {
    for (size_t i = 0; i < table.columns.size(); ++i) {
      out += (i ? "," : "") + CsvField(table.columns[i]);
    }
    out += "\r\n";
    for (const auto& row : table.rows) {
      for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + CsvField(row[i]);
      out += "\r\n";
    }
    return out;
  }
  for (const auto& row : table.rows) {
    out += '{';
    for (size_t i = 0; i < row.size(); ++i) {
      out += (i ? "," : "") + json(table.columns[i]).dump() + ":" +
             row[i].dump(-1, ' ', false, json::error_handler_t::replace);
    }
    out += "}\n";
  }
  return out;
}

}  // namespace ablate::analysis
