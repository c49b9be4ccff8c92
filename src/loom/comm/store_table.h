// The rendezvous store's keys and values and what each request does to them, apart from any
// socket: the server feeds it decoded requests, and a fuzz target feeds it arbitrary ones.
//
// Threading: none of its own; the server calls it from its one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "loom/comm/store_protocol.h"

namespace loom::comm {

class StoreTable {
 public:
  // The reply to `request`, or nullopt when it must wait for keys that do not exist yet (get,
  // wait): the caller parks it and asks again after the table changes. A request that makes no
  // sense gets a kFailed reply saying why; nothing a client sends can throw.
  std::optional<store_protocol::Message> apply(const store_protocol::Message& request);

  // Counts the changes that can complete a parked request (a key created or changed).
  std::uint64_t version() const { return version_; }
  std::size_t size() const { return values_.size(); }

 private:
  bool all_exist(const std::vector<std::string>& keys) const;

  std::map<std::string, std::string> values_;
  std::uint64_t version_ = 0;
};

}  // namespace loom::comm
