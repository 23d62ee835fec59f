// Unit tests of the worker agent's pure parts: trainer line → metric points, batching and seq
// numbering, the spool (write/read/ack/compaction/torn tail), --gpus, start-up helpers, utilities.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "agent/gpus.h"
#include "agent/outbox.h"
#include "agent/setup.h"
#include "agent/spool.h"
#include "agent/trainer_output.h"
#include "agent/util.h"
#include "test_util.h"

namespace ablate::agent {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

std::map<std::string, double> PointMap(const TrainerLine& t) {
  std::map<std::string, double> m;
  for (const auto& p : t.points) {
    EXPECT_EQ(p.step(), t.step) << p.name();
    EXPECT_EQ(m.count(p.name()), 0u) << p.name();
    m[p.name()] = p.value();
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Trainer output
// ---------------------------------------------------------------------------------------------

TEST(WorkerTrainerOutput, StartLineHasNoStepAndKeepsOnlyNumbers) {
  auto t = ParseTrainerLine(
      R"({"type":"start","config_hash":"9f1c","resumed_from_step":0,"backend":"cpu","threads":2,)"
      R"("params":412928,"vocab_size":256,"data":"brown 1.0 MB","train_tokens":950000,)"
      R"("val_tokens":50000,"unigram_entropy":3.08,"accumulation_steps":4,"tokens_per_step":16384,)"
      R"("flops_per_token":2.5e6,"peak_flops":1.2e11,"peak_source":"cpu estimate",)"
      R"("optimizer_state_bytes":1000,"optimizer_state_bytes_fp32":4000,)"
      R"("optimizer_state_saved":0.75,"spectral_tensors":12})");
  ASSERT_TRUE(t.is_json);
  EXPECT_EQ(t.type, "start");
  EXPECT_EQ(t.step, 0);
  auto m = PointMap(t);
  EXPECT_EQ(m.count("config_hash"), 0u);
  EXPECT_EQ(m.count("backend"), 0u);
  EXPECT_EQ(m.count("data"), 0u);
  EXPECT_EQ(m.count("peak_source"), 0u);
  EXPECT_EQ(m.count("type"), 0u);
  EXPECT_EQ(m.size(), 15u);
  EXPECT_DOUBLE_EQ(m["params"], 412928);
  EXPECT_DOUBLE_EQ(m["resumed_from_step"], 0);
  EXPECT_DOUBLE_EQ(m["flops_per_token"], 2.5e6);
  EXPECT_DOUBLE_EQ(m["optimizer_state_saved"], 0.75);
  EXPECT_FALSE(t.checkpoint_path);
  EXPECT_FALSE(t.final_status);
}

TEST(WorkerTrainerOutput, StepLine) {
  auto t = ParseTrainerLine(
      R"({"type":"step","step":42,"loss":3.5,"lr":0.01,"lr_vector":0.0003,"grad_norm":0.9,)"
      R"("tokens":688128,"tokens_per_s":5000.5,"mfu":0.12,"step_time_s":3.2,"p":0.5,)"
      R"("update_rms_spectral":0.2,"update_rms_adamw":0.1,"newton_residual":0.4})");
  ASSERT_TRUE(t.is_json);
  EXPECT_EQ(t.step, 42);
  auto m = PointMap(t);
  EXPECT_EQ(m.size(), 12u);
  EXPECT_EQ(m.count("step"), 0u);
  EXPECT_DOUBLE_EQ(m["loss"], 3.5);
  EXPECT_DOUBLE_EQ(m["tokens"], 688128);
  EXPECT_DOUBLE_EQ(m["newton_residual"], 0.4);
}

TEST(WorkerTrainerOutput, EvalAndDiagnosticsLines) {
  auto e = ParseTrainerLine(R"({"type":"eval","step":50,"val_loss":2.1,"val_bpb":3.03})");
  EXPECT_EQ(e.step, 50);
  auto m = PointMap(e);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_DOUBLE_EQ(m["val_loss"], 2.1);

  auto d = ParseTrainerLine(
      R"({"type":"diagnostics","step":50,"attn.0.o.cos":0.999,"attn.0.o.rel_l2":0.02,)"
      R"("attn.0.dq.cos":0.98,"attn.1.max_logit":7.5,"attn.1.q_gain":1.01,)"
      R"("diagnostics_time_s":0.3})");
  EXPECT_EQ(d.type, "diagnostics");
  auto dm = PointMap(d);
  EXPECT_EQ(dm.size(), 6u);
  EXPECT_DOUBLE_EQ(dm["attn.0.dq.cos"], 0.98);
  EXPECT_DOUBLE_EQ(dm["attn.1.max_logit"], 7.5);
}

TEST(WorkerTrainerOutput, CheckpointLineNamesTheCheckpoint) {
  auto t = ParseTrainerLine(
      R"({"type":"checkpoint","step":100,"path":"/w/trials/3/attempt-1/checkpoints/step_00000100.ckpt"})");
  EXPECT_EQ(t.step, 100);
  EXPECT_TRUE(t.points.empty());
  ASSERT_TRUE(t.checkpoint_path);
  EXPECT_EQ(*t.checkpoint_path, "/w/trials/3/attempt-1/checkpoints/step_00000100.ckpt");
}

TEST(WorkerTrainerOutput, FinalLineKeepsStatusReasonAndSkipsNulls) {
  auto ok = ParseTrainerLine(R"({"type":"final","status":"ok","step":500,"final_train_loss":1.9,)"
                             R"("final_val_loss":1.95,"best_val_loss":1.94,"elapsed_s":80.5})");
  ASSERT_TRUE(ok.final_status);
  EXPECT_EQ(*ok.final_status, "ok");
  EXPECT_EQ(ok.final_reason, "");
  EXPECT_EQ(ok.step, 500);
  auto m = PointMap(ok);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_DOUBLE_EQ(m["final_val_loss"], 1.95);

  // NaN losses are printed as null by the trainer: not points.
  auto div = ParseTrainerLine(
      R"({"type":"final","status":"diverged","step":7,"final_train_loss":null,)"
      R"("final_val_loss":null,"best_val_loss":null,"elapsed_s":1.5,"reason":"train loss nan"})");
  ASSERT_TRUE(div.final_status);
  EXPECT_EQ(*div.final_status, "diverged");
  EXPECT_EQ(div.final_reason, "train loss nan");
  auto dm = PointMap(div);
  EXPECT_EQ(dm.size(), 1u);
  EXPECT_EQ(dm.count("elapsed_s"), 1u);
}

TEST(WorkerTrainerOutput, BooleansNestedAndOddValuesAreNotPoints) {
  auto t = ParseTrainerLine(
      R"({"type":"step","step":3,"flag":true,"nested":{"a":1},"list":[1,2],"neg":-2,"big":1e300})");
  auto m = PointMap(t);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_DOUBLE_EQ(m["neg"], -2);
  EXPECT_DOUBLE_EQ(m["big"], 1e300);
  // A line without a type still maps its numbers; a fractional step is truncated.
  auto u = ParseTrainerLine(R"({"step":2.7,"x":1})");
  EXPECT_TRUE(u.is_json);
  EXPECT_EQ(u.step, 2);
  EXPECT_EQ(PointMap(u).size(), 1u);
}

TEST(WorkerTrainerOutput, NonJsonLinesAreRecognized) {
  for (const char* line : {"", "   ", "hello world", "[1,2,3]", "{broken", "42", "\"str\"",
                           "{\"a\":1} trailing", "Segmentation fault (core dumped)"}) {
    auto t = ParseTrainerLine(line);
    EXPECT_FALSE(t.is_json) << line;
    EXPECT_TRUE(t.points.empty()) << line;
  }
  // Leading spaces and a trailing \r (a CRLF line) are fine.
  auto t = ParseTrainerLine("  {\"type\":\"eval\",\"step\":1,\"val_loss\":2}\r");
  EXPECT_TRUE(t.is_json);
  EXPECT_EQ(t.points.size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Outbox: batching and seq numbering
// ---------------------------------------------------------------------------------------------

std::vector<v1::MetricPoint> Points(int n, int64_t step0 = 0) {
  std::vector<v1::MetricPoint> v;
  for (int i = 0; i < n; ++i) {
    v1::MetricPoint p;
    p.set_step(step0 + i);
    p.set_name("loss");
    p.set_value(i);
    v.push_back(p);
  }
  return v;
}

v1::TrialEvent Event(v1::TrialEvent::Kind kind) {
  v1::TrialEvent e;
  e.set_kind(kind);
  return e;
}

std::vector<v1::WorkerMessage> Take(AttemptOutbox& ob) {
  std::vector<v1::WorkerMessage> out;
  ob.TakeUnsent(&out);
  return out;
}

TEST(WorkerOutbox, BatchesByTimeAndSizeAndFlushesBeforeEvents) {
  AttemptOutbox ob(7, 2, nullptr, OutboxOptions{200, 2000});
  EXPECT_EQ(ob.AddEvent(Event(v1::TrialEvent::STARTED)), 1);
  ob.AddPoints(Points(3), /*now_ms=*/1000);
  EXPECT_EQ(ob.NextFlushMs(), 1200);
  ob.AddPoints(Points(2), 1100);  // the batch's age counts from its first point
  EXPECT_EQ(ob.NextFlushMs(), 1200);
  ob.Flush(1199);
  auto out = Take(ob);
  ASSERT_EQ(out.size(), 1u);  // only the STARTED event so far
  EXPECT_EQ(out[0].event().seq(), 1);
  EXPECT_EQ(out[0].event().trial_id(), 7);
  EXPECT_EQ(out[0].event().attempt(), 2);

  ob.Flush(1200);
  out = Take(ob);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].has_metrics());
  EXPECT_EQ(out[0].metrics().seq(), 2);
  EXPECT_EQ(out[0].metrics().trial_id(), 7);
  EXPECT_EQ(out[0].metrics().attempt(), 2);
  EXPECT_EQ(out[0].metrics().points_size(), 5);
  EXPECT_EQ(ob.NextFlushMs(), INT64_MAX);

  // 2500 points: one full batch of 2000 at once, 500 left open until the event closes them.
  ob.AddPoints(Points(2500), 2000);
  out = Take(ob);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].metrics().seq(), 3);
  EXPECT_EQ(out[0].metrics().points_size(), 2000);
  EXPECT_EQ(out[0].metrics().points(1999).step(), 1999);
  auto ck = Event(v1::TrialEvent::CHECKPOINTED);
  ck.set_checkpoint_path("/c");
  EXPECT_EQ(ob.AddEvent(ck), 5);
  out = Take(ob);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].metrics().seq(), 4);
  EXPECT_EQ(out[0].metrics().points_size(), 500);
  EXPECT_EQ(out[0].metrics().points(0).step(), 2000);
  EXPECT_EQ(out[1].event().seq(), 5);
  EXPECT_EQ(out[1].event().checkpoint_path(), "/c");
  EXPECT_TRUE(Take(ob).empty());
  EXPECT_EQ(ob.last_seq(), 5);
  EXPECT_EQ(ob.unacked(), 5u);
}

