// TcpCommunicator's calls: the checks made on the caller's thread, and what each runs on its
// lane. Construction, lanes and the failure rule are in tcp_communicator.cpp.
#include <cstring>

#include "loom/comm/float_widening.h"
#include "loom/comm/reduce_kernels.h"
#include "loom/comm/shape_checks.h"
#include "loom/comm/tcp_communicator.h"
#include "loom/comm/tcp_ring_plans.h"
#include "loom/core/error.h"

namespace loom::comm {

using namespace tcp_protocol;
using Clock = std::chrono::steady_clock;

namespace {

// A send this small goes out on the caller's thread when its peer's lane is idle and the
// connection has taken everything before it: the write cannot block, and waking the lane's
// thread would cost more than the write (pipeline stages and parameter servers send many small
// headers).
constexpr std::size_t kInlineSendBytes = 4096;

// Whether a reduce-scatter of `dtype` on `world` ranks keeps float partial sums. Only 16-bit
// floats need them, and not on two ranks when the kernels sum the type: there each element is
// added once, from two parts that travel as they are, and the kernels' sum (in float, rounded
// once) writes it in place: no float copy, nothing widened.
bool sums_in_float(at::ScalarType dtype, int world) {
  return widens_to_float(dtype) && !(world == 2 && reducible(dtype));
}

// The reduce kernels' types, and float16 (summed in float here: DataParallel's fp16 buckets).
void check_reducible(const at::Tensor& tensor, ReduceOp op, const char* operation) {
  if (!(reducible(tensor.scalar_type()) || tensor.scalar_type() == at::kHalf) ||
      (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type()))) {
    throw CommError(std::string(operation) + ": cannot " +
                    (op == ReduceOp::kAvg ? "average" : "sum") + " " +
                    c10::toString(tensor.scalar_type()) + " tensors over tcp");
  }
}

char* bytes_of(const at::Tensor& tensor) { return static_cast<char*>(tensor.data_ptr()); }

// `error` again with `what` in front, of the same kind.
[[noreturn]] void rethrow_within(const std::string& what, const Error& error) {
  if (dynamic_cast<const TimeoutError*>(&error)) {
    throw TimeoutError(what + ": " + error.what(), error.fields());
  }
  throw CommError(what + ": " + error.what(), error.fields());
}

}  // namespace

// ---- collectives ------------------------------------------------------------------------------

WorkPtr TcpCommunicator::allreduce(at::Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce", rank_, world_);
  check_reducible(tensor, op, "allreduce");
  const auto call = header(CallKind::kAllreduce, ++sequence_, tensor, 0);
  std::string what = describe_call("allreduce", call.sequence, tensor);
  return enqueue(*collectives_, what,
                 [this, tensor, op, call, what] { run_allreduce(tensor, op, call, what); });
}

void TcpCommunicator::run_allreduce(const at::Tensor& tensor, ReduceOp op, const CallHeader& call,
                                    const std::string& what) {
  if (world_ == 1) return;
  const auto dtype = tensor.scalar_type();
  const std::size_t n = tensor.numel(), element = tensor.element_size(), bytes = n * element;
  const double scale = op == ReduceOp::kAvg ? 1.0 / world_ : 1.0;
  char* data = bytes_of(tensor);
  const RingShape ring{rank_, world_, chunk_bytes_};
  if (bytes <= small_bytes_) {
    // Every rank gathers every tensor and sums them in rank order: world - 1 steps, not
    // 2 (world - 1), and the same bits on every rank.
    char* gathered = gather_space(world_ * bytes);
    run_ring(ring_allgather(gathered, data, equal_blocks(n, world_), element, ring, call,
                            WithHeader::kYes),
             what);
    std::vector<const void*> inputs(world_);
    for (int q = 0; q < world_; ++q) inputs[q] = q == rank_ ? data : gathered + q * bytes;
    if (reducible(dtype)) {
      reduce_sum(dtype, data, inputs.data(), world_, n, scale);
      return;
    }
    // float16, which the kernels lack: widened, summed in float in rank order, rounded once.
    auto* wide = reinterpret_cast<float*>(work_space(world_ * n * sizeof(float)));
    for (int q = 0; q < world_; ++q) {
      widen_to_float(dtype, inputs[q], wide + q * n, n);
      inputs[q] = wide + q * n;
    }
    reduce_sum(at::kFloat, wide, inputs.data(), world_, n, scale);
    narrow_from_float(dtype, wide, data, n);
    return;
  }
  const RingBlocks blocks = even_blocks(n, world_);
  if (sums_in_float(dtype, world_)) {
    // Partial sums travel as float; the rank that completes a block rounds it once.
    auto* wide = reinterpret_cast<float*>(work_space(n * sizeof(float)));
    widen_to_float(dtype, data, wide, n);
    run_ring(ring_reduce_scatter_widened(reinterpret_cast<char*>(wide), data, dtype, blocks, scale,
                                         ring, call, WithHeader::kYes),
             what);
    const std::size_t first = blocks.offset[rank_];
    narrow_from_float(dtype, wide + first, data + first * element, blocks.count[rank_]);
  } else {
    run_ring(ring_reduce_scatter(data, blocks, dtype, scale, ring, call, WithHeader::kYes), what);
  }
  run_ring(ring_allgather(data, nullptr, blocks, element, ring, call, WithHeader::kNo), what);
}

