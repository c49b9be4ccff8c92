#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "loom/comm/store_server.h"
#include "loom/comm/store_table.h"
#include "loom/comm/tcp_store.h"
#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom::comm {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(Store, KeyValueOperations) {
  StoreServer server("127.0.0.1", 0);
  TcpStore a("127.0.0.1", server.port(), 5s), b("127.0.0.1", server.port(), 5s);
  a.set("x", bytes("hello"));
  EXPECT_EQ(b.get("x"), bytes("hello"));
  EXPECT_EQ(a.add("n", 3), 3);
  EXPECT_EQ(b.add("n", 4), 7);
  EXPECT_TRUE(b.check({"x", "n"}));
  EXPECT_FALSE(b.check({"x", "absent"}));
  EXPECT_EQ(a.getNumKeys(), 2);
  EXPECT_EQ(a.compareSet("x", bytes("hello"), bytes("bye")), bytes("bye"));
  EXPECT_EQ(a.compareSet("x", bytes("hello"), bytes("again")), bytes("bye"));  // no match
  EXPECT_TRUE(b.deleteKey("x"));
  EXPECT_FALSE(b.deleteKey("x"));
  EXPECT_EQ(a.getNumKeys(), 1);
}

TEST(Store, GetAndWaitBlockUntilAnotherClientSets) {
  StoreServer server("127.0.0.1", 0);
  TcpStore waiter("127.0.0.1", server.port(), 5s), setter("127.0.0.1", server.port(), 5s);
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    setter.set("ready", bytes("1"));
    setter.set("go", bytes("now"));
  });
  waiter.wait({"ready", "go"});
  EXPECT_EQ(waiter.get("go"), bytes("now"));
  later.join();
}

// The process serving the store may be a rank that failed: it answers the clients still
// connected (asking why it gave up) until they leave, and no longer than kLingerForClients.
TEST(Store, AClosingServerAnswersTheClientsStillThereUntilTheyLeave) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0);
  auto client = std::make_unique<TcpStore>("127.0.0.1", server->port(), 5s);
  client->set("failed/0", bytes("why"));
  const auto start = std::chrono::steady_clock::now();
  std::thread closing([&] { server.reset(); });
  std::this_thread::sleep_for(200ms);  // the destructor has begun
  EXPECT_EQ(client->get("failed/0"), bytes("why"));
  client.reset();
  closing.join();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_LT(waited, StoreServer::kLingerForClients) << "it waited for a client that had left";

  // A client that stays does not hold it longer than kLingerForClients.
  server = std::make_unique<StoreServer>("127.0.0.1", 0);
  TcpStore staying("127.0.0.1", server->port(), 5s);
  const auto again = std::chrono::steady_clock::now();
  server.reset();
  const auto held = std::chrono::steady_clock::now() - again;
  EXPECT_GE(held, StoreServer::kLingerForClients - 50ms);
  EXPECT_LT(held, StoreServer::kLingerForClients + 2s);
}

TEST(Store, TimeoutNamesTheKeyAndTheClientRecovers) {
  StoreServer server("127.0.0.1", 0);
  TcpStore store("127.0.0.1", server.port(), 5s);
  try {
    store.wait({"never"}, 200ms);
    FAIL() << "wait returned without the key";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  store.set("after", bytes("ok"));  // the next call works on a fresh connection
  EXPECT_EQ(store.get("after"), bytes("ok"));
}

TEST(Store, ListensOnlyOnTheAddressGiven) {
  StoreServer server("127.0.0.1", 0);
  // 127.0.0.2 is loopback too, but not the address the server was given.
  EXPECT_THROW(TcpStore("127.0.0.2", server.port(), 300ms), TimeoutError);
  EXPECT_NO_THROW(TcpStore("127.0.0.1", server.port(), 300ms));
}

TEST(Store, ClientWithoutServerTimesOutNamingTheAddress) {
  int port = 0;
  {
    StoreServer gone("127.0.0.1", 0);
    port = gone.port();
  }
  try {
    TcpStore("127.0.0.1", port, 200ms);
    FAIL() << "connected to a server that is gone";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

// A client that speaks raw bytes to the server, as an attacker or a confused program would.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  }
  ~RawClient() { ::close(fd_); }
  void send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  // The next message from the server; nullopt when it closed the connection or said nothing
  // for two seconds.
  std::optional<store_protocol::Message> next() {
    while (true) {
      if (auto m = store_protocol::decode(input_)) return m;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 2000) <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return std::nullopt;
      input_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Answers the challenge as a client without a token does.
  void handshake_without_token() {
    auto challenge = next();
    ASSERT_TRUE(challenge);
    send(store_protocol::encode({store_protocol::kAuth, {"", std::string(32, 'n')}}));
    auto answer = next();
    ASSERT_TRUE(answer);
    ASSERT_EQ(answer->code, store_protocol::kOk);
  }

 private:
  int fd_ = -1;
  std::string input_;
};

// Collects warnings for the lifetime of the object.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](LogLevel, std::string_view, std::string_view message) {
      std::lock_guard<std::mutex> lock(mutex_);
      text_ += std::string(message) + "\n";
    });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex_);
    return text_;
  }

 private:
  std::mutex mutex_;
  std::string text_;
};