TEST(WorkerOutbox, ResendsOnlyUnackedAfterReconnectAndEndsOnFinalAck) {
  AttemptOutbox ob(1, 1, nullptr);
  ob.AddEvent(Event(v1::TrialEvent::STARTED));
  ob.AddPoints(Points(4), 0);
  ob.Flush(0, /*force=*/true);
  ob.AddEvent(Event(v1::TrialEvent::FINISHED));
  EXPECT_TRUE(ob.finished());
  EXPECT_EQ(Take(ob).size(), 3u);
  ob.Ack(1);
  ob.Ack(99);  // unknown: ignored
  EXPECT_TRUE(Take(ob).empty());
  ob.RewindForReconnect();
  auto out = Take(ob);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].metrics().seq(), 2);
  EXPECT_EQ(out[1].event().seq(), 3);
  // The final ack arrives before the batch's: the attempt is not done until both are.
  ob.Ack(3);
  EXPECT_FALSE(ob.done());
  ob.Ack(2);
  EXPECT_TRUE(ob.done());
  ob.RewindForReconnect();
  EXPECT_TRUE(Take(ob).empty());
}

TEST(WorkerOutbox, SpoolCarriesSeqAndUnackedAcrossARestart) {
  TempDir dir;
  const std::string path = dir.path() + "/spool";
  {
    auto spool = Spool::Open(path);
    ASSERT_TRUE(spool.ok()) << spool.status().ToString();
    AttemptOutbox ob(5, 1, std::move(*spool));
    ob.AddEvent(Event(v1::TrialEvent::STARTED));  // 1
    ob.AddPoints(Points(10), 0);
    ob.Flush(0, true);                                 // 2
    ob.AddEvent(Event(v1::TrialEvent::CHECKPOINTED));  // 3
    ob.AddPoints(Points(3, 10), 0);                    // open: lost with the process
    EXPECT_EQ(Take(ob).size(), 3u);
    ob.Ack(1);
    ob.Ack(3);
    EXPECT_EQ(ob.spool_errors(), 0u);
  }
  auto spool = Spool::Open(path);
  ASSERT_TRUE(spool.ok());
  AttemptOutbox ob(5, 1, std::move(*spool));
  EXPECT_FALSE(ob.finished());
  auto out = Take(ob);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].metrics().seq(), 2);
  EXPECT_EQ(out[0].metrics().points_size(), 10);
  EXPECT_EQ(ob.AddEvent(Event(v1::TrialEvent::FAILED)), 4);  // continues after the last seq
  ob.Ack(2);
  ob.Ack(4);
  EXPECT_TRUE(ob.done());
  EXPECT_FALSE(FileExists(path));  // the final ack deletes the spool
}

