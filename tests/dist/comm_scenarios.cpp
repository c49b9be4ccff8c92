#include "dist/comm_scenarios.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/accumulate.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "loom/comm/make_communicator.h"
#include "loom/comm/staging_communicator.h"
#include "loom/comm/tensor_message.h"
#include "loom/parallel/ps/param_server.h"
#include "loom/parallel/ps/ps_bucket_exchange.h"
#include "loom/parallel/ps/ps_exchange.h"
#include "loom/parallel/ps/ps_server.h"
#include "loom/parallel/ps/remote_parameters.h"
#include "loom/parallel/ps/server_update.h"

namespace loom::test {

using namespace loom::comm;

namespace {

constexpr auto kWait = std::chrono::seconds(60);

// Small multiples of 1/4 whose sums over a few ranks are exact in float and close in bfloat16.
at::Tensor pattern(std::int64_t n, int rank, at::ScalarType dtype, int salt = 0) {
  auto i = at::arange(n, at::kLong);
  auto values = ((i * 7 + rank * 13 + salt) % 101).to(at::kFloat) * 0.25 - 12.0;
  return values.to(dtype);
}

struct Checker {
  int rank;
  int checks = 0;
  void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
    const double tolerance = got.scalar_type() == at::kBFloat16 ? 0.26
                             : got.scalar_type() == at::kHalf   ? 0.01
                                                                : 1e-5;
    const double error =
        got.numel() == 0 ? 0.0
                         : (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
    if (got.numel() != want.numel() || error > tolerance) {
      throw std::runtime_error(what + ": max error " + std::to_string(error) + " (rank " +
                               std::to_string(rank) + ")");
    }
    ++checks;
  }
};

// Every collective on `n` elements of `dtype`, against references computed here.
void check_one_size(Communicator& comm, Checker& check, at::ScalarType dtype, std::int64_t n) {
  const int rank = comm.rank(), world = comm.world();
  const std::string label = std::to_string(n) + " x " + c10::toString(dtype);
  // Reference: every rank's pattern, summed in float here.
  auto sum = at::zeros({n}, at::kFloat);
  for (int r = 0; r < world; ++r) sum += pattern(n, r, dtype).to(at::kFloat);

  auto t = pattern(n, rank, dtype);
  comm.allreduce(t, ReduceOp::kSum)->wait(kWait);
  check.expect_close(t, sum, "allreduce sum " + label);
  if (at::isFloatingType(dtype)) {  // integers are summed, never averaged
    t = pattern(n, rank, dtype);
    comm.allreduce(t, ReduceOp::kAvg)->wait(kWait);
    check.expect_close(t, sum / world, "allreduce avg " + label);
  }
  if (n > (4 << 20)) return;  // the others are exercised up to 4 M elements

  t = pattern(n, rank, dtype);
  comm.broadcast(t, world - 1)->wait(kWait);
  check.expect_close(t, pattern(n, world - 1, dtype), "broadcast " + label);

  auto gathered = at::empty({world * n}, dtype);
  comm.allgather(pattern(n, rank, dtype), gathered)->wait(kWait);
  for (int r = 0; r < world; ++r) {
    check.expect_close(gathered.slice(0, r * n, (r + 1) * n), pattern(n, r, dtype),
                       "allgather " + label);
  }

  auto block = at::empty({n}, dtype);
  auto whole_sum = at::zeros({world * n}, at::kFloat);
  for (int r = 0; r < world; ++r) whole_sum += pattern(world * n, r, dtype).to(at::kFloat);
  const auto input = pattern(world * n, rank, dtype);
  const auto untouched = input.clone();
  const bool floating = at::isFloatingType(dtype);
  comm.reduce_scatter(input, block, floating ? ReduceOp::kAvg : ReduceOp::kSum)->wait(kWait);
  check.expect_close(block, whole_sum.slice(0, rank * n, (rank + 1) * n) / (floating ? world : 1),
                     "reduce_scatter " + label);
  if (!input.equal(untouched)) throw std::runtime_error("reduce_scatter changed its input");

  // A ring: send to the next rank, receive from the previous one (a rank alone has no peer).
  if (world == 1) return;
  auto received = at::empty({n}, dtype);
  const int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  auto sent = comm.send(pattern(n, rank, dtype, 5), next);
  comm.recv(received, previous)->wait(kWait);
  sent->wait(kWait);
  check.expect_close(received, pattern(n, previous, dtype, 5), "send/recv " + label);
}

// After an all-reduce every rank must hold the same bits (replicas stay identical), on the
// small path and the large one, in float and in bfloat16.
void check_identical_replicas(Communicator& comm, Checker& check) {
  const int rank = comm.rank(), world = comm.world();
  at::Generator random = at::detail::createCPUGenerator(11 + rank);
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (std::int64_t n : {std::int64_t{1000}, std::int64_t{(3 << 18) + 7}}) {
      auto t = at::randn({n}, random, at::TensorOptions().dtype(at::kFloat)).to(dtype);
      comm.allreduce(t, ReduceOp::kAvg)->wait(kWait);
      auto everyone = at::empty({world * n}, dtype);
      comm.allgather(t, everyone)->wait(kWait);
      for (int r = 0; r < world; ++r) {
        if (!everyone.slice(0, r * n, (r + 1) * n).equal(t)) {
          throw std::runtime_error("allreduce of " + std::to_string(n) + " x " +
                                   c10::toString(dtype) + ": rank " + std::to_string(r) +
                                   " holds other bits than rank " + std::to_string(rank));
        }
      }
      ++check.checks;
    }
  }
}

// Several messages to one peer, received in the order sent, with a collective between them.
void check_message_order(Communicator& comm, Checker& check) {
  const int rank = comm.rank(), world = comm.world();
  const int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  const std::int64_t sizes[] = {5, 0, 70001, 1};
  std::vector<at::Tensor> received;
  std::vector<WorkPtr> works;
  for (std::int64_t n : sizes) {
    received.push_back(at::empty({n}, at::kFloat));
    works.push_back(comm.recv(received.back(), previous));
  }
  auto between = pattern(4097, rank, at::kFloat);
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    works.push_back(comm.send(pattern(sizes[i], rank, at::kFloat, static_cast<int>(i)), next));
    if (i == 1) works.push_back(comm.allreduce(between, ReduceOp::kSum));
  }
  for (const auto& work : works) work->wait(kWait);
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    check.expect_close(received[i], pattern(sizes[i], previous, at::kFloat, static_cast<int>(i)),
                       "message " + std::to_string(i) + " of " + std::to_string(std::size(sizes)));
  }
  auto sum = at::zeros({4097}, at::kFloat);
  for (int r = 0; r < world; ++r) sum += pattern(4097, r, at::kFloat);
  check.expect_close(between, sum, "allreduce between messages");
}

