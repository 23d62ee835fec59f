// Helpers shared by the store tests: a temporary directory and a few store shortcuts.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "store/store.h"
#include "temp_dir.h"

namespace ablate::server::testing {

using TempDir = ::ablate::testing::TempDir;  // tests/temp_dir.h

inline Store::Options OptionsFor(const std::string& path, FakeClock* clock = nullptr) {
  Store::Options o;
  o.path = path;
  o.clock = clock;
  return o;
}

inline std::unique_ptr<Store> OpenOrDie(const Store::Options& o) {
  auto s = Store::Open(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return nullptr;
  return std::move(s).value();
}

// A single integer from a read-only query (count(*) and friends).
inline int64_t QueryInt(Store& store, const std::string& sql) {
  auto r = store.Query(sql);
  EXPECT_TRUE(r.ok()) << sql << ": " << r.status().ToString();
  if (!r.ok() || r->rows.empty() || r->rows[0].empty()) return -1;
  return r->rows[0][0].i;
}

inline TrialRecord MakeTrial(const std::string& hash,
                             std::vector<std::pair<std::string, std::string>> axes = {}) {
  TrialRecord t;
  t.config_hash = hash;
  t.config_json = "{\"hash\":\"" + hash + "\"}";
  t.axes = std::move(axes);
  t.total_steps = 100;
  return t;
}

}  // namespace ablate::server::testing
