// Store::Query: read-only SQL with an authorizer, a time limit and a row limit.
#include <chrono>

#include "test_util.h"

namespace ablate::server {
namespace {

using testing::MakeTrial;
using testing::OpenOrDie;
using testing::OptionsFor;
using testing::QueryInt;
using testing::TempDir;

class QueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Store::Options o = OptionsFor(dir_.File("q.db"));
    o.query_timeout_ms = 300;
    o.query_max_rows = 5;
    store_ = OpenOrDie(o);
    ASSERT_NE(store_, nullptr);
    SweepRecord sweep;
    sweep.name = "s";
    std::vector<TrialRecord> trials;
    for (int i = 0; i < 10; ++i) trials.push_back(MakeTrial("h" + std::to_string(i)));
    ASSERT_TRUE(store_->SubmitSweep(sweep, trials).ok());
  }

  void ExpectRefused(const std::string& sql, const std::string& refused) {
    auto r = store_->Query(sql);
    ASSERT_FALSE(r.ok()) << sql;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument)
        << sql << ": " << r.status().ToString();
    EXPECT_EQ(r.status().message(),
              "query: only SELECT statements are allowed (refused: " + refused + ")")
        << sql;
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(QueryTest, SelectReturnsTypedCells) {
  auto r = store_->Query(
      "SELECT id, config_hash, 1.5 AS x, NULL AS n, x'0aff' AS b FROM trials ORDER BY id LIMIT 2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->columns, (std::vector<std::string>{"id", "config_hash", "x", "n", "b"}));
  ASSERT_EQ(r->rows.size(), 2u);
  EXPECT_FALSE(r->truncated);
  EXPECT_EQ(r->rows[0][0].kind, QueryResult::Cell::kInteger);
  EXPECT_EQ(r->rows[0][1].kind, QueryResult::Cell::kText);
  EXPECT_EQ(r->rows[0][1].s, "h0");
  EXPECT_EQ(r->rows[0][2].kind, QueryResult::Cell::kReal);
  EXPECT_DOUBLE_EQ(r->rows[0][2].d, 1.5);
  EXPECT_EQ(r->rows[0][3].kind, QueryResult::Cell::kNull);
  EXPECT_EQ(r->rows[0][4].s, "X'0AFF'");
  // Joins, CTEs (recursive too), aggregates and JSON functions are reads.
  EXPECT_EQ(QueryInt(*store_,
                     "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                     "WHERE x < 100) SELECT sum(x) FROM c"),
            5050);
  EXPECT_EQ(QueryInt(*store_,
                     "SELECT count(*) FROM trials t JOIN sweeps s ON s.id = t.sweep_id "
                     "WHERE json_extract(t.config_json, '$.hash') = 'h3'"),
            1);
  EXPECT_EQ(QueryInt(*store_, "  select count(*) from trials; -- trailing comment\n ; /* c */"),
            10);
}

TEST_F(QueryTest, RefusesEverythingButReads) {
  ExpectRefused("INSERT INTO sweeps(name, created_at) VALUES('x', 0)", "INSERT");
  ExpectRefused("UPDATE trials SET state = 'failed'", "UPDATE");
  ExpectRefused("DELETE FROM trials", "DELETE");
  ExpectRefused("DROP TABLE trials", "DROP TABLE");
  ExpectRefused("ATTACH DATABASE '/tmp/evil.db' AS evil", "ATTACH");
  ExpectRefused("PRAGMA writable_schema = 1", "PRAGMA writable_schema");
  ExpectRefused("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode");
  ExpectRefused("CREATE TABLE t(x)", "CREATE TABLE");
  ExpectRefused("CREATE TEMP TABLE t(x)", "CREATE TEMP TABLE");
  ExpectRefused("CREATE INDEX i ON trials(state)", "CREATE INDEX");
  ExpectRefused("CREATE VIEW v AS SELECT 1", "CREATE VIEW");
  ExpectRefused("ALTER TABLE trials ADD COLUMN x", "ALTER TABLE");
  ExpectRefused("BEGIN", "BEGIN/COMMIT/ROLLBACK");
  ExpectRefused("SAVEPOINT a", "SAVEPOINT");
  ExpectRefused("REINDEX", "REINDEX");
  ExpectRefused("ANALYZE", "ANALYZE");
  ExpectRefused("SELECT load_extension('/tmp/evil.so')", "function load_extension()");
  ExpectRefused("WITH x AS (SELECT 1) INSERT INTO sweeps(name, created_at) SELECT 'y', 0 FROM x",
                "INSERT");
  // Nothing changed.
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM trials"), 10);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM sweeps"), 1);
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM trials WHERE state = 'queued'"), 10);
}

