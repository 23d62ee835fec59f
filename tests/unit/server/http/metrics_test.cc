#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <regex>

#include "ablate/metric_catalog.h"
#include "metrics/coordinator_metrics.h"
#include "temp_dir.h"

namespace ablate::server::metrics {

namespace catalog = ::ablate::metrics;
namespace {

// The value of the series whose text line starts with `prefix` (name{labels}); NaN when absent.
double Value(const std::string& text, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') {
      size_t sp = text.find(' ', pos + prefix.size());
      return std::stod(text.substr(sp + 1));
    }
    pos += prefix.size();
  }
  return NAN;
}

TEST(Catalog, NamesFollowConventions) {
  for (const auto& m : catalog::Catalog()) {
    std::string n(m.name);
    EXPECT_EQ(n.rfind("ablate_", 0), 0u) << n;
    bool total = n.size() > 6 && n.substr(n.size() - 6) == "_total";
    EXPECT_EQ(total, m.type == catalog::MetricType::kCounter) << n;
    if (m.type == catalog::MetricType::kHistogram) {
      EXPECT_FALSE(m.buckets.empty()) << n;
      EXPECT_EQ(m.unit, "seconds") << n;
      EXPECT_NE(n.find("_seconds"), std::string::npos) << n;
    }
    EXPECT_FALSE(m.help.empty()) << n;
    EXPECT_EQ(catalog::FindMetric(n), &m);
  }
  EXPECT_EQ(catalog::FindMetric("ablate_nope"), nullptr);
}

TEST(CoordinatorMetrics, GaugesHistogramsAndGpuInfo) {
  const ::ablate::testing::TempDir scratch("ablate_metrics");
  std::string dir = scratch.path();
  FakeClock clock(0, 1000);
  Store::Options o;
  o.path = dir + "/db";
  o.clock = &clock;
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok());
  CoordinatorMetrics m(CoordinatorMetrics::Options{0});
  SweepRecord s;
  s.name = "sw";
  std::vector<TrialRecord> trials(3);
  for (int i = 0; i < 3; ++i) trials[i].config_hash = "h" + std::to_string(i), trials[i].config_json = "{}";
  auto sub = (*store)->SubmitSweep(s, trials);  // created_at = 1000
  ASSERT_TRUE(sub.ok());
  WorkerRecord w;
  w.id = "w0";
  w.hostname = "host";
  w.state = "busy";
  w.gpus_json = R"([{"index":0,"uuid":"GPU-aaa"},{"index":1,"uuid":"GPU-bbb"}])";
  (*store)->UpsertWorker(w);
  // Trial 0 runs on GPU 1; trial 1 succeeded after 30 s in the queue and 100 s running.
  AttemptRecord a;
  a.trial_id = sub->inserted[0].id;
  a.attempt = 1;
  a.worker_id = "w0";
  a.gpu_indices = {1};
  (*store)->InsertAttempt(a);
  TrialUpdate u0;
  u0.trial_id = sub->inserted[0].id;
  u0.state = v1::RUNNING;
  u0.attempts = 1;
  u0.started_at = 1010;
  (*store)->UpdateTrial(u0);
  TrialUpdate u1;
  u1.trial_id = sub->inserted[1].id;
  u1.state = v1::SUCCEEDED;
  u1.attempts = 1;
  u1.started_at = 1030;
  u1.finished_at = 1130;
  (*store)->UpdateTrial(u1);
  ASSERT_TRUE((*store)->Flush().ok());
  m.ObserveCommit(0.002, 3);

  ASSERT_TRUE(m.Refresh(store->get(), nullptr).ok());
  std::string text = m.Exposition();
  EXPECT_EQ(Value(text, "ablate_trials{state=\"queued\",sweep=\"sw\"}"), 1) << text;
  EXPECT_EQ(Value(text, "ablate_trials{state=\"running\",sweep=\"sw\"}"), 1);
  EXPECT_EQ(Value(text, "ablate_trials{state=\"succeeded\",sweep=\"sw\"}"), 1);
  EXPECT_EQ(Value(text, "ablate_trials{state=\"failed\",sweep=\"sw\"}"), 0);
  EXPECT_EQ(Value(text, "ablate_trial_gpu_info{gpu_uuid=\"GPU-bbb\",trial=\"" +
                            std::to_string(sub->inserted[0].id) + "\",worker=\"w0\"}"),
            1);
  EXPECT_EQ(text.find("GPU-aaa"), std::string::npos);
  EXPECT_EQ(Value(text, "ablate_queue_wait_seconds_count"), 2);
  EXPECT_EQ(Value(text, "ablate_queue_wait_seconds_sum"), 40);  // 10 + 30
  EXPECT_EQ(Value(text, "ablate_trial_duration_seconds_count{state=\"succeeded\"}"), 1);
  EXPECT_EQ(Value(text, "ablate_trial_duration_seconds_sum{state=\"succeeded\"}"), 100);
  EXPECT_EQ(Value(text, "ablate_store_commit_duration_seconds_count"), 1);
  EXPECT_EQ(Value(text, "ablate_store_commits_total"), 1);
  EXPECT_NE(text.find("ablate_build_info{component=\"ablated\""), std::string::npos);
  EXPECT_NE(text.find("# TYPE ablate_assignments_total counter"), std::string::npos);

  // A second refresh observes nothing twice; trial 0 finishing removes its GPU series.
  TrialUpdate f0;
  f0.trial_id = sub->inserted[0].id;
  f0.state = v1::FAILED;
  f0.finished_at = 1110;  // earlier than trial 1's finish, committed later: still observed
  (*store)->UpdateTrial(f0);
  ASSERT_TRUE((*store)->Flush().ok());
  ASSERT_TRUE(m.Refresh(store->get(), nullptr).ok());
  text = m.Exposition();
  EXPECT_EQ(Value(text, "ablate_queue_wait_seconds_count"), 2);
  EXPECT_EQ(Value(text, "ablate_trial_duration_seconds_count{state=\"succeeded\"}"), 1);
  EXPECT_EQ(Value(text, "ablate_trial_duration_seconds_count{state=\"failed\"}"), 1);
  EXPECT_EQ(Value(text, "ablate_trial_duration_seconds_sum{state=\"failed\"}"), 100);
  EXPECT_EQ(text.find("ablate_trial_gpu_info{"), std::string::npos) << text;
  EXPECT_EQ(Value(text, "ablate_trials{state=\"running\",sweep=\"sw\"}"), 0);
}

}  // namespace
}  // namespace ablate::server::metrics
