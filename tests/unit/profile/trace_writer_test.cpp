#include "loom/profile/trace_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tools/test_support.h"

namespace loom::profile {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A device's queue is no thread of the process: its slices go on a track of its own, named in the
// trace's metadata, apart from the calling thread's.
TEST(TraceWriter, ATrackOfNoThreadCarriesItsOwnSlicesUnderItsName) {
  test::TempDir dir;
  const std::string path = dir / "trace.json";
  const auto t0 = TraceWriter::Clock::now();
  int track = 0;
  {
    TraceWriter trace(path, 3, "loom train (rank 3)");
    trace.name_thread("main");
    trace.complete("forward", "phase", t0, t0 + std::chrono::milliseconds(1));
    track = trace.add_track("cuda:0 (the device's clock)");
    trace.complete_on(track, "forward", "device phase", t0 + std::chrono::milliseconds(1),
                      t0 + std::chrono::milliseconds(3));
    EXPECT_NE(trace.add_track("another"), track);
  }
  const nlohmann::json events = read_json(path)["traceEvents"];
  bool named = false, on_track = false, on_thread = false;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == track) {
      named = e["args"]["name"] == "cuda:0 (the device's clock)";
    }
    if (e["ph"] != "X") continue;
    EXPECT_EQ(e["pid"], 3);
    if (e["cat"] == "device phase") {
      on_track = e["tid"] == track && e["dur"] == 2000;
    } else {
      on_thread = e["tid"] != track && e["dur"] == 1000;
    }
  }
  EXPECT_TRUE(named);
  EXPECT_TRUE(on_track);
  EXPECT_TRUE(on_thread);
}

}  // namespace
}  // namespace loom::profile
