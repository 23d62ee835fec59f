// Global flags and their environment fallbacks, command-line errors, and status → exit code.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "app.h"
#include "client.h"
#include "exit_codes.h"

namespace ablate::cli {
namespace {

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ResolveClientOptions, Defaults) {
  auto o = ResolveClientOptions(GlobalFlags(), MapEnv({{"HOME", "/home/r"}}));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->coordinator, "127.0.0.1:7070");
  EXPECT_EQ(o->coordinator_source, "default");
  EXPECT_EQ(o->token_file, "/home/r/.ablate/token");
  EXPECT_EQ(o->token_source, "default");
  EXPECT_EQ(o->timeout_s, 30);
  EXPECT_EQ(o->tls_ca_file, "");
}

// The rules themselves are ResolveEndpoint's (tests/unit/common/endpoint_test.cc); these check
// that the CLI applies them.
TEST(ResolveClientOptions, EnvironmentBeatsDefaults) {
  auto o = ResolveClientOptions(GlobalFlags(), MapEnv({{"HOME", "/home/r"},
                                                       {"ABLATE_COORDINATOR", "coord:9000"},
                                                       {"ABLATE_DATA_DIR", "/var/lib/ablate"},
                                                       {"ABLATE_TLS_CA", "/etc/ca.pem"}}));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->coordinator, "coord:9000");
  EXPECT_EQ(o->coordinator_source, "$ABLATE_COORDINATOR");
  EXPECT_EQ(o->token_file, "/var/lib/ablate/token");
  EXPECT_EQ(o->token_source, "$ABLATE_DATA_DIR");
  EXPECT_EQ(o->tls_ca_file, "/etc/ca.pem");
  // $ABLATE_TOKEN_FILE beats $ABLATE_DATA_DIR.
  o = ResolveClientOptions(GlobalFlags(), MapEnv({{"ABLATE_TOKEN_FILE", "/t/tok"},
                                                  {"ABLATE_COORDINATOR", "coord:9000"},
                                                  {"ABLATE_DATA_DIR", "/var/lib/ablate"}}));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->token_file, "/t/tok");
  EXPECT_EQ(o->token_source, "$ABLATE_TOKEN_FILE");
}

TEST(ResolveClientOptions, FlagsBeatEnvironment) {
  GlobalFlags f;
  f.coordinator = "10.0.0.1:7070";
  f.token_file = "/flag/token";
  f.timeout_s = 2.5;
  auto o = ResolveClientOptions(f, MapEnv({{"ABLATE_COORDINATOR", "coord:9000"},
                                           {"ABLATE_TOKEN_FILE", "/t/tok"},
                                           {"ABLATE_DATA_DIR", "/d"}}));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->coordinator, "10.0.0.1:7070");
  EXPECT_EQ(o->coordinator_source, "--coordinator");
  EXPECT_EQ(o->token_file, "/flag/token");
  EXPECT_EQ(o->timeout_s, 2.5);
}

TEST(ResolveClientOptions, EmptyEnvironmentVariablesCountAsUnset) {
  auto o = ResolveClientOptions(
      GlobalFlags(),
      MapEnv({{"HOME", "/h"}, {"ABLATE_COORDINATOR", ""}, {"ABLATE_TOKEN_FILE", ""}}));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->coordinator, "127.0.0.1:7070");
  EXPECT_EQ(o->token_file, "/h/.ablate/token");
}

