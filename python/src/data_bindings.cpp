// DataStream for Python: batches as torch tensors (shared with PyTorch, not copied), the cursor
// as a plain dict for state_dict(), and the loader's counts as a dict.
#include <torch/csrc/utils/pybind.h>

#include "bindings.h"
#include "loom/data/sample_error.h"
#include "loom/train/data_stream.h"

namespace loom::python {
namespace {

py::dict stats_to_dict(const data::LoaderStats& s) {
  py::dict bad;
  for (size_t i = 0; i < s.bad.size(); ++i) {
    bad[data::fault_name(static_cast<data::SampleFault>(i))] = s.bad[i];
  }
  const double samples = static_cast<double>(s.samples);
  py::dict d;
  d["samples"] = s.samples;
  d["bad"] = bad;
  d["bad_total"] = s.bad_total();
  d["bad_fraction"] = samples > 0 ? static_cast<double>(s.bad_total()) / samples : 0.0;
  d["substituted"] = s.substituted;
  d["build_seconds"] = s.build_seconds;
  d["cpu_seconds"] = s.cpu_seconds;
  // What a sample costs the loader threads, and what they delivered while building.
  d["cpu_ms_per_sample"] = samples > 0 ? 1e3 * s.cpu_seconds / samples : 0.0;
  d["samples_per_build_second"] = s.build_seconds > 0 ? samples / s.build_seconds : 0.0;
  return d;
}

}  // namespace

void bind_data(py::module_& m) {
  py::class_<train::DataStream>(m, "DataStream",
                                "The training batches a config describes, with a cursor.")
      .def(py::init([](const Config& config, int rank, int world, const std::string& device,
                       const std::string& dtype, bool channels_last, bool normalize) {
             train::DataStreamOptions o;
             o.rank = rank;
             o.world = world;
             o.device = device;
             o.dtype = train::parse_stream_dtype(dtype, "dtype");
             o.channels_last = channels_last;
             o.normalize = normalize;
             py::gil_scoped_release release;  // opening a data set may take a while
             return std::make_unique<train::DataStream>(config, o);
           }),
           py::arg("config"), py::arg("rank"), py::arg("world"), py::arg("device"),
           py::arg("dtype"), py::arg("channels_last"), py::arg("normalize"))
      .def(
          "next",
          [](train::DataStream& s) -> py::object {
            std::optional<train::StreamBatch> batch;
            {
              py::gil_scoped_release release;  // other Python threads run while batches build
              batch = s.next();
            }
            if (!batch) return py::none();
            return py::make_tuple(batch->inputs, batch->targets);
          },
          "(inputs, targets) at the cursor (images and labels, or token ids and the next "
          "tokens), or None at the end of the epoch.")
      .def_property_readonly("steps_per_epoch", &train::DataStream::steps_per_epoch)
      .def_property_readonly("epoch", &train::DataStream::epoch)
      .def_property_readonly("step", &train::DataStream::step)
      .def("set_epoch", &train::DataStream::set_epoch, py::arg("epoch"))
      .def("state", [](const train::DataStream& s) { return loader_state_to_dict(s.state()); })
      .def(
          "restore",
          [](train::DataStream& s, const py::dict& state) {
            s.restore(loader_state_from_dict(state));
          },
          py::arg("state"))
      .def("stats", [](const train::DataStream& s) { return stats_to_dict(s.stats()); })
      .def_property_readonly("ready_batches",
                             [](const train::DataStream& s) { return s.source().ready_batches(); })
      .def_property_readonly("samples",
                             [](const train::DataStream& s) { return s.source().samples(); });
}

}  // namespace loom::python
