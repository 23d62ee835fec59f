#include "tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ablate::testing {

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {}

TcpProxy::~TcpProxy() { Stop(); }

std::string TcpProxy::Start() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return std::string("socket: ") + std::strerror(errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    return std::string("bind/listen 127.0.0.1:0: ") + std::strerror(errno);
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return "";
}

void TcpProxy::Cut(CutMode mode) {
  std::lock_guard<std::mutex> l(mu_);
  blackhole_ = mode == CutMode::kBlackhole;
  cut_ = true;
  // shutdown() (not close()) wakes the pump threads blocked on these sockets; the fds are closed
  // by the reaper once both pumps are done, so a number is never reused under a running pump.
  for (auto& c : conns_) {
    ::shutdown(c->client, SHUT_RDWR);
    ::shutdown(c->upstream, SHUT_RDWR);
  }
}

void TcpProxy::Heal() {
  std::lock_guard<std::mutex> l(mu_);
  cut_ = false;
  for (int fd : held_) ::close(fd);
  held_.clear();
}

void TcpProxy::Stop() {
  if (stop_.exchange(true)) return;
  if (acceptor_.joinable()) acceptor_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  std::lock_guard<std::mutex> l(mu_);
  for (int fd : held_) ::close(fd);
  held_.clear();
  ReapLocked(/*all=*/true);
}

void TcpProxy::Pump(int from, int to, std::atomic<int>* done) {
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(from, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    ssize_t off = 0;
    while (off < n) {
      ssize_t w = ::send(to, buf + off, size_t(n - off), MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        off = -1;
        break;
      }
      off += w;
    }
    if (off < 0) break;
  }
  // Either side ended: end the whole connection (gRPC does not use half-closed TCP).
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
  done->fetch_add(1);
}

void TcpProxy::ReapLocked(bool all) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    Conn& c = **it;
    if (all) {
      ::shutdown(c.client, SHUT_RDWR);
      ::shutdown(c.upstream, SHUT_RDWR);
    }
    if (all || c.pumps_done == 2) {
      c.to_upstream.join();
      c.to_client.join();
      ::close(c.client);
      ::close(c.upstream);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpProxy::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, 50);
    {
      std::lock_guard<std::mutex> l(mu_);
      ReapLocked(/*all=*/false);
    }
    if (r <= 0) continue;
    int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    std::unique_lock<std::mutex> l(mu_);
    if (cut_) {
      if (blackhole_) {
        held_.push_back(client);
      } else {
        // Linger 0: close() sends a reset, as a refused connection would.
        linger lg{1, 0};
        ::setsockopt(client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        ::close(client);
        refused_++;
      }
      continue;
    }
    l.unlock();
    int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(uint16_t(target_port_));
    // Loopback: a connect either succeeds or is refused at once.
    if (up < 0 || ::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      if (up >= 0) ::close(up);
      linger lg{1, 0};
      ::setsockopt(client, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
      ::close(client);
      refused_++;
      continue;
    }
    int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    l.lock();
    if (cut_) {  // cut while connecting: drop it like the others
      ::close(up);
      ::close(client);
      refused_++;
      continue;
    }
    // Counted before the pumps start, so a client that got bytes through this connection sees
    // it counted (counting after them raced with a fast round trip: the chaos test read 2 of 3).
    connections_++;
    auto c = std::make_unique<Conn>();
    c->client = client;
    c->upstream = up;
    Conn* raw = c.get();
    c->to_upstream = std::thread([raw] { Pump(raw->client, raw->upstream, &raw->pumps_done); });
    c->to_client = std::thread([raw] { Pump(raw->upstream, raw->client, &raw->pumps_done); });
    conns_.push_back(std::move(c));
  }
}

}  // namespace ablate::testing
