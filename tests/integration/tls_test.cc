// TLS and mutual TLS with the real binaries: ablated serves TLS and requires worker client
// certificates; a worker with a certificate signed by the CA runs a sweep; the CLI connects with the
// CA alone (TLS + token); a worker without a certificate and a plaintext client are refused.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

#include "process_util.h"
#include "temp_dir.h"

namespace ablate::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Tls, MutualTlsForWorkersTlsForTheCli) {
  const ::ablate::testing::TempDir scratch("ablate_tls");
  std::string dir = scratch.path();
  std::string gen =
      "cd " + dir + " && "
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
      "-subj /CN=ablate-test-ca && "
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost && "
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > san.ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
      "-days 1 -extfile san.ext && "
      "openssl req -newkey rsa:2048 -nodes -keyout worker.key -out worker.csr -subj /CN=worker && "
      "openssl x509 -req -in worker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out worker.pem "
      "-days 1 >/dev/null 2>&1";
  ASSERT_EQ(std::system((gen + " >/dev/null 2>&1").c_str()), 0) << "openssl failed";
  std::ofstream(dir + "/corpus.txt") << std::string(20000, 'a') + "the quick brown fox jumps\n";
  ::mkdir((dir + "/coord").c_str(), 0700);
  Proc coord = Spawn({ABLATED_BIN, "--data-dir", dir + "/coord", "--grpc", "127.0.0.1:0",
                      "--tls-cert", dir + "/server.pem", "--tls-key", dir + "/server.key",
                      "--tls-client-ca", dir + "/ca.pem", "--heartbeat-seconds", "0.5"},
                     dir + "/ablated.log");
  const std::string addr = WaitForFile(dir + "/coord/ablated.addr", seconds(10));
  ASSERT_FALSE(addr.empty()) << ReadFile(dir + "/ablated.log");
  const std::string token = dir + "/coord/token";

  Proc good = Spawn({ABLATE_WORKER_BIN, "--coordinator", addr, "--token-file", token, "--gpus",
                     "none", "--cpu-slots", "2", "--work-dir", dir + "/w1", "--trainer",
                     ABLATE_TRAIN_BIN, "--data-root", dir, "--tls-ca", dir + "/ca.pem", "--tls-cert",
                     dir + "/worker.pem", "--tls-key", dir + "/worker.key"},
                    dir + "/worker1.log");
  Proc nocert = Spawn({ABLATE_WORKER_BIN, "--coordinator", addr, "--token-file", token, "--gpus",
                       "none", "--cpu-slots", "2", "--work-dir", dir + "/w2", "--trainer",
                       ABLATE_TRAIN_BIN, "--tls-ca", dir + "/ca.pem"},
                      dir + "/worker2.log");
  std::vector<std::string> env = {"ABLATE_COORDINATOR=" + addr, "ABLATE_TOKEN_FILE=" + token,
                                  "ABLATE_TLS_CA=" + dir + "/ca.pem"};
  std::ofstream(dir + "/tls.yaml")
      << "name: tls\nbase:\n  data: {corpus: " << dir << "/corpus.txt, val_fraction: 0.1, eval_batches: 1}\n"
      << "  model: {seq_len: 16, layers: 1, d_model: 16, heads: 2}\n"
      << "  train: {steps: 5, tokens_per_step: 64, micro_batch: 4, warmup: 1, threads: 1}\n"
      << "resources: {gpus: 0}\ngrid: {attention.kind: [fpa, sagebwd]}\n";
  Output sub = ::ablate::testing::Run({ABLATE_CLI_BIN, "submit", dir + "/tls.yaml"}, dir, env);
  ASSERT_EQ(sub.code, 0) << sub.out << ReadFile(dir + "/ablated.log");
  Output watch = ::ablate::testing::Run({ABLATE_CLI_BIN, "watch", "tls"}, dir, env, seconds(120));
  EXPECT_EQ(watch.code, 0) << watch.out << ReadFile(dir + "/worker1.log");
  // Only the worker with a certificate ever registered.
  Output ws = ::ablate::testing::Run({ABLATE_CLI_BIN, "workers", "--format", "csv"}, dir, env);
  ASSERT_EQ(ws.code, 0) << ws.out;
  int registered = 0;
  for (size_t pos = 0; (pos = ws.out.find('\n', pos)) != std::string::npos; ++pos) ++registered;
  EXPECT_EQ(registered, 2) << ws.out;  // the header and one worker
  // A plaintext client cannot talk to the TLS port.
  Output plain = ::ablate::testing::Run({ABLATE_CLI_BIN, "status", "--timeout", "3"}, dir,
                     {"ABLATE_COORDINATOR=" + addr, "ABLATE_TOKEN_FILE=" + token});
  EXPECT_EQ(plain.code, 4) << plain.out;
  for (const Proc* p : {&good, &nocert}) Kill(*p), Wait(*p, seconds(5));
  Kill(coord, SIGTERM);
  EXPECT_EQ(Wait(coord, seconds(10)), 0);
}

}  // namespace
}  // namespace ablate::testing
