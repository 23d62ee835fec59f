// ResolveEndpoint: where the CLI and ablate-worker find the coordinator and its token.
#include "ablate/endpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace ablate {
namespace {

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

class DataDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base != nullptr && base[0] != '\0' ? base : "/tmp") +
                        "/ablate_endpoint_test.XXXXXX";
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void WriteAddr(const std::string& text) {
    std::ofstream(dir_ + "/ablated.addr", std::ios::trunc) << text;
  }
  std::string dir_;
};

TEST(ResolveEndpoint, DefaultsWithoutFlagsOrEnvironment) {
  auto e = ResolveEndpoint(EndpointFlags(), MapEnv({{"HOME", "/home/r"}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->coordinator, "127.0.0.1:7070");
  EXPECT_EQ(e->coordinator_source, "default");
  EXPECT_EQ(e->token_file, "/home/r/.ablate/token");
  EXPECT_EQ(e->token_source, "default");
  EXPECT_EQ(DescribeTokenFile(*e), "/home/r/.ablate/token (the default location)");
}

TEST_F(DataDir, TheDataDirAloneGivesAddressAndToken) {
  WriteAddr("127.0.0.1:40123\n");
  auto e = ResolveEndpoint(EndpointFlags(), MapEnv({{"HOME", "/h"}, {"ABLATE_DATA_DIR", dir_}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->coordinator, "127.0.0.1:40123");
  EXPECT_EQ(e->coordinator_source, "$ABLATE_DATA_DIR/ablated.addr");
  EXPECT_EQ(e->token_file, dir_ + "/token");
  EXPECT_EQ(e->token_source, "$ABLATE_DATA_DIR");
  EXPECT_EQ(DescribeTokenFile(*e), dir_ + "/token (from $ABLATE_DATA_DIR)");
}

TEST_F(DataDir, FlagsBeatEnvironmentWhichBeatsTheDataDir) {
  WriteAddr("127.0.0.1:40123\n");
  const auto env = MapEnv({{"ABLATE_DATA_DIR", dir_},
                           {"ABLATE_COORDINATOR", "coord:9000"},
                           {"ABLATE_TOKEN_FILE", "/t/tok"}});
  auto e = ResolveEndpoint(EndpointFlags(), env);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->coordinator, "coord:9000");
  EXPECT_EQ(e->coordinator_source, "$ABLATE_COORDINATOR");
  EXPECT_EQ(e->token_file, "/t/tok");
  EXPECT_EQ(e->token_source, "$ABLATE_TOKEN_FILE");

  EndpointFlags f;
  f.coordinator = "10.0.0.1:7070";
  f.token_file = "/flag/token";
  e = ResolveEndpoint(f, env);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->coordinator, "10.0.0.1:7070");
  EXPECT_EQ(e->coordinator_source, "--coordinator");
  EXPECT_EQ(e->token_file, "/flag/token");
  EXPECT_EQ(e->token_source, "--token-file");
  EXPECT_EQ(DescribeTokenFile(*e), "/flag/token");
}

// A flag or $ABLATE_COORDINATOR decides the address: the data dir's missing ablated.addr does not
// matter then (the token may still come from it).
TEST_F(DataDir, AMissingAddrFileIsIgnoredWhenTheAddressComesFromElsewhere) {
  auto e = ResolveEndpoint(EndpointFlags(),
                           MapEnv({{"ABLATE_DATA_DIR", dir_}, {"ABLATE_COORDINATOR", "h:1"}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->coordinator, "h:1");
  EXPECT_EQ(e->token_file, dir_ + "/token");
}

TEST_F(DataDir, AMissingAddrFileSaysTheCoordinatorIsNotRunningAndNamesTheFile) {
  auto e = ResolveEndpoint(EndpointFlags(), MapEnv({{"ABLATE_DATA_DIR", dir_}}));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  const std::string& m = e.status().message();
  EXPECT_NE(m.find(dir_ + "/ablated.addr does not exist"), std::string::npos) << m;
  EXPECT_NE(m.find("no coordinator has started with that data directory"), std::string::npos) << m;
  EXPECT_NE(m.find("ablated --data-dir " + dir_), std::string::npos) << m;

  WriteAddr("  \n");
  e = ResolveEndpoint(EndpointFlags(), MapEnv({{"ABLATE_DATA_DIR", dir_}}));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(e.status().message().find("is empty"), std::string::npos) << e.status().message();
}

TEST_F(DataDir, WildcardHostsInTheAddrFileAreDialledOnLoopback) {
  for (const auto& [written, dialled] : std::vector<std::pair<std::string, std::string>>{
           {"0.0.0.0:7070\n", "127.0.0.1:7070"},
           {"[::]:7070\n", "[::1]:7070"},
           {":7070", "127.0.0.1:7070"},
           {" coord.example:7070 \r\n", "coord.example:7070"}}) {
    WriteAddr(written);
    auto e = ResolveEndpoint(EndpointFlags(), MapEnv({{"ABLATE_DATA_DIR", dir_}}));
    ASSERT_TRUE(e.ok()) << written << ": " << e.status().ToString();
    EXPECT_EQ(e->coordinator, dialled) << written;
  }
  WriteAddr("garbage\n");
  auto e = ResolveEndpoint(EndpointFlags(), MapEnv({{"ABLATE_DATA_DIR", dir_}}));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("$ABLATE_DATA_DIR/ablated.addr: 'garbage'"),
            std::string::npos)
      << e.status().message();
}

TEST(ResolveEndpoint, EmptyEnvironmentVariablesCountAsUnset) {
  auto e = ResolveEndpoint(EndpointFlags(), MapEnv({{"HOME", "/h"},
                                                    {"ABLATE_COORDINATOR", ""},
                                                    {"ABLATE_TOKEN_FILE", ""},
                                                    {"ABLATE_DATA_DIR", ""}}));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->coordinator, "127.0.0.1:7070");
  EXPECT_EQ(e->token_file, "/h/.ablate/token");
}

TEST(ResolveEndpoint, EmptyFlagsAreErrors) {
  EndpointFlags f;
  f.coordinator = "";
  auto e = ResolveEndpoint(f, MapEnv({}));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("--coordinator: empty"), std::string::npos);
  f = EndpointFlags();
  f.token_file = "";
  e = ResolveEndpoint(f, MapEnv({}));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--token-file: empty path"), std::string::npos);
}

TEST(CheckCoordinatorAddress, HostPortOrAScheme) {
  for (const char* bad :
       {"localhost", "host:", ":7070", "host:port", "", "h:0", "h:65536", "h:123456"}) {
    Status st = CheckCoordinatorAddress(bad, "$ABLATE_COORDINATOR");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(st.message().rfind("$ABLATE_COORDINATOR: ", 0), 0u) << st.message();
  }
  for (const char* good :
       {"127.0.0.1:7070", "[::1]:7070", "coord:1", "unix:/run/ablate.sock", "dns:///coord:7070"}) {
    EXPECT_TRUE(CheckCoordinatorAddress(good, "--coordinator").ok()) << good;
  }
}

}  // namespace
}  // namespace ablate
