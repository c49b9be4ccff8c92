// What a trainer saw of one remote data worker over a run (summary.json, metrics, the report).
#pragma once

#include <cstdint>
#include <string>

namespace loom::data {

// One worker's record, for metrics, summary.json and the report.
struct RemoteWorkerStats {
  std::string address;
  std::string state;           // connecting | up | down | refused
  int threads = 0;             // the worker's build threads (0 until it answered)
  int64_t batches = 0;         // delivered and used
  int64_t samples = 0;         // in those batches
  int64_t bytes = 0;           // on the wire
  double request_seconds = 0;  // summed over delivered batches (latency)
  double up_seconds = 0;       // time it was up (connected and serving) so far
  int64_t failures = 0;        // errors and timeouts
  int64_t crc_mismatches = 0;  // replies that failed their checks (asked again)
  int64_t duplicates = 0;      // answers dropped because another producer was first
  std::string last_error;
};

}  // namespace loom::data
