#include <gtest/gtest.h>

#include <thread>

#include "loom/comm/store_server.h"
#include "loom/comm/tcp_store.h"
#include "loom/core/error.h"

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

}  // namespace
}  // namespace loom::comm
