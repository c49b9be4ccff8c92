// The rendezvous store's server: a key-value map that ranks reach over TCP, listening only on
// the address it is given (LibTorch 1.13's TCPStore listens on every interface and has no
// authentication at all).
//
// With a token, a client must answer a fresh challenge with a keyed hash of it before anything
// else is read on its behalf (the handshake is in store_protocol.h); a client that fails, sends
// anything else first, sends more than a handshake's bytes, or stays silent for
// `handshake_timeout`, is refused, disconnected and logged with its address. Messages that are
// malformed or over store_protocol::kMaxMessageBytes get an error reply and end that connection;
// the server and every other client go on.
//
// Threading: one thread serves every connection with poll(); get and wait requests whose keys
// do not exist yet are parked and answered when a set makes them whole.
//
// The destructor serves on until every client has disconnected, for at most kLingerForClients:
// when the process serving the store is a rank that failed, the others learn why from the store
// once they see its connections close (TcpCommunicator::explain_loss), and they ask after it
// has given up.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "loom/comm/store_table.h"

namespace loom::comm {

struct StoreServerOptions {
  std::string token;  // "" = no authentication
  std::chrono::milliseconds handshake_timeout{10'000};
};

class StoreServer {
 public:
  static constexpr std::chrono::milliseconds kLingerForClients{3000};

  // Listens on host:port (port 0: a free one). Throws CommError naming the address.
  StoreServer(const std::string& host, int port, StoreServerOptions options = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // Connections refused so far (failed or missing authentication, bad messages).
  int refused() const { return refused_.load(); }

 private:
  struct Client {
    std::string address;  // "10.0.0.2:51234", for the log
    std::string input;    // bytes of an incomplete message
    std::string nonce;    // the challenge sent; empty once authenticated
    bool authenticated = false;
    std::chrono::steady_clock::time_point since;
  };
  struct Parked {
    int fd;
    store_protocol::Message request;
  };

  void serve();
  void accept_client();
  // False when the connection should close.
  bool read_from(int fd, Client& client);
  bool authenticate(int fd, Client& client, const store_protocol::Message& request);
  // Logs the refusal and replies kFailed {"store: refused: " + why, problem}: the second field,
  // a token such as "wrong_token", is for programs (TcpStore puts it in its error's fields).
  void refuse(int fd, Client& client, const std::string& why, const std::string& problem);
  void drop(int fd);
  void drop_silent_clients();
  void answer_parked();
  void reply(int fd, const store_protocol::Message& message);

  StoreServerOptions options_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe that ends serve()
  int port_ = 0;
  StoreTable table_;
  std::map<int, Client> clients_;
  std::vector<Parked> parked_;
  std::atomic<int> refused_{0};
  std::atomic<bool> closing_{false};                // the destructor has begun
  std::chrono::steady_clock::time_point close_by_;  // then: serve until every client left, or this
  std::thread thread_;
};

}  // namespace loom::comm
