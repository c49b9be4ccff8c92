#include "loom/comm/device_backends.h"

#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "loom/comm/staging_communicator.h"
#include "loom/core/device.h"
#include "loom/core/error.h"

namespace loom::comm {
namespace {

constexpr const char* kKey = "comm.backend";

std::map<c10::DeviceType, std::vector<DeviceBackend>>& registry() {
  static std::map<c10::DeviceType, std::vector<DeviceBackend>> backends;
  return backends;
}

// Beside libloom, as the build and an install place it.
std::string module_path(const std::string& file) {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&register_device_backend), &info) == 0 || !info.dli_fname) {
    return file;
  }
  return (std::filesystem::path(info.dli_fname).parent_path() / file).string();
}

// Loads the modules that register backends for `type` (NCCL for CUDA), once; why a module did
// not load is kept for the error of a request that names its backend.
const std::string& load_modules(c10::DeviceType type) {
  static std::once_flag once;
  static std::string nccl_missing;
  if (type != c10::kCUDA) {
    static const std::string none;
    return none;
  }
  std::call_once(once, [] {
    std::string why;
    // libloom_nccl.so links torch's CUDA library, which must be the one ATen registered.
    if (!load_torch_cuda_library(&why)) {
      nccl_missing = why;
      return;
    }
    const std::string path = module_path("libloom_nccl.so");
    if (!std::filesystem::exists(path)) {
      nccl_missing = path +
                     " is missing: this build of Loom has no NCCL backend (its LibTorch "
                     "had no NCCL headers when it was configured)";
      return;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    const auto registers =
        handle ? reinterpret_cast<void (*)()>(::dlsym(handle, "loom_register_nccl_backend"))
               : nullptr;
    if (!registers) {
      const char* error = ::dlerror();
      nccl_missing = "cannot load " + path + ": " + (error ? error : "no registration function");
      return;
    }
    registers();
  });
  return nccl_missing;
}

DeviceBackend host_staging() {
  DeviceBackend backend;
  backend.name = "host";
  backend.why_not = [](const DeviceBackendRequest&) { return std::string(); };
  backend.make = [](const DeviceBackendRequest& request) -> std::unique_ptr<Communicator> {
    return std::make_unique<StagingCommunicator>(*request.host);
  };
  return backend;
}

}  // namespace

int DeviceBackendRequest::group_rank() const {
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rendezvous->rank()) return static_cast<int>(i);
  }
  throw Error("device backend: rank " + std::to_string(rendezvous->rank()) +
              " is not a member of group '" + name + "'");
}

void register_device_backend(c10::DeviceType type, DeviceBackend backend) {
  std::vector<DeviceBackend>& backends = registry()[type];
  for (DeviceBackend& known : backends) {
    if (known.name == backend.name) {
      known = std::move(backend);
      return;
    }
  }
  backends.push_back(std::move(backend));
}

std::unique_ptr<Communicator> make_device_backend(const std::string& name,
                                                  DeviceBackendRequest request) {
  const c10::DeviceType type = request.device.type();
  const std::string& module_missing = load_modules(type);
  std::vector<DeviceBackend> candidates = registry()[type];
  candidates.push_back(host_staging());
  std::string known;
  for (const DeviceBackend& backend : candidates)
    known += (known.empty() ? "" : ", ") + backend.name;
  if (name != "auto" && (name != "nccl" || type != c10::kCUDA)) {
    bool found = false;
    for (const DeviceBackend& backend : candidates) found = found || backend.name == name;
    if (!found) {
      throw ConfigError::at_key(kKey,
                                "'" + name + "' moves no " + c10::DeviceTypeName(type, true) +
                                    " tensors here (auto, " + known + ")",
                                {{"problem", "unknown"}, {"value", name}});
    }
  }
  // Every rank learns where the others compute, so that all choose alike.
  const std::string here =
      request.device.str() + "@" +
      std::to_string(request.rendezvous->host_of_rank()[request.rendezvous->rank()]);
  request.devices =
      request.rendezvous->exchange("device-backend/" + request.name, here, request.ranks);
  std::string refusals;
  for (const DeviceBackend& backend : candidates) {
    if (name != "auto" && backend.name != name) continue;
    const std::string why = backend.why_not(request);
    if (why.empty()) return backend.make(request);
    refusals += (refusals.empty() ? "" : "; ") + backend.name + ": " + why;
  }
  if (name == "nccl" && !module_missing.empty()) refusals = "nccl: " + module_missing;
  throw ConfigError::at_key(kKey,
                            "'" + name + "' cannot move this job's " +
                                c10::DeviceTypeName(type, true) + " tensors: " + refusals,
                            {{"problem", "unusable"}, {"value", name}});
}

}  // namespace loom::comm
