#include "loom/comm/shm_communicator.h"

#include <immintrin.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "loom/comm/reduce_kernels.h"
#include "loom/comm/shape_checks.h"
#include "loom/core/error.h"
#include "loom/core/settings.h"
#include "loom/core/topology.h"

namespace loom::comm {
namespace {

// A sleeping wait wakes this often to see whether its peer died or the timeout passed (wake-ups
// for data come from the peer's futex wake). Every needless wake-up takes CPU from computation:
// a parameter server's receive lanes sleep through most of a step.
constexpr auto kSleepSlice = std::chrono::milliseconds(50);

// The operation the current communication thread runs, for error messages.
thread_local std::string t_current_operation;

bool reached(std::uint32_t value, std::uint32_t target) {
  return static_cast<std::int32_t>(value - target) >= 0;
}

void futex_sleep(std::atomic<std::uint32_t>& word, std::uint32_t seen) {
  timespec slice{0, std::chrono::nanoseconds(kSleepSlice).count()};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &slice, nullptr,
            0);
}

const char* kind_name(std::int32_t kind) {
  static const char* names[] = {
      "?", "allreduce", "broadcast", "allgather", "reduce_scatter", "send/recv", "barrier"};
  return kind >= 1 && kind <= 6 ? names[kind] : names[0];
}

std::string describe(const ShmCall& call) {
  return std::string(kind_name(call.kind)) + " #" + std::to_string(call.sequence) + " (" +
         std::to_string(call.numel) + " x " +
         c10::toString(static_cast<c10::ScalarType>(call.dtype)) + ")";
}

// [lo, hi) of `part` when `n` elements are split into `parts` slices of whole cache lines.
std::pair<std::size_t, std::size_t> slice_of(std::size_t n, int parts, int part,
                                             std::size_t element) {
  const std::size_t line = std::max<std::size_t>(1, 64 / element);
  const std::size_t per = (n + parts * line - 1) / (parts * line) * line;
  const std::size_t lo = std::min(n, per * part);
  return {lo, std::min(n, lo + per)};
}

}  // namespace

ShmCommunicator::ShmCommunicator(std::shared_ptr<Rendezvous> rendezvous, CommOptions options,
                                 std::vector<int> ranks, const std::string& name)
    : Communicator(options),
      rendezvous_(std::move(rendezvous)),
      ranks_(std::move(ranks)),
      chunk_bytes_(static_cast<std::size_t>(setting_int("LOOM_SHM_CHUNK_BYTES"))),
      small_bytes_(static_cast<std::size_t>(setting_int("LOOM_SHM_SMALL_BYTES"))),
      mailbox_bytes_(static_cast<std::size_t>(setting_int("LOOM_SHM_MAILBOX_BYTES"))),
      spin_(std::chrono::microseconds(setting_int("LOOM_SHM_SPIN_US"))) {
  if (ranks_.empty()) {
    for (int r = 0; r < rendezvous_->world(); ++r) ranks_.push_back(r);
  }
  const auto me = std::find(ranks_.begin(), ranks_.end(), rendezvous_->rank());
  if (me == ranks_.end()) throw CommError("shm: rank is not a member of group '" + name + "'");
  rank_ = static_cast<int>(me - ranks_.begin());
  world_ = static_cast<int>(ranks_.size());
  const auto& hosts = rendezvous_->host_of_rank();
  for (int r : ranks_) {
    if (hosts[r] != hosts[ranks_[0]]) {
      throw CommError("shm: ranks " + std::to_string(ranks_[0]) + " and " + std::to_string(r) +
                      " are on different hosts; shared memory only connects ranks of one host "
                      "(use comm.backend tcp or auto)");
    }
  }
  if (chunk_bytes_ < 4096 * static_cast<std::size_t>(world_)) {
    throw ConfigError("LOOM_SHM_CHUNK_BYTES must be at least 4096 x ranks");
  }
  if (mailbox_bytes_ < 4096) throw ConfigError("LOOM_SHM_MAILBOX_BYTES must be at least 4096");
  // Spinning catches a peer that runs on another core at this moment. With more ranks on the
  // host than cores (parameter servers beside their workers), the peer waited for may be the
  // one waiting for this core: a spin only delays it. Measured on 2 cores, 2 workers and 2
  // servers: 0.87 of all-reduce's samples/s with the spin, 0.91 without (bench/RESULTS.md).
  if (world_ > detect_topology().usable_cores) spin_ = std::chrono::microseconds(0);
  sent_to_.assign(world_, 0);
  received_from_.assign(world_, 0);
  send_calls_.assign(world_, 0);
  recv_calls_.assign(world_, 0);

  // The first rank creates the segment, everyone maps it, then the name goes away.
  const std::string segment =
      "/loom-" + rendezvous_->job() + "-" + name + "-h" + std::to_string(hosts[ranks_[0]]);
  const ShmSegment::Layout layout{world_, chunk_bytes_, mailbox_bytes_};
  const std::string key = "loom/shm/" + name;
  if (rank_ == 0) segment_ = std::make_unique<ShmSegment>(segment, layout, true);
  rendezvous_->exchange(key + "/created", "", {ranks_[0]});
  if (rank_ != 0) segment_ = std::make_unique<ShmSegment>(segment, layout, false);
  segment_->slot(rank_).pid.store(static_cast<std::int32_t>(::getpid()));
  rendezvous_->exchange(key + "/mapped", "", ranks_);
  segment_->unlink();
  collectives_ = std::make_unique<SerialExecutor>();
}

