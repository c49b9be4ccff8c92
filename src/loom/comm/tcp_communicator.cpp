#include "loom/comm/tcp_communicator.h"

#include <sys/socket.h>

#include <algorithm>

#include "loom/comm/store_text.h"
#include "loom/comm/tcp_peer_connect.h"
#include "loom/comm/tcp_ring_plans.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/settings.h"
#include "loom/core/topology.h"

namespace loom::comm {

using namespace tcp_protocol;
using Clock = std::chrono::steady_clock;

namespace {

// The handshake of a connection that is not a peer of the group (a scanner, another job) gives
// up after this long, or the timeout when that is shorter.
constexpr auto kHandshakeTimeout = std::chrono::milliseconds(10000);

// The address this rank's listener binds (see the class comment).
std::string listen_host(const Rendezvous& rendezvous, const std::vector<int>& ranks) {
  if (std::string host = setting("LOOM_COMM_HOST"); !host.empty()) return host;
  const auto& host_of = rendezvous.host_of_rank();
  const bool one_host = std::all_of(ranks.begin(), ranks.end(),
                                    [&](int r) { return host_of[r] == host_of[ranks.front()]; });
  if (one_host) return "127.0.0.1";
  const WorldInfo& world = rendezvous.world_info();
  if (std::string route = local_address_towards(world.master_addr, world.master_port);
      !route.empty()) {
    return route;
  }
  return host_name();
}

std::size_t size_setting(const char* name, std::size_t least) {
  const long long value = setting_int(name);
  if (value < static_cast<long long>(least)) {
    throw ConfigError("environment variable " + std::string(name) + ": " + std::to_string(value) +
                          " is below the least allowed, " + std::to_string(least),
                      {{"key", name}, {"value", std::to_string(value)}});
  }
  return static_cast<std::size_t>(value);
}

}  // namespace

TcpCommunicator::TcpCommunicator(std::shared_ptr<Rendezvous> rendezvous, CommOptions options,
                                 std::vector<int> ranks, const std::string& name)
    : Communicator(options),
      rendezvous_(std::move(rendezvous)),
      ranks_(std::move(ranks)),
      chunk_bytes_(size_setting("LOOM_TCP_CHUNK_BYTES", 4096)),
      small_bytes_(size_setting("LOOM_TCP_SMALL_BYTES", 0)) {
  if (ranks_.empty()) {
    for (int r = 0; r < rendezvous_->world(); ++r) ranks_.push_back(r);
  }
  const auto me = std::find(ranks_.begin(), ranks_.end(), rendezvous_->rank());
  if (me == ranks_.end()) throw CommError("tcp: rank is not a member of group '" + name + "'");
  rank_ = static_cast<int>(me - ranks_.begin());
  world_ = static_cast<int>(ranks_.size());
  message_out_.assign(world_, -1);
  message_in_.assign(world_, -1);
  send_calls_.assign(world_, 0);
  recv_calls_.assign(world_, 0);

  // A group built again under the same name (a second communicator over the same ranks) gets
  // keys of its own: every member counts the groups of that name it made, in the same order.
  auto& store = *rendezvous_->store();
  const auto generation =
      store.add("loom/tcp/" + name + "/generation/" + std::to_string(rendezvous_->rank()), 1);
  group_ = name + "/" + std::to_string(generation);
  const std::string keys = "loom/tcp/" + group_;

  const auto handshake_timeout =
      std::min<std::chrono::milliseconds>(kHandshakeTimeout, options.timeout);
  try {
    listener_ =
        std::make_unique<TcpPeerListener>(listen_host(*rendezvous_, ranks_), handshake_timeout);
  } catch (const CommError& e) {
    // An address this host does not have is the setting's fault: say so, as configuration.
    if (setting("LOOM_COMM_HOST").empty()) throw;
    throw ConfigError("environment variable LOOM_COMM_HOST: " + std::string(e.what()),
                      {{"key", "LOOM_COMM_HOST"}, {"value", setting("LOOM_COMM_HOST")}});
  }
  secret_ =
      rendezvous_->exchange(keys + "/secret", rank_ == 0 ? random_hex(32) : "", {ranks_[0]})[0];
  addresses_ = rendezvous_->exchange(keys + "/address", listener_->address(), ranks_);
  listener_->start({secret_, group_, rank_, world_});

  if (world_ > 1) {
    const int next = (rank_ + 1) % world_, previous = (rank_ + world_ - 1) % world_;
    ring_.send_fd = connect_to(next, Channel::kRing);
    ring_.send_peer = describe_peer(next);
    ring_.send_rank = ranks_[next];
    Socket in = listener_->take(Channel::kRing, previous, Clock::now() + options.timeout);
    if (!in.valid()) {
      throw TimeoutError("tcp: " + rendezvous_->describe_rank() + " waited " +
                             std::to_string(options.timeout.count() / 1000) + " s for " +
                             describe_peer(previous) + " to connect to it, and it did not",
                         {{"peer_rank", std::to_string(ranks_[previous])}});
    }
    ring_.receive_fd = keep(std::move(in));
    ring_.receive_peer = describe_peer(previous);
    ring_.receive_rank = ranks_[previous];
  }
  collectives_ = std::make_unique<SerialExecutor>();
}

TcpCommunicator::~TcpCommunicator() {
  // Drain and join the lanes before the connections close.
  collectives_.reset();
  send_lanes_.clear();
  recv_lanes_.clear();
}

std::string TcpCommunicator::describe_peer(int peer) const {
  const int job_rank = ranks_[peer];
  return "rank " + std::to_string(job_rank) + " (host " +
         std::to_string(rendezvous_->host_of_rank()[job_rank]) + " at " + addresses_[peer] + ")";
}

int TcpCommunicator::keep(Socket socket) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int fd = socket.fd();
  // Made while the communicator failed: closed like the others, so whoever uses it fails.
  if (!broken_.empty()) ::shutdown(fd, SHUT_RDWR);
  sockets_.push_back(std::move(socket));
  return fd;
}

