// The tcp backend's edges, with ranks as threads around an in-process store: who may connect to
// a rank (only holders of the group's secret, once per channel, and only a listener that proves
// the secret in turn gets data), and how failures are named (the operation, the peer's rank as
// an error field, the error of a peer that gave up first). The collectives themselves are
// checked against references in tests/dist (ranks_as_threads_test, collectives_test).
#include "loom/comm/tcp_communicator.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <thread>

#include "loom/comm/store_server.h"
#include "loom/comm/store_text.h"
#include "loom/comm/tcp_peer_connect.h"
#include "loom/comm/tcp_peer_listener.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"

namespace loom::comm {
namespace {

using namespace tcp_protocol;
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kWait{20000};

SteadyTime in(std::chrono::milliseconds ms) { return Clock::now() + ms; }

// Runs body(rank, rendezvous) on `world` threads; an exception fails the test with its rank.
template <typename Body>
void run_ranks(int world, Body body) {
  const std::string token = "tcp-communicator-test";
  StoreServer store("127.0.0.1", 0, StoreServerOptions{token});
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    WorldInfo info;
    info.rank = info.local_rank = r;
    info.world = info.local_world = world;
    info.master_addr = "127.0.0.1";
    info.master_port = store.port();
    info.launcher = "threads";
    info.store_served_by_launcher = true;
    info.store_token = token;
    ranks.emplace_back([&, info] {
      try {
        body(info.rank, Rendezvous::connect(info, std::chrono::seconds(10)));
      } catch (const std::exception& e) {
        errors[info.rank] = e.what();
      }
    });
  }
  for (auto& rank : ranks) rank.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

CommOptions timeout_of(std::chrono::milliseconds timeout) {
  CommOptions options;
  options.timeout = timeout;
  return options;
}

TcpPeerListener::Identity identity(const std::string& secret) { return {secret, "g/1", 0, 2}; }

PeerGreeting greeting(const std::string& secret, Channel channel = Channel::kMessages) {
  return {secret, "g/1", 1, 0, channel};
}

TEST(TcpPeerListener, FilesAnAuthenticatedConnectionByChannelAndPeer) {
  TcpPeerListener listener("127.0.0.1", std::chrono::milliseconds(2000));
  listener.start(identity("secret"));
  Socket out = connect_to_peer(listener.address(), greeting("secret"), "rank 0", in(kWait));
  Socket accepted = listener.take(Channel::kMessages, 1, in(kWait));
  ASSERT_TRUE(accepted.valid());
  EXPECT_FALSE(listener.take(Channel::kRing, 1, in(std::chrono::milliseconds(50))).valid());
  ASSERT_EQ(::send(out.fd(), "data", 4, 0), 4);
  char got[4];
  ASSERT_TRUE(wait_until(accepted.fd(), POLLIN, in(kWait)));
  ASSERT_EQ(::recv(accepted.fd(), got, 4, 0), 4);
  EXPECT_EQ(std::string(got, 4), "data");
  EXPECT_EQ(listener.refused(), 0);
}

TEST(TcpPeerListener, RefusesWhoeverCannotProveTheSecretOrComesTwice) {
  TcpPeerListener listener("127.0.0.1", std::chrono::milliseconds(300));
  listener.start(identity("secret"));
  // Another job's secret.
  EXPECT_THROW(connect_to_peer(listener.address(), greeting("another"), "rank 0", in(kWait)),
               CommError);
  // Another group's hello with the right secret, and one to a rank this is not.
  PeerGreeting other_group = greeting("secret");
  other_group.group = "g/2";
  EXPECT_THROW(connect_to_peer(listener.address(), other_group, "rank 0", in(kWait)), CommError);
  // The same channel from the same peer twice.
  Socket first = connect_to_peer(listener.address(), greeting("secret"), "rank 0", in(kWait));
  EXPECT_THROW(connect_to_peer(listener.address(), greeting("secret"), "rank 0", in(kWait)),
               CommError);
  // Bytes that are no hello, and a client that says nothing past the handshake timeout.
  std::string error;
  Socket http = connect_before(listener.address(), in(kWait), error);
  ASSERT_TRUE(write_before(http.fd(), "GET / HTTP/1.0\r\n\r\n", in(kWait)));
  Socket silent = connect_before(listener.address(), in(kWait), error);
  for (Socket* s : {&http, &silent}) {
    std::string input;
    // Read past the challenge to the refusal, then the end of the connection.
    const auto challenge = read_message_before(s->fd(), input, 4096, in(kWait));
    ASSERT_TRUE(challenge);
    const auto refusal = read_message_before(s->fd(), input, 4096, in(kWait));
    ASSERT_TRUE(refusal);
    EXPECT_EQ(refusal->code, kRefused);
  }
  EXPECT_EQ(listener.refused(), 5);
  EXPECT_TRUE(listener.take(Channel::kMessages, 1, in(kWait)).valid());  // the first one stands
}

// The connecting side checks the listener too: one that answers without the secret gets nothing.
TEST(TcpPeerListener, AConnectorRefusesAListenerThatCannotProveTheSecret) {
  Socket fake = listen_on("127.0.0.1");
  const std::string address = local_address(fake.fd());
  std::thread impostor([&] {
    const auto until = in(kWait);
    ASSERT_TRUE(wait_until(fake.fd(), POLLIN, until));
    Socket client(::accept4(fake.fd(), nullptr, nullptr, SOCK_CLOEXEC));
    write_before(client.fd(),
                 store_protocol::encode({kChallenge, {kVersion, std::string(kNonceBytes, 'n')}}),
                 until);
    std::string input;
    if (read_message_before(client.fd(), input, 4096, until)) {
      write_before(client.fd(), store_protocol::encode({kWelcome, {std::string(32, 'x')}}), until);
    }
    wait_until(client.fd(), POLLIN, until);  // until the connector hangs up
  });
  try {
    connect_to_peer(address, greeting("secret"), "rank 0", in(kWait));
    ADD_FAILURE() << "connected to an impostor";
  } catch (const CommError& e) {
    EXPECT_EQ(e.field("problem"), "unproven_listener") << e.what();
    EXPECT_EQ(e.field("peer_address"), address) << e.what();
  }
  impostor.join();
}

// A rank's listener in a real group: strangers are refused and the group goes on.
TEST(TcpCommunicator, RefusesStrangersAndGoesOn) {
  run_ranks(2, [](int rank, std::shared_ptr<Rendezvous> rendezvous) {
    TcpCommunicator comm(rendezvous, timeout_of(kWait));
    if (rank == 0) {
      PeerGreeting stranger{"not the secret", "world/1", 1, 0, Channel::kMessages};
      EXPECT_THROW(connect_to_peer(comm.address(), stranger, "rank 0", in(kWait)), CommError);
      // The group's secret, but the ring connection from rank 1 exists already.
      const std::string secret = get_text(*rendezvous->store(), "loom/tcp/world/1/secret/0");
      PeerGreeting again{secret, "world/1", 1, 0, Channel::kRing};
      EXPECT_THROW(connect_to_peer(comm.address(), again, "rank 0", in(kWait)), CommError);
      EXPECT_EQ(comm.refused_connections(), 2);
    }
    auto t = at::full({1000}, rank + 1.0);
    comm.allreduce(t, ReduceOp::kSum)->wait(kWait);
    EXPECT_TRUE(t.equal(at::full({1000}, 3.0)));
  });
}

// A rank that never makes the call: the others' error names the operation and, as a field, the
// rank they waited for.
TEST(TcpCommunicator, AStalledPeerIsNamedInATimeoutError) {
  run_ranks(2, [](int rank, std::shared_ptr<Rendezvous> rendezvous) {
    TcpCommunicator comm(rendezvous, timeout_of(std::chrono::milliseconds(500)));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    const auto start = Clock::now();
    try {
      comm.allreduce(at::ones({4096}), ReduceOp::kSum)->wait(kWait);
      ADD_FAILURE() << "the all-reduce finished without rank 1";
    } catch (const TimeoutError& e) {
      EXPECT_EQ(e.field("peer_rank"), "1") << e.what();
      EXPECT_EQ(e.field("operation"), "allreduce #1 (4096 x Float)") << e.what();
      EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1400));
    }
  });
}

