#include "loom/core/thread_stacks.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace loom {
namespace {

// Every thread is listed by id and name, with its frames; one asleep shows the call it waits in.
TEST(ThreadStacks, ListEveryThreadWithItsNameAndWhereItWaits) {
  std::atomic<bool> named{false}, done{false};
  std::thread sleeper([&] {
    pthread_setname_np(pthread_self(), "loom-sleeper");
    named = true;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  while (!named) std::this_thread::yield();
  const std::string text = all_thread_stacks();
  done = true;
  sleeper.join();

  const auto at = text.find("(loom-sleeper):\n");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string sleeper_stack = text.substr(at, text.find("\nthread ", at) - at);
  EXPECT_NE(sleeper_stack.find("  #0 0x"), std::string::npos) << sleeper_stack;
  EXPECT_NE(sleeper_stack.find("nanosleep"), std::string::npos) << sleeper_stack;
  // The calling thread is there too, inside this very call.
  EXPECT_NE(text.find("loom::all_thread_stacks"), std::string::npos) << text;
}

}  // namespace
}  // namespace loom
