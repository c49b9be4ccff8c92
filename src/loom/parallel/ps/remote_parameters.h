// A worker's side of servers that hold the parameters (param_server.h): asynchronous and
// bounded-staleness training, and the optimizer on the servers (issue 16). Backward fills the
// model's gradients as in one process; step() then pushes this step's gradients
// (optimizer_on: server) or the delta the worker's own optimizer made (optimizer_on: worker) to
// every server, its parts of them, and receives the parameters to train the next step on. Those
// may lack other workers' latest steps: metrics()' last_staleness() says how many of the slowest
// worker's.
//
// Construction is collective over the workers and the servers: worker 0 sends the first
// parameters (and a resumed run's optimizer state), and every worker starts from what the
// servers then hold. end_training() waits until every worker has pushed its last step, so all
// end with the same parameters; held_optimizer_state() (worker 0) fetches the servers' optimizer
// state for a checkpoint. The destructor tells the servers to stop.
//
// Threading: the trainer's thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/models/model.h"
#include "loom/parallel/grad_sync.h"
#include "loom/parallel/ps/flat_layout.h"
#include "loom/parallel/ps/part_plan.h"
#include "loom/parallel/ps/ps_exchange.h"
#include "loom/parallel/ps/ps_protocol.h"
#include "loom/parallel/ps/server_window.h"

namespace loom::parallel::ps {

struct RemoteParametersOptions {
  PsRoles roles;
  std::int64_t part_bytes = 4 << 20;
  std::int64_t job = 0;                   // job_hash() of the run
  std::vector<std::string> server_hosts;  // for errors, per server; may be empty
  std::string mode = "async";             // for describe(): async | ssp | sync
  std::int64_t staleness = 0;
  bool optimizer_on_server = false;
  int state_fields = 0;         // tensors per parameter the servers' optimizer keeps
  std::int64_t first_step = 0;  // the run's step at construction (a resumed run's)
  // Worker 0 of a resumed run with the optimizer on the servers: where their optimizer resumes.
  std::optional<HeldOptimizerState> state;
};

class RemoteParameters : public GradSync {
 public:
  // `workers` holds the training ranks only, `world` the workers then the servers; both must
  // outlive this object.
  RemoteParameters(models::NamedTensors parameters, models::NamedTensors buffers,
                   comm::Communicator& workers, comm::Communicator& world,
                   RemoteParametersOptions options);
  ~RemoteParameters() override;

  void zero_grad() override;
  void prepare() override {}
  void finish() override {}
  // Rank 0's BatchNorm statistics to every worker, and the servers' latest parameters: collective
  // over the workers, which then evaluate one model.
  void sync_buffers() override;
  const SyncStats& last_stats() const override { return stats_; }
  // The servers' load (worker 0) and how stale the pulled parameters were (every worker).
  ServerWindow* metrics() override { return &servers_; }
  std::string describe() const override;

  void step(double lr, const std::function<void()>& local_step) override;
  void end_training() override;
  std::optional<HeldOptimizerState> held_optimizer_state() override;

  const PartPlan& plan() const { return plan_; }

 private:
  struct Answer {
    std::int64_t staleness = 0;
    std::int64_t optimizer_steps = 0;
    std::vector<at::Tensor> state;  // flat, per field (kFetch)
  };
  // Sends `command` (with `payload`'s parts for kPush) to every server and, except for kStop,
  // receives the parameters into the model.
  Answer request(Command command, double lr, const at::Tensor& payload);
  std::vector<at::Tensor> parameter_tensors() const;
  std::string server_name(int server) const;

  models::NamedTensors parameters_, buffers_;
  comm::Communicator& workers_;
  comm::Communicator& world_;
  RemoteParametersOptions options_;
  FlatLayout layout_;
  PartPlan plan_;
  std::vector<std::vector<std::size_t>> parts_of_;  // per server, its parts in plan order
  at::Tensor flat_;                                 // the parameters as last received
  std::int64_t step_ = 0;
  bool broken_ = false;  // a request failed: the servers learn of it from their timeout
  SyncStats stats_;
  ServerWindow servers_;
};

}  // namespace loom::parallel::ps