// A call out of step: both ranks report both calls, at once.
TEST(TcpCommunicator, CallsOutOfStepNameBothCalls) {
  run_ranks(2, [](int rank, std::shared_ptr<Rendezvous> rendezvous) {
    TcpCommunicator comm(rendezvous, timeout_of(kWait));
    try {
      comm.allreduce(at::ones({rank == 0 ? 1024 : 2048}), ReduceOp::kSum)->wait(kWait);
      ADD_FAILURE() << "mismatched calls were not caught";
    } catch (const CommError& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("allreduce #1 (1024 x Float)"), std::string::npos) << text;
      EXPECT_NE(text.find("allreduce #1 (2048 x Float)"), std::string::npos) << text;
      EXPECT_EQ(e.field("peer_rank"), std::to_string(1 - rank));
      EXPECT_EQ(e.field("problem"), "calls_out_of_step") << text;
    }
  });
}

// Rank 2 never comes; rank 0 times out waiting for it, and rank 1, which waits for rank 0, learns
// at once why rank 0 closed its connections, long before its own timeout.
TEST(TcpCommunicator, APeerThatGaveUpIsExplained) {
  run_ranks(3, [](int rank, std::shared_ptr<Rendezvous> rendezvous) {
    const auto timeout = std::chrono::milliseconds(rank == 0 ? 500 : 15000);
    TcpCommunicator comm(rendezvous, timeout_of(timeout));
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    const auto start = Clock::now();
    try {
      comm.allreduce(at::ones({16}), ReduceOp::kSum)->wait(kWait);
      ADD_FAILURE() << "the all-reduce finished without rank 2";
    } catch (const Error& e) {
      const std::string text = e.what();
      if (rank == 1) {
        EXPECT_EQ(e.field("peer_rank"), "0") << text;
        EXPECT_EQ(e.field("problem"), "peer_gave_up") << text;
        EXPECT_NE(text.find("rank 2 "), std::string::npos) << text;
        EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(2000)) << text;
      } else {
        EXPECT_EQ(e.field("peer_rank"), "2") << text;
        EXPECT_EQ(e.field("problem"), "stalled") << text;
      }
    }
    // Every later call fails with the first error.
    EXPECT_THROW(comm.barrier()->wait(kWait), CommError);
  });
}

