#include "http/http_server.h"

#include <httplib.h>

#include <chrono>

#include "http/sse.h"

namespace ablate::server::http {
namespace {

double MonoNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

HttpRequest Convert(const httplib::Request& req) {
  HttpRequest r;
  r.method = req.method;
  r.path = req.path;  // cpp-httplib has percent-decoded it once
  for (const auto& [k, v] : req.params) r.params.emplace(k, v);
  for (const auto& [k, v] : req.headers) {
    std::string lower = k;
    for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    r.headers[lower] = v;
  }
  return r;
}

void Send(const HttpResponse& resp, httplib::Response& res) {
  res.status = resp.status;
  res.set_content(resp.body, resp.content_type);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-store");
}

}  // namespace

HttpServer::HttpServer(const Api* api, HttpServerOptions options)
    : api_(api), opt_(options), server_(std::make_unique<httplib::Server>()) {}

HttpServer::~HttpServer() { Stop(); }

StatusOr<int> HttpServer::Start(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("--http " + host_port + ": expected HOST:PORT");
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(host_port.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535 || colon + 1 == host_port.size()) {
    return InvalidArgument("--http " + host_port + ": bad port");
  }
  httplib::Server& s = *server_;
  const int threads = opt_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  s.set_payload_max_length(opt_.max_body_bytes);
  s.set_read_timeout(10, 0);
  s.set_write_timeout(10, 0);
  s.set_keep_alive_max_count(100);

  s.Get("/api/events", [this](const httplib::Request& req, httplib::Response& res) {
    HttpRequest r = Convert(req);
    if (!api_->Authorized(r)) {
      return Send(JsonError(401, "missing or wrong bearer token (header or ?token=)"), res);
    }
    if (streams_.fetch_add(1) >= opt_.max_event_streams) {
      streams_.fetch_sub(1);
      return Send(JsonError(503, "too many event streams; retry later"), res);
    }
    int64_t last = -1;
    if (req.has_header("Last-Event-ID")) {
      last = std::strtoll(req.get_header_value("Last-Event-ID").c_str(), nullptr, 10);
    }
    auto feed = std::make_shared<EventFeed>(api_->store(), last, opt_.changed_every_s);
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, feed](size_t, httplib::DataSink& sink) {
          if (stopping_) return false;
          auto frames = feed->Poll(MonoNow());
          if (!frames.ok()) {
            std::string f = SseFrame("error", frames.status().message());
            sink.write(f.data(), f.size());
          } else if (!frames->empty()) {
            if (!sink.write(frames->data(), frames->size())) return false;
          }
          // Sleep in slices so Stop() ends the stream promptly.
          for (double waited = 0; waited < opt_.event_poll_s && !stopping_; waited += 0.05) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
          return !stopping_ && sink.is_writable();
        },
        [this](bool) { streams_.fetch_sub(1); });
  });
  auto handle = [this](const httplib::Request& req, httplib::Response& res) {
    Send(api_->Handle(Convert(req)), res);
  };
  s.Get(".*", handle);
  s.Post(".*", handle);
  s.Put(".*", handle);
  s.Delete(".*", handle);
  s.Patch(".*", handle);
  s.Options(".*", handle);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      std::string msg = res.status == 413 ? "request too large"
                        : res.status == 414 ? "URI too long"
                                            : "HTTP error " + std::to_string(res.status);
      res.set_content(JsonError(res.status, msg).body, "application/json");
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(JsonError(500, "internal error").body, "application/json");
  });

  int bound = port == 0 ? s.bind_to_any_port(host) : (s.bind_to_port(host, int(port)) ? int(port) : -1);
  if (bound <= 0) return Status(StatusCode::kUnavailable, "cannot listen on " + host_port);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpServer::Stop() {
  stopping_ = true;
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ablate::server::http
