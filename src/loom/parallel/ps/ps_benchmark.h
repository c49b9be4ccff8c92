// Parameter servers against ring all-reduce on one model's gradients (issue 16): the exchange
// alone, as DataParallel runs it, without forward or backward, so that a 2-core machine can
// time 4 workers and 4 servers on links limited by tc. Run by every rank of a job whose last
// `servers` ranks serve (`loom launch --servers K -- loom bench ps`).
//
// Each repetition times one ring step (the workers all-reduce every bucket among themselves)
// and one server step (PsBucketExchange pushes and pulls the same buckets through the servers),
// alternately, so that the machine's drift hits both alike. Times are medians of worker rank
// 0's steps, each begun together by a barrier of the workers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/rendezvous.h"
#include "loom/core/config.h"
#include "loom/parallel/ps/server_load.h"

namespace loom::parallel::ps {

struct PsBenchOptions {
  int servers = 1;
  std::string model = "resnet18";
  double part_mb = 4;
  int repeats = 10;
  std::string backend = "tcp";  // of the whole job and of the workers' ring
};

struct PsBenchResult {
  int workers = 0, servers = 0;
  std::int64_t gradient_bytes = 0;  // M
  int buckets = 0, parts = 0;
  double ring_seconds = 0, ps_seconds = 0;  // median step times
  std::vector<double> ring_steps, ps_steps;
  std::vector<ServerLoad> server_loads;  // over the run (warm-up included), per server
};

// Collective over every rank of the job; worker rank 0's result is complete, the other ranks'
// hold only the layout.
PsBenchResult run_ps_benchmark(const std::shared_ptr<comm::Rendezvous>& rendezvous,
                               const PsBenchOptions& options);

}  // namespace loom::parallel::ps
