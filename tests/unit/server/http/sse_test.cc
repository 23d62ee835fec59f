#include "http/sse.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "temp_dir.h"

namespace ablate::server::http {
namespace {

TEST(SseFrame, Framing) {
  EXPECT_EQ(SseFrame("changed", "{\"a\":1}"), "event: changed\ndata: {\"a\":1}\n\n");
  EXPECT_EQ(SseFrame("trial", "x", 42), "id: 42\nevent: trial\ndata: x\n\n");
  // Line breaks in data become separate data lines (CR, LF, CRLF); none can end the frame early.
  EXPECT_EQ(SseFrame("e", "a\nb\r\nc\rd"), "event: e\ndata: a\ndata: b\ndata: c\ndata: d\n\n");
  EXPECT_EQ(SseFrame("e", "a\n\nb"), "event: e\ndata: a\ndata: \ndata: b\n\n");
  // An event name cannot inject lines.
  EXPECT_EQ(SseFrame("x\ndata: evil", "d"), "event: x\ndata: d\n\n");
}

TEST(EventFeed, EventsAndChangedCounts) {
  const ::ablate::testing::TempDir scratch("ablate_sse");
  std::string dir = scratch.path();
  Store::Options o;
  o.path = dir + "/db";
  auto store = Store::Open(o);
  ASSERT_TRUE(store.ok());
  (*store)->AddEvent("worker_registered", 0, 0, 0, "w0", "before");
  ASSERT_TRUE((*store)->Flush().ok());
  EventFeed feed(store->get(), -1, 10);
  auto f = feed.Poll(0);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find("before"), std::string::npos);  // "from now": history is not replayed
  EXPECT_NE(f->find("event: changed\n"), std::string::npos);  // first poll always sends counts

  SweepRecord s;
  s.name = "sw";
  TrialRecord t;
  t.config_hash = "h";
  t.config_json = "{}";
  auto sub = (*store)->SubmitSweep(s, {t});
  ASSERT_TRUE(sub.ok());
  (*store)->AddEvent("trial_failed", sub->sweep_id, sub->inserted[0].id, 1, "w0", "boom\nline2");
  ASSERT_TRUE((*store)->Flush().ok());
  f = feed.Poll(1);
  ASSERT_TRUE(f.ok());
  EXPECT_NE(f->find("event: trial\ndata: {"), std::string::npos) << *f;
  EXPECT_NE(f->find("boom\\nline2"), std::string::npos) << *f;  // JSON-escaped, one data line
  EXPECT_NE(f->find("event: changed\ndata: {\"sweeps\":[{\"counts\":{\"queued\":1}"),
            std::string::npos) << *f;
  f = feed.Poll(2);  // nothing new, counts unchanged, heartbeat not due
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, "");
  f = feed.Poll(20);  // heartbeat due
  ASSERT_TRUE(f.ok());
  EXPECT_NE(f->find("event: changed"), std::string::npos);

  EventFeed resume(store->get(), 0, 10);  // Last-Event-ID: 0 replays everything
  f = resume.Poll(0);
  ASSERT_TRUE(f.ok());
  EXPECT_NE(f->find("before"), std::string::npos);
  EXPECT_NE(f->find("id: 2\nevent: trial"), std::string::npos) << *f;
}

}  // namespace
}  // namespace ablate::server::http