// A pipeline's messages: tensors of shapes the receiver learns from their headers (one empty),
// sent to the next rank before the previous rank's are received, as 1F1B's ranks send before
// they receive; bytes on the tensors' device, labels and notes in the headers.
void check_tensor_messages(Communicator& comm, Checker& check, c10::Device device) {
  const int rank = comm.rank(), world = comm.world();
  const int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  comm.prepare_peers({next, previous});
  const std::vector<std::vector<std::int64_t>> shapes = {{3, 5}, {0, 4}, {70001}, {2, 3, 4}};
  const auto sent_by = [&](int sender, std::size_t i) {
    return pattern(c10::multiply_integers(shapes[i]), sender, at::kFloat, static_cast<int>(i))
        .reshape(shapes[i]);
  };
  const auto header_of = [](int sender, std::size_t i) {
    const auto k = static_cast<std::int64_t>(i);
    return MessageHeader{{sender, k, 1, 7}, 10 * k + sender};
  };
  PendingSends sends;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    send_tensor(comm, sent_by(rank, i).to(device), next, sends, header_of(rank, i),
                Bytes::kOnTheirDevice);
  }
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string what =
        "message " + std::to_string(i) + " from rank " + std::to_string(previous);
    MessageHeader header;
    const at::Tensor got = recv_tensor(
        comm, previous, [&](const MessageHeader& h) { header = h; }, device);
    const MessageHeader want = header_of(previous, i);
    if (header.label != want.label || header.note != want.note) {
      throw std::runtime_error(what + ": its header's label or note differs from the one sent");
    }
    const c10::Device lands_on = got.numel() == 0 ? c10::Device(c10::kCPU) : device;
    if (got.sizes() != at::IntArrayRef(shapes[i]) || got.device() != lands_on) {
      throw std::runtime_error(what + ": arrived as " + c10::str(got.sizes()) + " on " +
                               got.device().str());
    }
    check.expect_close(got.cpu(), sent_by(previous, i), what);
  }
  sends.wait_all(kWait);
}

