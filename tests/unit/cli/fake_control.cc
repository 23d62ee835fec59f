#include "fake_control.h"

#include <chrono>
#include <thread>

namespace ablate::cli::testing {

grpc::Status FakeControl::Check(grpc::ServerContext* context) {
  std::string auth;
  auto it = context->client_metadata().find("authorization");
  if (it != context->client_metadata().end()) auth.assign(it->second.data(), it->second.size());
  std::lock_guard<std::mutex> lock(mu_);
  authorization_.push_back(auth);
  if (auth != "Bearer " + token_) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid bearer token");
  }
  return grpc::Status::OK;
}

template <typename Req>
grpc::Status FakeControl::Handle(grpc::ServerContext* context, const Req& req, Req* last) {
  grpc::Status st = Check(context);
  if (!st.ok()) return st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (++calls_ <= unavailable_first) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect: No such file or directory");
    }
    if (last != nullptr) *last = req;
  }
  return status;
}

#define FAKE_UNARY(Method, Req, Resp, last, canned)                                  \
  grpc::Status FakeControl::Method(grpc::ServerContext* context, const v1::Req* req, \
                                   v1::Resp* resp) {                                 \
    grpc::Status st = Handle(context, *req, last);                                   \
    if (st.ok()) *resp = canned;                                                     \
    return st;                                                                       \
  }

FAKE_UNARY(Submit, SubmitRequest, SubmitResponse, &last_submit_, submit)
FAKE_UNARY(ListSweeps, ListSweepsRequest, ListSweepsResponse,
           static_cast<v1::ListSweepsRequest*>(nullptr), sweeps)
FAKE_UNARY(GetSweep, GetSweepRequest, GetSweepResponse, &last_get_sweep_, sweep)
FAKE_UNARY(GetTrial, GetTrialRequest, GetTrialResponse, static_cast<v1::GetTrialRequest*>(nullptr),
           trial)
FAKE_UNARY(Cancel, CancelRequest, CancelResponse, &last_cancel_, cancel)
FAKE_UNARY(Retry, RetryRequest, RetryResponse, &last_retry_, retry)
FAKE_UNARY(Results, ResultsRequest, ResultsResponse, &last_results_, results)
FAKE_UNARY(Query, QueryRequest, QueryResponse, &last_query_, query)
FAKE_UNARY(ListWorkers, ListWorkersRequest, ListWorkersResponse,
           static_cast<v1::ListWorkersRequest*>(nullptr), workers)
FAKE_UNARY(Logs, LogsRequest, LogsResponse, &last_logs_, logs)
#undef FAKE_UNARY

grpc::Status FakeControl::Watch(grpc::ServerContext* context, const v1::WatchRequest* req,
                                grpc::ServerWriter<v1::SweepSnapshot>* writer) {
  grpc::Status st = Handle(context, *req, &last_watch_);
  if (!st.ok()) return st;
  int call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = ++watch_calls_;
  }
  if (watch_stall_after >= 0) {
    for (int i = 0; call == 1 && i < watch_stall_after && i < int(snapshots.size()); ++i) {
      if (!writer->Write(snapshots[i])) break;
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!context->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return grpc::Status::OK;
  }
  for (size_t i = 0; i < snapshots.size(); ++i) {
    if (call == 1 && watch_break_after >= 0 && int(i) == watch_break_after) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator restarting");
    }
    if (context->IsCancelled() || !writer->Write(snapshots[i])) break;
  }
  return grpc::Status::OK;
}

std::vector<std::string> FakeControl::authorization() const {
  std::lock_guard<std::mutex> lock(mu_);
  return authorization_;
}
#define FAKE_GETTER(Type, name, member)    \
  Type FakeControl::name() const {         \
    std::lock_guard<std::mutex> lock(mu_); \
    return member;                         \
  }
FAKE_GETTER(v1::SubmitRequest, last_submit, last_submit_)
FAKE_GETTER(v1::GetSweepRequest, last_get_sweep, last_get_sweep_)
FAKE_GETTER(v1::CancelRequest, last_cancel, last_cancel_)
FAKE_GETTER(v1::RetryRequest, last_retry, last_retry_)
FAKE_GETTER(v1::ResultsRequest, last_results, last_results_)
FAKE_GETTER(v1::QueryRequest, last_query, last_query_)
FAKE_GETTER(v1::LogsRequest, last_logs, last_logs_)
FAKE_GETTER(v1::WatchRequest, last_watch, last_watch_)
FAKE_GETTER(int, watch_calls, watch_calls_)
FAKE_GETTER(int, calls, calls_)
#undef FAKE_GETTER

FakeServer::FakeServer(grpc::Service* service) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(service);
  server_ = builder.BuildAndStart();
}

FakeServer::~FakeServer() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

}  // namespace ablate::cli::testing
