// Meeting point of the ranks of one job: a key-value store at the master address (Loom's
// StoreServer, served by the launcher or by rank 0, listening on that address only), the job's
// identity, and which ranks share a host. Every backend builds on it (tcp exchanges addresses
// and its group's secret through the store, shm names its segment after the job and groups ranks
// by host).
//
// Same-host detection compares a host identity (hostname + kernel boot id) that each rank puts
// in the store, not LOCAL_WORLD_SIZE, which launchers do not always set truthfully.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "loom/comm/store_server.h"
#include "loom/comm/world_info.h"

namespace loom::comm {

// The key space of one attempt of a job that `loom launch --max-restarts` restarted
// (LOOM_RESTART_COUNT): attempt 0 uses keys as they are, attempt N > 0 puts "attempt<N>/"
// before them, so that nothing an earlier attempt left in the launcher's store is read again.
std::string key_for_attempt(const std::string& key, int attempt);
// `store` seen through that key space.
c10::intrusive_ptr<c10d::Store> store_for_attempt(c10::intrusive_ptr<c10d::Store> store,
                                                  int attempt);
// restart_count_from_environment (world_info.h) of this process's environment.
int restart_attempt();

// A client of the job's store at the master address, in this attempt's key space: Loom's
// store (authenticated with the job's token), or torchrun's agent's where the ranks share it.
c10::intrusive_ptr<c10d::Store> connect_store(const WorldInfo& world,
                                              std::chrono::milliseconds timeout);

class Rendezvous {
 public:
  // Connects to (or, on rank 0 without a launcher-served store, serves) the store and waits for
  // every rank to check in. Throws TimeoutError naming the ranks that did not.
  static std::shared_ptr<Rendezvous> connect(const WorldInfo& world,
                                             std::chrono::milliseconds timeout);

  int rank() const { return world_.rank; }
  int world() const { return world_.world; }
  const WorldInfo& world_info() const { return world_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // A token shared by all ranks of this job and no other (names shared-memory segments).
  const std::string& job() const { return job_; }

  // Host index (0, 1, ... in order of first appearance by rank) of every rank.
  const std::vector<int>& host_of_rank() const { return host_of_rank_; }
  int host_count() const;
  // The ranks on `host`, ascending.
  std::vector<int> ranks_on_host(int host) const;

  // Puts `key` + "/" + rank into the store, then waits until every rank listed has put its own.
  // Returns their values in the listed order. Throws TimeoutError naming the missing ranks.
  std::vector<std::string> exchange(const std::string& key, const std::string& value,
                                    const std::vector<int>& ranks);

  // "rank 1 of 4 (host 0)": for error messages.
  std::string describe_rank() const;

 private:
  Rendezvous(WorldInfo world, std::chrono::milliseconds timeout);

  WorldInfo world_;
  std::unique_ptr<StoreServer> server_;  // rank 0 without a launcher-served store
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::string job_;
  std::vector<int> host_of_rank_;
};

// hostname + "/" + kernel boot id, or LOOM_HOST_ID when set (tests use it to pretend that ranks
// of one machine live on several hosts).
std::string host_identity();

}  // namespace loom::comm
