// ablate/files.h: whole-file reads, atomic durable writes, folder creation.
#include "ablate/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ablate {
namespace {

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ablate_files_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> Entries(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      out.push_back(e.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

TEST_F(FilesTest, WriteThenReadRoundTripsBinaryData) {
  const std::string data("a\0b\xff\n", 5);
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/f", data).ok());
  auto back = ReadFile(dir_ + "/f");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/f", "two").ok());  // replaces
  EXPECT_EQ(*ReadFile(dir_ + "/f"), "two");
  EXPECT_EQ(Entries(dir_), std::vector<std::string>{"f"});  // no temporary left behind
}

TEST_F(FilesTest, WriteKeepsTheModeWhateverTheUmask) {
  const mode_t old = ::umask(0);
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/secret", "token\n", 0600).ok());
  ::umask(old);
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(FilesTest, ConcurrentWritersOfOnePathLeaveOneWholeFile) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const std::string content(100000, char('a' + i));
      for (int k = 0; k < 5; ++k) EXPECT_TRUE(WriteFileAtomic(dir_ + "/shared", content).ok());
    });
  }
  for (auto& t : threads) t.join();
  auto back = ReadFile(dir_ + "/shared");
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 100000u);
  EXPECT_EQ(back->find_first_not_of((*back)[0]), std::string::npos);  // one writer's bytes only
  EXPECT_EQ(Entries(dir_), std::vector<std::string>{"shared"});
}

TEST_F(FilesTest, WriteIntoAMissingFolderFailsAndNamesIt) {
  Status st = WriteFileAtomic(dir_ + "/nope/f", "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find(dir_ + "/nope/f"), std::string::npos);
}

TEST_F(FilesTest, ReadOfAMissingFileIsNotFound) {
  auto missing = ReadFile(dir_ + "/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir_ + "/nope"), std::string::npos);
}

TEST_F(FilesTest, MakeDirsCreatesParentsAndIsIdempotent) {
  const std::string deep = dir_ + "/a/b//c";
  ASSERT_TRUE(MakeDirs(deep).ok());
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/a/b/c"));
  EXPECT_TRUE(MakeDirs(deep).ok());
  EXPECT_TRUE(MakeDirs(dir_ + "/a/b/c/").ok());
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/a/f", "x").ok());
  Status blocked = MakeDirs(dir_ + "/a/f/g");  // a file is in the way
  EXPECT_FALSE(blocked.ok());
  Status file = MakeDirs(dir_ + "/a/f");
  EXPECT_EQ(file.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(MakeDirs("").code(), StatusCode::kInvalidArgument);
}

TEST(FilesPaths, DirName) {
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
}

TEST(FilesPaths, NotATextFile) {
  EXPECT_EQ(NotATextFile("/tmp"), "not a regular file (it is a directory)");
  EXPECT_EQ(NotATextFile("/dev/null"), "");
  EXPECT_EQ(NotATextFile("/no/such/path"), "");
}

}  // namespace
}  // namespace ablate
