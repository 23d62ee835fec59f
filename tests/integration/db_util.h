// Shared by the end-to-end and chaos tests: read the coordinator's database directly, and compute
// the metric points a worker must have forwarded for a trainer's metrics.jsonl. Test-only helpers.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace ablate::testing {

using Rows = std::vector<std::vector<std::string>>;

// Every row of `sql` on a read-only connection to `db_path`, cells as text ("" for NULL).
inline Rows ReadOnlySql(const std::string& db_path, const std::string& sql) {
  Rows rows;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "open " << db_path << ": " << sqlite3_errmsg(db);
    sqlite3_close(db);
    return rows;
  }
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db) << " in " << sql;
  } else {
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const unsigned char* t = sqlite3_column_text(st, i);
        row.push_back(t ? reinterpret_cast<const char*>(t) : "");
      }
      rows.push_back(row);
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows;
}

using Point = std::tuple<int64_t, std::string, double>;

// The points a worker must have forwarded for one metrics.jsonl: every numeric field except step
// and type, at the line's step (0 when it has none). Lines that are not JSON are skipped.
inline std::multiset<Point> ExpectedPoints(const std::string& jsonl) {
  std::multiset<Point> out;
  std::stringstream ss(jsonl);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    int64_t step = j.contains("step") ? j["step"].get<int64_t>() : 0;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "step" || it.key() == "type" || !it->is_number()) continue;
      out.insert({step, it.key(), it->get<double>()});
    }
  }
  return out;
}

}  // namespace ablate::testing