// `call` must throw an error with these fields (and maybe others).
void expect_error_with(const std::function<void()>& call, const ErrorFields& expected) {
  try {
    call();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& [name, value] : expected) EXPECT_EQ(e.field(name), value) << e.what();
  }
}

TEST(StoreAuthentication, ClientsWithTheTokenWorkAndTheWireNeverCarriesIt) {
  StoreServer server("127.0.0.1", 0, {"s3cret-token"});
  TcpStore a("127.0.0.1", server.port(), 5s, "s3cret-token");
  TcpStore b("127.0.0.1", server.port(), 5s, "s3cret-token");
  a.set("x", bytes("1"));
  EXPECT_EQ(b.get("x"), bytes("1"));
  EXPECT_EQ(server.refused(), 0);
  // What a listener sees of a handshake: a nonce, then a proof that is not the token.
  RawClient raw(server.port());
  auto challenge = raw.next();
  ASSERT_TRUE(challenge);
  ASSERT_EQ(challenge->fields.size(), 3u);
  EXPECT_EQ(challenge->fields[2], "1");
  const std::string proof = store_protocol::client_proof("s3cret-token", challenge->fields[1]);
  EXPECT_EQ(proof.find("s3cret"), std::string::npos);
  raw.send(store_protocol::encode({store_protocol::kAuth, {proof, std::string(32, 'c')}}));
  auto answer = raw.next();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->code, store_protocol::kOk);
  EXPECT_EQ(answer->fields[0], store_protocol::server_proof("s3cret-token", std::string(32, 'c')));
}

TEST(StoreAuthentication, AClientWithoutOrWithAWrongTokenIsRefusedAndLoggedWithItsAddress) {
  LogCapture log;
  StoreServer server("127.0.0.1", 0, {"s3cret-token"});
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  expect_error_with([&] { TcpStore("127.0.0.1", server.port(), 2s); },
                    {{"problem", "token_required"}, {"peer_address", address}});
  expect_error_with([&] { TcpStore("127.0.0.1", server.port(), 2s, "guess"); },
                    {{"problem", "refused"}, {"reason", "wrong_token"}});
  // A replayed proof from another connection's challenge does not work either.
  RawClient replay(server.port());
  ASSERT_TRUE(replay.next());
  replay.send(
      store_protocol::encode({store_protocol::kAuth,
                              {store_protocol::client_proof("s3cret-token", std::string(32, 'z')),
                               std::string(32, 'c')}}));
  auto answer = replay.next();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->code, store_protocol::kFailed);
  ASSERT_EQ(answer->fields.size(), 2u);
  EXPECT_EQ(answer->fields[1], "wrong_token");
  EXPECT_FALSE(replay.next()) << "the connection stays open after a refusal";
  for (int i = 0; i < 100 && server.refused() < 3; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server.refused(), 3);
  const std::string text = log.text();
  // Each refusal is logged with the client's address (the log is for people: this checks only
  // that the address and the reason are in it).
  EXPECT_NE(text.find("127.0.0.1:"), std::string::npos) << text;
  EXPECT_NE(text.find("wrong token"), std::string::npos) << text;
  // The server still serves the job.
  TcpStore good("127.0.0.1", server.port(), 2s, "s3cret-token");
  good.set("k", bytes("v"));
  EXPECT_EQ(good.get("k"), bytes("v"));
}

