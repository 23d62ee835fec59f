// libFuzzer target: the HTTP API's request handling (routing, auth, query parsing, static files).
// The input's first byte decides whether the request carries the right token (odd: yes; the seeds
// use 'A' and 'N'); the rest is split into lines: method, path, then "key=value" query parameters. Invariants checked on every input:
//   - without the token, no /api or /metrics route answers 200 (only static files may);
//   - a static answer never carries the secret file placed next to (outside) the web dir;
//   - every error is a JSON {"error": ...} body.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "http/api.h"
#include "metrics/coordinator_metrics.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace {

using namespace ablate::server;

constexpr char kToken[] = "fuzz-token-0123456789abcdef";
constexpr char kSecret[] = "TOP-SECRET-OUTSIDE-WEB-DIR";

struct World {
  std::string dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<Scheduler> scheduler;
  metrics::CoordinatorMetrics metrics;
  std::unique_ptr<http::Api> api;
  World() {
    char tmpl[] = "/tmp/ablate_fuzz_http_XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::mkdir((dir + "/web").c_str(), 0755);
    std::ofstream(dir + "/web/index.html") << "<html>ablate</html>";
    std::ofstream(dir + "/secret.txt") << kSecret;
    ::symlink((dir + "/secret.txt").c_str(), (dir + "/web/link.txt").c_str());
    Store::Options so;
    so.path = dir + "/ablate.db";
    store = Store::Open(so).value();
    scheduler = std::make_unique<Scheduler>(store.get(), ablate::SystemClock(), SchedulerOptions{});
    (void)scheduler->Recover();
    SweepRecord s;
    s.name = "fuzz";
    s.axes = {"a"};
    std::vector<TrialRecord> trials(3);
    for (int i = 0; i < 3; ++i) {
      trials[i].config_hash = "h" + std::to_string(i);
      trials[i].config_json = "{}";
      trials[i].axes = {{"a", std::to_string(i)}};
      trials[i].order_key = i;
    }
    (void)scheduler->Submit(s, trials);
    (void)store->Flush();
    http::ApiOptions opt;
    opt.token = kToken;
    opt.web_dir = dir + "/web";
    api = std::make_unique<http::Api>(store.get(), scheduler.get(), &metrics, opt);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();
  if (size == 0) return 0;
  const bool authed = data[0] & 1;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  http::HttpRequest req;
  size_t pos = 0;
  auto next_line = [&](std::string* out) {
    if (pos > text.size()) return false;
    size_t nl = text.find('\n', pos);
    *out = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() + 1 : nl + 1;
    return true;
  };
  std::string line;
  if (next_line(&line)) req.method = line;
  if (next_line(&line)) req.path = line;
  while (next_line(&line)) {
    size_t eq = line.find('=');
    req.params.emplace(line.substr(0, eq), eq == std::string::npos ? "" : line.substr(eq + 1));
  }
  if (authed) req.headers["authorization"] = std::string("Bearer ") + kToken;
  http::HttpResponse resp = world->api->Handle(req);
  const bool protected_route = req.path.rfind("/api", 0) == 0 || req.path == "/metrics";
  if (!authed && protected_route && resp.status == 200) __builtin_trap();
  // (Unless the request itself carried the text: error messages may echo what was asked.)
  if (resp.body.find(kSecret) != std::string::npos &&
      text.find("SECRET") == std::string::npos) {
    __builtin_trap();
  }
  if (resp.status >= 400 && resp.content_type == "application/json" &&
      resp.body.find("\"error\"") == std::string::npos) {
    __builtin_trap();
  }
  return 0;
}
