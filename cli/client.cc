#include "client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "ablate/token.h"

namespace ablate::cli {
namespace {

StatusCode FromGrpcCode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return StatusCode::kOk;
    case grpc::StatusCode::CANCELLED:
      return StatusCode::kCancelled;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return StatusCode::kInvalidArgument;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return StatusCode::kDeadlineExceeded;
    case grpc::StatusCode::NOT_FOUND:
      return StatusCode::kNotFound;
    case grpc::StatusCode::ALREADY_EXISTS:
      return StatusCode::kAlreadyExists;
    case grpc::StatusCode::PERMISSION_DENIED:
      return StatusCode::kPermissionDenied;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return StatusCode::kResourceExhausted;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return StatusCode::kFailedPrecondition;
    case grpc::StatusCode::ABORTED:
      return StatusCode::kAborted;
    case grpc::StatusCode::OUT_OF_RANGE:
      return StatusCode::kOutOfRange;
    case grpc::StatusCode::UNIMPLEMENTED:
      return StatusCode::kUnimplemented;
    case grpc::StatusCode::UNAVAILABLE:
      return StatusCode::kUnavailable;
    case grpc::StatusCode::DATA_LOSS:
      return StatusCode::kDataLoss;
    case grpc::StatusCode::UNAUTHENTICATED:
      return StatusCode::kUnauthenticated;
    default:
      return StatusCode::kInternal;  // UNKNOWN, INTERNAL
  }
}

constexpr double kMaxTimeoutS = 365 * 86400.0;

std::string FormatSeconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

StatusOr<ClientOptions> ResolveClientOptions(const GlobalFlags& flags, const EnvLookup& env) {
  EndpointFlags endpoint_flags;
  endpoint_flags.coordinator = flags.coordinator;
  endpoint_flags.token_file = flags.token_file;
  ABLATE_ASSIGN_OR_RETURN(Endpoint endpoint, ResolveEndpoint(endpoint_flags, env));
  ClientOptions o;
  o.coordinator = endpoint.coordinator;
  o.coordinator_source = endpoint.coordinator_source;
  o.token_file = endpoint.token_file;
  o.token_source = endpoint.token_source;

  if (flags.tls_ca_file) {
    o.tls_ca_file = *flags.tls_ca_file;
  } else {
    o.tls_ca_file = env("ABLATE_TLS_CA").value_or("");
  }

  if (!(flags.timeout_s > 0) || !std::isfinite(flags.timeout_s)) {
    return InvalidArgument("--timeout: expected a positive number of seconds, got " +
                           FormatSeconds(flags.timeout_s));
  }
  if (flags.timeout_s > kMaxTimeoutS) {  // deadlines past that overflowed into the past
    return InvalidArgument("--timeout: at most 31536000 s (a year), got " +
                           FormatSeconds(flags.timeout_s));
  }
  o.timeout_s = flags.timeout_s;
  return o;
}

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  const std::string where = DescribeTokenFile(Endpoint{
      options.coordinator, options.coordinator_source, options.token_file, options.token_source});
  StatusOr<std::string> token = ReadToken(options.token_file);
  if (!token.ok()) {
    const std::string hint =
        "; pass the coordinator's token file with --token-file or $ABLATE_TOKEN_FILE (ablated "
        "writes it to its --token-file, by default <data dir>/token)";
    if (token.status().code() == StatusCode::kNotFound) {
      return Status(StatusCode::kUnauthenticated, "no token file at " + where + hint);
    }
    return Status(StatusCode::kUnauthenticated,
                  "cannot use token file " + where + ": " + token.status().message());
  }

  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_ca_file.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    std::ifstream in(options.tls_ca_file, std::ios::binary);
    if (!in) {
      return InvalidArgument("--tls-ca: cannot read " + options.tls_ca_file);
    }
    std::ostringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    creds = grpc::SslCredentials(ssl);
  }
  // The read-only calls are retried by gRPC when the coordinator is UNAVAILABLE (a first
  // connection that fails transiently, a restart), within --timeout; Submit, Cancel and Retry are
  // not, so a change is never applied twice.
  grpc::ChannelArguments args;
  // gRPC's default of 4 MB is less than a dry run of a few thousand trials (each with its config)
  // or a large query result (the server caps those at 48 MB).
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetServiceConfigJSON(R"({"methodConfig": [{
    "name": [{"service": "ablate.v1.ControlService", "method": "ListSweeps"},
             {"service": "ablate.v1.ControlService", "method": "GetSweep"},
             {"service": "ablate.v1.ControlService", "method": "GetTrial"},
             {"service": "ablate.v1.ControlService", "method": "Results"},
             {"service": "ablate.v1.ControlService", "method": "Query"},
             {"service": "ablate.v1.ControlService", "method": "ListWorkers"},
             {"service": "ablate.v1.ControlService", "method": "Logs"}],
    "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.25s", "maxBackoff": "2s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})");
  return std::make_unique<Client>(
      grpc::CreateCustomChannel(options.coordinator, creds, args), *token, options);
}

Client::Client(std::shared_ptr<grpc::ChannelInterface> channel, std::string token,
               ClientOptions options)
    : options_(std::move(options)),
      token_(std::move(token)),
      stub_(v1::ControlService::NewStub(std::move(channel))) {}

Client::~Client() = default;

std::unique_ptr<grpc::ClientContext> Client::NewContext(bool unary) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata(kAuthMetadataKey, BearerValue(token_));
  if (unary) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(int64_t(options_.timeout_s * 1000)));
  }
  return context;
}

Status Client::FromGrpc(const grpc::Status& status) const {
  if (status.ok()) return Status::Ok();
  const StatusCode code = FromGrpcCode(status.error_code());
  const std::string& msg = status.error_message();
  const std::string addr = options_.coordinator;
  switch (code) {
    case StatusCode::kUnavailable:
      return Status(code, "cannot reach the coordinator at " + addr +
                              (options_.coordinator_source == "default"
                                   ? " (the default address)"
                                   : " (from " + options_.coordinator_source + ")") +
                              ": ablated may not be running there" +
                              (options_.coordinator_source.rfind("$ABLATE_DATA_DIR", 0) == 0
                                   ? " (it leaves that file behind when it stops)"
                                   : "") +
                              "; start it, or point --coordinator / $ABLATE_COORDINATOR at it" +
                              (msg.empty() ? "" : " [" + msg + "]"));
    case StatusCode::kDeadlineExceeded:
      return Status(code, "the coordinator at " + addr + " did not answer within " +
                              FormatSeconds(options_.timeout_s) +
                              " s (--timeout); ablated may be overloaded or not running there");
    case StatusCode::kUnauthenticated:
      return Status(code, "the coordinator at " + addr + " rejected the token from " +
                              options_.token_file + " (" + options_.token_source + "): " + msg +
                              "; use that coordinator's token file (--token-file)");
    case StatusCode::kPermissionDenied:
      return Status(code, "permission denied by the coordinator at " + addr + " (token from " +
                              options_.token_file + "): " + msg);
    default:
      return Status(code, msg.empty() ? std::string(StatusCodeName(code)) : msg);
  }
}

}  // namespace ablate::cli