TEST(ResolveClientOptions, BadValuesAreInvalidArguments) {
  for (const char* bad : {"localhost", "host:", ":7070", "host:port", ""}) {
    GlobalFlags f;
    f.coordinator = bad;
    auto o = ResolveClientOptions(f, MapEnv({}));
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(o.status().message().find("--coordinator"), std::string::npos);
  }
  for (const char* good : {"[::1]:7070", "unix:/run/ablate.sock", "dns:///coord:7070"}) {
    GlobalFlags f;
    f.coordinator = good;
    EXPECT_TRUE(ResolveClientOptions(f, MapEnv({})).ok()) << good;
  }
  auto bad_env = ResolveClientOptions(GlobalFlags(), MapEnv({{"ABLATE_COORDINATOR", "nohost"}}));
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.status().message().find("$ABLATE_COORDINATOR"), std::string::npos);
  GlobalFlags f;
  f.timeout_s = 0;
  EXPECT_EQ(ResolveClientOptions(f, MapEnv({})).status().code(), StatusCode::kInvalidArgument);
}

TEST(ExitCodes, OneMappingForEveryStatus) {
  EXPECT_EQ(ExitCodeFor(StatusCode::kOk), 0);
  EXPECT_EQ(ExitCodeFor(StatusCode::kInternal), 1);
  EXPECT_EQ(ExitCodeFor(StatusCode::kFailedPrecondition), 1);
  EXPECT_EQ(ExitCodeFor(StatusCode::kAlreadyExists), 1);
  EXPECT_EQ(ExitCodeFor(StatusCode::kInvalidArgument), 2);
  EXPECT_EQ(ExitCodeFor(StatusCode::kOutOfRange), 2);
  EXPECT_EQ(ExitCodeFor(StatusCode::kNotFound), 3);
  EXPECT_EQ(ExitCodeFor(StatusCode::kUnavailable), 4);
  EXPECT_EQ(ExitCodeFor(StatusCode::kDeadlineExceeded), 4);
  EXPECT_EQ(ExitCodeFor(StatusCode::kUnauthenticated), 5);
  EXPECT_EQ(ExitCodeFor(StatusCode::kPermissionDenied), 5);
  EXPECT_EQ(kExitWatchFailures, 7);
}

TEST(FromGrpc, CodesMapOneToOneAndMessagesNameWhatToFix) {
  ClientOptions o;
  o.coordinator = "coord:7070";
  o.coordinator_source = "--coordinator";
  o.token_file = "/tok/file";
  o.token_source = "$ABLATE_TOKEN_FILE";
  o.timeout_s = 3;
  Client c(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()), "t", o);
  EXPECT_TRUE(c.FromGrpc(grpc::Status::OK).ok());
  Status st = c.FromGrpc(grpc::Status(grpc::StatusCode::NOT_FOUND, "sweep 'x' not found"));
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "sweep 'x' not found");
  st = c.FromGrpc(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused"));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("coord:7070"), std::string::npos);
  EXPECT_NE(st.message().find("ablated may not be running"), std::string::npos);
  st = c.FromGrpc(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, ""));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("3 s"), std::string::npos);
  st = c.FromGrpc(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token"));
  EXPECT_EQ(st.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(st.message().find("/tok/file"), std::string::npos);
  st = c.FromGrpc(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "read-only"));
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("/tok/file"), std::string::npos);
  EXPECT_EQ(c.FromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "x")).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(c.FromGrpc(grpc::Status(grpc::StatusCode::UNKNOWN, "x")).code(), StatusCode::kInternal);
}

struct CliResult {
  int code;
  std::string out, err;
};

CliResult RunArgs(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  std::ostringstream out, err;
  Io io;
  io.out = &out;
  io.err = &err;
  io.now = [] { return 1000.0; };
  if (!env.count("HOME")) env["HOME"] = "/nonexistent-home";
  const int code = RunCli(args, io, MapEnv(env));
  return {code, out.str(), err.str()};
}

class TokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ablate_cli_args_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    token_ = dir_ + "/token";
    std::ofstream(token_) << "0123456789abcdef0123456789abcdef\n";
    ::chmod(token_.c_str(), 0600);
  }
  void TearDown() override {
    std::remove(token_.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_, token_;
};

TEST(RunCli, HelpAndVersionExitZero) {
  CliResult r = RunArgs({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("submit"), std::string::npos);
  EXPECT_NE(r.out.find("Exit codes"), std::string::npos);
  r = RunArgs({"results", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--metric"), std::string::npos);
  EXPECT_EQ(RunArgs({"--version"}).code, 0);
}

TEST(RunCli, UsageErrorsExitTwo) {
  CliResult r = RunArgs({"status", "--format", "xml"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--format"), std::string::npos);
  EXPECT_EQ(RunArgs({}).code, kExitUsage);                     // no subcommand
  EXPECT_EQ(RunArgs({"frobnicate"}).code, kExitUsage);         // unknown subcommand
  EXPECT_EQ(RunArgs({"submit"}).code, kExitUsage);             // missing SPEC
  EXPECT_EQ(RunArgs({"status", "--bogus"}).code, kExitUsage);  // unknown flag
  EXPECT_EQ(RunArgs({"--timeout", "abc", "workers"}).code, kExitUsage);
  EXPECT_EQ(RunArgs({"--timeout", "-1", "workers"}).code, kExitUsage);
  r = RunArgs({"--timeout", "1e16", "workers"});  // its deadline overflowed into the past
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--timeout: at most 31536000 s"), std::string::npos) << r.err;
  r = RunArgs({"--coordinator", "nohost", "workers"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("ablate: --coordinator: 'nohost' is not HOST:PORT"), std::string::npos)
      << r.err;
  // A port past 65535 must not wrap around to another port (99999 would dial 34463).
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:0", "h:1234567"}) {
    r = RunArgs({"--coordinator", bad, "workers"});
    EXPECT_EQ(r.code, kExitUsage) << bad;
    EXPECT_NE(r.err.find("is not in 1..65535"), std::string::npos) << r.err;
  }
}

TEST_F(TokenFile, BadArgumentsFailBeforeAnyCall) {
  // Nothing listens on port 1; a usage error must be reported, not "unavailable".
  CliResult r = RunArgs({"--coordinator", "127.0.0.1:1", "--token-file", token_, "logs", "qknorm"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("expected a trial id"), std::string::npos);
  r = RunArgs(
      {"--coordinator", "127.0.0.1:1", "--token-file", token_, "submit", dir_ + "/no.yaml"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("no.yaml"), std::string::npos);
  r = RunArgs({"--coordinator", "127.0.0.1:1", "--token-file", token_, "status", "trial:x"});
  EXPECT_EQ(r.code, kExitUsage);
}

// Without a token anywhere, a bad reference is still a usage error (it said "no token file").
TEST(RunCli, BadReferencesAreUsageErrorsEvenWithoutAToken) {
  const std::map<std::string, std::string> env = {{"ABLATE_TOKEN_FILE", "/nonexistent/token"}};
  for (const std::vector<std::string>& args : {std::vector<std::string>{"logs", "abc"},
                                               {"status", "trial:x"},
                                               {"cancel", "trial:x"},
                                               {"retry", "sweep:x"},
                                               {"results", "sweep:x"},
                                               {"watch", "sweep:x"},
                                               {"submit", "/nonexistent/spec.yaml"}}) {
    CliResult r = RunArgs(args, env);
    EXPECT_EQ(r.code, kExitUsage) << args[0] << ": " << r.err;
    EXPECT_EQ(r.err.find("token"), std::string::npos) << args[0] << ": " << r.err;
  }
}

TEST(RunCli, MissingTokenFileExitsFiveAndNamesIt) {
  CliResult r = RunArgs({"workers"}, {{"ABLATE_DATA_DIR", "/nonexistent-data"},
                                      {"ABLATE_COORDINATOR", "127.0.0.1:1"}});
  EXPECT_EQ(r.code, kExitAuth);
  EXPECT_NE(r.err.find("/nonexistent-data/token"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("$ABLATE_DATA_DIR"), std::string::npos) << r.err;
}

// $ABLATE_DATA_DIR alone: the address comes from its ablated.addr. Without that file the
// coordinator has not started there (exit 4, naming the file); with it, the CLI dials the address
// written there (nothing listens on port 1 here) and says where the address came from.
TEST_F(TokenFile, TheDataDirAloneNamesTheCoordinator) {
  CliResult r = RunArgs({"workers"}, {{"ABLATE_DATA_DIR", dir_}});
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;
  EXPECT_NE(r.err.find(dir_ + "/ablated.addr does not exist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no coordinator has started"), std::string::npos) << r.err;
  std::ofstream(dir_ + "/ablated.addr") << "127.0.0.1:1\n";
  r = RunArgs({"workers"}, {{"ABLATE_DATA_DIR", dir_}});
  std::remove((dir_ + "/ablated.addr").c_str());
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;  // the token was read from the data dir
  EXPECT_NE(r.err.find("127.0.0.1:1 (from $ABLATE_DATA_DIR/ablated.addr)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("it leaves that file behind when it stops"), std::string::npos) << r.err;
}

TEST_F(TokenFile, TokenReadableByOthersIsRefused) {
  ::chmod(token_.c_str(), 0644);
  CliResult r = RunArgs({"--token-file", token_, "workers"});
  EXPECT_EQ(r.code, kExitAuth);
  EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << r.err;
}

// A byte-order mark or blanks around the token (an editor's) are not part of it; any other byte
// outside printable ASCII is refused by position. Before, gRPC aborted the CLI on the invalid
// header value and printed the whole token.
TEST_F(TokenFile, TokenBytesOutsidePrintableAsciiAreRefusedWithoutShowingTheToken) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  std::ofstream(token_, std::ios::trunc) << "\xEF\xBB\xBF " << token << "\t\r\n";
  CliResult r = RunArgs({"--coordinator", "127.0.0.1:1", "--token-file", token_, "workers"});
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;  // the token was read; nothing listens on port 1
  for (const std::string& bad : {token + "\x01", std::string("0123456789ab\xC3\xA9"
                                                             "cdef0123456789abcdef")}) {
    std::ofstream(token_, std::ios::trunc) << bad << "\n";
    r = RunArgs({"--coordinator", "127.0.0.1:1", "--token-file", token_, "workers"});
    EXPECT_EQ(r.code, kExitAuth) << r.err;
    EXPECT_NE(r.err.find("is not printable ASCII"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("column"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("0123456789ab"), std::string::npos) << r.err;
  }
  r = RunArgs({"--coordinator", "127.0.0.1:1", "--token-file", dir_, "workers"});
  EXPECT_EQ(r.code, kExitAuth) << r.err;
  EXPECT_NE(r.err.find("is not a regular file (it is a directory)"), std::string::npos) << r.err;
}

// A FIFO is a file to read (`--token-file <(pass show ablate)`), unlike a folder.
TEST_F(TokenFile, ATokenFromAPipeIsRead) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo) << "0123456789abcdef0123456789abcdef\n"; });
  CliResult r = RunArgs({"--coordinator", "127.0.0.1:1", "--token-file", fifo, "workers"});
  const int unblock = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // if the CLI never opened it
  writer.join();
  ::close(unblock);
  std::remove(fifo.c_str());
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;  // the token was read; nothing listens on port 1
}

TEST_F(TokenFile, NoCoordinatorExitsFourAndNamesTheAddress) {
  // Global flags work after the subcommand too.
  CliResult r = RunArgs({"workers", "--coordinator", "127.0.0.1:1", "--token-file", token_});
  EXPECT_EQ(r.code, kExitUnavailable);
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ablated may not be running"), std::string::npos) << r.err;
  r = RunArgs({"watch", "s"},
              {{"ABLATE_COORDINATOR", "127.0.0.1:1"}, {"ABLATE_TOKEN_FILE", token_}});
  EXPECT_EQ(r.code, kExitUnavailable);
  EXPECT_NE(r.err.find("$ABLATE_COORDINATOR"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ablate::cli
