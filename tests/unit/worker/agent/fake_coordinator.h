// An in-process fake coordinator for the worker agent's tests: a real gRPC WorkerService that
// registers the worker, assigns attempts, acks (or withholds acks), cuts streams on request and
// records everything it receives.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "proto/ablate.grpc.pb.h"

namespace ablate::agent::testing {

inline constexpr char kToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Received {
  int conn;
  v1::WorkerMessage msg;
};

class FakeCoordinator final : public v1::WorkerService::Service {
 public:
  // Decide per report whether to ack it, and whether to cut the stream after it.
  std::function<bool(int conn, const v1::WorkerMessage&)> ack_policy;
  std::function<bool(int conn, int reports_on_conn)> break_policy;

  grpc::Status Connect(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    auto auth = ctx->client_metadata().find("authorization");
    if (auth == ctx->client_metadata().end() ||
        std::string(auth->second.data(), auth->second.size()) != std::string("Bearer ") + kToken) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
    }
    v1::WorkerMessage m;
    if (!stream->Read(&m) || !m.has_register_()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "register first");
    }
    int conn;
    {
      std::lock_guard<std::mutex> l(mu_);
      conn = int(registers_.size()) + 1;
      registers_.push_back(m.register_());
      current_ = stream;
      v1::CoordinatorMessage r;
      r.mutable_registered()->set_lease_ms(3000);
      r.mutable_registered()->set_heartbeat_ms(100);
      for (const auto& a : m.register_().running()) *r.mutable_registered()->add_adopted() = a;
      stream->Write(r);
      for (const auto& a : pending_) {
        v1::CoordinatorMessage am;
        *am.mutable_assign() = a;
        stream->Write(am);
      }
      pending_.clear();
      cv_.notify_all();
    }
    int reports = 0;
    while (stream->Read(&m)) {
      std::lock_guard<std::mutex> l(mu_);
      if (m.has_heartbeat()) {
        heartbeats_.push_back(m.heartbeat());
      } else {
        received_.push_back({conn, m});
        ++reports;
        if (!ack_policy || ack_policy(conn, m)) {
          v1::CoordinatorMessage ack;
          const bool metrics = m.has_metrics();
          ack.mutable_ack()->set_trial_id(metrics ? m.metrics().trial_id() : m.event().trial_id());
          ack.mutable_ack()->set_attempt(metrics ? m.metrics().attempt() : m.event().attempt());
          ack.mutable_ack()->set_seq(metrics ? m.metrics().seq() : m.event().seq());
          stream->Write(ack);
        }
        if (break_policy && break_policy(conn, reports)) {
          current_ = nullptr;
          cv_.notify_all();
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "test: stream cut");
        }
      }
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> l(mu_);
    current_ = nullptr;
    return grpc::Status::OK;
  }

  // Assigns on the current stream, or on the next one.
  void Assign(const v1::Assignment& a) {
    std::lock_guard<std::mutex> l(mu_);
    if (current_) {
      v1::CoordinatorMessage m;
      *m.mutable_assign() = a;
      current_->Write(m);
    } else {
      pending_.push_back(a);
    }
  }
  bool Send(const v1::CoordinatorMessage& m) {
    std::lock_guard<std::mutex> l(mu_);
    return current_ && current_->Write(m);
  }

  bool WaitUntil(const std::function<bool()>& pred, int timeout_ms = 10000) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), pred);
  }

  // Accessors for predicates (call with mu_ held, i.e. inside WaitUntil) and after the run.
  const std::vector<Received>& received() const { return received_; }
  const std::vector<v1::Register>& registers() const { return registers_; }
  const std::vector<v1::Heartbeat>& heartbeats() const { return heartbeats_; }
  std::mutex& mu() { return mu_; }

  // The final event of an attempt, if received.
  const v1::TrialEvent* FinalOf(int64_t trial, int32_t attempt) const {
    for (const auto& r : received_) {
      if (!r.msg.has_event()) continue;
      const auto& e = r.msg.event();
      if (e.trial_id() == trial && e.attempt() == attempt &&
          (e.kind() == v1::TrialEvent::FINISHED || e.kind() == v1::TrialEvent::FAILED ||
           e.kind() == v1::TrialEvent::CANCELED)) {
        return &e;
      }
    }
    return nullptr;
  }
  bool HasEvent(int64_t trial, v1::TrialEvent::Kind kind) const {
    for (const auto& r : received_) {
      if (r.msg.has_event() && r.msg.event().trial_id() == trial && r.msg.event().kind() == kind)
        return true;
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* current_ = nullptr;
  std::vector<v1::Assignment> pending_;
  std::vector<v1::Register> registers_;
  std::vector<v1::Heartbeat> heartbeats_;
  std::vector<Received> received_;
};

}  // namespace ablate::agent::testing