// ---------------------------------------------------------------------------------------------
// Spool
// ---------------------------------------------------------------------------------------------

v1::WorkerMessage Batch(int64_t seq, int npoints = 3) {
  v1::WorkerMessage m;
  auto* b = m.mutable_metrics();
  b->set_trial_id(11);
  b->set_attempt(1);
  b->set_seq(seq);
  for (int i = 0; i < npoints; ++i) {
    auto* p = b->add_points();
    p->set_step(seq * 100 + i);
    p->set_name("loss");
    p->set_value(double(seq) + 0.5);
  }
  return m;
}

v1::WorkerMessage FinalEvent(int64_t seq) {
  v1::WorkerMessage m;
  auto* e = m.mutable_event();
  e->set_trial_id(11);
  e->set_attempt(1);
  e->set_seq(seq);
  e->set_kind(v1::TrialEvent::FINISHED);
  e->set_status("ok");
  return m;
}

std::vector<int64_t> Seqs(const Spool& s) {
  std::vector<int64_t> v;
  for (const auto& [seq, m] : s.Unacked()) {
    EXPECT_EQ(Spool::SeqOf(m), seq);
    v.push_back(seq);
  }
  return v;
}

off_t FileSize(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST(WorkerSpool, WriteAckReopen) {
  TempDir dir;
  const std::string path = dir.path() + "/spool";
  {
    auto s = Spool::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->last_seq(), 0);
    for (int i = 1; i <= 5; ++i) ASSERT_TRUE((*s)->Append(Batch(i)).ok());
    ASSERT_TRUE((*s)->Ack(2).ok());
    ASSERT_TRUE((*s)->Ack(4).ok());
    ASSERT_TRUE((*s)->Ack(42).ok());  // unknown
    EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{1, 3, 5}));
  }
  auto s = Spool::Open(path);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ((*s)->last_seq(), 5);
  EXPECT_FALSE((*s)->finished());
  EXPECT_EQ((*s)->torn_bytes(), 0u);
  const auto& m3 = (*s)->Unacked().at(3);
  ASSERT_EQ(m3.metrics().points_size(), 3);
  EXPECT_EQ(m3.metrics().points(2).step(), 302);
  EXPECT_DOUBLE_EQ(m3.metrics().points(2).value(), 3.5);
  EXPECT_TRUE((*s)->Append(v1::WorkerMessage()).code() == StatusCode::kInvalidArgument);
}

