// A worker's side of synchronous parameter servers (issue 16): DataParallel's buckets, combined
// by pushing their parts to the servers and pulling the sums back, instead of all-reduce. The
// buckets already fill in the order backward produces gradients and start as soon as they are
// full, so a bucket's parts are on the wire while backward goes on; the part plan (part_plan.h)
// spreads every bucket over all servers with equal bytes each.
//
// Per synchronised step, to every server: a header (ps_protocol.h), the server's share of the
// plan when it changed, then the parts in plan order; from every server: the sums, and to worker
// rank 0 the server's running totals (SyncStats::servers). The destructor tells the servers to
// stop when no step is in flight, so they exit with the training.
//
// Threading: DataParallel's thread only.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "loom/parallel/bucket_exchange.h"
#include "loom/parallel/ps/part_plan.h"
#include "loom/parallel/ps/ps_exchange.h"
#include "loom/parallel/ps/ps_protocol.h"

namespace loom::parallel::ps {

struct PsExchangeOptions {
  PsRoles roles;
  std::int64_t part_bytes = 4 << 20;
  std::int64_t job = 0;                   // job_hash() of the run
  std::vector<std::string> server_hosts;  // for errors, per server; may be empty
};

class PsBucketExchange : public BucketExchange {
 public:
  // `world` holds the workers and the servers (roles); it must outlive this object.
  PsBucketExchange(comm::Communicator& world, PsExchangeOptions options);
  ~PsBucketExchange() override;

  void buckets_changed(const std::vector<at::Tensor>& buckets) override;
  comm::WorkPtr start(std::size_t index, const at::Tensor& bucket) override;
  void step_finished(SyncStats& stats) override;
  // Tells the servers to stop; worker 0 waits until each has closed its books (its trace).
  void end_training() override;
  std::string describe() const override;

  const PartPlan& plan() const { return plan_; }
  // "server 1 (rank 5 on host b)".
  std::string server_name(int server) const;

 private:
  void begin_step();
  void send_to_servers(Command command);
  void wait_for_control_sends();

  comm::Communicator& world_;
  PsExchangeOptions options_;
  PartPlan plan_;
  c10::ScalarType dtype_ = at::kFloat;
  std::int64_t plan_version_ = 0;
  bool plan_changed_ = false;
  std::int64_t step_ = 0;
  bool in_step_ = false;
  bool stopped_ = false;
  struct ControlSend {
    int server;
    at::Tensor message;
    comm::WorkPtr work;
  };
  std::vector<ControlSend> control_;  // this step's header (and plan) sends
};

}  // namespace loom::parallel::ps