void check_collectives(Communicator& comm, Checker& check, std::int64_t max_elements) {
  const std::int64_t sizes[] = {0, 1, 3, 1000, 4097, 70001, (1 << 20) + 5, 16 << 20};
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (std::int64_t n : sizes) {
      if (n > max_elements) continue;
      // 64 MB all-reduces run on two ranks; more ranks than the CI machine's two cores stop at 4 M.
      if (n > (4 << 20) && comm.world() > 2) continue;
      check_one_size(comm, check, dtype, n);
    }
  }
  // The other reducible types, at sizes on either side of the small all-reduce's bound.
  for (auto dtype : {at::kDouble, at::kInt, at::kLong}) {
    for (std::int64_t n : {std::int64_t{3}, std::int64_t{70001}})
      check_one_size(comm, check, dtype, n);
  }
  // float16 (DataParallel's fp16 buckets) where the backend sums it: tcp, in float.
  if (comm.backend() == "tcp") {
    for (std::int64_t n : {std::int64_t{3}, std::int64_t{70001}}) {
      check_one_size(comm, check, at::kHalf, n);
    }
  }
  check_identical_replicas(comm, check);
  if (comm.world() > 1) check_message_order(comm, check);
  comm.barrier()->wait(kWait);
}

// Groups of some ranks: the even and the odd job ranks. Over tcp each is made twice under the same
// name (a second group of a name keeps its keys apart from the first one's; shm's segment keys
// are per name, so shm makes each once). A group of one works alone.
void check_groups(const std::shared_ptr<Rendezvous>& rendezvous, const std::string& backend,
                  CommOptions options, Checker& check) {
  const int rank = rendezvous->rank(), world = rendezvous->world();
  std::vector<int> members;
  for (int r = rank % 2; r < world; r += 2) members.push_back(r);
  const std::string name = rank % 2 ? "odd" : "even";
  const int rounds = backend == "tcp" ? 2 : 1;
  for (int round = 0; round < rounds; ++round) {
    auto group = make_group_communicator(backend, rendezvous, members, name, options);
    const std::int64_t n = 70001 + round;
    const std::string label = name + " group, round " + std::to_string(round);
    auto sum = at::zeros({n}, at::kFloat);
    for (int member : members) sum += pattern(n, member, at::kFloat);
    auto t = pattern(n, rank, at::kFloat);
    group->allreduce(t, ReduceOp::kSum)->wait(kWait);
    check.expect_close(t, sum, "allreduce, " + label);
    t = pattern(n, rank, at::kFloat);
    group->broadcast(t, group->world() - 1)->wait(kWait);
    check.expect_close(t, pattern(n, members.back(), at::kFloat), "broadcast, " + label);
    if (group->world() > 1) {
      const int g = group->rank(), size = group->world();
      auto received = at::empty({n}, at::kFloat);
      auto sent = group->send(pattern(n, rank, at::kFloat, 3), (g + 1) % size);
      group->recv(received, (g + size - 1) % size)->wait(kWait);
      sent->wait(kWait);
      check.expect_close(received, pattern(n, members[(g + size - 1) % size], at::kFloat, 3),
                         "send/recv, " + label);
    }
    group->barrier()->wait(kWait);
  }
}

void check_agreement(std::shared_ptr<Rendezvous> rendezvous, CommOptions options, Checker& check) {
  auto shm = make_communicator("shm", rendezvous, options);
  auto tcp = make_communicator("tcp", rendezvous, options);
  // A generator of the rank's own: ranks may be threads of one process.
  at::Generator random = at::detail::createCPUGenerator(7 + shm->rank());
  for (std::int64_t n : {std::int64_t{5}, std::int64_t{100003}, std::int64_t{3 << 20}}) {
    auto data = at::randn({n}, random, at::TensorOptions().dtype(at::kFloat)) * (shm->rank() + 1);
    auto a = data.clone(), b = data.clone();
    shm->allreduce(a, ReduceOp::kSum)->wait(kWait);
    tcp->allreduce(b, ReduceOp::kSum)->wait(kWait);
    check.expect_close(a, b, "shm vs tcp, " + std::to_string(n) + " floats");
  }
}

