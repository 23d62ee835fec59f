#include "trainer/loop/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace ablate::trainer {
namespace {

TEST(Checkpoint, RoundTrip) {
  const ::ablate::testing::TempDir tmp("ablate_ckpt");
  const std::string dir = tmp.path();
  Checkpoint c;
  c.header = {{"step", 7}, {"sampler", {{"epoch", 1}, {"index", 3}}}};
  c.sections = {std::string("\x00\x01\x02", 3), std::string(1000, 'x')};
  ASSERT_TRUE(WriteCheckpointAtomic(dir + "/a.ckpt", c).ok());
  std::vector<std::string> left;  // no temporary left behind
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"a.ckpt"});
  auto r = ReadCheckpoint(dir + "/a.ckpt");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header, c.header);
  EXPECT_EQ(r->sections, c.sections);
}

TEST(Checkpoint, CorruptionIsDetectedAndExplained) {
  const ::ablate::testing::TempDir tmp("ablate_ckpt");
  const std::string dir = tmp.path();
  Checkpoint c;
  c.header = {{"step", 1}};
  c.sections = {std::string(4096, 'w')};
  std::string path = dir + "/b.ckpt";
  ASSERT_TRUE(WriteCheckpointAtomic(path, c).ok());
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& d) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << d;
  };
  std::string flipped = data;
  flipped[100] ^= 1;
  write(flipped);
  auto r = ReadCheckpoint(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("checksum mismatch"), std::string::npos);
  write(data.substr(0, data.size() / 2));
  r = ReadCheckpoint(path);
  ASSERT_FALSE(r.ok());
  write("not a checkpoint at all");
  r = ReadCheckpoint(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad magic"), std::string::npos);
  r = ReadCheckpoint(dir + "/missing.ckpt");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ablate::trainer
