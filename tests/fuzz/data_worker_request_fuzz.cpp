// What a data worker reads from the network before it trusts a trainer: an OpenRequest (protobuf)
// whose `config` is YAML the worker parses and confines to its data roots, and BatchRequests.
// Input: a serialised OpenRequest. Every bad request must end in ConfigError or DataError (the
// worker's INVALID_ARGUMENT / PERMISSION_DENIED replies), and an accepted configuration must read
// only under the root.
#include "fuzz_target.h"
#include "loom/core/error.h"
#include "loom/data/remote/data_service.pb.h"
#include "loom/data/remote/remote_config.h"

LOOM_FUZZ_TARGET(data_worker_request) {
  loom::remote::OpenRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;  // INVALID_ARGUMENT
  loom::remote::BatchRequest batch;
  (void)batch.ParseFromString(request.client());  // a session id and a position, nothing more
  try {
    const loom::Config config = loom::data::parse_remote_config(request.config());
    loom::data::check_under_roots(config, {"/nonexistent/loom-fuzz-root"});
    if (config.data.source != "synthetic") {  // reads files, and none is under the root
      loom::fuzz::broken("a data path outside the worker's roots was accepted");
    }
  } catch (const loom::ConfigError&) {
  } catch (const loom::DataError&) {
  }
}
