// The scenarios of the communication tests, run by one rank: by a process of its own
// (comm_worker, started by `loom launch` or torchrun-style) or by a thread among others in one
// process (ranks_as_threads_test), which runs them without process start-up cost.
//
//   collectives  every collective on float and bfloat16, sizes 0 elements .. max_elements, and on
//                double, int32 and int64, checked against values computed here; replicas hold
//                the same bits after an all-reduce; messages arrive in the order sent
//   agree        shm and tcp all-reduce the same data; results must be equal
//   groups       groups of the even and of the odd ranks (over tcp each made twice under one
//                name)
//   mismatch     rank 0 all-reduces 1024 floats, the others 2048: must fail, not hang
//   die          rank 1 kills itself (SIGKILL) before an all-reduce the others wait in
//                (processes only)
//   die-mid      rank 1 kills itself while a 64 MB all-reduce is under way (processes only)
//   stall        rank 1 sleeps past the timeout before an all-reduce
//   ps           parameter-server exchange: the last world/2 ranks serve, the others push
//                (rank+1)-valued buffers and must pull exactly n(n+1)/2 (MXNet's dist_sync test),
//                then means of float and bfloat16 patterns against sums computed here
//   ps-held      servers that keep the parameters, in SSP with no slack and asynchronously
//   ps-stall     the ps exchange with the last rank (a server) asleep past the timeout: the
//                workers must fail naming the server
//   staged       collectives, every tensor staged through a copy in host memory as a GPU's
//                tensors are over comm.backend's cuda:host (comm/staging_communicator.h)
//   messages     a pipeline's messages (comm/tensor_message): each rank sends its neighbours
//                tensors of shapes they do not know, with labels and notes, before it receives
//                theirs (as 1F1B's ranks do), their bytes on the tensors' device
//
// `device` other than cpu (collectives and messages): the communicator is made for that device,
// and the checks' tensors are copied there, so that its device backend (NCCL, or staging through
// the host) moves them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/comm/communicator.h"
#include "loom/comm/world_info.h"
#include "loom/core/error.h"

namespace loom::test {

struct ScenarioOptions {
  std::string scenario, backend;
  comm::CommOptions comm;
  // collectives: the largest all-reduce; the other collectives stop at 4 M elements.
  std::int64_t max_elements = 16 << 20;
  std::string device = "cpu";
};

struct ScenarioResult {
  int exit_code = 0;    // 0: behaved as expected; 1: not (the message says why); 2: usage
  std::string message;  // for people: "rank R: N checks passed on BACKEND", or what went wrong
  // For tests, which must not parse the message: "rank", "outcome" (passed, slept, error: an
  // error was thrown, undetected: the failure the scenario provokes did not come, usage), and
  // "checks", "backend", "hosts" when it passed, "kind" and the error's own fields when it threw.
  ErrorFields facts;
};

// Runs the scenario as the rank `world` describes. Never throws.
ScenarioResult run_scenario(const comm::WorldInfo& world, const ScenarioOptions& options);

// Facts as one line that programs print and tests read: key=value pairs separated by spaces. A
// value that is empty or holds whitespace, a double quote or a backslash is written in double
// quotes, with a backslash before each double quote and backslash and a newline as \n. Inline:
// dp_worker prints facts too, and is built from its own source alone.
inline std::string facts_line(const ErrorFields& facts) {
  std::string line;
  for (const auto& [key, value] : facts) {
    line += (line.empty() ? "" : " ") + key + "=";
    if (!value.empty() && value.find_first_of(" \t\n\"\\") == std::string::npos) {
      line += value;
      continue;
    }
    line += '"';
    for (char c : value) {
      if (c == '"' || c == '\\') line += '\\';
      line += c == '\n' ? std::string("\\n") : std::string(1, c);
    }
    line += '"';
  }
  return line;
}

// The facts of every line of `output` written by facts_line, after the "[rank R] " with which
// loom launch starts a rank's lines; other lines are skipped.
std::vector<ErrorFields> facts_in(const std::string& output);

}  // namespace loom::test
