#include "http/static_files.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "temp_dir.h"

namespace ablate::server::http {
namespace {

class StaticFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.path();
    root_ = base_ + "/web";
    ::mkdir(root_.c_str(), 0755);
    ::mkdir((root_ + "/js").c_str(), 0755);
    std::ofstream(root_ + "/index.html") << "<html>";
    std::ofstream(root_ + "/js/app.js") << "app";
    std::ofstream(base_ + "/secret.txt") << "secret";
    ASSERT_EQ(::symlink((base_ + "/secret.txt").c_str(), (root_ + "/leak.txt").c_str()), 0);
    ASSERT_EQ(::symlink("/etc", (root_ + "/etc").c_str()), 0);
    ASSERT_EQ(::symlink("js/app.js", (root_ + "/alias.js").c_str()), 0);  // inside: fine
  }
  StatusCode Code(const std::string& p) { return ResolveStaticPath(root_, p).status().code(); }
  ::ablate::testing::TempDir tmp_{"ablate_static"};
  std::string base_, root_;
};

TEST_F(StaticFiles, ServesFilesAndIndex) {
  auto r = ResolveStaticPath(root_, "/");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->substr(r->size() - 10), "index.html");
  EXPECT_TRUE(ResolveStaticPath(root_, "/js/app.js").ok());
  EXPECT_TRUE(ResolveStaticPath(root_, "//js//app.js").ok());
  EXPECT_TRUE(ResolveStaticPath(root_, "/alias.js").ok());
  EXPECT_EQ(Code("/missing.js"), StatusCode::kNotFound);
  EXPECT_EQ(Code("/js"), StatusCode::kNotFound);  // a directory without index.html
}

TEST_F(StaticFiles, RefusesTraversal) {
  for (const char* p : {"/../secret.txt", "/js/../../secret.txt", "/..", "/./index.html",
                        "/%2e%2e/secret.txt", "/%252e%252e/secret.txt", "/..\\secret.txt",
                        "/leak.txt", "/etc/passwd"}) {
    EXPECT_EQ(Code(p), StatusCode::kPermissionDenied) << p;
  }
  // An absolute path is taken relative to the root, so it is simply not there.
  EXPECT_EQ(Code("//etc/hostname"), StatusCode::kPermissionDenied);  // the root's etc -> /etc link
  EXPECT_EQ(Code("/" + base_ + "/secret.txt"), StatusCode::kNotFound);
  EXPECT_EQ(Code(std::string("/index.html\0x", 13)), StatusCode::kPermissionDenied);
}

TEST(ContentType, ByExtension) {
  EXPECT_EQ(ContentTypeFor("a/b.js"), "application/javascript; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(ContentTypeFor("x"), "application/octet-stream");
}

}  // namespace
}  // namespace ablate::server::http
