// The CLI's connection to the coordinator's ControlService.
//
// Address and token file: ResolveEndpoint (ablate/endpoint.h, shared with ablate-worker):
// --coordinator, else $ABLATE_COORDINATOR, else $ABLATE_DATA_DIR/ablated.addr, else 127.0.0.1:7070;
// --token-file, else $ABLATE_TOKEN_FILE, else $ABLATE_DATA_DIR/token, else ~/.ablate/token. The CLI
// never creates a token: a missing or unreadable token file is UNAUTHENTICATED (exit 5) naming the
// file and where its path came from.
// Every call carries the metadata `authorization: Bearer <token>`; unary calls get a deadline of
// --timeout seconds (default 30); Watch streams have none.
//
// Thread safety: a Client may be used from one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "ablate/endpoint.h"
#include "ablate/status.h"
#include "proto/ablate.grpc.pb.h"

namespace ablate::cli {

inline constexpr double kDefaultTimeoutS = 30;

// The global flags as given on the command line (unset: not given).
struct GlobalFlags {
  std::optional<std::string> coordinator;
  std::optional<std::string> token_file;
  std::optional<std::string> tls_ca_file;
  double timeout_s = kDefaultTimeoutS;
};

struct ClientOptions {
  std::string coordinator;         // HOST:PORT (or any gRPC target, e.g. unix:/path)
  // "--coordinator", "$ABLATE_COORDINATOR", "$ABLATE_DATA_DIR/ablated.addr" or "default"
  std::string coordinator_source;
  std::string token_file;
  std::string token_source;  // "--token-file", "$ABLATE_TOKEN_FILE", "$ABLATE_DATA_DIR", "default"
  std::string tls_ca_file;   // empty: plaintext; else TLS with this root certificate (PEM)
  double timeout_s = kDefaultTimeoutS;
};

// Applies the precedence rules above. InvalidArgument for an empty address, an address without a
// port, or a timeout that is not positive; Unavailable when $ABLATE_DATA_DIR has no ablated.addr
// (ResolveEndpoint).
StatusOr<ClientOptions> ResolveClientOptions(const GlobalFlags& flags, const EnvLookup& env);

class Client {
 public:
  // Reads the token file and opens a (lazy) channel; nothing is sent yet.
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  // For tests: an existing channel and token.
  Client(std::shared_ptr<grpc::ChannelInterface> channel, std::string token, ClientOptions options);
  ~Client();

  const ClientOptions& options() const { return options_; }
  v1::ControlService::StubInterface& stub() { return *stub_; }

  // A context carrying the bearer token and, when `unary`, the --timeout deadline.
  std::unique_ptr<grpc::ClientContext> NewContext(bool unary = true) const;

  // The single grpc::Status → ablate::Status conversion. The code maps one to one; the message is
  // the server's, except for the cases a user must act on: UNAVAILABLE / DEADLINE_EXCEEDED name the
  // address and say that ablated may not be running there; UNAUTHENTICATED / PERMISSION_DENIED name
  // the token file used.
  Status FromGrpc(const grpc::Status& status) const;

  // One unary call: fresh context, deadline, conversion of the result.
  template <typename Request, typename Response>
  Status Call(grpc::Status (v1::ControlService::StubInterface::*method)(grpc::ClientContext*,
                                                                        const Request&, Response*),
              const Request& request, Response* response) {
    auto context = NewContext();
    return FromGrpc((stub_.get()->*method)(context.get(), request, response));
  }

 private:
  ClientOptions options_;
  std::string token_;
  std::unique_ptr<v1::ControlService::StubInterface> stub_;
};

}  // namespace ablate::cli
