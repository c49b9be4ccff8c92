// Checkpoints written in the background (checkpoint.async, loom.checkpoint.save(blocking=False)).
// start() copies a checkpoint's tensors into host buffers and returns; a thread of the writer's
// own then writes and commits them through the CheckpointStore, atomically as ever, while the
// caller trains on. The buffers are kept from one checkpoint to the next (a tensor of the same
// name, type and shape is copied into the buffer it had last time), so that a checkpoint costs
// no allocation once the first is made, and the host memory of one checkpoint in all.
//
// Why copy at all rather than write the live tensors: the next optimizer step changes them in
// place, and a checkpoint must hold one step's state. Why one buffer set and not two: a
// checkpoint waits for the previous one to commit (start() refuses while a write is in flight),
// as torch DCP's async_save does, so the buffers are free again when the next copy begins.
//
// A tensor to fetch (another rank's share, sent as the writer asks) is fetched into its buffer
// during start(), on the calling thread: the other ranks' sends complete there, in the order of
// the job's other calls, and the background thread never talks to another rank.
//
// Threading: start(), poll(), wait() and the accessors from one thread (the owner's); the
// write runs on a thread of the writer's, which alone touches the store and the buffers while it
// runs. The destructor waits for the write in flight.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "loom/train/checkpoint.h"

namespace loom::train {

// What a checkpoint written in the background came to.
struct AsyncWriteResult {
  int64_t step = 0;
  std::string path;   // the committed checkpoint; "" when the write failed
  std::string error;  // why it failed (the store's message, naming the previous checkpoint)
  double background_seconds = 0;  // from the start of the write to its commit or failure
  bool committed() const { return error.empty(); }
};

class AsyncCheckpointWriter {
 public:
  // Writes into `store` (not owned; it must outlive the writer, and nothing else may write to
  // it while a write is in flight).
  explicit AsyncCheckpointWriter(CheckpointStore& store) : store_(store) {}
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Copies every tensor of `data` into the host buffers (fetching its tensors to fetch, in
  // order) and starts writing the copy; returns once the copy is made. Throws Error while a
  // write is in flight or its outcome is not taken yet (wait() first), and whatever a fetch
  // throws (the caller still completes the other ranks' sends).
  void start(CheckpointData data);

  // Whether a write was started and its outcome not taken yet.
  bool pending() const { return thread_.joinable(); }
  // Whether the write started last is still going on.
  bool running() const { return running_.load(std::memory_order_acquire); }
  // The outcome of the write in flight once it has ended (taken: the next call says nullopt);
  // nullopt while it runs, or when none was started.
  std::optional<AsyncWriteResult> poll();
  // Waits for the write in flight and takes its outcome; nullopt when none was started.
  std::optional<AsyncWriteResult> wait();

  // The host buffers' bytes, and how many buffers were ever allocated (a checkpoint like the
  // previous one allocates none).
  int64_t buffer_bytes() const;
  int64_t buffer_allocations() const { return allocations_; }

 private:
  // The buffer for `key` holding a copy of `t` (reused when it fits, else made afresh).
  at::Tensor copy_into_buffer(const std::string& key, const at::Tensor& t,
                              std::map<std::string, at::Tensor>& used);

  CheckpointStore& store_;
  std::map<std::string, at::Tensor> buffers_;  // by "model/<name>", "optimizer/<name>", "rng/..."
  int64_t allocations_ = 0;
  std::thread thread_;
  std::atomic<bool> running_{false};
  AsyncWriteResult result_;  // written by the thread, read after it ended
};

}  // namespace loom::train
