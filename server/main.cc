// ablated: the coordinator daemon.
//   ablated --data-dir DIR --grpc HOST:PORT [--http HOST:PORT] --token-file F
//           [--tls-cert F --tls-key F [--tls-client-ca F]] [--web-dir DIR] [--metrics-public]
// --http serves the JSON API, server-sent events, the dashboard (static files of --web-dir) and
// Prometheus /metrics on one port (server/http/api.h).
// Keeps all state in DIR/ablate.db (SQLite, WAL); restarts from it alone. Prints the gRPC address it
// listens on (useful with port 0) to stderr and to DIR/ablated.addr. SIGINT/SIGTERM shut it down
// gracefully: stop accepting, let in-flight calls finish, commit everything queued.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "ablate/token.h"
#ifdef ABLATE_WITH_HTTP
#include "http/api.h"
#include "http/http_server.h"
#include "http/static_files.h"
#include "metrics/coordinator_metrics.h"
#endif
#include "rpc/services.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace {

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }

std::string DefaultDataDir() {
  if (const char* d = std::getenv("ABLATE_DATA_DIR")) return d;
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.ablate";
  return ".ablate";
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "ablated: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ablated: the ablate coordinator (gRPC control and worker services, SQLite store)"};
  std::string data_dir = DefaultDataDir(), grpc_addr = "127.0.0.1:7070", http_addr, token_file;
  std::string tls_cert, tls_key, tls_client_ca, web_dir;
  bool metrics_public = false;
  double lease_s = 30, heartbeat_s = 5, retry_backoff_s = 1;
  int max_trials = 10000;
  app.add_option("--data-dir", data_dir, "state folder: ablate.db, token (default $ABLATE_DATA_DIR or ~/.ablate)");
  app.add_option("--grpc", grpc_addr, "gRPC listen address HOST:PORT (port 0 picks a free port)");
  app.add_option("--http", http_addr,
                 "HTTP listen address HOST:PORT for the JSON API, dashboard and /metrics");
  app.add_option("--web-dir", web_dir,
                 "dashboard files served over --http (default: web/ next to the binary or in the source tree)");
  app.add_flag("--metrics-public", metrics_public, "serve /metrics without the bearer token");
  app.add_option("--token-file", token_file, "bearer token file; created (mode 0600) when missing (default DATA_DIR/token)");
  app.add_option("--tls-cert", tls_cert, "PEM server certificate: serve gRPC over TLS");
  app.add_option("--tls-key", tls_key, "PEM server private key (with --tls-cert)");
  app.add_option("--tls-client-ca", tls_client_ca,
                 "PEM CA: workers must present a client certificate it signed (mutual TLS)");
  app.add_option("--lease-seconds", lease_s, "attempt lease, renewed by worker heartbeats")->check(CLI::PositiveNumber);
  app.add_option("--heartbeat-seconds", heartbeat_s, "heartbeat interval asked of workers")->check(CLI::PositiveNumber);
  app.add_option("--retry-backoff-seconds", retry_backoff_s,
                 "wait before retrying a failed attempt, doubled per attempt (max 30 s)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-trials", max_trials, "largest sweep accepted without --force")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
#ifndef ABLATE_WITH_HTTP
  if (!http_addr.empty()) {
    return Fail("--http: this build has no HTTP support (prometheus-cpp / cpp-httplib missing)");
  }
