// The trainer and the cost planner for Python: loom.train() trains as a rank of the job it
// entered (loom.distributed.init(), the one job entry) and returns what `loom train` writes to
// summary.json, loom.plan() what `loom plan --prices` prints, as dicts.
#include <Python.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/topology.h"
#include "loom/profile/cost_plan.h"
#include "loom/train/job.h"
#include "loom/train/trainer.h"

namespace loom::python {
namespace {

// Lets Ctrl-C stop a loom.train() call: the training thread runs without the GIL, so Python's
// SIGINT handler only sets a flag, which is looked at after every step. The exception ends the
// run the way any error does (the last committed checkpoint stays intact).
class InterruptCheck : public train::TrainObserver {
 public:
  void on_step(const train::StepReport&) override {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
};

std::string read_argument_file(const std::string& path, const std::string& argument) {
  try {
    return read_file(path);
  } catch (const Error& e) {
    throw ConfigError(argument + ": " + e.what());
  }
}

py::dict instance_to_dict(const profile::InstanceEstimate& e, double samples) {
  py::dict d;
  d["name"] = e.instance.name;
  d["vcpus"] = e.instance.vcpus;
  d["gpus"] = e.instance.gpus;
  d["price_per_hour"] = e.instance.price_per_hour;
  d["spot_price_per_hour"] = e.instance.spot_price_per_hour;
  d["basis"] = e.basis;
  if (!e.samples_per_second) {
    d["samples_per_second"] = py::none();
    return d;
  }
  d["samples_per_second"] = *e.samples_per_second;
  d["samples_per_dollar"] = e.samples_per_dollar();
  d["hours"] = e.hours_for(samples);
  d["cost"] = e.cost_for(samples);
  d["spot_cost"] =
      e.instance.spot_price_per_hour > 0 ? py::cast(e.spot_cost_for(samples)) : py::none();
  return d;
}

py::dict what_if_to_dict(const profile::WhatIf& w) {
  py::list rows;
  for (const auto& r : w.rows) {
    py::dict row;
    row["cpu_instances"] = r.cpu_instances;
    row["samples_per_second"] = r.samples_per_second;
    row["price_per_hour"] = r.price_per_hour;
    row["samples_per_dollar"] = r.samples_per_dollar();
    row["spot_price_per_hour"] = r.spot_price_per_hour;
    row["spot_samples_per_dollar"] = r.spot_samples_per_dollar();
    rows.append(row);
  }
  py::dict d;
  d["model_rate"] = w.model_rate;
  d["local_input_rate"] = w.local_input_rate;
  d["shared_cores"] = w.shared_cores;
  d["per_instance_rate"] = w.per_instance_rate;
  d["break_even"] = w.break_even;
  d["best_value"] = w.best_value;
  d["rows"] = rows;
  return d;
}

py::dict plan_to_dict(const profile::CostPlan& plan, double samples) {
  const profile::RunMeasurement& r = plan.run;
  py::dict run;
  run["samples_per_second"] = r.samples_per_second;
  run["usable_cores"] = r.usable_cores;
  run["data_wait_share"] = r.data_wait_share;
  run["cpu_seconds_per_sample"] = r.cpu_seconds_per_sample;
  py::list instances;
  for (const auto& e : plan.instances) instances.append(instance_to_dict(e, samples));
  py::dict d;
  d["run"] = run;
  d["samples"] = samples;
  d["instances"] = instances;
  d["trainer"] = plan.trainer.empty() ? py::none() : py::cast(plan.trainer);
  d["worker"] = plan.worker.empty() ? py::none() : py::cast(plan.worker);
  d["what_if"] = plan.what_if ? py::object(what_if_to_dict(*plan.what_if)) : py::none();
  return d;
}

}  // namespace

void bind_train(py::module_& m) {
  m.def(
      "train",
      [](const Config& config, const std::string& out_dir, bool resume,
         train::Job& job) -> std::optional<std::string> {
        if (out_dir.empty()) throw ConfigError("out: name the run's output directory");
        train::TrainOptions options;
        options.out_dir = out_dir;
        options.resume = resume;
        options.topology = detect_topology();
        InterruptCheck interrupt;
        options.observer = &interrupt;
        {
          py::gil_scoped_release release;
          job.check_trains(config);
          job.fill(options);
          train::train(config, options);
        }
        // Rank 0 writes the run directory for every rank.
        if (job.world.rank != 0) return std::nullopt;
        return read_file(out_dir + "/summary.json");
      },
      py::arg("config"), py::arg("out"), py::arg("resume"), py::arg("job"),
      "Trains as `loom train --out OUT` does, as a training rank of `job` (entered with "
      "enter_job); returns summary.json's text on rank 0, None on the others.");
  m.def(
      "plan_costs",
      [](const std::string& run_dir, const std::string& prices, double samples,
         const std::string& trainer, const std::string& worker) {
        const std::string summary = run_dir + "/summary.json";
        const auto run =
            profile::measurement_from_summary(read_argument_file(summary, "run_dir"), summary);
        const auto list = profile::parse_prices(read_argument_file(prices, "prices"), prices);
        return plan_to_dict(profile::plan_costs(run, list, trainer, worker), samples);
      },
      py::arg("run_dir"), py::arg("prices"), py::arg("samples"), py::arg("trainer"),
      py::arg("worker"), "What `loom plan RUN_DIR --prices PRICES` computes, as a dict.");
}

}  // namespace loom::python
