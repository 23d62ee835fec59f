// The worker's end of WorkerService.Connect behind a small interface, so that the agent can be
// driven by tests without a network.
//
// One CoordinatorStream is one Connect call. The agent writes from one thread and reads from
// another, which gRPC's synchronous bidirectional streams allow; Cancel() may be called from any
// thread and makes a blocked Read() or Write() return false.
#pragma once

#include <memory>
#include <string>

#include "ablate/status.h"
#include "proto/ablate.pb.h"

namespace ablate::agent {

class CoordinatorStream {
 public:
  virtual ~CoordinatorStream() = default;
  // False when the stream is broken; then every later call fails too.
  virtual bool Write(const v1::WorkerMessage& m) = 0;
  // Blocks for the next message; false when the stream ended or broke.
  virtual bool Read(v1::CoordinatorMessage* m) = 0;
  // Ends the stream from this side (unblocks Read/Write). Safe to call more than once.
  virtual void Cancel() = 0;
  // After Read() returned false: why the stream ended (OK when the coordinator closed it cleanly).
  virtual Status Finish() = 0;
};

class CoordinatorConnector {
 public:
  virtual ~CoordinatorConnector() = default;
  // Opens a new stream. Unavailable (with the reason) when the coordinator cannot be reached;
  // the caller retries with backoff.
  virtual StatusOr<std::unique_ptr<CoordinatorStream>> Connect() = 0;
  // Where it connects to, for log lines.
  virtual std::string target() const = 0;
};

struct TlsFiles {
  std::string ca_cert;      // PEM file of the CA that signed the coordinator's certificate
  std::string client_cert;  // PEM files of this worker's certificate and key (mutual TLS)
  std::string client_key;
};

// A gRPC connector to `target` ("host:port") that adds `authorization: Bearer <token>` to every
// call. TLS when tls.ca_cert is set (with a client certificate when both client files are set),
// plaintext otherwise. InvalidArgument/NotFound when a TLS file cannot be read.
//
// keepalive_ms > 0 sends HTTP/2 keepalive pings at that period (10 s timeout), so a coordinator
// that vanished without closing the connection (host power loss, network cut) is noticed in
// keepalive_ms + 10 s instead of the ~15 minutes of TCP retransmissions; 0 turns pings off.
// The coordinator must accept pings that often from a client it sends nothing to: its server needs
// GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS <= keepalive_ms (gRPC's default, 5 min,
// answers more frequent pings with GOAWAY "too_many_pings": the stream breaks, the agent
// reconnects, and gRPC doubles the ping period until it is accepted).
// The channel reconnects with at most 5 s of backoff of its own.
StatusOr<std::unique_ptr<CoordinatorConnector>> MakeGrpcConnector(const std::string& target,
                                                                  const std::string& token,
                                                                  const TlsFiles& tls = {},
                                                                  int keepalive_ms = 30000);

}  // namespace ablate::agent
