// All-reduce timing of several backends side by side, run by every rank of a job
// (`loom launch --nproc-per-node 2 -- loom bench comm`). Backends take turns size by size, so
// the machine's noise hits them alike; times are medians over repetitions.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/comm/rendezvous.h"

namespace loom::comm {

struct CommBenchOptions {
  std::vector<std::string> backends{"shm", "tcp"};
  std::vector<std::int64_t> sizes_bytes{4 << 10, 64 << 10, 256 << 10, 1 << 20,
                                        4 << 20, 32 << 20, 64 << 20};
  std::vector<c10::ScalarType> dtypes{c10::ScalarType::Float, c10::ScalarType::BFloat16};
  double seconds_per_case = 0.3;  // repeat until this much time or max_repeats
  int min_repeats = 5;
  int max_repeats = 200;
};

struct CommBenchRow {
  std::string backend;
  c10::ScalarType dtype;
  std::int64_t bytes;
  double median_seconds;
  int repeats;
  // nccl-tests' "bus bandwidth": bytes x 2(n-1)/n per second, comparable across rank counts.
  double bus_gbps;
};

struct CommBenchResult {
  int world = 1;
  double memcpy_gbps = 0;  // single-thread memcpy of 32 MB, measured in the same run
  std::vector<CommBenchRow> rows;
};

// Collective over all ranks; every rank returns the same rows (rank 0's clock).
CommBenchResult run_comm_benchmark(const std::shared_ptr<Rendezvous>& rendezvous,
                                   const CommBenchOptions& options);

// Bytes copied per second by one thread copying a warm 32 MB buffer (median of several).
double measure_memcpy_gbps();

}  // namespace loom::comm