// A peer whose process ends (here: its communicator goes away mid-call) is named at once.
TEST(TcpCommunicator, APeerThatLeavesIsNamedAtOnce) {
  run_ranks(2, [](int rank, std::shared_ptr<Rendezvous> rendezvous) {
    auto comm = std::make_unique<TcpCommunicator>(rendezvous, timeout_of(kWait));
    comm->barrier()->wait(kWait);
    if (rank == 1) {
      comm.reset();
      return;
    }
    const auto start = Clock::now();
    try {
      comm->allreduce(at::ones({1 << 20}), ReduceOp::kSum)->wait(kWait);
      ADD_FAILURE() << "the all-reduce finished without rank 1";
    } catch (const CommError& e) {
      EXPECT_EQ(e.field("peer_rank"), "1") << e.what();
      EXPECT_EQ(e.field("problem"), "connection_lost") << e.what();
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  });
}

// LOOM_COMM_HOST naming an address this host does not have is the configuration's error.
TEST(TcpCommunicator, AnAddressThisHostLacksIsAConfigurationError) {
  struct Setting {
    Setting() { ::setenv("LOOM_COMM_HOST", "192.0.2.1", 1); }  // TEST-NET-1: nobody's address
    ~Setting() { ::unsetenv("LOOM_COMM_HOST"); }
  } setting;
  run_ranks(1, [](int, std::shared_ptr<Rendezvous> rendezvous) {
    try {
      TcpCommunicator comm(rendezvous, timeout_of(kWait));
      ADD_FAILURE() << "listening on 192.0.2.1 worked";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), "LOOM_COMM_HOST") << e.what();
    }
  });
}

}  // namespace
}  // namespace loom::comm