TEST(WorkerSpool, TornTailIsDroppedAndTruncated) {
  TempDir dir;
  const std::string path = dir.path() + "/spool";
  {
    auto s = Spool::Open(path);
    ASSERT_TRUE(s.ok());
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->Append(Batch(i)).ok());
  }
  const off_t full = FileSize(path);
  ASSERT_EQ(::truncate(path.c_str(), full - 5), 0);  // the last append was cut short
  {
    auto s = Spool::Open(path);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{1, 2}));
    EXPECT_GT((*s)->torn_bytes(), 0u);
    EXPECT_EQ((*s)->last_seq(), 2);
    ASSERT_TRUE((*s)->Append(Batch(3)).ok());  // appended after the valid prefix
  }
  auto s = Spool::Open(path);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ((*s)->torn_bytes(), 0u);
  EXPECT_EQ(FileSize(path), full);
}

TEST(WorkerSpool, CorruptOrGarbageTailIsDropped) {
  TempDir dir;
  const std::string path = dir.path() + "/spool";
  {
    auto s = Spool::Open(path);
    ASSERT_TRUE(s.ok());
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->Append(Batch(i)).ok());
  }
  // Flip one byte inside the last record's body: its checksum fails.
  std::string data = ReadAll(path);
  data[data.size() - 3] ^= 0x40;
  WriteAll(path, data);
  {
    auto s = Spool::Open(path);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{1, 2}));
  }
  // Garbage after valid records (a header claiming a huge length, then noise).
  std::string more = ReadAll(path) + std::string("\xff\xff\xff\x7f\x01\x02\x03\x04zzzz", 12);
  WriteAll(path, more);
  auto s = Spool::Open(path);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ((*s)->torn_bytes(), 12u);
}

