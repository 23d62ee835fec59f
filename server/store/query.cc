#include "store/query.h"

#include <sqlite3.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "ablate/utf8.h"
#include "store/sqlite_util.h"

namespace ablate::server {
namespace {

using Clock = std::chrono::steady_clock;

const char* ActionName(int action) {
  switch (action) {
    case SQLITE_CREATE_INDEX:
      return "CREATE INDEX";
    case SQLITE_CREATE_TABLE:
      return "CREATE TABLE";
    case SQLITE_CREATE_TEMP_INDEX:
      return "CREATE TEMP INDEX";
    case SQLITE_CREATE_TEMP_TABLE:
      return "CREATE TEMP TABLE";
    case SQLITE_CREATE_TEMP_TRIGGER:
      return "CREATE TEMP TRIGGER";
    case SQLITE_CREATE_TEMP_VIEW:
      return "CREATE TEMP VIEW";
    case SQLITE_CREATE_TRIGGER:
      return "CREATE TRIGGER";
    case SQLITE_CREATE_VIEW:
      return "CREATE VIEW";
    case SQLITE_DELETE:
      return "DELETE";
    case SQLITE_DROP_INDEX:
      return "DROP INDEX";
    case SQLITE_DROP_TABLE:
      return "DROP TABLE";
    case SQLITE_DROP_TEMP_INDEX:
      return "DROP TEMP INDEX";
    case SQLITE_DROP_TEMP_TABLE:
      return "DROP TEMP TABLE";
    case SQLITE_DROP_TEMP_TRIGGER:
      return "DROP TEMP TRIGGER";
    case SQLITE_DROP_TEMP_VIEW:
      return "DROP TEMP VIEW";
    case SQLITE_DROP_TRIGGER:
      return "DROP TRIGGER";
    case SQLITE_DROP_VIEW:
      return "DROP VIEW";
    case SQLITE_INSERT:
      return "INSERT";
    case SQLITE_PRAGMA:
      return "PRAGMA";
    case SQLITE_TRANSACTION:
      return "BEGIN/COMMIT/ROLLBACK";
    case SQLITE_UPDATE:
      return "UPDATE";
    case SQLITE_ATTACH:
      return "ATTACH";
    case SQLITE_DETACH:
      return "DETACH";
    case SQLITE_ALTER_TABLE:
      return "ALTER TABLE";
    case SQLITE_REINDEX:
      return "REINDEX";
    case SQLITE_ANALYZE:
      return "ANALYZE";
    case SQLITE_CREATE_VTABLE:
      return "CREATE VIRTUAL TABLE";
    case SQLITE_DROP_VTABLE:
      return "DROP VIRTUAL TABLE";
    case SQLITE_SAVEPOINT:
      return "SAVEPOINT";
    default:
      return "statement";
  }
}

// Functions that touch anything beyond the database being read. The CLI shell's readfile() and
// writefile() are not part of the library, but a linked extension could add them.
bool IsForbiddenFunction(const char* name) {
  if (name == nullptr) return false;
  for (const char* f : {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit",
                        "sqlite_dbpage", "fts5_source_id"}) {
    if (sqlite3_stricmp(name, f) == 0) return true;
  }
  return false;
}

struct Guard {
  std::string refused;  // what the authorizer refused (first refusal)
  // A change to an internal table (sqlite_master, sqlite_stat1), allowed for the moment so that the
  // statement's own action (CREATE INDEX, ANALYZE) reaches the authorizer and names the refusal.
  // The statement is refused after prepare all the same and never runs.
  std::string deferred;
  Clock::time_point deadline;
  bool timed_out = false;
};

int Authorize(void* arg, int action, const char* a1, const char* a2, const char* /*db*/,
              const char* /*trigger*/) {
  auto* g = static_cast<Guard*>(arg);
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_RECURSIVE:
      return SQLITE_OK;
    case SQLITE_FUNCTION:
      if (!IsForbiddenFunction(a2)) return SQLITE_OK;
      if (g->refused.empty()) g->refused = std::string("function ") + a2 + "()";
      return SQLITE_DENY;
    default:
      break;
  }
  if (a1 != nullptr && sqlite3_strnicmp(a1, "sqlite_", 7) == 0) {
    if (g->deferred.empty()) g->deferred = ActionName(action);
    return SQLITE_OK;
  }
  if (g->refused.empty()) {
    g->refused = ActionName(action);
    if (action == SQLITE_PRAGMA && a1 != nullptr) g->refused += std::string(" ") + a1;
  }
  return SQLITE_DENY;
}

int Progress(void* arg) {
  auto* g = static_cast<Guard*>(arg);
  if (Clock::now() < g->deadline) return 0;
  g->timed_out = true;
  return 1;
}

// Whether `rest` holds anything besides whitespace, semicolons and comments; returns the offset
// of the first such character, or npos.
size_t FirstSignificant(const std::string& rest) {
  size_t i = 0;
  while (i < rest.size()) {
    char c = rest[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == ';') {
      ++i;
    } else if (c == '-' && i + 1 < rest.size() && rest[i + 1] == '-') {
      size_t nl = rest.find('\n', i);
      i = nl == std::string::npos ? rest.size() : nl + 1;
    } else if (c == '/' && i + 1 < rest.size() && rest[i + 1] == '*') {
      size_t end = rest.find("*/", i + 2);
      i = end == std::string::npos ? rest.size() : end + 2;
    } else {
      return i;
    }
  }
  return std::string::npos;
}

Status QueryError(StatusCode code, const std::string& msg) { return Status(code, "query: " + msg); }

std::string BlobAsText(const void* p, int n) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string s = "X'";
  const auto* b = static_cast<const unsigned char*>(p);
  for (int i = 0; i < n; ++i) {
    s += kHex[b[i] >> 4];
    s += kHex[b[i] & 15];
  }
  s += "'";
  return s;
}

}  // namespace

