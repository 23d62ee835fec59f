// Export: the wide table (one row per trial, axes and final metrics as columns, the build of each
// trial) and the long table of points, from a real store in a temporary file; CSV as RFC 4180 and
// JSON lines.
#include "analysis/export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <string>
#include <vector>

#include "../store/test_util.h"

namespace ablate::analysis {
namespace {

using server::AttemptRecord;
using server::AttemptUpdate;
using server::Point;
using server::Store;
using server::SweepRecord;
using server::TrialRecord;

Status Sync(const std::function<void(Store::Done)>& call) {
  std::promise<Status> p;
  auto f = p.get_future();
  call([&p](const Status& s) { p.set_value(s); });
  return f.get();
}

Status Append(Store& store, int64_t trial, int64_t seq, std::vector<Point> points) {
  std::promise<Status> p;
  auto f = p.get_future();
  store.AppendMetrics(trial, 1, seq, std::move(points),
                      [&p](const Status& s, bool) { p.set_value(s); });
  return f.get();
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = server::testing::OpenOrDie(server::testing::OptionsFor(dir_.File("ablate.db")));
    ASSERT_NE(store_, nullptr);
    SweepRecord sweep;
    sweep.name = "s";
    sweep.axes = {"attention.kind", "optimizer.lr", "seed"};
    std::vector<TrialRecord> trials = {
        server::testing::MakeTrial("a", {{"attention.kind", "fpa"}, {"optimizer.lr", "0.01"},
                                         {"seed", "0"}}),
        server::testing::MakeTrial("b", {{"attention.kind", "sagebwd"}, {"optimizer.lr", "0.01"},
                                         {"seed", "1"}})};
    auto r = store_->SubmitSweep(sweep, trials);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    sweep_ = r->sweep_id;
    a_ = r->inserted[0].id;
    b_ = r->inserted[1].id;
    AttemptRecord at;
    at.trial_id = a_;
    at.attempt = 1;
    at.worker_id = "w";
    ASSERT_TRUE(Sync([&](Store::Done d) { store_->InsertAttempt(at, d); }).ok());
    AttemptUpdate u;
    u.trial_id = a_;
    u.attempt = 1;
    u.build_version = "0.4.0";
    u.build_commit = "abc123";
    u.numerics_version = "1";
    ASSERT_TRUE(Sync([&](Store::Done d) { store_->UpdateAttempt(u, d); }).ok());
    ASSERT_TRUE(Append(*store_, a_, 1, {{10, "loss", 3.5}, {10, "tokens", 1024}}).ok());
    ASSERT_TRUE(Append(*store_, a_, 2,
                       {{20, "loss", 3.0}, {20, "tokens", 2048}, {20, "final_val_loss", 2.9}})
                    .ok());
    ASSERT_TRUE(Append(*store_, b_, 1, {{10, "loss", NAN}}).ok());
    server::TrialAnnotation note;
    note.trial_id = b_;
    note.add_tags = {"rerun", "odd"};
    note.note = "said \"odd\", then\nline two";
    ASSERT_TRUE(store_->AnnotateTrial(note).ok());
    ASSERT_TRUE(store_->Flush().ok());
  }

  server::testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  int64_t sweep_ = 0, a_ = 0, b_ = 0;
};

TEST_F(ExportTest, TrialsAreOneRowEachWithAxesBuildAndLatestMetrics) {
  auto t = ExportTrials(*store_, sweep_);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->columns,
            (std::vector<std::string>{"trial_id", "state", "attempt", "seed", "build_version",
                                      "build_commit", "numerics_version", "builds", "tags", "note",
                                      "attention.kind", "optimizer.lr", "final_val_loss", "loss",
                                      "tokens"}));
  ASSERT_EQ(t->rows.size(), 2u);
  const auto& a = t->rows[0];
  EXPECT_EQ(a[0], a_);
  EXPECT_EQ(a[1], "queued");
  EXPECT_EQ(a[3], 0);  // the seed axis, typed
  EXPECT_EQ(a[4], "0.4.0");
  EXPECT_EQ(a[5], "abc123");
  EXPECT_EQ(a[6], "1");
  EXPECT_EQ(a[7], 1);
  EXPECT_EQ(a[10], "fpa");
  EXPECT_EQ(a[11], 0.01);
  EXPECT_EQ(a[12], 2.9);
  EXPECT_EQ(a[13], 3.0);  // the latest loss, not the first
  EXPECT_EQ(a[14], 2048);
  const auto& b = t->rows[1];
  EXPECT_TRUE(b[4].is_null());  // no attempt reported a build
  EXPECT_EQ(b[7], 0);
  EXPECT_TRUE(b[12].is_null());  // never reported
  EXPECT_TRUE(b[13].is_null());  // NaN
  EXPECT_EQ(b[8], nlohmann::json::array({"odd", "rerun"}));  // sorted
  EXPECT_EQ(b[9], "said \"odd\", then\nline two");
}

