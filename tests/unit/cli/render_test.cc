// Table / CSV / JSON renderers, progress bars, durations and the ETA estimator.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "render/progress.h"
#include "render/table.h"

namespace ablate::cli {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Table Sample() {
  Table t;
  t.AddColumn("id");
  t.AddColumn("name");
  t.AddColumn("loss");
  t.AddRow({Cell::Int(7), Cell::Text("fpa"), Cell::Real(3.214567)});
  t.AddRow({Cell::Int(12), Cell::Text("sagebwd-long"), Cell::Real(kNaN)});
  t.AddRow({Cell::Int(3), Cell(), Cell::Real(10.5)});
  return t;
}

TEST(TableText, AlignsByContentNumbersRightTextLeft) {
  EXPECT_EQ(RenderText(Sample()),
            "id  name             loss\n"
            " 7  fpa            3.2146\n"
            "12  sagebwd-long        -\n"
            " 3  -             10.5000\n");
}

TEST(TableText, WidthCountsCodePointsNotBytes) {
  Table t;
  t.AddColumn("v");
  t.AddColumn("x");
  t.AddRow({Cell::Text("1.0 ± 0.1"), Cell::Text("a")});
  t.AddRow({Cell::Text("12.0 ± 0.25"), Cell::Text("b")});
  EXPECT_EQ(RenderText(t),
            "v            x\n"
            "1.0 ± 0.1    a\n"
            "12.0 ± 0.25  b\n");
  EXPECT_EQ(DisplayWidth("± █"), 3u);
}

TEST(TableText, ControlCharactersCannotBreakTheLayout) {
  Table t;
  t.AddColumn("reason");
  t.AddRow({Cell::Text("line1\nline2\x1b[2Jx")});
  EXPECT_EQ(RenderText(t), "reason\nline1 line2?[2Jx\n");
}

TEST(TableText, ColumnsCanBeTextOnlyOrMachineOnly) {
  Table t;
  t.AddColumn("step", "", Column::Show::kTextOnly);
  t.AddColumn("step", "step", Column::Show::kMachineOnly);
  t.AddColumn("total_steps", "total_steps", Column::Show::kMachineOnly);
  t.AddRow({Cell::Text("250/500"), Cell::Int(250), Cell::Int(500)});
  EXPECT_EQ(RenderText(t), "step\n250/500\n");
  EXPECT_EQ(RenderCsv(t), "step,total_steps\r\n250,500\r\n");
}

TEST(TableText, ExplicitRightAlignment) {
  Table t;
  t.AddColumn("value").align = Column::Align::kRight;
  t.AddRow({Cell::Text("a")});
  t.AddRow({Cell::Text("bbb")});
  EXPECT_EQ(RenderText(t), "value\n    a\n  bbb\n");
}

TEST(Csv, QuotesPerRfc4180) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("cr\r"), "\"cr\r\"");
  EXPECT_EQ(CsvField(""), "");
}

TEST(Csv, NullAndNaNAreEmptyNumbersFullPrecision) {
  EXPECT_EQ(RenderCsv(Sample()),
            "id,name,loss\r\n"
            "7,fpa,3.214567\r\n"
            "12,sagebwd-long,\r\n"
            "3,,10.5\r\n");
  Table t;
  t.AddColumn("x");
  t.AddRow({Cell::Real(0.1 + 0.2)});
  EXPECT_EQ(RenderCsv(t), "x\r\n0.30000000000000004\r\n");
}

TEST(Json, ArrayOfTypedObjectsWithNulls) {
  Table t = Sample();
  t.AddColumn("ok");
  t.AddColumn("cfg");
  for (auto& row : t.rows) {
    row.push_back(Cell::Bool(true));
    row.push_back(Cell::Json(R"({"a":[1,2]})"));
  }
  auto j = nlohmann::json::parse(RenderJson(t));
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["id"], 7);
  EXPECT_EQ(j[0]["name"], "fpa");
  EXPECT_DOUBLE_EQ(j[0]["loss"].get<double>(), 3.214567);
  EXPECT_TRUE(j[1]["loss"].is_null());  // NaN
  EXPECT_TRUE(j[2]["name"].is_null());  // absent
  EXPECT_EQ(j[0]["ok"], true);
  EXPECT_EQ(j[0]["cfg"]["a"][1], 2);
  // Keys keep the column order.
  EXPECT_LT(RenderJson(t).find("\"id\""), RenderJson(t).find("\"name\""));
}

TEST(Json, EmptyTableIsEmptyArray) {
  Table t;
  t.AddColumn("id");
  EXPECT_EQ(nlohmann::json::parse(RenderJson(t)), nlohmann::json::array());
  EXPECT_EQ(RenderText(t), "id\n");
}

TEST(Format, ParsesKnownNamesOnly) {
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  EXPECT_EQ(*ParseFormat("csv"), Format::kCsv);
  EXPECT_EQ(*ParseFormat("table"), Format::kTable);
  auto bad = ParseFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("xml"), std::string::npos);
}

