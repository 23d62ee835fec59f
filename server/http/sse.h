// Server-sent events for the dashboard's live updates (GET /api/events).
//
// Each connection owns an EventFeed that polls the store: every new row of the events table becomes
// a frame (event: "trial" for trial_* / attempt_* kinds, "sweep" for submit / retry, "worker" for
// worker_*, with the row as JSON data and the row id as the SSE id, so a reconnecting EventSource
// resumes after Last-Event-ID), and a "changed" frame carries every sweep's counts by state
// whenever they differ from the last one sent, and at least every `changed_every_s` (a heartbeat
// that also lets proxies keep the stream open).
//
// Thread safety: an EventFeed belongs to one connection (one thread at a time).
#pragma once

#include <cstdint>
#include <string>

#include "ablate/status.h"
#include "store/store.h"

namespace ablate::server::http {

// One SSE frame: "id: <id>\n" (when id > 0), "event: <event>\n", one "data: " line per line of
// `data` (a CR, LF or CRLF in data starts a new data line, as the SSE grammar requires), then a
// blank line. `event` must not contain a line break (it is cut at the first one).
std::string SseFrame(const std::string& event, const std::string& data, int64_t id = 0);

class EventFeed {
 public:
  // Starts after event row `last_event_id`; a negative value means "from now" (the newest row).
  EventFeed(Store* store, int64_t last_event_id, double changed_every_s = 15);

  // Frames produced since the previous call ("" when nothing is due). `now` is monotonic seconds.
  StatusOr<std::string> Poll(double now);

 private:
  Store* store_;
  int64_t last_id_;
  double changed_every_s_;
  double last_changed_sent_ = -1e300;
  std::string last_counts_;
  bool started_ = false;
};

}  // namespace ablate::server::http