TEST_F(QueryTest, OnlyOneStatement) {
  auto r = store_->Query("SELECT 1; DELETE FROM trials");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("only one statement"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("offset 10: 'DELETE FROM trials'"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(store_->Query("SELECT 1; SELECT 2").ok());
  EXPECT_EQ(QueryInt(*store_, "SELECT count(*) FROM trials"), 10);

  auto empty = store_->Query("  -- nothing\n");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "query: empty statement");
  auto syntax = store_->Query("SELEC 1");
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(syntax.status().message().find("syntax error"), std::string::npos);
  auto missing = store_->Query("SELECT * FROM nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no such table: nope"), std::string::npos);
}

TEST_F(QueryTest, TimeLimit) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = store_->Query(
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c");
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  // Not DEADLINE_EXCEEDED: a client would take that for its own deadline (no answer in time).
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "query: time limit of 300 ms exceeded");
  EXPECT_GE(ms, 290);
  EXPECT_LT(ms, 3000);
}

// Table-valued functions (json_each over a trial's axes) are reads, although SQLite asks the
// authorizer about sqlite_master while it sets their virtual tables up (they were refused as
// "UPDATE" before). A statement that writes is still refused by name.
TEST_F(QueryTest, TableValuedFunctionsAreReads) {
  auto each = store_->Query("SELECT key, value FROM json_each('[10, 20]')");
  ASSERT_TRUE(each.ok()) << each.status().ToString();
  ASSERT_EQ(each->rows.size(), 2u);
  EXPECT_EQ(each->rows[1][1].i, 20);
  auto axes = store_->Query("SELECT count(*) FROM trials t, json_each(t.axes_json) j");
  ASSERT_TRUE(axes.ok()) << axes.status().ToString();
  ExpectRefused("CREATE INDEX i ON trials(state)", "CREATE INDEX");
}

// Text that is not UTF-8 comes back in the blob form (a protobuf string cannot carry it).
TEST_F(QueryTest, TextThatIsNotUtf8ComesBackAsABlobLiteral) {
  auto r = store_->Query("SELECT CAST(x'41ff42' AS TEXT) AS t, 'caf\xC3\xA9' AS u");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rows[0][0].s, "X'41FF42'");
  EXPECT_EQ(r->rows[0][1].s, "caf\xC3\xA9");
}

// All cells together are bounded, not only each value: 40 columns of 16 MB blobs took 2.6 GB of
// the coordinator's memory and a 1.3 GB reply before.
TEST(QueryLimits, ResultBytesAreBounded) {
  TempDir dir;
  Store::Options o = OptionsFor(dir.File("q.db"));
  o.query_max_result_bytes = 1 << 20;
  auto store = OpenOrDie(o);
  ASSERT_NE(store, nullptr);
  auto fits = store->Query("SELECT zeroblob(200000), zeroblob(200000)");
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  auto big = store->Query("SELECT zeroblob(200000), zeroblob(200000), zeroblob(200000)");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(big.status().message(),
            "query: the result exceeds 1 MB after 0 rows; select fewer columns or rows (LIMIT)");
  auto rows = store->Query(
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000) "
      "SELECT printf('%0400d', x) FROM c",
      100000);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("the result exceeds 1 MB after 2"), std::string::npos)
      << rows.status().message();
}

TEST_F(QueryTest, RowLimit) {
  auto r = store_->Query("SELECT id FROM trials ORDER BY id");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rows.size(), 5u);  // the option's limit
  EXPECT_TRUE(r->truncated);
  auto three = store_->Query("SELECT id FROM trials", 3);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->rows.size(), 3u);
  EXPECT_TRUE(three->truncated);
  auto exact = store_->Query("SELECT id FROM trials", 10);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->rows.size(), 10u);
  EXPECT_FALSE(exact->truncated);
}

TEST_F(QueryTest, HugeValuesAreRefused) {
  auto r = store_->Query("SELECT length(randomblob(100000000))");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
}

}  // namespace
}  // namespace ablate::server
