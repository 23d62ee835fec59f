#include "store/sqlite_util.h"

#include <cmath>

namespace ablate::server::sqlite {

Status ToStatus(sqlite3* db, int rc, std::string_view what) {
  StatusCode code = StatusCode::kInternal;
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      code = StatusCode::kUnavailable;
      break;
    case SQLITE_CONSTRAINT:
      code = (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE)
                 ? StatusCode::kAlreadyExists
                 : StatusCode::kInvalidArgument;
      break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      code = StatusCode::kDataLoss;
      break;
    case SQLITE_FULL:
      code = StatusCode::kResourceExhausted;
      break;
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      code = StatusCode::kFailedPrecondition;
      break;
    case SQLITE_AUTH:
      code = StatusCode::kPermissionDenied;
      break;
    case SQLITE_INTERRUPT:
      code = StatusCode::kDeadlineExceeded;
      break;
    case SQLITE_ERROR:  // SQL errors: a bad query, a missing table.
      code = StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  std::string msg(what);
  msg += ": ";
  // The connection's message is more specific than sqlite3_errstr when it belongs to this rc.
  msg += (db != nullptr && sqlite3_errcode(db) == rc) ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return Status(code, std::move(msg));
}

Stmt::~Stmt() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

void Stmt::Bind(int i, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(stmt_, i);
  } else {
    sqlite3_bind_double(stmt_, i, v);
  }
}

StatusOr<bool> Stmt::Step(std::string_view what) {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Status s = ToStatus(db_, rc, what);
  sqlite3_reset(stmt_);
  return s;
}

Status Stmt::Run(std::string_view what) {
  for (;;) {
    ABLATE_ASSIGN_OR_RETURN(bool row, Step(what));
    if (!row) break;
  }
  sqlite3_reset(stmt_);
  return Status::Ok();
}

double Stmt::Real(int col) const {
  if (sqlite3_column_type(stmt_, col) == SQLITE_NULL) return std::nan("");
  return sqlite3_column_double(stmt_, col);
}

std::string Stmt::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (p == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = ToStatus(db, rc, "open " + path);
    sqlite3_close_v2(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  return std::unique_ptr<Db>(new Db(db, path));
}

Db::~Db() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close_v2(db_);
}

Status Db::Exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string what = std::string("exec '") + sql + "'";
  if (what.size() > 120) what = what.substr(0, 117) + "...'";
  Status s = ToStatus(db_, rc, what);
  sqlite3_free(err);
  return s;
}

StatusOr<Stmt> Db::Prepare(const char* sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return Stmt(db_, it->second);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return ToStatus(db_, rc, std::string("prepare '") + sql + "'");
  cache_.emplace(sql, stmt);
  return Stmt(db_, stmt);
}

}  // namespace ablate::server::sqlite