#endif
  if (::mkdir(data_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Fail("cannot create data dir " + data_dir + ": " + std::strerror(errno));
  }
  if (token_file.empty()) token_file = data_dir + "/token";
  auto token = ablate::LoadOrCreateToken(token_file);
  if (!token.ok()) return Fail(token.status().message());

  ablate::server::Store::Options so;
  so.path = data_dir + "/ablate.db";
#ifdef ABLATE_WITH_HTTP
  ablate::server::metrics::CoordinatorMetrics prom_metrics;
  so.on_commit = [&prom_metrics](double seconds, int ops) { prom_metrics.ObserveCommit(seconds, ops); };
#endif
  auto store = ablate::server::Store::Open(so);
  if (!store.ok()) return Fail(store.status().message());
  ablate::server::SchedulerOptions sched_opt;
  sched_opt.lease_s = lease_s;
  sched_opt.heartbeat_s = heartbeat_s;
  sched_opt.retry_backoff_s = retry_backoff_s;
  ablate::server::Scheduler scheduler(store->get(), ablate::SystemClock(), sched_opt);
  if (auto st = scheduler.Recover(); !st.ok()) return Fail("recovering state: " + st.message());

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!tls_cert.empty() || !tls_key.empty() || !tls_client_ca.empty()) {
    if (tls_cert.empty() || tls_key.empty()) return Fail("--tls-cert and --tls-key go together");
    auto read = [](const std::string& path, std::string* out) {
      std::ifstream in(path, std::ios::binary);
      if (!in) return false;
      out->assign(std::istreambuf_iterator<char>(in), {});
      return !out->empty();
    };
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!read(tls_cert, &pair.cert_chain)) return Fail("cannot read --tls-cert " + tls_cert);
    if (!read(tls_key, &pair.private_key)) return Fail("cannot read --tls-key " + tls_key);
    ssl.pem_key_cert_pairs.push_back(pair);
    if (!tls_client_ca.empty()) {
      if (!read(tls_client_ca, &ssl.pem_root_certs)) {
        return Fail("cannot read --tls-client-ca " + tls_client_ca);
      }
      // Verify a client certificate when one is presented; WorkerService then requires one, so
      // workers use mutual TLS while the CLI authenticates with TLS and its token alone.
      ssl.client_certificate_request = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  }

  ablate::server::ServiceOptions svc_opt;
  svc_opt.token = *token;
  svc_opt.require_worker_cert = !tls_client_ca.empty();
  svc_opt.max_trials = max_trials;
  ablate::server::WorkerServiceImpl worker_service(&scheduler, svc_opt);
  ablate::server::ControlServiceImpl control_service(&scheduler, store->get(), svc_opt);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(grpc_addr, creds, &port);
  builder.RegisterService(&worker_service);
  builder.RegisterService(&control_service);
  builder.SetMaxReceiveMessageSize(16 << 20);  // larger requests fail RESOURCE_EXHAUSTED
  // Workers ping every 30 s to notice a dead coordinator host; allow it even on idle streams.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return Fail("cannot listen on " + grpc_addr);
  std::string host = grpc_addr.substr(0, grpc_addr.rfind(':'));
  std::string actual = host + ":" + std::to_string(port);
  std::ofstream(data_dir + "/ablated.addr") << actual << "\n";
  std::fprintf(stderr, "ablated: listening on %s%s (data %s, token %s)\n", actual.c_str(),
               tls_cert.empty() ? "" : (tls_client_ca.empty() ? " with TLS" : " with TLS, mutual TLS for workers"),
               data_dir.c_str(), token_file.c_str());

#ifdef ABLATE_WITH_HTTP
  std::unique_ptr<ablate::server::http::Api> api;
  std::unique_ptr<ablate::server::http::HttpServer> http_server;
  if (!http_addr.empty()) {
    ablate::server::http::ApiOptions api_opt;
    api_opt.token = *token;
    api_opt.metrics_public = metrics_public;
    api_opt.web_dir = web_dir.empty() ? ablate::server::http::DefaultWebDir(ABLATE_SOURCE_WEB_DIR) : web_dir;
    api = std::make_unique<ablate::server::http::Api>(store->get(), &scheduler, &prom_metrics, api_opt);
    http_server = std::make_unique<ablate::server::http::HttpServer>(api.get(), ablate::server::http::HttpServerOptions{});
    auto http_port = http_server->Start(http_addr);
    if (!http_port.ok()) return Fail(http_port.status().message());
    std::string http_actual = http_addr.substr(0, http_addr.rfind(':')) + ":" + std::to_string(*http_port);
    std::ofstream(data_dir + "/ablated.http") << http_actual << "\n";
    std::fprintf(stderr, "ablated: HTTP on %s (web dir %s)\n", http_actual.c_str(),
                 api_opt.web_dir.empty() ? "none" : api_opt.web_dir.c_str());
  }
#endif

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  while (g_signal == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    static int ticks = 0;
    if (++ticks % 4 == 0) scheduler.Tick();
  }
  std::fprintf(stderr, "ablated: signal %d, shutting down\n", int(g_signal));
  control_service.Shutdown();
#ifdef ABLATE_WITH_HTTP
  if (http_server) http_server->Stop();
#endif
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (auto st = (*store)->Flush(); !st.ok()) return Fail("final commit: " + st.message());
  return 0;
}
