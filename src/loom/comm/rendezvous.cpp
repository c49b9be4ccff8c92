#include "loom/comm/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "loom/comm/store_text.h"
#include "loom/comm/store_wait.h"
#include "loom/comm/tcp_store.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/settings.h"
#include "loom/core/topology.h"

namespace loom::comm {

std::string key_for_attempt(const std::string& key, int attempt) {
  return attempt == 0 ? key : "attempt" + std::to_string(attempt) + "/" + key;
}

c10::intrusive_ptr<c10d::Store> store_for_attempt(c10::intrusive_ptr<c10d::Store> store,
                                                  int attempt) {
  if (attempt == 0) return store;
  // PrefixStore joins its prefix and a key with "/", as key_for_attempt does.
  return c10::make_intrusive<c10d::PrefixStore>("attempt" + std::to_string(attempt),
                                                std::move(store));
}

int restart_attempt() {
  return restart_count_from_environment([](const char* name) { return std::getenv(name); });
}

c10::intrusive_ptr<c10d::Store> connect_store(const WorldInfo& world,
                                              std::chrono::milliseconds timeout) {
  if (!world.store_is_torchruns) {
    return store_for_attempt(
        c10::make_intrusive<TcpStore>(world.master_addr, world.master_port, timeout,
                                      world.store_token),
        restart_attempt());
  }
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(world.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    // Under keys of Loom's own, apart from those of torchrun's agent and of torch's workers.
    return store_for_attempt(
        c10::make_intrusive<c10d::PrefixStore>(
            "loom", c10::make_intrusive<c10d::TCPStore>(world.master_addr, options)),
        restart_attempt());
  } catch (const c10::Error& e) {
    throw CommError("torchrun's agent store at " + world.master_addr + ":" +
                        std::to_string(world.master_port) +
                        " (TORCHELASTIC_USE_AGENT_STORE=True): " + e.what_without_backtrace(),
                    {{"peer", world.master_addr + ":" + std::to_string(world.master_port)}});
  }
}

namespace {

// MASTER_PORT=0: the store's port, for the ranks still to be started (LOOM_STORE_PORT_FILE).
// Written whole and renamed into place, so that a reader never sees half a number.
void publish_port(int port) {
  const std::string path = setting("LOOM_STORE_PORT_FILE");
  if (path.empty()) return;
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial);
    out << port << "\n";
    if (!out.flush()) throw CommError("rendezvous: cannot write the store's port to " + partial);
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    throw CommError("rendezvous: cannot rename " + partial + " to " + path);
  }
}

}  // namespace

std::string host_identity() {
  if (std::string forced = setting("LOOM_HOST_ID"); !forced.empty()) return forced;
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return host_name("") + "/" + boot;
}

Rendezvous::Rendezvous(WorldInfo world, std::chrono::milliseconds timeout)
    : world_(std::move(world)), timeout_(timeout) {
  try {
    if (world_.rank == 0 && !world_.store_served_by_launcher) {
      server_ = std::make_unique<StoreServer>(world_.master_addr, world_.master_port,
                                              StoreServerOptions{world_.store_token});
      if (world_.master_port == 0) {
        world_.master_port = server_->port();
        publish_port(world_.master_port);
      }
    } else if (world_.master_port == 0) {
      throw ConfigError(
          "environment variable MASTER_PORT: 0 (a free port) is only for the rank that serves "
          "the store (rank 0 without loom launch); the others need the port it reported");
    }
    store_ = connect_store(world_, timeout);
  } catch (const Error& e) {
    throw CommError("rendezvous: rank " + std::to_string(world_.rank) + " of " +
                    std::to_string(world_.world) + " (" + world_.launcher + "): " + e.what());
  }
}

std::shared_ptr<Rendezvous> Rendezvous::connect(const WorldInfo& world,
                                                std::chrono::milliseconds timeout) {
  std::shared_ptr<Rendezvous> self(new Rendezvous(world, timeout));
  std::vector<int> everyone(world.world);
  for (int r = 0; r < world.world; ++r) everyone[r] = r;

  // Rank 0 draws the job token; everyone learns it together with the host identities.
  const std::string token = world.rank == 0 ? random_hex(8) : std::string();
  const auto tokens = self->exchange("loom/rendezvous/token", token, {0});
  self->job_ = tokens[0];
  const auto hosts = self->exchange("loom/rendezvous/host", host_identity(), everyone);
  std::vector<std::string> seen;
  for (const auto& identity : hosts) {
    auto it = std::find(seen.begin(), seen.end(), identity);
    self->host_of_rank_.push_back(static_cast<int>(it - seen.begin()));
    if (it == seen.end()) seen.push_back(identity);
  }
  return self;
}

int Rendezvous::host_count() const {
  return host_of_rank_.empty() ? 1
                               : *std::max_element(host_of_rank_.begin(), host_of_rank_.end()) + 1;
}

std::vector<int> Rendezvous::ranks_on_host(int host) const {
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(host_of_rank_.size()); ++r) {
    if (host_of_rank_[r] == host) ranks.push_back(r);
  }
  return ranks;
}

std::vector<std::string> Rendezvous::exchange(const std::string& key, const std::string& value,
                                              const std::vector<int>& ranks) {
  if (std::find(ranks.begin(), ranks.end(), rank()) != ranks.end()) {
    set_text(*store_, key + "/" + std::to_string(rank()), value);
  }
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(key + "/" + std::to_string(r));
  const std::vector<std::size_t> missing = wait_for_keys(*store_, keys, timeout_);
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i : missing) list += (list.empty() ? "" : ", ") + std::to_string(ranks[i]);
    throw TimeoutError("rendezvous '" + key + "': " + describe_rank() + " waited " +
                       std::to_string(timeout_.count() / 1000) + " s for rank(s) " + list + " of " +
                       std::to_string(world()) + ", which never arrived");
  }
  std::vector<std::string> values;
  for (int r : ranks) values.push_back(get_text(*store_, key + "/" + std::to_string(r)));
  return values;
}

std::string Rendezvous::describe_rank() const {
  std::string text = "rank " + std::to_string(rank()) + " of " + std::to_string(world());
  if (!host_of_rank_.empty()) text += " (host " + std::to_string(host_of_rank_[rank()]) + ")";
  return text;
}

}  // namespace loom::comm