ShmCommunicator::~ShmCommunicator() {
  // Drain and join the threads before the segment goes away.
  collectives_.reset();
  send_lanes_.clear();
  recv_lanes_.clear();
}

WorkPtr ShmCommunicator::enqueue(SerialExecutor& lane, std::string what,
                                 std::function<void()> body) {
  auto run = guarded(what, std::move(body));
  return lane.submit(std::move(what), std::move(run));
}

std::function<void()> ShmCommunicator::guarded(const std::string& what,
                                               std::function<void()> body) {
  return [this, what, body = std::move(body)] {
    t_current_operation = what;
    throw_if_broken();  // calls queued before a failure fail with it
    try {
      body();
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!broken_.empty()) throw;
        broken_ = e.what();
      }
      // Tell the peers, so that whoever waits for this rank fails now rather than at timeout.
      auto& slot = segment_->slot(rank_);
      std::strncpy(slot.failure, e.what(), sizeof slot.failure - 1);
      slot.failed.store(1);
      throw;
    }
  };
}

SerialExecutor& ShmCommunicator::lane(std::map<int, std::unique_ptr<SerialExecutor>>& lanes,
                                      int peer) {
  auto& executor = lanes[peer];
  if (!executor) executor = std::make_unique<SerialExecutor>();
  return *executor;
}

void ShmCommunicator::throw_if_broken() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_.empty()) {
    throw CommError(t_current_operation + ": the communicator failed earlier: " + broken_);
  }
}

// ---- waiting -----------------------------------------------------------------------------

void ShmCommunicator::await(ShmFlag& flag, std::uint32_t target, int peer, const char* phase) {
  // Spin first: a peer a few microseconds behind is caught without the futex's wake-up latency
  // (tens of microseconds); then sleep, so that a waiting rank leaves its core to computation.
  // The spin never yields the core: with a core for each rank (spin_ is 0 otherwise) the peer
  // runs elsewhere, and on 2-core KVM hosts a sched_yield between polls made a fifth to a half
  // of 4 KB all-reduces take 25-50 us instead of 2-4 us (bench/RESULTS.md, session 31), so that
  // the median of a run fell in either mode.
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (reached(flag.value.load(std::memory_order_acquire), target)) return;
    _mm_pause();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() - started > spin_) break;
  }
  auto& peer_slot = segment_->slot(peer);
  while (true) {
    flag.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = flag.value.load(std::memory_order_seq_cst);
    if (!reached(seen, target)) futex_sleep(flag.value, seen);
    flag.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (reached(flag.value.load(std::memory_order_acquire), target)) return;

    const std::string who = "rank " + std::to_string(ranks_[peer]);
    const std::string me = " (rank " + std::to_string(ranks_[rank_]) + " of " +
                           std::to_string(rendezvous_->world()) + ")";
    // The same facts as the message, for programs: whom this rank waited for, and why it stopped.
    const auto fields = [&](const std::string& problem) {
      return ErrorFields{{"operation", t_current_operation},
                         {"peer_rank", std::to_string(ranks_[peer])},
                         {"problem", problem}};
    };
    if (peer_slot.failed.load() != 0) {
      throw CommError(t_current_operation + ": " + who + " gave up: " + peer_slot.failure + me,
                      fields("peer_gave_up"));
    }
    const int pid = peer_slot.pid.load();
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
      ErrorFields exited = fields("peer_exited");
      exited["pid"] = std::to_string(pid);
      throw CommError(t_current_operation + ": " + who + " (pid " + std::to_string(pid) +
                          ") exited while this rank waited for it to " + phase + me,
                      std::move(exited));
    }
    if (std::chrono::steady_clock::now() - started > options().timeout) {
      throw TimeoutError(t_current_operation + ": waited " +
                             std::to_string(options().timeout.count() / 1000.0).substr(0, 5) +
                             " s for " + who + " to " + phase + ", and it did not" + me,
                         fields("stalled"));
    }
  }
}

