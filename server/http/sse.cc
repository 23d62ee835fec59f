#include "http/sse.h"

#include <nlohmann/json.hpp>

namespace ablate::server::http {

std::string SseFrame(const std::string& event, const std::string& data, int64_t id) {
  std::string out;
  if (id > 0) out += "id: " + std::to_string(id) + "\n";
  std::string ev = event.substr(0, event.find_first_of("\r\n"));
  if (!ev.empty()) out += "event: " + ev + "\n";
  size_t start = 0;
  while (true) {
    size_t nl = data.find_first_of("\r\n", start);
    out += "data: " + data.substr(start, nl == std::string::npos ? nl : nl - start) + "\n";
    if (nl == std::string::npos) break;
    start = nl + ((data[nl] == '\r' && nl + 1 < data.size() && data[nl + 1] == '\n') ? 2 : 1);
  }
  out += "\n";
  return out;
}

EventFeed::EventFeed(Store* store, int64_t last_event_id, double changed_every_s)
    : store_(store), last_id_(last_event_id), changed_every_s_(changed_every_s) {}

StatusOr<std::string> EventFeed::Poll(double now) {
  using nlohmann::json;
  std::string out;
  if (!started_) {
    started_ = true;
    if (last_id_ < 0) {
      ABLATE_ASSIGN_OR_RETURN(QueryResult r, store_->Query("SELECT COALESCE(MAX(id), 0) FROM events"));
      last_id_ = r.rows.empty() ? 0 : r.rows[0][0].i;
    }
  }
  // At most 500 rows per poll: a burst (a 10,000-trial submit) drains over several polls.
  ABLATE_ASSIGN_OR_RETURN(
      QueryResult rows,
      store_->Query("SELECT id, time, kind, sweep_id, trial_id, attempt, worker_id, message FROM "
                    "events WHERE id > " + std::to_string(last_id_) + " ORDER BY id LIMIT 500"));
  for (const auto& row : rows.rows) {
    auto cell_i = [&](size_t i) { return row[i].kind == QueryResult::Cell::kInteger ? row[i].i : 0; };
    const std::string kind = row[2].s;
    std::string event = "event";
    if (kind.rfind("trial_", 0) == 0 || kind.rfind("attempt_", 0) == 0) event = "trial";
    else if (kind == "submit" || kind == "retry") event = "sweep";
    else if (kind.rfind("worker_", 0) == 0) event = "worker";
    json j = {{"id", row[0].i},
              {"time", row[1].kind == QueryResult::Cell::kReal ? row[1].d : double(cell_i(1))},
              {"kind", kind},
              {"sweep_id", cell_i(3)},
              {"trial_id", cell_i(4)},
              {"attempt", cell_i(5)},
              {"worker_id", row[6].s},
              {"message", row[7].s}};
    out += SseFrame(event, j.dump(-1, ' ', false, json::error_handler_t::replace), row[0].i);
    last_id_ = row[0].i;
  }
  ABLATE_ASSIGN_OR_RETURN(auto sweeps, store_->ListSweeps());
  json list = json::array();
  for (const auto& s : sweeps) {
    list.push_back({{"id", s.sweep.id}, {"name", s.sweep.name}, {"counts", s.counts},
                    {"total", s.total}});
  }
  std::string counts = json({{"sweeps", list}}).dump(-1, ' ', false, json::error_handler_t::replace);
  if (counts != last_counts_ || now - last_changed_sent_ >= changed_every_s_) {
    out += SseFrame("changed", counts);
    last_counts_ = counts;
    last_changed_sent_ = now;
  }
  return out;
}

}  // namespace ablate::server::http