// A bucket filled gradient by gradient, as backward fills it: PsBucketExchange pushes a part as
// soon as every gradient it covers has landed, and only in plan order (the order the servers
// receive in); the rest goes when the bucket starts. The means stay exact.
void check_parts_go_early(Communicator& comm, const parallel::ps::PsRoles& roles, Checker& check) {
  using namespace loom::parallel::ps;
  const std::int64_t job = job_hash("parts go early");
  if (roles.is_server(comm.rank())) {
    PsServerOptions server;
    server.roles = roles;
    server.job = job;
    if (run_server(comm, server).steps != 1) throw std::runtime_error("a server missed the step");
    ++check.checks;
    return;
  }
  PsExchangeOptions options;
  options.roles = roles;
  options.part_bytes = 4000;  // 4000 floats: parts [0, 1000), [1000, 2000), ... [3000, 4000)
  options.job = job;
  PsBucketExchange exchange(comm, options);
  const at::Tensor bucket = at::full({4000}, comm.rank() + 1, at::kFloat);
  exchange.buckets_changed({bucket});
  const auto expect = [&](bool pushed, bool want, const std::string& when) {
    if (pushed != want) {
      throw std::runtime_error("ps: " + when + (want ? ": nothing pushed" : ": pushed too early"));
    }
    ++check.checks;
  };
  expect(exchange.filled(0, 3000, 1000), false, "the last part complete, the first not");
  expect(exchange.filled(0, 0, 600), false, "the first part partly filled");
  expect(exchange.filled(0, 600, 900), true, "the first part complete");
  exchange.start(0, bucket)->wait(std::chrono::milliseconds(30000));
  parallel::SyncStats stats;
  exchange.step_finished(stats);
  exchange.end_training();
  // The servers send the mean: (1 + ... + n) / n, exact in float for small n.
  const double n = roles.workers;
  if (!bucket.equal(at::full({4000}, (n + 1) / 2, at::kFloat))) {
    throw std::runtime_error(
        "ps: parts pushed early averaged to " + std::to_string(bucket[0].item<float>()) + " and " +
        std::to_string(bucket[3999].item<float>()) + ", expected " + std::to_string((n + 1) / 2));
  }
  ++check.checks;
}

// Buffers of odd sizes cut into 4 KB parts over the servers, so parts end mid-buffer and a
// server gets parts of several buffers.
void check_parameter_servers(Communicator& comm, Checker& check) {
  using namespace loom::parallel::ps;
  PsRoles roles;
  roles.servers = std::max(1, comm.world() / 2);
  roles.workers = comm.world() - roles.servers;
  const std::vector<std::int64_t> sizes = {1, 1000, 5003, 70001};
  const auto timeout = std::chrono::milliseconds(30000);
  const int n = roles.workers;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const PartPlan plan = plan_parts(sizes, c10::elementSize(dtype), 4096, roles.servers);
    for (bool mean : {false, true}) {
      const double scale = mean ? 1.0 / n : 1.0;
      if (roles.is_server(comm.rank())) {
        const int server = comm.rank() - roles.workers;
        const ServeStats stats = serve_step(comm, plan, server, dtype, roles, scale, timeout);
        // Every server gets its share of the bytes from every worker (within one part).
        const std::int64_t share = plan.server_bytes()[static_cast<size_t>(server)];
        if (stats.bytes_in != share * n || stats.bytes_out != share * n) {
          throw std::runtime_error("server " + std::to_string(server) + " moved " +
                                   std::to_string(stats.bytes_in) + " bytes in, expected " +
                                   std::to_string(share * n));
        }
        ++check.checks;
        continue;
      }
      std::vector<at::Tensor> buffers;
      for (std::int64_t size : sizes) {
        buffers.push_back(mean ? pattern(size, comm.rank(), dtype)
                               : at::full({size}, comm.rank() + 1, at::TensorOptions(dtype)));
      }
      push_pull(comm, plan, buffers, roles, timeout);
      for (size_t b = 0; b < sizes.size(); ++b) {
        const std::string label = std::string(mean ? "ps mean " : "ps sum ") +
                                  std::to_string(sizes[b]) + " x " + c10::toString(dtype);
        if (!mean) {  // (rank+1) summed over the workers, exactly
          const at::Tensor want = at::full({sizes[b]}, n * (n + 1) / 2, at::kFloat);
          if (!buffers[b].to(at::kFloat).equal(want)) throw std::runtime_error(label + ": wrong");
          ++check.checks;
          continue;
        }
        auto sum = at::zeros({sizes[b]}, at::kFloat);
        for (int r = 0; r < n; ++r) sum += pattern(sizes[b], r, dtype).to(at::kFloat);
        check.expect_close(buffers[b], sum / n, label);
      }
    }
  }
  check_parts_go_early(comm, roles, check);
  comm.barrier()->wait(kWait);
}