void ShmCommunicator::await_peers(ShmFlag ShmRankSlot::*flag, std::uint32_t step,
                                  const char* phase) {
  for (int q = 0; q < world_; ++q) {
    if (q != rank_) await(segment_->slot(q).*flag, step, q, phase);
  }
}

// ---- the step protocol --------------------------------------------------------------------

std::uint32_t ShmCommunicator::begin_step() {
  const std::uint32_t step = ++step_;
  // The half this step fills was last used two steps ago; peers must be done reading it.
  if (step > 2) await_peers(&ShmRankSlot::released, step - 2, "finish reading the previous round");
  return step;
}

void ShmCommunicator::arrive(std::uint32_t step, const ShmCall& call) {
  auto& slot = segment_->slot(rank_);
  slot.call[step & 1] = call;
  slot.arrived.publish(step);
}

void ShmCommunicator::check_calls_match(std::uint32_t step, const ShmCall& mine) {
  for (int q = 0; q < world_; ++q) {
    if (q == rank_) continue;
    const ShmCall& theirs = segment_->slot(q).call[step & 1];
    if (theirs.kind != mine.kind || theirs.sequence != mine.sequence ||
        theirs.dtype != mine.dtype || theirs.numel != mine.numel || theirs.root != mine.root) {
      fail_mismatch(mine, theirs, q);
    }
  }
}

void ShmCommunicator::fail_mismatch(const ShmCall& mine, const ShmCall& theirs, int peer) {
  std::string text = "calls out of step: rank " + std::to_string(ranks_[rank_]) + " called " +
                     describe(mine) + " but rank " + std::to_string(ranks_[peer]) + " called " +
                     describe(theirs);
  if (mine.kind == kBroadcast && theirs.kind == kBroadcast && mine.root != theirs.root) {
    text +=
        " with root " + std::to_string(theirs.root) + " instead of " + std::to_string(mine.root);
  }
  throw CommError(text + "; every rank must make the same calls in the same order",
                  {{"operation", describe(mine)},
                   {"peer_operation", describe(theirs)},
                   {"peer_rank", std::to_string(ranks_[peer])},
                   {"problem", "calls_out_of_step"}});
}

void ShmCommunicator::release(std::uint32_t step) { segment_->slot(rank_).released.publish(step); }

// One round: wait for the staging half, fill it, publish, wait for everyone, check the calls.
std::uint32_t ShmCommunicator::stage(const ShmCall& call, const std::function<void(char*)>& fill) {
  const std::uint32_t step = begin_step();
  fill(staging(rank_, step));
  arrive(step, call);
  await_peers(&ShmRankSlot::arrived, step, "arrive");
  check_calls_match(step, call);
  return step;
}

ShmCall ShmCommunicator::make_call(Kind kind, std::uint64_t sequence, const at::Tensor& tensor,
                                   int root) {
  ShmCall call;
  call.sequence = sequence;
  call.kind = kind;
  call.dtype = tensor.defined() ? static_cast<std::int32_t>(tensor.scalar_type()) : 0;
  call.numel = tensor.defined() ? tensor.numel() : 0;
  call.root = root;
  return call;
}

// ---- collectives ----------------------------------------------------------------------------

