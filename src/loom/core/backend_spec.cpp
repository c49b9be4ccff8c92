#include "loom/core/backend_spec.h"

#include <set>

#include "loom/core/error.h"

namespace loom {
namespace {

const std::set<std::string> kCpuBackends = {"auto", "shm", "tcp"};
const std::set<std::string> kCudaBackends = {"auto", "nccl", "host"};

}  // namespace

BackendSpec parse_backend_spec(const std::string& text, const std::string& key) {
  const auto refuse = [&](const std::string& why) {
    return ConfigError::at_key(key,
                               "'" + text + "': " + why +
                                   " (auto, shm or tcp; or per device type, e.g. cpu:shm,cuda:nccl "
                                   "with cuda: auto, nccl or host)",
                               {{"problem", "backend"}, {"value", text}});
  };
  BackendSpec spec;
  std::set<std::string> named;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string entry =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    const std::size_t colon = entry.find(':');
    const std::string type = colon == std::string::npos ? "cpu" : entry.substr(0, colon);
    const std::string name = colon == std::string::npos ? entry : entry.substr(colon + 1);
    if (!named.insert(type).second) throw refuse("device type " + type + " is named twice");
    if (type == "cpu" && kCpuBackends.count(name)) {
      spec.cpu = name;
    } else if (type == "cuda" && kCudaBackends.count(name)) {
      spec.cuda = name;
    } else if (type != "cpu" && type != "cuda") {
      throw refuse("no backends for device type '" + type + "'");
    } else {
      throw refuse("'" + name + "' is no " + type + " backend");
    }
  }
  return spec;
}

}  // namespace loom