// Servers that keep the parameters: every worker moves a parameter larger than several parts by
// (rank + 1) per step through its own "optimizer", three steps, in SSP with no slack and then
// asynchronously. The servers add the mean of the moves, so after the last step every worker
// holds exactly 3 (n + 1) / 2 (SSP; async within rounding), and with s = 0 no answer lacks a step.
void check_held_parameters(Communicator& world, const std::shared_ptr<Rendezvous>& rendezvous,
                           const std::string& backend, Checker& check) {
  using namespace loom::parallel::ps;
  PsRoles roles;
  roles.servers = std::max(1, world.world() / 2);
  roles.workers = world.world() - roles.servers;
  const int n = roles.workers;
  for (bool bounded : {true, false}) {
    if (roles.is_server(world.rank())) {
      ParamServerOptions options;
      options.roles = roles;
      options.bounded = bounded;
      const auto update = add_deltas();
      const auto load = run_param_server(world, options, *update);
      if (load.steps != (bounded ? 3 : 3 * n)) {
        throw std::runtime_error("server applied " + std::to_string(load.steps) + " updates");
      }
      ++check.checks;
      continue;
    }
    std::vector<int> workers;
    for (int r = 0; r < n; ++r) workers.push_back(r);
    auto group = make_group_communicator(backend, rendezvous, workers,
                                         bounded ? "held-ssp" : "held-async", world.options());
    at::Tensor w = at::zeros({70001});
    RemoteParametersOptions options;
    options.roles = roles;
    options.part_bytes = 4096;
    options.mode = bounded ? "ssp" : "async";
    {
      RemoteParameters held({{"w", w}}, {}, *group, world, options);
      for (int step = 0; step < 3; ++step) {
        held.step(0.1, [&] { w.add_(world.rank() + 1); });
        if (bounded && held.metrics()->last_staleness() != 0) {
          throw std::runtime_error("SSP s=0 answered with staleness " +
                                   std::to_string(held.metrics()->last_staleness()));
        }
      }
      held.end_training();
    }
    const at::Tensor want = at::full({70001}, 3.0 * (n + 1) / 2);
    if (bounded && !w.equal(want)) throw std::runtime_error("ssp: wrong parameters");
    check.expect_close(w, want, bounded ? "ssp" : "async");
  }
  world.barrier()->wait(kWait);
}

}  // namespace

