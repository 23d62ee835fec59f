// Tables in three formats: aligned text for people, CSV (RFC 4180) and JSON for programs.
//
//   Table t;
//   t.AddColumn("id");
//   t.AddColumn("loss");
//   t.AddRow({Cell::Int(3), Cell::Real(3.21456)});
//   std::cout << Render(t, Format::kTable);
//
// Text: columns separated by two spaces, widths by content (counted in UTF-8 code points), numbers
// right-aligned and text left-aligned unless the column says otherwise, absent values and NaN as
// "-", control characters in text replaced (a log line cannot move the cursor).
// CSV: a header row of column keys, fields quoted when they hold a comma, quote, CR or LF (quotes
// doubled), CRLF line ends; absent values and NaN are empty fields; numbers in full precision.
// JSON: an array with one object per row keyed by column key; absent values and NaN are null;
// numbers in full precision.
// A column may be shown only in text or only in the machine formats (CSV, JSON), so one table can
// say "250/500" to a person and give `step` and `total_steps` to a program.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ablate/status.h"

namespace ablate::cli {

enum class Format { kTable, kJson, kCsv };

// "table" | "json" | "csv"; InvalidArgument otherwise.
StatusOr<Format> ParseFormat(std::string_view name);

class Cell {
 public:
  enum class Kind { kNull, kInt, kReal, kText, kBool, kJson };
  // Display precision of kReal: >= 0 fixed decimals, kGeneral "%.6g".
  static constexpr int kGeneral = -1;

  Cell() = default;  // null
  static Cell Null() { return Cell(); }
  static Cell Int(int64_t v);
  static Cell Real(double v, int decimals = 4);
  static Cell Text(std::string v);
  static Cell Bool(bool v);
  // A JSON document (object, array, ...) given as text: nested as is in JSON output, its compact
  // text in the other formats.
  static Cell Json(std::string json_text);

  Kind kind() const { return kind_; }
  bool numeric() const { return kind_ == Kind::kInt || kind_ == Kind::kReal; }
  // What the text table shows.
  std::string Display() const;
  // What a CSV field holds (before quoting).
  std::string Machine() const;

  int64_t int_value() const { return int_; }
  double real_value() const { return real_; }
  const std::string& text() const { return text_; }

 private:
  Kind kind_ = Kind::kNull;
  int64_t int_ = 0;
  double real_ = 0;
  int decimals_ = 4;
  std::string text_;  // kText, kJson
};

struct Column {
  enum class Align { kAuto, kLeft, kRight };
  enum class Show { kAll, kTextOnly, kMachineOnly };
  std::string header;          // text-table header
  std::string key;             // CSV header and JSON key (defaults to the header)
  Align align = Align::kAuto;  // kAuto: right when every non-null cell is a number
  Show show = Show::kAll;
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  // each row has one cell per column

  Column& AddColumn(std::string header, std::string key = "",
                    Column::Show show = Column::Show::kAll);
  void AddRow(std::vector<Cell> row) { rows.push_back(std::move(row)); }
};

std::string RenderText(const Table& table);
std::string RenderCsv(const Table& table);
std::string RenderJson(const Table& table);
std::string Render(const Table& table, Format format);

// Helpers shared by the commands.
// Columns a string takes on a terminal (UTF-8 code points; no East Asian wide characters here).
size_t DisplayWidth(std::string_view utf8);
// Cuts `s` to at most `width` columns, ending in "…" when cut.
std::string Truncate(std::string_view s, size_t width);
// Fixed decimals; NaN or infinity as "-".
std::string FormatFixed(double v, int decimals);
// The shortest text that reads back as the same double ("0.1", "3.2145", "1e-05").
std::string FormatShortest(double v);
// RFC 4180 field quoting.
std::string CsvField(std::string_view field);

}  // namespace ablate::cli