TEST(WorkerSpool, CompactionKeepsUnackedLastSeqAndFinished) {
  TempDir dir;
  const std::string path = dir.path() + "/spool";
  SpoolOptions opt;
  opt.compact_min_acked = 4;
  {
    auto s = Spool::Open(path, opt);
    ASSERT_TRUE(s.ok());
    for (int i = 1; i <= 10; ++i) ASSERT_TRUE((*s)->Append(Batch(i, 50)).ok());
    const off_t before = FileSize(path);
    // The 5th ack finds 4+ acks and more than half the file dead: the file is rewritten with the
    // 5 live records (then 3 more acks are appended).
    for (int i = 1; i <= 4; ++i) ASSERT_TRUE((*s)->Ack(i).ok());
    EXPECT_GT(FileSize(path), before);
    for (int i = 5; i <= 8; ++i) ASSERT_TRUE((*s)->Ack(i).ok());
    const off_t after = FileSize(path);
    EXPECT_LT(after, before * 6 / 10) << "acks did not trigger a compaction";
    EXPECT_EQ(uint64_t(after), (*s)->file_bytes());
    ASSERT_TRUE((*s)->Append(Batch(11)).ok());  // appends go to the compacted file
    EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{9, 10, 11}));
  }
  {
    auto s = Spool::Open(path, opt);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{9, 10, 11}));
    EXPECT_EQ((*s)->last_seq(), 11);
    ASSERT_TRUE((*s)->Append(FinalEvent(12)).ok());
    EXPECT_TRUE((*s)->finished());
    for (int i = 9; i <= 12; ++i) ASSERT_TRUE((*s)->Ack(i).ok());
    ASSERT_TRUE((*s)->Compact().ok());
    EXPECT_TRUE((*s)->Unacked().empty());
  }
  // Everything acknowledged and compacted away: the meta record still knows the last seq and
  // that the attempt finished.
  auto s = Spool::Open(path, opt);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->Unacked().empty());
  EXPECT_EQ((*s)->last_seq(), 12);
  EXPECT_TRUE((*s)->finished());
}

TEST(WorkerSpool, InterruptedCompactionLeavesTheSpoolIntact) {
  TempDir dir;
  const std::string path = dir.path() + "/spool";
  {
    auto s = Spool::Open(path);
    ASSERT_TRUE(s.ok());
    for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*s)->Append(Batch(i)).ok());
  }
  WriteAll(path + ".tmp", "half a compaction");
  auto s = Spool::Open(path);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Seqs(**s), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(FileExists(path + ".tmp"));
  ASSERT_TRUE((*s)->Remove().ok());
  EXPECT_FALSE(FileExists(path));
}

TEST(WorkerSpool, Crc32KnownValue) {
  EXPECT_EQ(Crc32("123456789", 9), 0xCBF43926u);  // the standard check value
}

