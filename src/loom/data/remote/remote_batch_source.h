// Training batches from remote data workers and local threads at once (`data.remote.workers`).
//
// Every producer builds whole batches by (epoch, step), each batch a pure function of those, so
// who builds which batch changes nothing in what the trainer sees: the run is bit-identical to a
// local-only one whatever the workers do. Producers pull the lowest step not yet taken from a
// window of upcoming steps (bounded by data.remote.max_inflight_bytes, and to a step per
// producer plus data.prefetch_batches; the Loader's BatchWindow, running on into the next
// epoch), so faster producers get more batches. A worker that errors,
// times out or disconnects gives its steps back to the window (another producer takes them), is
// named in a warning, and is reconnected every few seconds; a worker started mid-run joins the same
// way. A late answer for a step someone else already delivered is dropped and counted. When no
// worker is up and data.remote.local_threads is 0, fallback local threads keep the run going.
//
// Threading: batch(), seek() and the setters are called from one thread (the trainer); the
// producers are internal threads, stopped by the destructor.
#pragma once

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/data/batch_source.h"
#include "loom/data/batch_window.h"
#include "loom/data/remote/remote_worker_stats.h"
#include "loom/data/remote/worker_connection.h"

namespace loom::data {

struct RemoteSourceOptions {
  std::vector<std::string> workers;  // host:port
  ConnectionOptions connection;      // steps_per_epoch and samples are filled in from the loader
  int local_threads = 1;             // local producers that always work
  int fallback_threads = 1;          // local producers that work only while no worker is up
  int64_t max_inflight_bytes = int64_t{256} << 20;
  int prefetch_batches = 4;        // data.prefetch_batches: ready batches waiting for the trainer
  double max_bad_fraction = 0.05;  // data.max_bad_fraction
  std::chrono::milliseconds reconnect_every{3000};
};

class RemoteBatchSource : public BatchSource {
 public:
  // `local` builds the local producers' batches and fixes the sequence (identity, steps) and what
  // a batch holds (images, token windows).
  RemoteBatchSource(std::unique_ptr<LocalBatchSource> local, RemoteSourceOptions options);
  ~RemoteBatchSource() override;

  int64_t steps_per_epoch() const override { return local_->steps_per_epoch(); }
  int64_t samples() const override { return local_->samples(); }
  Batch batch(int64_t epoch, int64_t step) const override;
  LoaderState identity() const override { return local_->identity(); }
  LoaderStats stats() const override;
  int ready_batches() const override;
  void set_batch_observer(BatchObserver observer) override;
  void seek(int64_t epoch, int64_t step) const override;
  void set_epoch_limit(int64_t epochs) override;
  void set_threads(int threads) override;  // local producers

  std::string describe_producers() const override;
  std::vector<RemoteWorkerStats> worker_stats() const override;
  // The fields of worker `w`'s refusal ("problem", "key", ...) while it refuses this trainer
  // (state "refused"), else none: what its last_error says, for programs.
  ErrorFields refusal_fields(int w) const;
  // CPU seconds this process spent receiving and checking workers' batches so far (the planner's
  // cost of a remote sample on the trainer). Counted by thread name, while the threads live.
  double receive_cpu_seconds() const override;
  int64_t local_batches() const override;  // delivered by local producers

 private:
  using Work = BatchWindow::Claim;
  enum class WorkerState { kConnecting, kUp, kDown, kRefused };
  struct Remote {
    std::unique_ptr<WorkerConnection> connection;
    WorkerState state = WorkerState::kConnecting;
    int lanes = 0;          // producers allowed for it now (its build threads + 1)
    int lanes_started = 0;  // threads started for it so far
    bool ever_up = false;
    std::chrono::steady_clock::time_point up_since;  // while kUp
    std::chrono::steady_clock::time_point next_try;
    RemoteWorkerStats stats;
    ErrorFields refusal;  // while kRefused
  };
  static constexpr int kLocal = -1;
  static constexpr const char* kFetchThreadName = "loom-fetch";

  // Steps ahead of the trainer that `producer` (lane `lane` of it) may take now, 0 while it may
  // not work: bounded by bytes (max_ahead_by_bytes_) and by batches (one per producer plus
  // data.prefetch_batches). window_'s lock held.
  int64_t ahead_locked(int producer, int lane) const;
  bool may_work(int producer, int lane) const;  // window_'s lock held
  // Blocks until `producer` (lane `lane` of it) may take a step; false when stopping.
  bool take_work(int producer, int lane, Work& work);
  void deliver(const Work& work, int producer, Batch batch, std::exception_ptr error,
               const LoaderStats& tally);
  void local_lane(int lane);
  void remote_lane(int worker, int lane);
  // Opens a session on worker `w`; logs what changed.
  void try_connect(int w);
  void mark_down(int w, const std::string& why);
  void connect_loop();
  void start_lanes_locked(int w);

  std::unique_ptr<LocalBatchSource> local_;
  RemoteSourceOptions options_;
  BatchShape shape_;  // of a full batch (epoch and step filled in per request)
  int64_t max_ahead_by_bytes_ = 1;

  // Producer: a worker's index, or kLocal. Its stats are the counts of the batches taken and the
  // local threads' build times. It guards the members below.
  mutable BatchWindow window_;
  int local_threads_ = 1;
  int workers_up_ = 0;
  mutable int64_t local_batches_ = 0;
  std::vector<Remote> remotes_;
  BatchObserver observer_;
  std::vector<std::thread> threads_;
};

}  // namespace loom::data
