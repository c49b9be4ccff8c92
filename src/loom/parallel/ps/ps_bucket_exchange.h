// A worker's side of synchronous parameter servers (issue 16): DataParallel's buckets, combined
// by pushing their parts to the servers and pulling the sums back, instead of all-reduce. The
// part plan (part_plan.h) spreads every bucket over all servers with equal bytes each. A part is
// pushed as soon as every gradient it covers has landed (filled()), not when its whole bucket
// is full: the gradient of a large layer goes out while backward computes the layers before it.
// Parts go in plan order, which is the order every server posts its receives in.
//
// Per synchronised step, to every server: a header (ps_protocol.h), the server's share of the
// plan when it changed, then the parts in plan order; from every server: the sums, and to worker
// rank 0 the server's running totals (SyncStats::servers). The destructor tells the servers to
// stop when no step is in flight, so they exit with the training.
//
// Threading: DataParallel's thread only.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "loom/parallel/bucket_exchange.h"
#include "loom/parallel/ps/part_plan.h"
#include "loom/parallel/ps/ps_exchange.h"
#include "loom/parallel/ps/ps_protocol.h"

namespace loom::parallel::ps {

class ServerWindow;  // server_window.h (internal)

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
  bool filled(std::size_t index, std::int64_t offset, std::int64_t elements) override;
  comm::WorkPtr start(std::size_t index, const at::Tensor& bucket) override;
  void step_finished(SyncStats& stats) override;
  // The servers' load, as worker 0 hears it after every step (a ServerWindow).
  LayoutMetrics* metrics() override;
  const ServerWindow& servers() const { return *servers_; }
  // Tells the servers to stop; worker 0 waits until each has closed its books (its trace).
  void end_training() override;
  std::string describe() const override;

  const PartPlan& plan() const { return plan_; }
  // "server 1 (rank 5 on host b)".
  std::string server_name(int server) const;

 private:
  void begin_step();
  // Pushes, in plan order, the parts before `complete_before` and the complete ones after them
  // up to the first incomplete one; returns whether it pushed any.
  bool push_parts(std::size_t complete_before);
  void send_to_servers(Command command);
  void wait_for_control_sends();

  comm::Communicator& world_;
  PsExchangeOptions options_;
  PartPlan plan_;
  std::vector<at::Tensor> buckets_;      // as buckets_changed() gave them
  std::vector<std::size_t> first_part_;  // bucket -> its first part; one past the last at the end
  // This step: elements of each part filled, the next part to push, each part's push and pull.
  std::vector<std::int64_t> filled_;
  std::size_t next_part_ = 0;
  std::vector<std::vector<comm::WorkPtr>> part_works_;
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
  std::unique_ptr<ServerWindow> servers_;
};

}  // namespace loom::parallel::ps