ScenarioResult run_scenario(const WorldInfo& world, const ScenarioOptions& options) {
  const std::string& scenario = options.scenario;
  const int rank = world.rank;
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  const auto ended = [&](int exit_code, const std::string& outcome, const std::string& what) {
    return ScenarioResult{
        exit_code, prefix + what, {{"rank", std::to_string(rank)}, {"outcome", outcome}}};
  };
  // The provoked failure did not come.
  const auto undetected = [&](const std::string& what) { return ended(1, "undetected", what); };
  try {
    auto rendezvous = Rendezvous::connect(world, std::chrono::seconds(30));
    Checker check{rank};
    std::string used = options.backend;
    if (scenario == "agree") {
      check_agreement(rendezvous, options.comm, check);
    } else if (scenario == "groups") {
      check_groups(rendezvous, options.backend, options.comm, check);
    } else if (scenario == "staged") {
      auto comm = make_communicator(options.backend, rendezvous, options.comm);
      StagingCommunicator staged(*comm, c10::kCPU, Staged::kEveryTensor);
      used = staged.backend();
      check_collectives(staged, check, options.max_elements);
    } else {
      const c10::Device device(options.device);
      auto comm = make_communicator(options.backend, rendezvous, options.comm, device);
      used = comm->backend();
      if (scenario == "collectives" && !device.is_cpu()) {
        // The checks' CPU tensors go to the device and back, so the device's backend moves them.
        StagingCommunicator on_device(*comm, device);
        check_collectives(on_device, check, options.max_elements);
      } else if (scenario == "collectives") {
        check_collectives(*comm, check, options.max_elements);
      } else if (scenario == "messages") {
        check_tensor_messages(*comm, check, device);
      } else if (scenario == "ps") {
        check_parameter_servers(*comm, check);
      } else if (scenario == "ps-held") {
        check_held_parameters(*comm, rendezvous, options.backend, check);
      } else if (scenario == "ps-stall") {
        comm->barrier()->wait(kWait);
        if (rank == comm->world() - 1) {
          std::this_thread::sleep_for(options.comm.timeout + std::chrono::seconds(1));
          return ended(0, "slept", "slept");
        }
        check_parameter_servers(*comm, check);
        return undetected("the exchange finished without its server");
      } else if (scenario == "mismatch") {
        auto t = at::ones({rank == 0 ? 1024 : 2048});
        comm->allreduce(t, ReduceOp::kSum)->wait(kWait);
        return undetected("mismatched all-reduce was not detected");
      } else if (scenario == "die-mid") {
        comm->barrier()->wait(kWait);
        auto t = at::ones({16 << 20});  // 64 MB: still on its way when rank 1 dies
        auto work = comm->allreduce(t, ReduceOp::kSum);
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          ::raise(SIGKILL);
        }
        work->wait(kWait);
        return undetected("all-reduce finished without rank 1");
      } else if (scenario == "die" || scenario == "stall") {
        comm->barrier()->wait(kWait);
        if (rank == 1 && scenario == "die") ::raise(SIGKILL);
        // Past the others' timeout, so that they name rank 1 as the one that never came.
        if (rank == 1) std::this_thread::sleep_for(options.comm.timeout + std::chrono::seconds(1));
        auto t = at::ones({1000});
        comm->allreduce(t, ReduceOp::kSum)->wait(kWait);
        if (rank != 1) return undetected("all-reduce finished without rank 1");
      } else {
        return ended(2, "usage", "unknown scenario " + scenario);
      }
    }
    ScenarioResult passed =
        ended(0, "passed", std::to_string(check.checks) + " checks passed on " + used);
    passed.facts["checks"] = std::to_string(check.checks);
    passed.facts["backend"] = used;
    passed.facts["hosts"] = std::to_string(rendezvous->host_count());
    return passed;
  } catch (const std::exception& e) {
    ScenarioResult failed = ended(1, "error", e.what());
    // The error's kind and fields (whom it waited for, which check failed); the scenario's own
    // facts ("rank": this rank) stay.
    const auto* error = dynamic_cast<const Error*>(&e);
    failed.facts["kind"] = dynamic_cast<const TimeoutError*>(&e)  ? "timeout"
                           : dynamic_cast<const CommError*>(&e)   ? "comm"
                           : dynamic_cast<const ConfigError*>(&e) ? "config"
                           : error                                ? "error"
                                                                  : "other";
    if (error) failed.facts.insert(error->fields().begin(), error->fields().end());
    return failed;
  }
}

namespace {

// One line's facts, or nothing when the line is not a facts_line.
std::optional<ErrorFields> parse_facts(const std::string& line) {
  ErrorFields facts;
  std::size_t at = 0;
  while (at < line.size()) {
    const std::size_t equals = line.find('=', at);
    if (equals == std::string::npos || equals == at) return std::nullopt;
    const std::string key = line.substr(at, equals - at);
    const bool key_ok = std::all_of(key.begin(), key.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
    });
    if (!key_ok) return std::nullopt;
    std::string value;
    at = equals + 1;
    if (at < line.size() && line[at] == '"') {
      bool closed = false;
      for (++at; at < line.size(); ++at) {
        if (line[at] == '"') {
          closed = true;
          ++at;
          break;
        }
        if (line[at] == '\\' && at + 1 < line.size()) {
          ++at;
          value += line[at] == 'n' ? '\n' : line[at];
        } else {
          value += line[at];
        }
      }
      if (!closed) return std::nullopt;
    } else {
      const std::size_t end = std::min(line.find(' ', at), line.size());
      value = line.substr(at, end - at);
      at = end;
    }
    facts[key] = value;
    if (at < line.size()) {
      if (line[at] != ' ') return std::nullopt;
      ++at;
    }
  }
  if (facts.empty()) return std::nullopt;
  return facts;
}

}  // namespace

std::vector<ErrorFields> facts_in(const std::string& output) {
  std::vector<ErrorFields> all;
  std::size_t at = 0;
  while (at < output.size()) {
    std::size_t end = output.find('\n', at);
    if (end == std::string::npos) end = output.size();
    std::string line = output.substr(at, end - at);
    // loom launch starts each line of a rank with "[rank R] ".
    const std::size_t prefix_end = line.find("] ");
    if (!line.empty() && line[0] == '[' && prefix_end != std::string::npos) {
      line.erase(0, prefix_end + 2);
    }
    if (auto facts = parse_facts(line)) all.push_back(std::move(*facts));
    at = end + 1;
  }
  return all;
}

}  // namespace loom::test
