// The rendezvous store's server: a key-value map that ranks reach over TCP, listening only on
// the address it is given (LibTorch 1.13's TCPStore listens on every interface, and has no
// authentication either: keep its port inside the cluster's network).
//
// Threading: one thread serves every connection with poll(); get and wait requests whose keys
// do not exist yet are parked and answered when a set makes them whole.
#pragma once

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/store_protocol.h"

namespace loom::comm {

class StoreServer {
 public:
  // Listens on host:port (port 0: a free one). Throws CommError naming the address.
  StoreServer(const std::string& host, int port);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

 private:
  struct Parked {
    int client;
    store_protocol::Message request;
  };

  void serve();
  void accept_client();
  // False when the connection should close.
  bool read_from(int client);
  // Answers `request` now, or returns false to park it until its keys exist.
  bool answer(int client, const store_protocol::Message& request);
  void answer_parked();
  void reply(int client, store_protocol::Status status, std::vector<std::string> fields = {});
  bool all_exist(const std::vector<std::string>& keys, std::size_t first) const;

  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe that ends serve()
  int port_ = 0;
  std::map<std::string, std::string> values_;
  std::map<int, std::string> pending_input_;  // client fd -> bytes of an incomplete message
  std::vector<Parked> parked_;
  std::thread thread_;
};

}  // namespace loom::comm