int TcpCommunicator::connect_to(int peer, Channel channel) {
  PeerGreeting greeting{secret_, group_, rank_, peer, channel};
  return keep(connect_to_peer(addresses_[peer], greeting, describe_peer(peer),
                              Clock::now() + options().timeout));
}

// ---- failures ---------------------------------------------------------------------------------

std::function<void()> TcpCommunicator::guarded(const std::string& what,
                                               std::function<void()> body) {
  return [this, what, body = std::move(body)] {
    throw_if_broken(what);  // calls queued before a failure fail with it
    try {
      body();
    } catch (const std::exception& e) {
      std::string earlier;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        earlier = broken_;
        if (earlier.empty()) broken_ = e.what();
      }
      // A failure after the first is usually its echo (this rank closed the connections).
      if (!earlier.empty()) throw CommError(what + ": the communicator failed earlier: " + earlier);
      break_connections(e.what());
      throw;
    }
  };
}

void TcpCommunicator::throw_if_broken(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!broken_.empty()) throw CommError(what + ": the communicator failed earlier: " + broken_);
}

void TcpCommunicator::break_connections(const std::string& error) {
  // Say why first, then close: a peer that sees the connection end finds the reason posted.
  try {
    set_text(*rendezvous_->store(), "loom/tcp/" + group_ + "/failed/" + std::to_string(rank_),
             error);
  } catch (const std::exception&) {
    // the store is gone too (its rank exited): the peers still see the connections close
  }
  listener_->stop();
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Socket& socket : sockets_) ::shutdown(socket.fd(), SHUT_RDWR);
}

std::string TcpCommunicator::explain_loss(int job_rank) const {
  const auto it = std::find(ranks_.begin(), ranks_.end(), job_rank);
  if (it == ranks_.end()) return "";
  const std::string key =
      "loom/tcp/" + group_ + "/failed/" + std::to_string(static_cast<int>(it - ranks_.begin()));
  try {
    if (auto error = text_if_set(*rendezvous_->store(), key)) return ": it gave up: " + *error;
  } catch (const std::exception&) {
    // the store is unreachable: say what the connection said
  }
  return "";
}

TransferContext TcpCommunicator::context(const std::string& operation) const {
  TransferContext context;
  context.operation = operation;
  context.me = rendezvous_->describe_rank();
  context.timeout = options().timeout;
  context.explain_loss = [this](int job_rank) { return explain_loss(job_rank); };
  return context;
}

// ---- lanes ------------------------------------------------------------------------------------

WorkPtr TcpCommunicator::enqueue(SerialExecutor& lane, std::string what,
                                 std::function<void()> body) {
  auto run = guarded(what, std::move(body));
  return lane.submit(std::move(what), std::move(run));
}

SerialExecutor& TcpCommunicator::lane(std::map<int, std::unique_ptr<SerialExecutor>>& lanes,
                                      int peer) {
  auto& executor = lanes[peer];
  if (!executor) executor = std::make_unique<SerialExecutor>();
  return *executor;
}

CallHeader TcpCommunicator::header(CallKind kind, std::uint64_t sequence, const at::Tensor& tensor,
                                   int root) const {
  CallHeader call;
  call.kind = kind;
  call.sequence = sequence;
  call.dtype = tensor.defined() ? static_cast<std::int32_t>(tensor.scalar_type()) : 0;
  call.numel = tensor.defined() ? tensor.numel() : 0;
  call.root = root;
  return call;
}

char* TcpCommunicator::gather_space(std::size_t bytes) {
  if (gather_space_.size() < bytes) gather_space_.resize(bytes);
  return gather_space_.data();
}

char* TcpCommunicator::work_space(std::size_t bytes) {
  if (work_space_.size() < bytes) work_space_.resize(bytes);
  return work_space_.data();
}

void TcpCommunicator::run_ring(const TransferPlan& plan, const std::string& operation) {
  if (reduce_space_.size() < plan.scratch_bytes()) reduce_space_.resize(plan.scratch_bytes());
  run_transfer(plan, ring_, context(operation), reduce_space_.data());
}

}  // namespace loom::comm
