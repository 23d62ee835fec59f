// The coordinator's gRPC services: thin adapters between protobuf and the scheduler / store
// (docs/design.md, "Processes"). They authenticate every call (bearer token), convert, and delegate.
//
// Thread safety: the services are called concurrently by gRPC's thread pool; they hold no state of
// their own beyond immutable configuration.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>

#include "proto/ablate.grpc.pb.h"
#include "scheduler/scheduler.h"
#include "store/store.h"

namespace ablate::server {

struct ServiceOptions {
  std::string token;         // required bearer token
  int max_trials = 10000;    // grid-size limit for Submit without force
  bool require_worker_cert = false;  // mutual TLS: a worker stream needs a verified client cert
};

// OK when the call carries `authorization: Bearer <token>`.
grpc::Status CheckAuth(const grpc::ServerContext* ctx, const std::string& token);
// Status (ablate) -> grpc::Status, converted once at the edge.
grpc::Status ToGrpc(const Status& st);

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  WorkerServiceImpl(Scheduler* scheduler, ServiceOptions options)
      : scheduler_(scheduler), opt_(std::move(options)) {}
  grpc::Status Connect(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override;

 private:
  Scheduler* scheduler_;
  ServiceOptions opt_;
};

class ControlServiceImpl final : public v1::ControlService::Service {
 public:
  ControlServiceImpl(Scheduler* scheduler, Store* store, ServiceOptions options)
      : scheduler_(scheduler), store_(store), opt_(std::move(options)) {}
  // Stops Watch streams promptly (graceful shutdown).
  void Shutdown() { shutting_down_ = true; }

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
  grpc::Status Compare(grpc::ServerContext*, const v1::CompareRequest*,
                       v1::CompareResponse*) override;
  grpc::Status Query(grpc::ServerContext*, const v1::QueryRequest*, v1::QueryResponse*) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse*) override;
  grpc::Status Logs(grpc::ServerContext*, const v1::LogsRequest*, v1::LogsResponse*) override;
  grpc::Status Export(grpc::ServerContext*, const v1::ExportRequest*,
                      grpc::ServerWriter<v1::ExportChunk>*) override;
  grpc::Status Annotate(grpc::ServerContext*, const v1::AnnotateRequest*,
                        v1::AnnotateResponse*) override;
  grpc::Status Archive(grpc::ServerContext*, const v1::ArchiveRequest*,
                       v1::ArchiveResponse*) override;
  grpc::Status Watch(grpc::ServerContext*, const v1::WatchRequest*,
                     grpc::ServerWriter<v1::SweepSnapshot>*) override;

 private:
  Scheduler* scheduler_;
  Store* store_;
  ServiceOptions opt_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace ablate::server
