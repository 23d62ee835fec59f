#include "agent/trainer_output.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "agent/util.h"

namespace ablate::agent {

TrainerLine ParseTrainerLine(std::string_view line) {
  TrainerLine out;
  // Cheap rejection first: the trainer's lines are objects; anything else (a stray printf from a
  // library, an empty line) must not cost an exception.
  const size_t first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos || line[first] != '{') return out;
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return out;
  out.is_json = true;
  if (auto it = j.find("type"); it != j.end() && it->is_string()) out.type = it->get<std::string>();
  if (auto it = j.find("step"); it != j.end() && it->is_number()) {
    const double s = it->get<double>();
    if (std::isfinite(s)) out.step = static_cast<int64_t>(s);
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "step" || it.key() == "type" || !it->is_number()) continue;
    v1::MetricPoint p;
    p.set_step(out.step);
    p.set_name(it.key());
    p.set_value(it->get<double>());
    out.points.push_back(std::move(p));
  }
  if (out.type == "checkpoint") {
    if (auto it = j.find("path"); it != j.end() && it->is_string()) {
      out.checkpoint_path = SanitizeUtf8(it->get<std::string>());
    }
  } else if (out.type == "start") {
    auto b = j.find("build");
    if (b != j.end() && b->is_object()) {
      auto text = [&](const char* key) {
        auto it = b->find(key);
        return it != b->end() && it->is_string() ? SanitizeUtf8(it->get<std::string>().substr(0, 200))
                                                 : std::string();
      };
      v1::BuildInfo info;
      info.set_version(text("version"));
      info.set_commit(text("commit"));
      info.set_numerics(text("numerics"));
      out.build = std::move(info);
    }
  } else if (out.type == "final") {
    auto it = j.find("status");
    out.final_status = (it != j.end() && it->is_string()) ? it->get<std::string>() : "";
    if (auto r = j.find("reason"); r != j.end() && r->is_string()) {
      out.final_reason = SanitizeUtf8(r->get<std::string>());
    }
  }
  return out;
}

}  // namespace ablate::agent
