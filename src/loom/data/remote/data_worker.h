// `loom data-worker`: a gRPC server that builds training batches for trainers on other hosts
// (data_service.proto). It holds no job state a trainer could not rebuild by opening again: a
// trainer sends its data configuration and asks for batches by (epoch, step), and a batch is a
// pure function of those, so any worker (or the trainer itself) can build any batch.
//
// Security: it binds only the address it is given; with a token, a client must answer a fresh
// challenge with HMAC-SHA256(token, challenge) before anything is read on its behalf; it opens
// only files under its data roots; with a certificate and key it speaks TLS.
//
// Threading: the constructor starts the server and `threads` build threads, which take batch
// requests in turn between sessions (FairQueue); gRPC's own threads only parse and queue.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom::data {

struct DataWorkerOptions {
  std::string listen = "127.0.0.1:0";   // host:port; port 0 picks a free one
  std::vector<std::string> data_roots;  // the only folders it reads
  int threads = 1;                      // batches built at once
  std::string token;                    // "" = no authentication
  std::string tls_cert, tls_key;        // PEM text; both empty = plaintext
  // Sessions nobody asked anything of for this long are closed (a trainer that comes back
  // opens a new one).
  std::chrono::seconds session_idle{600};
  std::chrono::seconds report_every{30};  // rate lines in the log
  // Testing failure handling: every n-th reply has a byte of its images flipped after the
  // checksum was taken. 0 = never.
  int corrupt_every = 0;
};

class DataWorker {
 public:
  // Binds and starts serving; throws Error naming the address when it cannot bind.
  explicit DataWorker(DataWorkerOptions options);
  ~DataWorker();
  DataWorker(const DataWorker&) = delete;
  DataWorker& operator=(const DataWorker&) = delete;

  int port() const;  // the bound port (the chosen one when 0 was asked for)
  // Stops taking requests and fails those in flight after `grace`; returns when stopped.
  void shutdown(std::chrono::milliseconds grace);
  // Blocks until shutdown() (from another thread).
  void wait();
  // Since a trainer last opened a session or got a batch; nullopt while none ever came.
  std::optional<std::chrono::steady_clock::duration> idle_for() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::data