// ---------------------------------------------------------------------------------------------
// --gpus
// ---------------------------------------------------------------------------------------------

std::vector<v1::GpuInfo> TwoGpus() {
  std::vector<v1::GpuInfo> v(2);
  for (int i = 0; i < 2; ++i) {
    v[i].set_index(i);
    v[i].set_uuid("GPU-" + std::to_string(i));
    v[i].set_name("NVIDIA H100 80GB HBM3");
    v[i].set_memory_bytes(80LL << 30);
  }
  return v;
}

TEST(WorkerGpus, ParseFlag) {
  auto all = ParseGpuFlag("all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->kind, GpuSelection::Kind::kAll);
  auto none = ParseGpuFlag("none");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kind, GpuSelection::Kind::kNone);
  auto list = ParseGpuFlag("3, 0,1");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->kind, GpuSelection::Kind::kList);
  EXPECT_EQ(list->indices, (std::vector<int>{0, 1, 3}));
  auto one = ParseGpuFlag("2");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->indices, (std::vector<int>{2}));
  for (const char* bad : {"x", "0,,1", "0,0", "-1", "1,", "ALL", "0;1", "1.5", "9999999"}) {
    auto r = ParseGpuFlag(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(r.status().message().find("--gpus"), std::string::npos) << r.status().message();
    }
  }
  EXPECT_NE(ParseGpuFlag("0,0").status().message().find("twice"), std::string::npos);
}

TEST(WorkerGpus, Select) {
  auto found = TwoGpus();
  auto all = SelectGpus(found, *ParseGpuFlag("all"));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  auto none = SelectGpus(found, *ParseGpuFlag("none"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto one = SelectGpus(found, *ParseGpuFlag("1"));
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].uuid(), "GPU-1");
  auto missing = SelectGpus(found, *ParseGpuFlag("0,3"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "--gpus: no GPU with index 3 (found 0, 1)");
  auto nogpu = SelectGpus({}, *ParseGpuFlag("0"));
  ASSERT_FALSE(nogpu.ok());
  EXPECT_NE(nogpu.status().message().find("found none"), std::string::npos);
}

TEST(WorkerGpus, NvmlProbeNeverFails) {
  // On a machine without the NVIDIA driver this finds nothing and says why; with one, every GPU
  // has a UUID. Either way it must not crash or throw.
  auto gpus = NvmlProber()->Probe();
  if (gpus.empty()) {
    EXPECT_FALSE(NvmlProber()->last_error().empty());
  } else {
    for (const auto& g : gpus) EXPECT_EQ(g.uuid().rfind("GPU-", 0), 0u) << g.uuid();
  }
}

// ---------------------------------------------------------------------------------------------
// Start-up helpers
// ---------------------------------------------------------------------------------------------

TEST(WorkerSetup, WorkerIdIsGeneratedOnceAndKept) {
  TempDir dir;
  auto id = LoadOrCreateWorkerId(dir.path(), "node-7");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->rfind("node-7-", 0), 0u) << *id;
  EXPECT_EQ(id->size(), std::string("node-7-").size() + 6);
  auto again = LoadOrCreateWorkerId(dir.path(), "other-host");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *id);
  EXPECT_EQ(ReadAll(dir.path() + "/worker_id"), *id + "\n");
  WriteAll(dir.path() + "/worker_id", "two words\n");
  auto bad = LoadOrCreateWorkerId(dir.path(), "node-7");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("worker_id"), std::string::npos);
}