void ShmCommunicator::run_allreduce(const at::Tensor& tensor, ReduceOp op, const ShmCall& call) {
  const auto dtype = tensor.scalar_type();
  const std::size_t element = tensor.element_size();
  const std::size_t total = tensor.numel();
  const std::size_t chunk = chunk_bytes_ / element;
  const bool small = total * element <= small_bytes_;
  const double scale = op == ReduceOp::kAvg ? 1.0 / world_ : 1.0;
  char* data = static_cast<char*>(tensor.data_ptr());
  std::vector<const void*> inputs(world_);
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(chunk, total - offset);
    char* out = data + offset * element;
    const std::uint32_t step =
        stage(call, [&](char* mine) { std::memcpy(mine, out, n * element); });
    if (small) {
      for (int q = 0; q < world_; ++q) inputs[q] = staging(q, step);
      reduce_sum(dtype, out, inputs.data(), world_, n, scale);
    } else {
      // Reduce my slice across ranks into my staging half, then collect the others' slices.
      const auto [lo, hi] = slice_of(n, world_, rank_, element);
      for (int q = 0; q < world_; ++q) inputs[q] = staging(q, step) + lo * element;
      char* reduced = staging(rank_, step) + lo * element;
      reduce_sum(dtype, reduced, inputs.data(), world_, hi - lo, scale);
      std::memcpy(out + lo * element, reduced, (hi - lo) * element);
      segment_->slot(rank_).reduced.publish(step);
      await_peers(&ShmRankSlot::reduced, step, "finish reducing its slice");
      for (int q = 0; q < world_; ++q) {
        if (q == rank_) continue;
        const auto [qlo, qhi] = slice_of(n, world_, q, element);
        std::memcpy(out + qlo * element, staging(q, step) + qlo * element, (qhi - qlo) * element);
      }
    }
    release(step);
    offset += n;
  } while (offset < total);
}

void ShmCommunicator::run_broadcast(const at::Tensor& tensor, const ShmCall& call) {
  const std::size_t bytes = tensor.nbytes();
  char* data = static_cast<char*>(tensor.data_ptr());
  const int root = call.root;
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(chunk_bytes_, bytes - offset);
    const std::uint32_t step = stage(call, [&](char* mine) {
      if (rank_ == root) std::memcpy(mine, data + offset, n);
    });
    if (rank_ != root) std::memcpy(data + offset, staging(root, step), n);
    release(step);
    offset += n;
  } while (offset < bytes);
}

void ShmCommunicator::run_allgather(const at::Tensor& input, const at::Tensor& output,
                                    const ShmCall& call) {
  const std::size_t bytes = input.nbytes();
  const char* in = static_cast<const char*>(input.data_ptr());
  char* out = static_cast<char*>(output.data_ptr());
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(chunk_bytes_, bytes - offset);
    const std::uint32_t step = stage(call, [&](char* mine) { std::memcpy(mine, in + offset, n); });
    for (int q = 0; q < world_; ++q) std::memcpy(out + q * bytes + offset, staging(q, step), n);
    release(step);
    offset += n;
  } while (offset < bytes);
}

void ShmCommunicator::run_reduce_scatter(const at::Tensor& input, const at::Tensor& output,
                                         ReduceOp op, const ShmCall& call) {
  const auto dtype = input.scalar_type();
  const std::size_t element = input.element_size();
  const std::size_t block = output.numel();  // elements per rank
  const std::size_t chunk = chunk_bytes_ / element / world_;
  const double scale = op == ReduceOp::kAvg ? 1.0 / world_ : 1.0;
  const char* in = static_cast<const char*>(input.data_ptr());
  char* out = static_cast<char*>(output.data_ptr());
  std::vector<const void*> inputs(world_);
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(chunk, block - offset);
    // My staging half holds, for every destination rank q, my part of q's block.
    const std::uint32_t step = stage(call, [&](char* mine) {
      for (int q = 0; q < world_; ++q) {
        std::memcpy(mine + q * n * element, in + (q * block + offset) * element, n * element);
      }
    });
    for (int q = 0; q < world_; ++q) inputs[q] = staging(q, step) + rank_ * n * element;
    reduce_sum(dtype, out + offset * element, inputs.data(), world_, n, scale);
    release(step);
    offset += n;
  } while (offset < block);
}

void ShmCommunicator::run_barrier(const ShmCall& call) {
  release(stage(call, [](char*) {}));
}

// ---- point to point -----------------------------------------------------------------------

void ShmCommunicator::run_send(const at::Tensor& tensor, int peer, const ShmCall& call) {
  ShmMailbox& box = segment_->mailbox(rank_, peer);
  char* slot = segment_->mailbox_data(rank_, peer);
  const std::size_t bytes = tensor.nbytes();
  const char* data = static_cast<const char*>(tensor.data_ptr());
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(mailbox_bytes_, bytes - offset);
    await(box.taken, sent_to_[peer], peer, "receive the previous message part");
    std::memcpy(slot, data + offset, n);
    box.call = call;
    box.sent.publish(++sent_to_[peer]);
    offset += n;
  } while (offset < bytes);
}