TEST_F(ExportTest, CsvQuotesWhatNeedsItAndWritesNullAsEmpty) {
  auto t = ExportTrials(*store_, sweep_);
  ASSERT_TRUE(t.ok());
  const std::string csv = Render(*t, ExportFormat::kCsv);
  const std::string header =
      "trial_id,state,attempt,seed,build_version,build_commit,numerics_version,builds,tags,note,"
      "attention.kind,optimizer.lr,final_val_loss,loss,tokens\r\n";
  ASSERT_EQ(csv.substr(0, header.size()), header);
  EXPECT_NE(csv.find("\r\n" + std::to_string(a_) + ",queued,0,0,0.4.0,abc123,1,1,,,fpa,0.01,2.9,3,2048\r\n"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find(",,,0,odd;rerun,\"said \"\"odd\"\", then\nline two\",sagebwd,0.01,,,\r\n"),
            std::string::npos)
      << csv;
}

TEST_F(ExportTest, JsonLinesKeepColumnOrderAndTypes) {
  auto t = ExportTrials(*store_, sweep_);
  ASSERT_TRUE(t.ok());
  const std::string out = Render(*t, ExportFormat::kJsonl);
  const auto first = out.substr(0, out.find('\n'));
  auto j = nlohmann::json::parse(first);
  EXPECT_EQ(j["optimizer.lr"], 0.01);
  EXPECT_EQ(j["final_val_loss"], 2.9);
  EXPECT_EQ(first.rfind("{\"trial_id\":", 0), 0u) << first;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);
}

TEST_F(ExportTest, SeriesIsTheLongTableWithTokensBesideEachPoint) {
  auto t = ExportSeries(*store_, sweep_, {"loss"});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->columns, (std::vector<std::string>{"trial_id", "step", "tokens", "name", "value"}));
  ASSERT_EQ(t->rows.size(), 3u);
  EXPECT_EQ(t->rows[0], (std::vector<nlohmann::json>{a_, 10, 1024, "loss", 3.5}));
  EXPECT_EQ(t->rows[1], (std::vector<nlohmann::json>{a_, 20, 2048, "loss", 3}));
  EXPECT_TRUE(t->rows[2][2].is_null());  // trial b reported no tokens
  EXPECT_TRUE(t->rows[2][4].is_null());  // NaN
  EXPECT_EQ(ExportSeries(*store_, sweep_, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ExportTrials(*store_, 999).status().code(), StatusCode::kNotFound);
}

TEST(ExportFormatTest, NamesAndTypedAxisValues) {
  EXPECT_EQ(*ParseExportFormat("csv"), ExportFormat::kCsv);
  EXPECT_EQ(*ParseExportFormat("jsonl"), ExportFormat::kJsonl);
  auto bad = ParseExportFormat("xlsx");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("xlsx"), std::string::npos);
  EXPECT_EQ(TypedAxisValue("0.5"), 0.5);
  EXPECT_EQ(TypedAxisValue("true"), true);
  EXPECT_EQ(TypedAxisValue("fpa"), "fpa");
  EXPECT_EQ(TypedAxisValue("inf"), "inf");
  EXPECT_EQ(TypedAxisValue("1e-3"), 0.001);
}

}  // namespace
}  // namespace ablate::analysis
