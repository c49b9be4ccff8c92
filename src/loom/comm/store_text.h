// Text values in a rendezvous store, whose keys hold bytes: what Loom's own keys (host
// identities, heartbeats, launchers' agreements) put there and read back.
#pragma once

#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace loom::comm {

inline void set_text(c10d::Store& store, const std::string& key, const std::string& text) {
  store.set(key, std::vector<uint8_t>(text.begin(), text.end()));
}

// Waits for the key as Store::get does.
inline std::string get_text(c10d::Store& store, const std::string& key) {
  const std::vector<uint8_t> bytes = store.get(key);
  return std::string(bytes.begin(), bytes.end());
}

// The key's text, or nullopt when it is not set (without waiting).
inline std::optional<std::string> text_if_set(c10d::Store& store, const std::string& key) {
  if (!store.check({key})) return std::nullopt;
  return get_text(store, key);
}

}  // namespace loom::comm
