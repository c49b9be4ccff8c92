#include "loom/comm/comm_benchmark.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "loom/comm/make_communicator.h"
#include "loom/core/median.h"

namespace loom::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWait = std::chrono::seconds(120);

// Times repeated all-reduces of one tensor. Rank 0 decides when to stop and tells the others
// through the same communicator, so every rank makes the same number of calls.
std::pair<double, int> time_allreduce(Communicator& comm, at::Tensor tensor,
                                      const CommBenchOptions& options) {
  for (int i = 0; i < 2; ++i) comm.allreduce(tensor, ReduceOp::kSum)->wait(kWait);  // warm up
  std::vector<double> times;
  auto more = at::ones({1}, at::kInt);
  const auto started = Clock::now();
  while (true) {
    comm.barrier()->wait(kWait);
    const auto t0 = Clock::now();
    comm.allreduce(tensor, ReduceOp::kSum)->wait(kWait);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    const int count = static_cast<int>(times.size());
    more.fill_(count < options.min_repeats ||
               (elapsed < options.seconds_per_case && count < options.max_repeats));
    comm.broadcast(more, 0)->wait(kWait);
    if (more.item<int>() == 0) break;
  }
  return {upper_median(times), static_cast<int>(times.size())};
}

}  // namespace

double measure_memcpy_gbps() {
  const std::size_t bytes = 32u << 20;
  std::vector<char> from(bytes, 1), to(bytes, 0);
  std::vector<double> times;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    from[i] = to[bytes - 1 - i];  // keep the copies observable
  }
  return static_cast<double>(bytes) / upper_median(times) / 1e9;
}

CommBenchResult run_comm_benchmark(const std::shared_ptr<Rendezvous>& rendezvous,
                                   const CommBenchOptions& options) {
  CommBenchResult result;
  result.world = rendezvous->world();
  result.memcpy_gbps = measure_memcpy_gbps();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (const auto& backend : options.backends) {
    comms.push_back(make_communicator(backend, rendezvous, CommOptions{}));
  }
  const double bus_factor = 2.0 * (result.world - 1) / result.world;
  for (auto dtype : options.dtypes) {
    for (auto bytes : options.sizes_bytes) {
      const auto elements = bytes / static_cast<std::int64_t>(c10::elementSize(dtype));
      auto tensor = at::ones({elements}, at::TensorOptions().dtype(dtype));
      for (std::size_t b = 0; b < comms.size(); ++b) {
        const auto [seconds, repeats] = time_allreduce(*comms[b], tensor, options);
        // Every rank reports rank 0's median, so that all print the same table.
        auto shared = at::tensor({seconds}, at::kDouble);
        comms[b]->broadcast(shared, 0)->wait(kWait);
        const double median_seconds = shared.item<double>();
        result.rows.push_back({options.backends[b], dtype, bytes, median_seconds, repeats,
                               bus_factor * static_cast<double>(bytes) / median_seconds / 1e9});
      }
    }
  }
  return result;
}

}  // namespace loom::comm
