// MPS control (agent/mps.h) against a stand-in for nvidia-cuda-mps-control written by the test (a
// shell script with the real program's interface: -d starts a daemon that makes a control pipe;
// commands on stdin; exit 0 when the daemon answers). The real daemon runs in the GPU tests.
#include "agent/mps.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstdlib>

#include "test_util.h"

namespace ablate::agent {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WaitFor;

std::string WriteFakeControl(const std::string& dir) {
  const std::string path = dir + "/fake-mps-control";
  testing::WriteAll(path, R"SH(#!/bin/sh
dir="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-d" ]; then
  mkdir -p "$dir"
  (trap 'rm -f "$dir/control" "$dir/daemon.pid"; exit 0' TERM
   while :; do sleep 0.05; done) </dev/null >/dev/null 2>&1 &
  echo $! > "$dir/daemon.pid"
  echo "-d" >> "$dir/../starts"
  mkfifo "$dir/control"
  exit 0
fi
read cmd
pid=$(cat "$dir/daemon.pid" 2>/dev/null)
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then exit 1; fi
case "$cmd" in
  get_server_list) exit 0 ;;
  quit) kill "$pid"; rm -f "$dir/control"; exit 0 ;;
esac
exit 1
)SH");
  ::chmod(path.c_str(), 0755);
  return path;
}

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    control_ = WriteFakeControl(dir_.path());
    // No host daemon: point the host's pipe folder at an empty one.
    ::setenv("CUDA_MPS_PIPE_DIRECTORY", (dir_.path() + "/no-host").c_str(), 1);
  }
  void TearDown() override { ::unsetenv("CUDA_MPS_PIPE_DIRECTORY"); }
  MpsOptions Options(const std::string& mode) {
    MpsOptions o;
    o.mode = mode;
    o.work_dir = dir_.path() + "/work";
    o.control = control_;
    o.start_timeout_ms = 5000;
    o.log = [this](const std::string& l) { log_ += l + "\n"; };
    return o;
  }
  int DaemonPid() {
    const std::string s = ReadAll(dir_.path() + "/work/mps/pipe/daemon.pid");
    return s.empty() ? 0 : std::atoi(s.c_str());
  }
  TempDir dir_;
  std::string control_, log_;
};

TEST_F(MpsTest, OwnDaemonStartsOnceIsReadoptedAfterAKillAndQuits) {
  int pid = 0;
  {
    auto m = MpsControl::Create(Options("auto"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_FALSE((*m)->own_running());  // started only when a shared trial needs it
    auto env = (*m)->ClientEnv();
    ASSERT_TRUE(env.ok()) << env.status().ToString();
    const std::string pipe = dir_.path() + "/work/mps/pipe";
    EXPECT_EQ(*env, (MpsControl::Env{{"CUDA_MPS_PIPE_DIRECTORY", pipe},
                                     {"CUDA_MPS_LOG_DIRECTORY", dir_.path() + "/work/mps/log"}}));
    pid = DaemonPid();
    ASSERT_GT(pid, 0);
    ASSERT_TRUE((*m)->ClientEnv().ok());
    EXPECT_EQ(ReadAll(dir_.path() + "/work/mps/starts"), "-d\n");  // one daemon, not two
    // The worker is killed: nothing quits the daemon.
  }
  EXPECT_EQ(::kill(pid, 0), 0);
  auto again = MpsControl::Create(Options("auto"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->own_running());
  EXPECT_NE((*again)->Describe().find("re-adopted"), std::string::npos) << (*again)->Describe();
  ASSERT_TRUE((*again)->ClientEnv().ok());
  EXPECT_EQ(ReadAll(dir_.path() + "/work/mps/starts"), "-d\n");
  (*again)->Shutdown();
  EXPECT_TRUE(WaitFor([&] { return ::kill(pid, 0) != 0; }, 3000));
  EXPECT_FALSE((*again)->own_running());
}

TEST_F(MpsTest, AStaleFolderIsCleanedAndANewDaemonStarted) {
  {
    auto m = MpsControl::Create(Options("own"));
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE((*m)->ClientEnv().ok());
  }
  const int pid = DaemonPid();
  ::kill(pid, SIGKILL);  // the daemon died too (its control pipe stays behind)
  ASSERT_TRUE(WaitFor([&] { return ::kill(pid, 0) != 0; }, 3000));
  auto m = MpsControl::Create(Options("own"));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE((*m)->own_running());
  EXPECT_NE(log_.find("removed the stale pipe folder"), std::string::npos) << log_;
  ASSERT_TRUE((*m)->ClientEnv().ok());
  EXPECT_NE(DaemonPid(), pid);
  (*m)->Shutdown();
}

TEST_F(MpsTest, WithoutTheProgramAutoSharesWithoutMpsAndOwnIsAnError) {
  MpsOptions o = Options("auto");
  o.control = dir_.path() + "/not-installed";
  auto m = MpsControl::Create(o);
  ASSERT_TRUE(m.ok());
  auto env = (*m)->ClientEnv();
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->empty());
  EXPECT_NE((*m)->Describe().find("unavailable"), std::string::npos);
  o.mode = "own";
  auto own = MpsControl::Create(o);
  ASSERT_TRUE(own.ok());
  auto err = (*own)->ClientEnv();
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("could not be run"), std::string::npos)
      << err.status().ToString();
  auto off = MpsControl::Create(Options("off"));
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE((*off)->ClientEnv()->empty());
  EXPECT_FALSE(MpsControl::Create(Options("sometimes")).ok());
}

TEST_F(MpsTest, JoinsTheHostsDaemonAndLeavesItAlone) {
  EXPECT_EQ(MpsControl::Create(Options("host")).status().code(), StatusCode::kFailedPrecondition);
  const std::string host = dir_.path() + "/host-mps";
  ASSERT_EQ(::mkdir(host.c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo((host + "/control").c_str(), 0600), 0);
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", host.c_str(), 1);
  for (const char* mode : {"auto", "host"}) {
    auto m = MpsControl::Create(Options(mode));
    ASSERT_TRUE(m.ok()) << mode;
    auto env = (*m)->ClientEnv();
    ASSERT_TRUE(env.ok());
    EXPECT_EQ(*env, (MpsControl::Env{{"CUDA_MPS_PIPE_DIRECTORY", host}}));
    (*m)->Shutdown();  // nothing of ours to quit
    EXPECT_FALSE((*m)->own_running());
  }
  struct stat st {};
  EXPECT_EQ(::stat((host + "/control").c_str(), &st), 0);
}

}  // namespace
}  // namespace ablate::agent