WorkPtr TcpCommunicator::broadcast(at::Tensor tensor, int root) {
  check_tensor(tensor, "broadcast", rank_, world_);
  if (root < 0 || root >= world_) {
    throw CommError("broadcast: root " + std::to_string(root) + " is not a rank of 0.." +
                    std::to_string(world_ - 1));
  }
  const auto call = header(CallKind::kBroadcast, ++sequence_, tensor, root);
  std::string what = describe_call("broadcast", call.sequence, tensor);
  return enqueue(*collectives_, what, [this, tensor, root, call, what] {
    if (world_ == 1) return;
    run_ring(ring_broadcast(bytes_of(tensor), tensor.nbytes(), root,
                            RingShape{rank_, world_, chunk_bytes_}, call),
             what);
  });
}

WorkPtr TcpCommunicator::allgather(at::Tensor input, at::Tensor output) {
  check_allgather(input, output, rank_, world_);
  const auto call = header(CallKind::kAllgather, ++sequence_, input, 0);
  std::string what = describe_call("allgather", call.sequence, input);
  return enqueue(*collectives_, what, [this, input, output, call, what] {
    const std::size_t bytes = input.nbytes();
    if (bytes > 0) std::memcpy(bytes_of(output) + rank_ * bytes, bytes_of(input), bytes);
    if (world_ == 1) return;
    run_ring(ring_allgather(bytes_of(output), bytes_of(input), equal_blocks(input.numel(), world_),
                            input.element_size(), RingShape{rank_, world_, chunk_bytes_}, call,
                            WithHeader::kYes),
             what);
  });
}

WorkPtr TcpCommunicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op) {
  check_reduce_scatter(input, output, rank_, world_);
  check_reducible(input, op, "reduce_scatter");
  const auto call = header(CallKind::kReduceScatter, ++sequence_, input, 0);
  std::string what = describe_call("reduce_scatter", call.sequence, input);
  return enqueue(*collectives_, what, [this, input, output, op, call, what] {
    run_reduce_scatter(input, output, op, call, what);
  });
}

void TcpCommunicator::run_reduce_scatter(const at::Tensor& input, const at::Tensor& output,
                                         ReduceOp op, const CallHeader& call,
                                         const std::string& what) {
  // The ring adds into its buffer, and the input must stay as it is: it works on a copy (in
  // float where partial sums travel as float, see sums_in_float).
  const auto dtype = input.scalar_type();
  const bool wide = sums_in_float(dtype, world_);
  const auto work_dtype = wide ? at::kFloat : dtype;
  const std::size_t n = input.numel(), block = output.numel();
  const std::size_t element = c10::elementSize(work_dtype);
  char* work = work_space(n * element);
  if (wide) {
    widen_to_float(dtype, bytes_of(input), reinterpret_cast<float*>(work), n);
  } else if (n > 0) {
    std::memcpy(work, bytes_of(input), input.nbytes());
  }
  const double scale = op == ReduceOp::kAvg ? 1.0 / world_ : 1.0;
  if (world_ > 1) {
    const RingShape ring{rank_, world_, chunk_bytes_};
    const RingBlocks blocks = equal_blocks(block, world_);
    run_ring(wide ? ring_reduce_scatter_widened(work, bytes_of(input), dtype, blocks, scale, ring,
                                                call, WithHeader::kYes)
                  : ring_reduce_scatter(work, blocks, dtype, scale, ring, call, WithHeader::kYes),
             what);
  }
  const char* mine = work + rank_ * block * element;
  if (wide) {
    narrow_from_float(dtype, reinterpret_cast<const float*>(mine), bytes_of(output), block);
  } else if (block > 0) {
    std::memcpy(bytes_of(output), mine, output.nbytes());
  }
}

