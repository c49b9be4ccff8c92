// A loader's position and identity as the plain dict state_dict() gives, shared by
// loom.data.Loader and loom.checkpoint.
#include "bindings.h"
#include "loom/core/error.h"

namespace loom::python {

// The format tag of a state dict, checked on load, so that a dict of another loader (or of a
// later, different Loom format) is refused with a clear message rather than misread.
constexpr const char* kStateFormat = "loom.data.Loader/1";

py::dict loader_state_to_dict(const data::LoaderState& s) {
  py::dict d;
  d["format"] = kStateFormat;
  d["epoch"] = s.epoch;
  d["step"] = s.step;
  d["seed"] = s.seed;
  d["samples"] = s.samples;
  d["steps_per_epoch"] = s.steps_per_epoch;
  d["rank"] = s.rank;
  d["world"] = s.world;
  d["batch"] = s.batch;
  return d;
}

data::LoaderState loader_state_from_dict(const py::dict& d) {
  auto need = [&](const char* key) -> py::object {
    if (!d.contains(key)) {
      throw DataError(std::string("state_dict: no '") + key +
                      "' (not a state_dict() of loom.data.Loader)");
    }
    return d[key];
  };
  const auto format = need("format").cast<std::string>();
  if (format != kStateFormat) {
    throw DataError("state_dict: format '" + format + "', expected '" + kStateFormat + "'");
  }
  data::LoaderState s;
  s.epoch = need("epoch").cast<int64_t>();
  s.step = need("step").cast<int64_t>();
  s.seed = need("seed").cast<uint64_t>();
  s.samples = need("samples").cast<int64_t>();
  s.steps_per_epoch = need("steps_per_epoch").cast<int64_t>();
  s.rank = need("rank").cast<int>();
  s.world = need("world").cast<int>();
  s.batch = need("batch").cast<int64_t>();
  return s;
}

}  // namespace loom::python
