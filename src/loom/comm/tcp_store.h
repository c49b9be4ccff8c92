// A client of Loom's StoreServer with c10d's Store interface, so that code written for c10d
// (PrefixStore, torch's own process groups) can rendezvous through it as through c10d's TCPStore.
// Connecting retries until the timeout (the server may start after its clients), then runs the
// handshake of store_protocol.h with the job's token, so that each side knows the other holds it;
// every blocking call ends at the timeout with an error that names the keys waited for and the
// server's address.
//
// Threading: calls are serialised on one connection; any thread may call.
#pragma once

#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "loom/comm/store_protocol.h"

namespace loom::comm {

class TcpStore : public c10d::Store {
 public:
  // `token`: the job's shared secret ("" when the store has none). Throws CommError when the
  // store refuses it, asks for one this process lacks, or cannot prove that it holds the same.
  TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout,
           std::string token = "");
  ~TcpStore() override;

  // Another client of the same server on a connection of its own (c10d hands clones to threads
  // that must not share this one's).
  c10::intrusive_ptr<c10d::Store> clone() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // Sends the request and returns the reply's fields; `what` names it in errors.
  std::vector<std::string> call(const store_protocol::Message& request, const std::string& what,
                                std::chrono::milliseconds timeout);
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  // Connects and runs the handshake, all before `deadline`; -1 when nobody listens yet. On a
  // failed handshake the connection is closed (fd_ = -1) and the error thrown.
  int open_connection(std::chrono::steady_clock::time_point deadline);
  // The client's half of store_protocol.h's handshake on fd_. Throws saying what went wrong.
  void handshake(std::chrono::steady_clock::time_point deadline);
  // Reads one whole message from fd_ before `deadline`; nullopt at the deadline.
  std::optional<store_protocol::Message> receive(std::chrono::steady_clock::time_point deadline,
                                                 const std::string& what);

  std::string host_;
  int port_;
  std::string token_;
  int fd_ = -1;
  std::string input_;
  std::mutex mutex_;
};

}  // namespace loom::comm