WorkPtr TcpCommunicator::barrier() {
  const auto call = header(CallKind::kBarrier, ++sequence_, at::Tensor(), 0);
  std::string what = describe_call("barrier", call.sequence, at::Tensor());
  return enqueue(*collectives_, what, [this, call, what] {
    if (world_ == 1) return;
    // A byte from every rank, each forwarded around the ring: when this rank has them all,
    // every rank has arrived.
    char* tokens = gather_space(world_);
    tokens[rank_] = 1;
    run_ring(ring_allgather(tokens, nullptr, equal_blocks(1, world_), 1,
                            RingShape{rank_, world_, chunk_bytes_}, call, WithHeader::kYes),
             what);
  });
}

// ---- point to point ---------------------------------------------------------------------------

WorkPtr TcpCommunicator::send(at::Tensor tensor, int peer) {
  check_tensor(tensor, "send", rank_, world_);
  check_peer(peer, "send", rank_, world_);
  const auto call = header(CallKind::kMessage, ++send_calls_[peer], tensor, 0);
  std::string what =
      describe_call("send", call.sequence, tensor) + " to rank " + std::to_string(ranks_[peer]);
  auto body =
      guarded(what, [this, tensor, peer, call, what] { run_send(tensor, peer, call, what); });
  SerialExecutor& executor = lane(send_lanes_, peer);
  if (tensor.nbytes() <= kInlineSendBytes) {
    // The lane is idle while this is asked, so nothing else touches the connection meanwhile.
    const auto ready = [this, peer] {
      return message_out_[peer] >= 0 && sent_everything(message_out_[peer]);
    };
    if (WorkPtr done = executor.run_now_if_idle(what, ready, body)) return done;
  }
  return executor.submit(std::move(what), std::move(body));
}

void TcpCommunicator::run_send(const at::Tensor& tensor, int peer, const CallHeader& call,
                               const std::string& what) {
  if (message_out_[peer] < 0) {
    try {
      message_out_[peer] = connect_to(peer, Channel::kMessages);
    } catch (const Error& e) {
      rethrow_within(what, e);
    }
  }
  TransferPlan plan;
  plan.header = call;
  plan.add_header(true, false);
  plan.sends.push_back({bytes_of(tensor), tensor.nbytes(), 0});
  TransferEnds ends;
  ends.send_fd = message_out_[peer];
  ends.send_peer = describe_peer(peer);
  ends.send_rank = ranks_[peer];
  run_transfer(plan, ends, context(what), nullptr);
}

WorkPtr TcpCommunicator::recv(at::Tensor tensor, int peer) {
  check_tensor(tensor, "recv", rank_, world_);
  check_peer(peer, "recv", rank_, world_);
  const auto call = header(CallKind::kMessage, ++recv_calls_[peer], tensor, 0);
  std::string what =
      describe_call("recv", call.sequence, tensor) + " from rank " + std::to_string(ranks_[peer]);
  return enqueue(lane(recv_lanes_, peer), what,
                 [this, tensor, peer, call, what] { run_recv(tensor, peer, call, what); });
}

void TcpCommunicator::run_recv(const at::Tensor& tensor, int peer, const CallHeader& call,
                               const std::string& what) {
  if (message_in_[peer] < 0) {
    // The peer connects on its first send to this rank.
    Socket in = listener_->take(Channel::kMessages, peer, Clock::now() + options().timeout);
    if (!in.valid()) {
      throw_if_broken(what);
      throw TimeoutError(
          what + ": waited " + std::to_string(options().timeout.count() / 1000.0).substr(0, 5) +
              " s for " + describe_peer(peer) + " to connect and send, and nothing came (" +
              rendezvous_->describe_rank() + ")",
          {{"operation", what}, {"peer_rank", std::to_string(ranks_[peer])}});
    }
    message_in_[peer] = keep(std::move(in));
  }
  TransferPlan plan;
  plan.header = call;
  plan.add_header(false, true);
  TransferPlan::Receive payload;
  payload.data = bytes_of(tensor);
  payload.bytes = tensor.nbytes();
  plan.receives.push_back(payload);
  TransferEnds ends;
  ends.receive_fd = message_in_[peer];
  ends.receive_peer = describe_peer(peer);
  ends.receive_rank = ranks_[peer];
  run_transfer(plan, ends, context(what), nullptr);
}

}  // namespace loom::comm
