// Private helpers of the store: RAII SQLite connections and statements, and the one place where
// SQLite result codes become Status values. Not part of the public interface.
//
// Thread safety: a Db (and its statements) is used by one thread at a time; the store gives each
// connection to exactly one owner (the writer thread, or a borrower of the read pool).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ablate/status.h"

namespace ablate::server::sqlite {

// "what: message (sqlite code name)" with a StatusCode chosen from the (extended) result code.
Status ToStatus(sqlite3* db, int rc, std::string_view what);

// A statement borrowed from a Db's cache; resets and clears its bindings when it goes out of
// scope, so a cached statement never holds a read snapshot open after use.
class Stmt {
 public:
  Stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Stmt(Stmt&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt();

  // Parameters are 1-based, as in SQLite.
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, int v) { sqlite3_bind_int64(stmt_, i, v); }
  // NaN has no SQLite representation (sqlite3_bind_double stores NULL); we say so explicitly.
  void Bind(int i, double v);
  void Bind(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, const std::string& v) { Bind(i, std::string_view(v)); }
  void Bind(int i, const char* v) { Bind(i, std::string_view(v)); }
  // Text that outlives the statement's next step (avoids a copy on the hot insert path).
  void BindStatic(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
  }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }
  template <typename T>
  void Bind(int i, const std::optional<T>& v) {
    if (v) {
      Bind(i, *v);
    } else {
      BindNull(i);
    }
  }
  // A time in seconds where 0 means "not set": bound as NULL.
  struct Time {
    double seconds;
  };
  void Bind(int i, Time t) {
    if (t.seconds == 0) {
      BindNull(i);
    } else {
      Bind(i, t.seconds);
    }
  }
  // Binds parameters 1, 2, ... to `vs` in order, each as Bind(i, v).
  template <typename... Ts>
  void BindAll(const Ts&... vs) {
    int i = 0;
    (Bind(++i, vs), ...);
  }

  // Returns true for a row, false when done; an error otherwise.
  StatusOr<bool> Step(std::string_view what);
  // Runs a statement that returns no rows (or ignores them) to completion.
  Status Run(std::string_view what);
  // Resets for another execution with new bindings (bindings are kept until rebound).
  void Reset() { sqlite3_reset(stmt_); }

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  // NULL reads as NaN (the way NaN values are stored).
  double Real(int col) const;
  std::string Text(int col) const;
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  sqlite3_stmt* raw() const { return stmt_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

// One connection and its prepared-statement cache.
class Db {
 public:
  // `flags` as for sqlite3_open_v2. Never returns a half-open connection.
  static StatusOr<std::unique_ptr<Db>> Open(const std::string& path, int flags);
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  // Runs one or more statements with no parameters (schema, PRAGMAs, BEGIN/COMMIT).
  Status Exec(const char* sql);
  // A cached prepared statement for `sql` (a string literal: the cache is keyed by its address).
  StatusOr<Stmt> Prepare(const char* sql);

  sqlite3* raw() const { return db_; }
  const std::string& path() const { return path_; }

 private:
  Db(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
  std::unordered_map<const char*, sqlite3_stmt*> cache_;
};

}  // namespace ablate::server::sqlite