void ShmCommunicator::run_recv(const at::Tensor& tensor, int peer, const ShmCall& call) {
  ShmMailbox& box = segment_->mailbox(peer, rank_);
  const char* slot = segment_->mailbox_data(peer, rank_);
  const std::size_t bytes = tensor.nbytes();
  char* data = static_cast<char*>(tensor.data_ptr());
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(mailbox_bytes_, bytes - offset);
    await(box.sent, received_from_[peer] + 1, peer, "send");
    ShmCall sent = box.call;
    if (sent.numel != call.numel || sent.dtype != call.dtype || sent.sequence != call.sequence) {
      sent.kind = kSend;
      fail_mismatch(call, sent, peer);
    }
    std::memcpy(data + offset, slot, n);
    box.taken.publish(++received_from_[peer]);
    offset += n;
  } while (offset < bytes);
}

// ---- the public calls -----------------------------------------------------------------------

static void check_reducible(const at::Tensor& tensor, ReduceOp op, const char* operation) {
  if (!reducible(tensor.scalar_type()) ||
      (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type()))) {
    throw CommError(std::string(operation) + ": cannot " +
                    (op == ReduceOp::kAvg ? "average" : "sum") + " " +
                    c10::toString(tensor.scalar_type()) + " tensors over shared memory");
  }
}

WorkPtr ShmCommunicator::allreduce(at::Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce", rank_, world_);
  check_reducible(tensor, op, "allreduce");
  const auto call = make_call(kAllreduce, ++sequence_, tensor, 0);
  return enqueue(*collectives_, describe_call("allreduce", call.sequence, tensor),
                 [this, tensor, op, call] { run_allreduce(tensor, op, call); });
}

WorkPtr ShmCommunicator::broadcast(at::Tensor tensor, int root) {
  check_tensor(tensor, "broadcast", rank_, world_);
  if (root < 0 || root >= world_)
    throw CommError("broadcast: root " + std::to_string(root) + " is not a rank");
  const auto call = make_call(kBroadcast, ++sequence_, tensor, root);
  return enqueue(*collectives_, describe_call("broadcast", call.sequence, tensor),
                 [this, tensor, call] { run_broadcast(tensor, call); });
}

WorkPtr ShmCommunicator::allgather(at::Tensor input, at::Tensor output) {
  check_allgather(input, output, rank_, world_);
  const auto call = make_call(kAllgather, ++sequence_, input, 0);
  return enqueue(*collectives_, describe_call("allgather", call.sequence, input),
                 [this, input, output, call] { run_allgather(input, output, call); });
}

WorkPtr ShmCommunicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  check_reduce_scatter(input, output, rank_, world_);
  check_reducible(input, op, "reduce_scatter");
  const auto call = make_call(kReduceScatter, ++sequence_, input, 0);
  return enqueue(*collectives_, describe_call("reduce_scatter", call.sequence, input),
                 [this, input, output, op, call] { run_reduce_scatter(input, output, op, call); });
}

WorkPtr ShmCommunicator::send(at::Tensor tensor, int peer) {
  check_tensor(tensor, "send", rank_, world_);
  check_peer(peer, "send", rank_, world_);
  const auto call = make_call(kSend, ++send_calls_[peer], tensor, peer);
  std::string what =
      describe_call("send", call.sequence, tensor) + " to rank " + std::to_string(ranks_[peer]);
  auto body = guarded(what, [this, tensor, peer, call] { run_send(tensor, peer, call); });
  SerialExecutor& executor = lane(send_lanes_, peer);
  if (tensor.nbytes() <= mailbox_bytes_) {
    // The peer has taken every piece sent so far: the copy cannot wait for anything.
    const auto mailbox_free = [this, peer] {
      return reached(segment_->mailbox(rank_, peer).taken.value.load(std::memory_order_acquire),
                     sent_to_[peer]);
    };
    if (WorkPtr done = executor.run_now_if_idle(what, mailbox_free, body)) return done;
  }
  return executor.submit(std::move(what), std::move(body));
}

WorkPtr ShmCommunicator::recv(at::Tensor tensor, int peer) {
  check_tensor(tensor, "recv", rank_, world_);
  check_peer(peer, "recv", rank_, world_);
  const auto call = make_call(kSend, ++recv_calls_[peer], tensor, rank_);
  return enqueue(
      lane(recv_lanes_, peer),
      describe_call("recv", call.sequence, tensor) + " from rank " + std::to_string(ranks_[peer]),
      [this, tensor, peer, call] { run_recv(tensor, peer, call); });
}

WorkPtr ShmCommunicator::barrier() {
  const auto call = make_call(kBarrier, ++sequence_, at::Tensor(), 0);
  return enqueue(*collectives_, describe_call("barrier", call.sequence, at::Tensor()),
                 [this, call] { run_barrier(call); });
}

}  // namespace loom::comm
