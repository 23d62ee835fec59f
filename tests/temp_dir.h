// A fresh directory under $TMPDIR (or /tmp) for one test (or one test suite), removed with
// everything in it when the object goes, unless the test (or a test of the suite, for a suite's
// folder dropped in TearDownTestSuite) has failed: then it is kept for inspection and its path
// printed.
// Every test that writes files makes its folder with this (tests/CMakeLists.txt puts tests/ on the
// include path), so repeated runs leave nothing behind.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace ablate::testing {

class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "ablate_test") {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base != nullptr && base[0] != '\0' ? base : "/tmp") + "/" +
                        std::string(prefix) + "_XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) ADD_FAILURE() << "mkdtemp " << templ;
    path_ = templ;
  }
  ~TempDir() {
    const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
    if (::testing::Test::HasFailure() || (suite != nullptr && suite->Failed())) {
      std::fprintf(stderr, "kept %s (the test failed)\n", path_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Join(std::string_view name) const { return path_ + "/" + std::string(name); }
  std::string File(std::string_view name) const { return Join(name); }

  // Writes `bytes` to <dir>/<name>, creating folders; returns the path.
  std::string Write(std::string_view name, std::string_view bytes) const {
    const std::string p = Join(name);
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << "writing " << p;
    return p;
  }

 private:
  std::string path_;
};

}  // namespace ablate::testing
