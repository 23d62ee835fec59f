#include "agent/transport.h"

#include <grpcpp/grpcpp.h>

#include "ablate/token.h"
#include "agent/util.h"
#include "proto/ablate.grpc.pb.h"

namespace ablate::agent {
namespace {

Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return Status::Ok();
  StatusCode code = StatusCode::kUnavailable;
  switch (s.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      code = StatusCode::kUnauthenticated;
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      code = StatusCode::kPermissionDenied;
      break;
    case grpc::StatusCode::INVALID_ARGUMENT:
      code = StatusCode::kInvalidArgument;
      break;
    case grpc::StatusCode::FAILED_PRECONDITION:
      code = StatusCode::kFailedPrecondition;
      break;
    case grpc::StatusCode::UNIMPLEMENTED:
      code = StatusCode::kUnimplemented;
      break;
    case grpc::StatusCode::CANCELLED:
      code = StatusCode::kCancelled;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      code = StatusCode::kDeadlineExceeded;
      break;
    default:
      break;
  }
  return Status(code, s.error_message().empty()
                          ? "gRPC status " + std::to_string(int(s.error_code()))
                          : s.error_message());
}

const char* StateName(grpc_connectivity_state s) {
  switch (s) {
    case GRPC_CHANNEL_IDLE:
      return "idle";
    case GRPC_CHANNEL_CONNECTING:
      return "connecting";
    case GRPC_CHANNEL_READY:
      return "ready";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "transient failure";
    case GRPC_CHANNEL_SHUTDOWN:
      return "shut down";
  }
  return "unknown";
}

class GrpcStream : public CoordinatorStream {
 public:
  GrpcStream(
      std::unique_ptr<grpc::ClientContext> ctx,
      std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> rw)
      : ctx_(std::move(ctx)), rw_(std::move(rw)) {}
  ~GrpcStream() override {
    Cancel();
    if (!finished_) (void)Finish();
  }

  bool Write(const v1::WorkerMessage& m) override { return rw_->Write(m); }
  bool Read(v1::CoordinatorMessage* m) override { return rw_->Read(m); }
  void Cancel() override { ctx_->TryCancel(); }
  Status Finish() override {
    if (finished_) return finish_status_;
    finished_ = true;
    finish_status_ = FromGrpc(rw_->Finish());
    return finish_status_;
  }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> rw_;
  bool finished_ = false;
  Status finish_status_;
};

class GrpcConnector : public CoordinatorConnector {
 public:
  GrpcConnector(std::string target, std::string token, std::shared_ptr<grpc::Channel> channel)
      : target_(std::move(target)),
        token_(std::move(token)),
        channel_(std::move(channel)),
        stub_(v1::WorkerService::NewStub(channel_)) {}

  StatusOr<std::unique_ptr<CoordinatorStream>> Connect() override {
    // Wait (bounded) for the channel to be READY, so "unreachable" is a clean error here rather
    // than a stream that fails on its first write; give up as soon as a connection attempt made
    // during this call fails (refused, no route), instead of sitting out the whole deadline.
    const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(5);
    grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
    bool attempted = false;
    while (state != GRPC_CHANNEL_READY) {
      if (state == GRPC_CHANNEL_SHUTDOWN ||
          (state == GRPC_CHANNEL_TRANSIENT_FAILURE && attempted)) {
        return Status(StatusCode::kUnavailable, "cannot connect to " + target_);
      }
      if (state == GRPC_CHANNEL_CONNECTING) attempted = true;
      if (!channel_->WaitForStateChange(state, deadline)) {
        return Status(
            StatusCode::kUnavailable,
            "no connection to " + target_ + " within 5 s (channel " + StateName(state) + ")");
      }
      state = channel_->GetState(/*try_to_connect=*/true);
    }
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata(kAuthMetadataKey, BearerValue(token_));
    auto rw = stub_->Connect(ctx.get());
    if (!rw) return Status(StatusCode::kUnavailable, "Connect to " + target_ + " failed");
    return std::unique_ptr<CoordinatorStream>(new GrpcStream(std::move(ctx), std::move(rw)));
  }

  std::string target() const override { return target_; }

 private:
  const std::string target_;
  const std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
};

}  // namespace

StatusOr<std::unique_ptr<CoordinatorConnector>> MakeGrpcConnector(const std::string& target,
                                                                  const std::string& token,
                                                                  const TlsFiles& tls,
                                                                  int keepalive_ms) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!tls.ca_cert.empty()) {
    grpc::SslCredentialsOptions o;
    ABLATE_ASSIGN_OR_RETURN(o.pem_root_certs, ReadFile(tls.ca_cert));
    if (!tls.client_cert.empty() || !tls.client_key.empty()) {
      if (tls.client_cert.empty() || tls.client_key.empty()) {
        return InvalidArgument("mutual TLS needs both a client certificate and its key");
      }
      ABLATE_ASSIGN_OR_RETURN(o.pem_cert_chain, ReadFile(tls.client_cert));
      ABLATE_ASSIGN_OR_RETURN(o.pem_private_key, ReadFile(tls.client_key));
    }
    creds = grpc::SslCredentials(o);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  // Our own backoff (agent.h) decides when to retry; the channel must not add minutes of its own.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  // A coordinator host that vanished without closing the TCP connection (power loss, network cut)
  // would otherwise block Read() for the ~15 minutes of TCP retransmissions.
  if (keepalive_ms > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Messages can be large (a 2000-point batch, a 64 KiB log tail) but never near this.
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(target, creds, args);
  return std::unique_ptr<CoordinatorConnector>(new GrpcConnector(target, token, channel));
}

}  // namespace ablate::agent
