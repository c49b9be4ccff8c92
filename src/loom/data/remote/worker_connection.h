// One remote data worker as a trainer sees it: a gRPC channel, a session opened on it, and the
// calls that fetch batches. RemoteBatchSource decides what to do when a call fails; this class
// only says how it failed.
//
// Threading: fetch() may run on several threads at once; open() and cancel_all() on any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "loom/core/error.h"
#include "loom/data/batch_source.h"
#include "loom/data/remote/batch_wire.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace loom::data {

// The worker could not be reached, timed out, or lost the session: try it again later.
class WorkerUnavailable : public Error {
 public:
  using Error::Error;
};
// The worker answered but refused this trainer (token, data roots, configuration, or data that
// differs from the trainer's): a person has to fix something.
class WorkerRefused : public Error {
 public:
  using Error::Error;
};

struct ConnectionOptions {
  std::string token;   // "" = none
  std::string tls_ca;  // PEM; "" = plaintext
  std::chrono::milliseconds timeout{30000};
  bool lz4 = false;
  std::string client;  // how the trainer names itself in the worker's log
  std::string config;  // remote_config_text of the trainer's configuration
  int rank = 0, world = 1;
  int64_t steps_per_epoch = 0, samples = 0;  // the trainer's own, which the worker must match
};

class WorkerConnection {
 public:
  WorkerConnection(std::string address, ConnectionOptions options);
  ~WorkerConnection();

  // Challenge + Open: a new session. Throws WorkerUnavailable or WorkerRefused.
  void open();
  // Batch (epoch, step) of the open session. Throws WorkerUnavailable (including an unknown
  // session), CorruptBatch, or DataError for a batch the worker could not build from the data.
  Batch fetch(const BatchShape& shape, LoaderStats& tally, int64_t& wire_bytes);
  // Cancels every call in flight (they throw WorkerUnavailable).
  void cancel_all();
  // cancel_all(), and every later call fails at once: for shutting down.
  void close();

  const std::string& address() const { return address_; }
  int threads() const;  // the worker's build slots, once open

 private:
  std::shared_ptr<grpc::Channel> channel() const;

  std::string address_;
  ConnectionOptions options_;
  std::shared_ptr<grpc::Channel> channel_;  // made by open()
  mutable std::mutex mutex_;
  std::string session_;
  int threads_ = 1;
  std::set<grpc::ClientContext*> in_flight_;
  bool closed_ = false;

  // Registers a call's context for cancel_all() for as long as the object lives.
  class Tracked {
   public:
    Tracked(WorkerConnection& owner, grpc::ClientContext& context);
    ~Tracked();

   private:
    WorkerConnection& owner_;
    grpc::ClientContext& context_;
  };
};

}  // namespace loom::data
