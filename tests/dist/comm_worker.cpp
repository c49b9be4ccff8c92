// One rank of a multi-process communication test, started by `loom launch` or by a test with
// torchrun-style variables. Usage: comm_worker SCENARIO BACKEND [TIMEOUT_MS]
// The scenarios are in comm_scenarios.h. Exit 0 when the scenario behaved as expected, 1 with
// the error on stderr otherwise. Either way the message for people is followed by a line of
// facts for the tests (facts_line: "backend=shm checks=57 outcome=passed rank=0 ...").
#include <cstdio>
#include <cstdlib>

#include "dist/comm_scenarios.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: comm_worker SCENARIO BACKEND [TIMEOUT_MS]\n");
    return 2;
  }
  loom::test::ScenarioOptions options;
  options.scenario = argv[1];
  options.backend = argv[2];
  options.comm.timeout = std::chrono::milliseconds(argc > 3 ? std::atoi(argv[3]) : 30000);
  loom::comm::WorldInfo world;
  try {
    world = loom::comm::world_from_environment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_worker: %s\n", e.what());
    return 2;
  }
  const loom::test::ScenarioResult result = loom::test::run_scenario(world, options);
  std::FILE* out = result.exit_code == 0 ? stdout : stderr;
  std::fprintf(out, "%s\n%s\n", result.message.c_str(),
               loom::test::facts_line(result.facts).c_str());
  return result.exit_code;
}
