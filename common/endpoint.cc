#include "ablate/endpoint.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace ablate {
namespace {

std::string NonEmpty(const std::optional<std::string>& v) { return v ? *v : std::string(); }

std::string HomeDir(const EnvLookup& env) {
  if (auto home = env("HOME"); home && !home->empty()) return *home;
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return ".";
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// ablated writes the host of its --grpc flag: a wildcard listens everywhere, and a client on the
// same host reaches it on the loopback address.
std::string DialableAddress(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return addr;
  const std::string host = addr.substr(0, colon), port = addr.substr(colon + 1);
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1:" + port;
  if (host == "[::]") return "[::1]:" + port;
  return addr;
}

// The address in <data_dir>/ablated.addr; Unavailable naming the file when there is none.
StatusOr<std::string> ReadAddrFile(const std::string& data_dir) {
  const std::string path = data_dir + "/" + kAddrFileName;
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    return Status(StatusCode::kUnavailable,
                  "$ABLATE_DATA_DIR is " + data_dir + ", but " + path + " " +
                      (err == ENOENT ? std::string("does not exist")
                                     : "cannot be read (" + std::string(std::strerror(err)) + ")") +
                      ": no coordinator has started with that data directory (ablated writes "
                      "its address there when it starts). Start it with: ablated --data-dir " +
                      data_dir + ", or pass --coordinator HOST:PORT / $ABLATE_COORDINATOR");
  }
  std::string line;
  std::getline(in, line);
  line = Trim(line);
  if (line.empty()) {
    return Status(StatusCode::kUnavailable,
                  path +
                      " (from $ABLATE_DATA_DIR) is empty: the coordinator may still be "
                      "starting; try again, or pass --coordinator HOST:PORT");
  }
  return DialableAddress(line);
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

Status CheckCoordinatorAddress(const std::string& address, const std::string& source) {
  if (address.empty()) {
    return InvalidArgument(source + ": empty coordinator address (expected HOST:PORT)");
  }
  const bool has_scheme = address.find(":/") != std::string::npos || address.rfind("unix:", 0) == 0;
  if (has_scheme) return Status::Ok();
  const size_t colon = address.rfind(':');
  const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  if (colon == std::string::npos || colon == 0 || port.empty() ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument(source + ": '" + address +
                           "' is not HOST:PORT (for example 127.0.0.1:7070)");
  }
  if (port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535) {
    return InvalidArgument(source + ": '" + address + "': port " + port + " is not in 1..65535");
  }
  return Status::Ok();
}

StatusOr<Endpoint> ResolveEndpoint(const EndpointFlags& flags, const EnvLookup& env) {
  Endpoint e;
  const std::string data_dir = NonEmpty(env("ABLATE_DATA_DIR"));
  if (flags.coordinator) {
    e.coordinator = *flags.coordinator;
    e.coordinator_source = "--coordinator";
  } else if (std::string v = NonEmpty(env("ABLATE_COORDINATOR")); !v.empty()) {
    e.coordinator = v;
    e.coordinator_source = "$ABLATE_COORDINATOR";
  } else if (!data_dir.empty()) {
    ABLATE_ASSIGN_OR_RETURN(e.coordinator, ReadAddrFile(data_dir));
    e.coordinator_source = std::string("$ABLATE_DATA_DIR/") + kAddrFileName;
  } else {
    e.coordinator = kDefaultCoordinator;
    e.coordinator_source = "default";
  }
  ABLATE_RETURN_IF_ERROR(CheckCoordinatorAddress(e.coordinator, e.coordinator_source));

  if (flags.token_file) {
    e.token_file = *flags.token_file;
    e.token_source = "--token-file";
  } else if (std::string v = NonEmpty(env("ABLATE_TOKEN_FILE")); !v.empty()) {
    e.token_file = v;
    e.token_source = "$ABLATE_TOKEN_FILE";
  } else if (!data_dir.empty()) {
    e.token_file = data_dir + "/token";
    e.token_source = "$ABLATE_DATA_DIR";
  } else {
    e.token_file = HomeDir(env) + "/.ablate/token";
    e.token_source = "default";
  }
  if (e.token_file.empty()) return InvalidArgument("--token-file: empty path");
  return e;
}

std::string DescribeTokenFile(const Endpoint& endpoint) {
  if (endpoint.token_source == "default") return endpoint.token_file + " (the default location)";
  if (endpoint.token_source == "--token-file") return endpoint.token_file;
  return endpoint.token_file + " (from " + endpoint.token_source + ")";
}

}  // namespace ablate