StatusOr<QueryResult> RunReadOnlyQuery(const std::string& path, const std::string& sql,
                                       const ReadOnlyQueryLimits& limits) {
  ABLATE_ASSIGN_OR_RETURN(std::unique_ptr<sqlite::Db> db,
                          sqlite::Db::Open(path, SQLITE_OPEN_READONLY));
  sqlite3* raw = db->raw();
  sqlite3_busy_timeout(raw, limits.busy_timeout_ms);
  // Belt and braces around the authorizer: no extensions, no attached files, no schema tricks.
  sqlite3_db_config(raw, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  sqlite3_db_config(raw, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(raw, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  sqlite3_limit(raw, SQLITE_LIMIT_ATTACHED, 0);
  sqlite3_limit(raw, SQLITE_LIMIT_LENGTH, limits.max_value_bytes);
  ABLATE_RETURN_IF_ERROR(db->Exec("PRAGMA query_only=1"));

  Guard guard;
  guard.deadline = Clock::now() + std::chrono::milliseconds(limits.timeout_ms);
  sqlite3_set_authorizer(raw, Authorize, &guard);
  sqlite3_progress_handler(raw, 1000, Progress, &guard);

  sqlite3_stmt* stmt = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(raw, sql.c_str(), static_cast<int>(sql.size()), &stmt, &tail);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owned(stmt, sqlite3_finalize);
  if (rc != SQLITE_OK) {
    if (!guard.refused.empty()) {
      return QueryError(StatusCode::kInvalidArgument,
                        "only SELECT statements are allowed (refused: " + guard.refused + ")");
    }
    return QueryError(StatusCode::kInvalidArgument, sqlite3_errmsg(raw));
  }
  if (stmt == nullptr) return QueryError(StatusCode::kInvalidArgument, "empty statement");
  // Table-valued functions (json_each, pragma_table_info) make SQLite ask about a change to
  // sqlite_master while it sets their virtual table up; that is no write of the statement's.
  if (!guard.deferred.empty() && !sqlite3_stmt_readonly(stmt)) {
    return QueryError(StatusCode::kInvalidArgument,
                      "only SELECT statements are allowed (refused: " + guard.deferred + ")");
  }
  std::string rest = tail == nullptr ? std::string() : std::string(tail);
  if (size_t at = FirstSignificant(rest); at != std::string::npos) {
    size_t offset = sql.size() - rest.size() + at;
    std::string excerpt = sql.substr(offset, 40);
    return QueryError(StatusCode::kInvalidArgument,
                      "only one statement is allowed; found more after the first at offset " +
                          std::to_string(offset) + ": '" + excerpt + "'");
  }
  // The authorizer also saw the statement at prepare time; a read-only statement that SQLite
  // would still classify as writing (it cannot: query_only) is refused here explicitly.
  if (!sqlite3_stmt_readonly(stmt)) {
    return QueryError(StatusCode::kInvalidArgument,
                      "only SELECT statements are allowed (refused: a statement that writes)");
  }

  QueryResult result;
  int ncol = sqlite3_column_count(stmt);
  for (int c = 0; c < ncol; ++c) {
    const char* name = sqlite3_column_name(stmt, c);
    result.columns.emplace_back(name == nullptr ? "" : name);
  }
  const size_t max_rows = static_cast<size_t>(limits.max_rows);
  const std::string time_limit =
      "time limit of " + std::to_string(limits.timeout_ms) + " ms exceeded";
  size_t result_bytes = 0;
  for (;;) {
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      if (guard.timed_out) return QueryError(StatusCode::kResourceExhausted, time_limit);
      return QueryError(
          rc == SQLITE_TOOBIG ? StatusCode::kResourceExhausted : StatusCode::kInvalidArgument,
          sqlite3_errmsg(raw));
    }
    if (result.rows.size() == max_rows) {
      result.truncated = true;
      break;
    }
    // The progress handler only runs inside sqlite3_step; the copies below are outside it.
    if (Clock::now() >= guard.deadline)
      return QueryError(StatusCode::kResourceExhausted, time_limit);
    std::vector<QueryResult::Cell> row(ncol);
    for (int c = 0; c < ncol; ++c) {
      // What the cell will cost (a blob's text is twice its bytes): checked before it is copied.
      const int type = sqlite3_column_type(stmt, c);
      result_bytes += 16 + (type == SQLITE_TEXT   ? size_t(sqlite3_column_bytes(stmt, c))
                            : type == SQLITE_BLOB ? 3 + 2 * size_t(sqlite3_column_bytes(stmt, c))
                                                  : 0);
      if (result_bytes > limits.max_result_bytes) {
        return QueryError(StatusCode::kResourceExhausted,
                          "the result exceeds " + std::to_string(limits.max_result_bytes >> 20) +
                              " MB after " + std::to_string(result.rows.size()) +
                              " rows; select fewer columns or rows (LIMIT)");
      }
      QueryResult::Cell& cell = row[c];
      switch (sqlite3_column_type(stmt, c)) {
        case SQLITE_INTEGER:
          cell.kind = QueryResult::Cell::kInteger;
          cell.i = sqlite3_column_int64(stmt, c);
          break;
        case SQLITE_FLOAT:
          cell.kind = QueryResult::Cell::kReal;
          cell.d = sqlite3_column_double(stmt, c);
          break;
        case SQLITE_TEXT: {
          cell.kind = QueryResult::Cell::kText;
          const void* text = sqlite3_column_text(stmt, c);
          const int n = sqlite3_column_bytes(stmt, c);
          cell.s.assign(static_cast<const char*>(text), static_cast<size_t>(n));
          // Text that is not UTF-8 (CAST(x'ff' AS TEXT)) cannot go into a protobuf string: it
          // comes back in the blob form, which loses nothing.
          if (InvalidUtf8At(cell.s) != std::string::npos) cell.s = BlobAsText(text, n);
          break;
        }
        case SQLITE_BLOB:
          cell.kind = QueryResult::Cell::kText;
          cell.s = BlobAsText(sqlite3_column_blob(stmt, c), sqlite3_column_bytes(stmt, c));
          break;
        default:
          break;
      }
    }
    result.rows.push_back(std::move(row));
  }
  return result;
}

}  // namespace ablate::server
