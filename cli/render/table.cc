#include "render/table.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace ablate::cli {
namespace {

// A text cell on a terminal: no line breaks (they would break the columns) and no escape
// sequences (text comes from the server and from trainer logs).
std::string Sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n' || c == '\r' || c == '\t') {
      out += ' ';
    } else if (u < 0x20 || u == 0x7f) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<size_t> VisibleColumns(const Table& t, bool text) {
  std::vector<size_t> cols;
  for (size_t i = 0; i < t.columns.size(); ++i) {
    const Column::Show show = t.columns[i].show;
    if (show == Column::Show::kAll ||
        (text ? show == Column::Show::kTextOnly : show == Column::Show::kMachineOnly)) {
      cols.push_back(i);
    }
  }
  return cols;
}

const Cell& CellAt(const Table& t, size_t row, size_t col) {
  static const Cell kNull;
  const auto& r = t.rows[row];
  return col < r.size() ? r[col] : kNull;
}

const std::string& KeyOf(const Column& c) { return c.key.empty() ? c.header : c.key; }

void Pad(std::string* line, size_t n) { line->append(n, ' '); }

}  // namespace

StatusOr<Format> ParseFormat(std::string_view name) {
  if (name == "table") return Format::kTable;
  if (name == "json") return Format::kJson;
  if (name == "csv") return Format::kCsv;
  return InvalidArgument("--format: expected table, json or csv, got '" + std::string(name) + "'");
}

Cell Cell::Int(int64_t v) {
  Cell c;
  c.kind_ = Kind::kInt;
  c.int_ = v;
  return c;
}

Cell Cell::Real(double v, int decimals) {
  Cell c;
  c.kind_ = Kind::kReal;
  c.real_ = v;
  c.decimals_ = decimals;
  return c;
}

Cell Cell::Text(std::string v) {
  Cell c;
  c.kind_ = Kind::kText;
  c.text_ = std::move(v);
  return c;
}

Cell Cell::Bool(bool v) {
  Cell c;
  c.kind_ = Kind::kBool;
  c.int_ = v ? 1 : 0;
  return c;
}

Cell Cell::Json(std::string json_text) {
  Cell c;
  c.kind_ = Kind::kJson;
  c.text_ = std::move(json_text);
  return c;
}

std::string Cell::Display() const {
  switch (kind_) {
    case Kind::kNull:
      return "-";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kReal: {
      if (!std::isfinite(real_)) return "-";
      if (decimals_ >= 0) return FormatFixed(real_, decimals_);
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", real_);
      return buf;
    }
    case Kind::kText:
      return Sanitize(text_);
    case Kind::kBool:
      return int_ ? "yes" : "no";
    case Kind::kJson:
      return Sanitize(text_);
  }
  return "";
}

std::string Cell::Machine() const {
  switch (kind_) {
    case Kind::kNull:
      return "";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kReal:
      return std::isfinite(real_) ? FormatShortest(real_) : "";
    case Kind::kText:
    case Kind::kJson:
      return text_;
    case Kind::kBool:
      return int_ ? "true" : "false";
  }
  return "";
}

Column& Table::AddColumn(std::string header, std::string key, Column::Show show) {
  Column c;
  c.header = std::move(header);
  c.key = std::move(key);
  c.show = show;
  columns.push_back(std::move(c));
  return columns.back();
}

std::string RenderText(const Table& t) {
  const std::vector<size_t> cols = VisibleColumns(t, /*text=*/true);
  if (cols.empty()) return "";
  const size_t n = cols.size();
  std::vector<std::vector<std::string>> cells(t.rows.size(), std::vector<std::string>(n));
  std::vector<size_t> width(n);
  std::vector<bool> right(n);
  for (size_t j = 0; j < n; ++j) {
    const Column& col = t.columns[cols[j]];
    width[j] = DisplayWidth(col.header);
    bool all_numeric = true, any = false;
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const Cell& cell = CellAt(t, i, cols[j]);
      cells[i][j] = cell.Display();
      width[j] = std::max(width[j], DisplayWidth(cells[i][j]));
      if (cell.kind() != Cell::Kind::kNull) {
        any = true;
        all_numeric = all_numeric && cell.numeric();
      }
    }
    right[j] = col.align == Column::Align::kRight ||
               (col.align == Column::Align::kAuto && any && all_numeric);
  }
  auto line = [&](auto&& text_of) {
    std::string out;
    for (size_t j = 0; j < n; ++j) {
      const std::string& s = text_of(j);
      const size_t pad = width[j] - DisplayWidth(s);
      if (j > 0) out += "  ";
      if (right[j]) Pad(&out, pad);
      out += s;
      if (!right[j]) Pad(&out, pad);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line([&](size_t j) -> const std::string& { return t.columns[cols[j]].header; });
  for (size_t i = 0; i < t.rows.size(); ++i) {
    out += line([&](size_t j) -> const std::string& { return cells[i][j]; });
  }
  return out;
}

std::string CsvField(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string RenderCsv(const Table& t) {
  const std::vector<size_t> cols = VisibleColumns(t, /*text=*/false);
  std::string out;
  auto emit = [&](auto&& field_of) {
    for (size_t j = 0; j < cols.size(); ++j) {
      if (j > 0) out += ',';
      out += CsvField(field_of(cols[j]));
    }
    out += "\r\n";
  };
  emit([&](size_t c) { return KeyOf(t.columns[c]); });
  for (size_t i = 0; i < t.rows.size(); ++i) {
    emit([&](size_t c) { return CellAt(t, i, c).Machine(); });
  }
  return out;
}

std::string RenderJson(const Table& t) {
  const std::vector<size_t> cols = VisibleColumns(t, /*text=*/false);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t i = 0; i < t.rows.size(); ++i) {
    nlohmann::ordered_json row = nlohmann::ordered_json::object();
    for (size_t c : cols) {
      const Cell& cell = CellAt(t, i, c);
      nlohmann::ordered_json& v = row[KeyOf(t.columns[c])];
      switch (cell.kind()) {
        case Cell::Kind::kNull:
          v = nullptr;
          break;
        case Cell::Kind::kInt:
          v = cell.int_value();
          break;
        case Cell::Kind::kReal:
          if (std::isfinite(cell.real_value())) {
            v = cell.real_value();
          } else {
            v = nullptr;
          }
          break;
        case Cell::Kind::kText:
          v = cell.text();
          break;
        case Cell::Kind::kBool:
          v = cell.Machine() == "true";
          break;
        case Cell::Kind::kJson:
          v = nlohmann::ordered_json::parse(cell.text(), nullptr, /*allow_exceptions=*/false);
          if (v.is_discarded()) v = cell.text();  // not JSON after all: keep the text
          break;
      }
    }
    rows.push_back(std::move(row));
  }
  return rows.dump(2) + "\n";
}

std::string Render(const Table& t, Format format) {
  switch (format) {
    case Format::kTable:
      return RenderText(t);
    case Format::kJson:
      return RenderJson(t);
    case Format::kCsv:
      return RenderCsv(t);
  }
  return "";
}

size_t DisplayWidth(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::string Truncate(std::string_view s, size_t width) {
  if (DisplayWidth(s) <= width) return std::string(s);
  if (width == 0) return "";
  std::string out;
  size_t cols = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool starts = (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
    if (starts && ++cols > width - 1) break;
    out += s[i];
  }
  return out + "…";
}

std::string FormatFixed(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  // "-0.0000" reads as a sign error; show zero as zero.
  std::string s = buf;
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string FormatShortest(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "";
  return std::string(buf, end);
}

}  // namespace ablate::cli
