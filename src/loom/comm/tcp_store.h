// A client of Loom's StoreServer with c10d's Store interface, so that ProcessGroupGloo can
// rendezvous through it like through c10d's TCPStore. Connecting retries until the timeout
// (the server may start after its clients); every blocking call ends at the timeout with an
// error that names the keys waited for and the server's address.
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
  TcpStore(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~TcpStore() override;

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

  std::string host_;
  int port_;
  int fd_ = -1;
  std::string input_;
  std::mutex mutex_;
};

}  // namespace loom::comm