TEST(StoreAuthentication, AClientWithATokenDoesNotTalkToAnOpenStore) {
  StoreServer open("127.0.0.1", 0);
  expect_error_with([&] { TcpStore("127.0.0.1", open.port(), 2s, "s3cret-token"); },
                    {{"problem", "token_not_required"}});
}

TEST(StoreRobustness, GarbageOversizedAndSilentClientsAreRefusedAndTheServerGoesOn) {
  LogCapture log;
  StoreServer server("127.0.0.1", 0, {"", 300ms});
  TcpStore store("127.0.0.1", server.port(), 5s);
  store.set("kept", bytes("yes"));

  RawClient http(server.port());  // someone points a browser at the port
  ASSERT_TRUE(http.next());
  http.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  auto refusal = http.next();
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->code, store_protocol::kFailed);
  // A refusal's second field names the check that failed.
  ASSERT_EQ(refusal->fields.size(), 2u);
  EXPECT_EQ(refusal->fields[1], "malformed") << refusal->fields[0];

  RawClient skipper(server.port());  // a request before the handshake
  ASSERT_TRUE(skipper.next());
  skipper.send(store_protocol::encode({store_protocol::kGet, {"kept"}}));
  refusal = skipper.next();
  ASSERT_TRUE(refusal);
  ASSERT_EQ(refusal->fields.size(), 2u);
  EXPECT_EQ(refusal->fields[1], "not_a_handshake") << refusal->fields[0];

  RawClient huge(server.port());  // an authenticated client announcing a 1 GiB field
  huge.handshake_without_token();
  std::string header(1, static_cast<char>(store_protocol::kSet));
  for (uint32_t v : {2u, 1u << 30}) {
    for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  huge.send(header);
  refusal = huge.next();
  ASSERT_TRUE(refusal);
  ASSERT_EQ(refusal->fields.size(), 2u);
  EXPECT_EQ(refusal->fields[1], "too_long") << refusal->fields[0];
  EXPECT_FALSE(huge.next());

  RawClient silent(server.port());  // connects and says nothing
  ASSERT_TRUE(silent.next());
  refusal = silent.next();
  ASSERT_TRUE(refusal) << "a silent client was not dropped";
  ASSERT_EQ(refusal->fields.size(), 2u);
  EXPECT_EQ(refusal->fields[1], "handshake_timeout") << refusal->fields[0];

  EXPECT_EQ(server.refused(), 4);
  EXPECT_EQ(store.get("kept"), bytes("yes"));
  EXPECT_EQ(store.getNumKeys(), 1);
}

TEST(StoreTable, RequestsThatMakeNoSenseGetErrorsNotCrashes) {
  using namespace store_protocol;
  StoreTable table;
  EXPECT_EQ(table.apply({kSet, {"name", "not a number"}})->code, kOk);
  auto reply = table.apply({kAdd, {"name", encode_int(1)}});
  EXPECT_EQ(reply->code, kFailed);
  EXPECT_EQ(reply->fields[0], "add: key 'name' does not hold a counter");
  EXPECT_EQ(table.apply({kAdd, {"n", encode_int(INT64_MAX)}})->code, kOk);
  EXPECT_EQ(table.apply({kAdd, {"n", encode_int(1)}})->fields[0], "add: key 'n' would overflow");
  EXPECT_EQ(table.apply({kAdd, {"n", "short"}})->code, kFailed);
  EXPECT_EQ(table.apply({kSet, {"only a key"}})->code, kFailed);
  EXPECT_EQ(table.apply({kCompareSet, {"k"}})->code, kFailed);
  EXPECT_EQ(table.apply({99, {}})->fields[0], "unknown operation 99");
  EXPECT_FALSE(table.apply({kGet, {"absent"}})) << "a get of a missing key waits";
  EXPECT_FALSE(table.apply({kWait, {"name", "absent"}}));
  const auto before = table.version();
  EXPECT_EQ(table.apply({kCompareSet, {"absent", "", "new"}})->fields[0], "new");
  EXPECT_GT(table.version(), before);
  EXPECT_EQ(table.apply({kGet, {"absent"}})->fields[0], "new");
}

}  // namespace
}  // namespace loom::comm