TEST(WorkerSetup, FindTrainer) {
  TempDir dir;
  auto make_exe = [](const std::string& p) {
    WriteAll(p, "#!/bin/sh\n");
    ::chmod(p.c_str(), 0755);
  };
  ASSERT_TRUE(MakeDirs(dir.path() + "/bin").ok());
  ASSERT_TRUE(MakeDirs(dir.path() + "/build/worker/agent").ok());
  ASSERT_TRUE(MakeDirs(dir.path() + "/path1").ok());

  auto missing = FindTrainer(dir.path() + "/nope", "", "");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--trainer"), std::string::npos);
  make_exe(dir.path() + "/bin/my-train");
  auto flag = FindTrainer(dir.path() + "/bin/my-train", dir.path() + "/bin/ablate-worker", "");
  ASSERT_TRUE(flag.ok());
  EXPECT_EQ(*flag, dir.path() + "/bin/my-train");
  WriteAll(dir.path() + "/bin/not-exec", "x");
  EXPECT_FALSE(FindTrainer(dir.path() + "/bin/not-exec", "", "").ok());

  // Nothing anywhere: the error lists what was tried.
  auto none = FindTrainer("", dir.path() + "/bin/ablate-worker", dir.path() + "/path1");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(dir.path() + "/bin/ablate-train"), std::string::npos);
  // PATH.
  make_exe(dir.path() + "/path1/ablate-train");
  auto on_path =
      FindTrainer("", dir.path() + "/bin/ablate-worker", "/nonexistent:" + dir.path() + "/path1");
  ASSERT_TRUE(on_path.ok());
  EXPECT_EQ(*on_path, dir.path() + "/path1/ablate-train");
  // Next to the worker (build/bin/, a bundle's bin/) beats PATH.
  make_exe(dir.path() + "/bin/ablate-train");
  auto next = FindTrainer("", dir.path() + "/bin/ablate-worker", dir.path() + "/path1");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, dir.path() + "/bin/ablate-train");
}

// ---------------------------------------------------------------------------------------------
// Utilities
// ---------------------------------------------------------------------------------------------

TEST(WorkerUtil, SanitizeUtf8) {
  EXPECT_EQ(SanitizeUtf8("plain ascii\n"), "plain ascii\n");
  EXPECT_EQ(SanitizeUtf8("Ψ_p ≈ 0.5 🙂"), "Ψ_p ≈ 0.5 🙂");
  EXPECT_EQ(SanitizeUtf8(std::string("a\xff"
                                     "b")),
            "a?b");
  EXPECT_EQ(SanitizeUtf8(std::string("cut \xe2\x89")), "cut ??");  // a character cut in two
  EXPECT_EQ(SanitizeUtf8(std::string("\xc0\xaf")), "??");          // overlong '/'
  EXPECT_EQ(SanitizeUtf8(std::string("\xed\xa0\x80")), "???");     // a surrogate
  // The check behind it (common/ablate/utf8.h), which the query results and the CLI's spec use.
  EXPECT_EQ(InvalidUtf8At("Ψ_p ≈ 0.5 🙂"), std::string::npos);
  EXPECT_EQ(InvalidUtf8At("r\xc3\xa9sum\xe9"), 6u);          // Latin-1 'é' after a UTF-8 one
  EXPECT_EQ(InvalidUtf8At(std::string("ab\xc0\xaf")), 2u);  // overlong
}

TEST(WorkerUtil, LogTail) {
  TempDir dir;
  const std::string path = dir.path() + "/stderr.log";
  EXPECT_EQ(ReadLogTail(path), "");
  std::string text;
  for (int i = 1; i <= 300; ++i) text += "line " + std::to_string(i) + "\n";
  WriteAll(path, text);
  const std::string tail = ReadLogTail(path, 64 * 1024, 200);
  EXPECT_EQ(tail.rfind("line 101\n", 0), 0u) << tail.substr(0, 40);
  EXPECT_EQ(tail.substr(tail.size() - 9), "line 300\n");
  EXPECT_EQ(std::count(tail.begin(), tail.end(), '\n'), 200);
  // The byte limit drops the line it cuts.
  const std::string small = ReadLogTail(path, 12, 200);  // "99\nline 300\n"
  EXPECT_EQ(small, "line 300\n");
  // No trailing newline; invalid bytes are replaced.
  WriteAll(path, std::string("first\nsecond \xff end"));
  EXPECT_EQ(ReadLogTail(path, 1024, 1), "second ? end");
  EXPECT_EQ(ReadLogTail(path, 1024, 5), "first\nsecond ? end");
}

TEST(WorkerUtil, SignalNames) {
  EXPECT_EQ(SignalName(9), "SIGKILL");
  EXPECT_EQ(SignalName(15), "SIGTERM");
  EXPECT_EQ(SignalName(11), "SIGSEGV");
  EXPECT_EQ(SignalName(63), "SIG63");
}

}  // namespace
}  // namespace ablate::agent
