// ablated's HTTP listener: binds Api (api.h) and the SSE feed (sse.h) to cpp-httplib.
//
// Limits: request bodies over max_body_bytes are refused (413; the API is GET-only anyway), URIs
// over cpp-httplib's 8 KiB limit get 414, at most max_event_streams concurrent /api/events streams
// (503 beyond: each holds a thread), read/write timeouts of 10 s on ordinary requests.
//
// Thread safety: Start and Stop from one thread; requests are served on an internal pool.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "ablate/status.h"
#include "http/api.h"

namespace httplib {
class Server;
}

namespace ablate::server::http {

struct HttpServerOptions {
  int threads = 24;
  int max_event_streams = 16;
  size_t max_body_bytes = 64 << 10;
  double event_poll_s = 1.0;       // how often an SSE stream polls the store
  double changed_every_s = 15.0;   // "changed" heartbeat interval
};

class HttpServer {
 public:
  HttpServer(const Api* api, HttpServerOptions options);
  ~HttpServer();  // Stop()

  // Listens on "HOST:PORT" (port 0 picks a free one) and serves on a background thread. Returns the
  // bound port. Errors: InvalidArgument (malformed address), Unavailable (cannot bind).
  StatusOr<int> Start(const std::string& host_port);
  // Stops accepting, ends the event streams, joins the serving thread. Idempotent.
  void Stop();

 private:
  const Api* api_;
  HttpServerOptions opt_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> streams_{0};
};

}  // namespace ablate::server::http
