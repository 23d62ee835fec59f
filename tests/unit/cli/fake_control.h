// An in-process ControlService for the CLI's tests: a real gRPC server on 127.0.0.1:<free port>
// that checks the bearer token like the coordinator, records what it was sent and answers with
// canned responses.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/ablate.grpc.pb.h"

namespace ablate::cli::testing {

class FakeControl final : public v1::ControlService::Service {
 public:
  explicit FakeControl(std::string token) : token_(std::move(token)) {}

  // Canned answers (set before the call). `status` fails every call when not OK.
  grpc::Status status = grpc::Status::OK;
  v1::SubmitResponse submit;
  v1::ListSweepsResponse sweeps;
  v1::GetSweepResponse sweep;
  v1::GetTrialResponse trial;
  v1::CancelResponse cancel;
  v1::RetryResponse retry;
  v1::ResultsResponse results;
  v1::QueryResponse query;
  v1::ListWorkersResponse workers;
  v1::LogsResponse logs;
  std::vector<v1::SweepSnapshot> snapshots;  // Watch sends these in order, then ends
  int unavailable_first = 0;  // the first N calls (any method) end UNAVAILABLE at once
  int watch_break_after = -1;  // >= 0: the first Watch ends UNAVAILABLE after that many snapshots
  // >= 0: a frozen coordinator: the first Watch sends that many snapshots, every later one none,
  // and then each waits (stream open, nothing sent) until the client cancels.
  int watch_stall_after = -1;

  // What the server saw. Read after the call returned.
  std::vector<std::string> authorization() const;
  v1::SubmitRequest last_submit() const;
  v1::GetSweepRequest last_get_sweep() const;
  v1::CancelRequest last_cancel() const;
  v1::RetryRequest last_retry() const;
  v1::ResultsRequest last_results() const;
  v1::QueryRequest last_query() const;
  v1::LogsRequest last_logs() const;
  v1::WatchRequest last_watch() const;
  int watch_calls() const;
  int calls() const;  // every call that carried the right token

  grpc::Status Submit(grpc::ServerContext*, const v1::SubmitRequest*, v1::SubmitResponse*) override;
  grpc::Status ListSweeps(grpc::ServerContext*, const v1::ListSweepsRequest*,
                          v1::ListSweepsResponse*) override;
  grpc::Status GetSweep(grpc::ServerContext*, const v1::GetSweepRequest*,
                        v1::GetSweepResponse*) override;
  grpc::Status GetTrial(grpc::ServerContext*, const v1::GetTrialRequest*,
                        v1::GetTrialResponse*) override;
  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest*, v1::CancelResponse*) override;
  grpc::Status Retry(grpc::ServerContext*, const v1::RetryRequest*, v1::RetryResponse*) override;
  grpc::Status Results(grpc::ServerContext*, const v1::ResultsRequest*,
                       v1::ResultsResponse*) override;
  grpc::Status Query(grpc::ServerContext*, const v1::QueryRequest*, v1::QueryResponse*) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse*) override;
  grpc::Status Logs(grpc::ServerContext*, const v1::LogsRequest*, v1::LogsResponse*) override;
  grpc::Status Watch(grpc::ServerContext*, const v1::WatchRequest*,
                     grpc::ServerWriter<v1::SweepSnapshot>*) override;

 private:
  // Records the call's authorization header; UNAUTHENTICATED unless it is "Bearer <token>".
  grpc::Status Check(grpc::ServerContext* context);
  template <typename Req>
  grpc::Status Handle(grpc::ServerContext* context, const Req& req, Req* last);

  const std::string token_;
  mutable std::mutex mu_;
  std::vector<std::string> authorization_;  // GUARDED_BY(mu_), and the rest below
  int calls_ = 0;
  v1::SubmitRequest last_submit_;
  v1::GetSweepRequest last_get_sweep_;
  v1::CancelRequest last_cancel_;
  v1::RetryRequest last_retry_;
  v1::ResultsRequest last_results_;
  v1::QueryRequest last_query_;
  v1::LogsRequest last_logs_;
  v1::WatchRequest last_watch_;
  int watch_calls_ = 0;
};

// Starts `service` on 127.0.0.1 with a port the kernel picks.
class FakeServer {
 public:
  explicit FakeServer(grpc::Service* service);
  ~FakeServer();
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace ablate::cli::testing
