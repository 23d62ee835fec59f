// A killable TCP proxy for the chaos test: accepts on 127.0.0.1 (an ephemeral port) and forwards
// every connection to a fixed loopback target, until told to cut.
//
//   Cut(mode)  closes every forwarded connection at once (both sides see the TCP connection end)
//              and, until Heal(), either refuses new connections (accepts and closes them at once:
//              the client sees a reset, like a dead host that still answers) or blackholes them
//              (accepts and holds them without forwarding a byte: the client sees a silent
//              network, as in a partition; they are closed at Heal()).
//   Heal()     forwards new connections again.
//
// The target may be down (a killed coordinator): a connection whose upstream connect fails is
// closed at once, which the client sees as a refused connection.
//
// Thread safety: all public methods are thread-safe. One accept thread plus two pump threads per
// forwarded connection (a handful in this test), each blocking in read/write.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ablate::testing {

class TcpProxy {
 public:
  enum class CutMode { kRefuse, kBlackhole };

  // Forwards to 127.0.0.1:target_port. Call Start() before port().
  explicit TcpProxy(int target_port);
  ~TcpProxy();  // Stop()
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // Binds 127.0.0.1:0 and starts accepting. Returns an error message, or "" on success.
  std::string Start();
  int port() const { return port_; }

  void Cut(CutMode mode);
  void Heal();
  bool cut() const { return cut_; }
  // Closes everything and joins every thread.
  void Stop();

  int64_t connections() const { return connections_; }  // forwarded connections so far
  int64_t refused() const { return refused_; }          // closed at once (cut or target down)

 private:
  struct Conn {
    int client = -1;
    int upstream = -1;
    std::thread to_upstream, to_client;
    std::atomic<int> pumps_done{0};
  };
  void AcceptLoop();
  void ReapLocked(bool all);
  static void Pump(int from, int to, std::atomic<int>* done);

  const int target_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::atomic<bool> blackhole_{false};  // the mode of the current cut
  std::atomic<int64_t> connections_{0}, refused_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::list<std::unique_ptr<Conn>> conns_;  // GUARDED_BY(mu_)
  std::vector<int> held_;                   // GUARDED_BY(mu_): blackholed client sockets
};

}  // namespace ablate::testing
