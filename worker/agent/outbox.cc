#include "agent/outbox.h"

#include <climits>

namespace ablate::agent {

AttemptOutbox::AttemptOutbox(int64_t trial_id, int32_t attempt, std::unique_ptr<Spool> spool,
                             OutboxOptions options)
    : trial_id_(trial_id), attempt_(attempt), options_(options), spool_(std::move(spool)) {
  if (spool_) {
    next_seq_ = spool_->last_seq() + 1;
    handed_max_ = spool_->last_seq();  // a previous worker process may have sent them
    finished_ = spool_->finished();
    // A finished attempt whose final event was acknowledged, but whose spool survived a crash
    // before it could be deleted: nothing left to do.
    if (finished_ && spool_->Unacked().empty()) {
      NoteSpool(spool_->Remove());
      spool_.reset();
      done_ = true;
    }
  }
}

void AttemptOutbox::NoteSpool(const Status& st) {
  if (st.ok()) return;
  ++spool_errors_;
  last_spool_error_ = st.ToString();
}

void AttemptOutbox::Keep(v1::WorkerMessage m) {
  if (spool_) {
    NoteSpool(spool_->Append(m));
  } else {
    const int64_t seq = Spool::SeqOf(m);
    memory_[seq] = std::move(m);
  }
}

void AttemptOutbox::CloseBatch() {
  if (open_.points_size() == 0) return;
  v1::WorkerMessage m;
  auto* b = m.mutable_metrics();
  b->Swap(&open_);
  b->set_trial_id(trial_id_);
  b->set_attempt(attempt_);
  b->set_seq(next_seq_++);
  open_.Clear();
  Keep(std::move(m));
  if (counters_) ++counters_->batches_spooled;
}

bool AttemptOutbox::IsBatch(int64_t seq) const {
  const auto& kept = spool_ ? spool_->Unacked() : memory_;
  auto it = kept.find(seq);
  return it != kept.end() && it->second.has_metrics();
}

void AttemptOutbox::AddPoints(std::vector<v1::MetricPoint> points, int64_t now_ms) {
  if (done_) return;
  for (auto& p : points) {
    if (open_.points_size() == 0) open_since_ms_ = now_ms;
    *open_.add_points() = std::move(p);
    if (size_t(open_.points_size()) >= options_.max_points) CloseBatch();
  }
}

int64_t AttemptOutbox::AddEvent(v1::TrialEvent event) {
  CloseBatch();
  v1::WorkerMessage m;
  auto* e = m.mutable_event();
  *e = std::move(event);
  e->set_trial_id(trial_id_);
  e->set_attempt(attempt_);
  const int64_t seq = next_seq_++;
  e->set_seq(seq);
  if (Spool::IsFinal(m)) finished_ = true;
  Keep(std::move(m));
  return seq;
}

void AttemptOutbox::Flush(int64_t now_ms, bool force) {
  if (open_.points_size() == 0) return;
  if (force || now_ms - open_since_ms_ >= options_.flush_ms) CloseBatch();
}

int64_t AttemptOutbox::NextFlushMs() const {
  if (open_.points_size() == 0) return INT64_MAX;
  return open_since_ms_ + options_.flush_ms;
}

void AttemptOutbox::TakeUnsent(std::vector<v1::WorkerMessage>* out) {
  const auto& kept = spool_ ? spool_->Unacked() : memory_;
  for (auto it = kept.upper_bound(sent_upto_); it != kept.end(); ++it) {
    out->push_back(it->second);
    sent_upto_ = it->first;
    if (it->first <= handed_max_) {
      if (counters_ && it->second.has_metrics()) ++counters_->batches_replayed;
    } else {
      handed_max_ = it->first;
    }
  }
}

bool AttemptOutbox::HasUnsent() const {
  const auto& kept = spool_ ? spool_->Unacked() : memory_;
  return kept.upper_bound(sent_upto_) != kept.end();
}

size_t AttemptOutbox::unacked() const { return spool_ ? spool_->Unacked().size() : memory_.size(); }

void AttemptOutbox::Ack(int64_t seq) {
  if (done_) return;
  if (counters_ && IsBatch(seq)) ++counters_->batches_acked;
  if (spool_) {
    NoteSpool(spool_->Ack(seq));
  } else {
    memory_.erase(seq);
  }
  // The attempt is over once its final event and everything before it are acknowledged. (An earlier
  // report still unacknowledged after the final ack is resent on the next connection.)
  if (finished_ && unacked() == 0) {
    if (spool_) {
      NoteSpool(spool_->Remove());
      spool_.reset();
    }
    memory_.clear();
    done_ = true;
  }
}

}  // namespace ablate::agent