TEST(Numbers, FixedShortestAndTruncate) {
  EXPECT_EQ(FormatFixed(3.14159, 4), "3.1416");
  EXPECT_EQ(FormatFixed(kNaN, 4), "-");
  EXPECT_EQ(FormatFixed(std::numeric_limits<double>::infinity(), 2), "-");
  EXPECT_EQ(FormatFixed(-0.00001, 4), "0.0000");
  EXPECT_EQ(FormatFixed(-1.5, 1), "-1.5");
  EXPECT_EQ(FormatShortest(0.1), "0.1");
  EXPECT_EQ(FormatShortest(1e-5), "1e-05");
  EXPECT_EQ(Cell::Real(123456.789, Cell::kGeneral).Display(), "123457");
  EXPECT_EQ(Truncate("abcdef", 4), "abc…");
  EXPECT_EQ(Truncate("abc", 4), "abc");
  EXPECT_EQ(Truncate("±±±±±", 3), "±±…");
}

TEST(Progress, AsciiBar) {
  EXPECT_EQ(ProgressBar(0, 10, false), "[----------]");
  EXPECT_EQ(ProgressBar(0.5, 10, false), "[#####-----]");
  EXPECT_EQ(ProgressBar(0.99, 10, false), "[#########-]");
  EXPECT_EQ(ProgressBar(1, 10, false), "[##########]");
  EXPECT_EQ(ProgressBar(2, 4, false), "[####]");
  EXPECT_EQ(ProgressBar(-1, 4, false), "[----]");
  EXPECT_EQ(ProgressBar(kNaN, 4, false), "[----]");
}

TEST(Progress, UnicodeBarUsesEighths) {
  EXPECT_EQ(ProgressBar(0.5, 4, true), "[██  ]");
  EXPECT_EQ(ProgressBar(0.5625, 4, true), "[██▎ ]");  // 18 of 32 eighths: 2 cells and 2/8
  EXPECT_EQ(ProgressBar(1, 3, true), "[███]");
  EXPECT_EQ(DisplayWidth(ProgressBar(0.37, 10, true)), 12u);
}

TEST(Progress, PercentIsFloored) {
  EXPECT_EQ(FormatPercent(0.999), "99%");
  EXPECT_EQ(FormatPercent(1), "100%");
  EXPECT_EQ(FormatPercent(0.29), "29%");
  EXPECT_EQ(FormatPercent(0), "0%");
}

TEST(Progress, Durations) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(7380), "2h03m");
  EXPECT_EQ(FormatDuration(3 * 86400 + 4 * 3600 + 59), "3d04h");
  EXPECT_EQ(FormatDuration(-1), "-");
  EXPECT_EQ(FormatDuration(kNaN), "-");
}

TEST(Progress, Ages) {
  EXPECT_EQ(FormatAge(1000, 0), "never");
  EXPECT_EQ(FormatAge(1000, 999.5), "just now");
  EXPECT_EQ(FormatAge(1000, 1005), "just now");  // clock skew
  EXPECT_EQ(FormatAge(1000, 995), "5s ago");
  EXPECT_EQ(FormatAge(1000, 1000 - 130), "2m ago");
  EXPECT_EQ(FormatAge(100000, 100000 - 7200), "2h ago");
  EXPECT_EQ(FormatAge(1e6, 1e6 - 3 * 86400), "3d ago");
}

TEST(Eta, UnknownUntilWorkIsDone) {
  EtaEstimator eta;
  EXPECT_FALSE(eta.SecondsLeft());
  eta.Add(0, 0, 1000);
  EXPECT_FALSE(eta.SecondsLeft());
  eta.Add(10, 0, 1000);
  EXPECT_FALSE(eta.SecondsLeft());  // no progress yet
  eta.Add(20, 100, 1000);
  ASSERT_TRUE(eta.Rate());
  EXPECT_DOUBLE_EQ(*eta.Rate(), 5);  // 100 units in 20 s
  EXPECT_DOUBLE_EQ(*eta.SecondsLeft(), 900 / 5.0);
}

TEST(Eta, ZeroWhenDone) {
  EtaEstimator eta;
  eta.Add(0, 10, 10);
  EXPECT_EQ(eta.SecondsLeft(), 0.0);
}

TEST(Eta, SlidingWindowFollowsTheRecentRate) {
  EtaEstimator eta(/*window_s=*/60);
  for (int t = 0; t <= 600; t += 10) eta.Add(t, t * 1.0, 10000);                  // 1 unit/s
  for (int t = 610; t <= 900; t += 10) eta.Add(t, 600 + (t - 600) * 4.0, 10000);  // 4 units/s
  ASSERT_TRUE(eta.Rate());
  EXPECT_NEAR(*eta.Rate(), 4.0, 1e-9);
  EXPECT_NEAR(*eta.SecondsLeft(), (10000 - 1800) / 4.0, 1e-6);
}

TEST(Eta, WorkGoingBackwardsRestartsTheMeasurement) {
  EtaEstimator eta;
  eta.Add(0, 0, 100);
  eta.Add(10, 50, 100);
  eta.Add(20, 40, 100);  // a lost attempt resumed from an earlier checkpoint
  EXPECT_FALSE(eta.Rate());
  eta.Add(30, 60, 100);
  EXPECT_DOUBLE_EQ(*eta.Rate(), 2);
  EXPECT_DOUBLE_EQ(*eta.SecondsLeft(), 20);
}

}  // namespace
}  // namespace ablate::cli
