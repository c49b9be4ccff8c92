// `loom plan RUN_DIR --prices PRICES.yaml [--samples N] [--trainer NAME] [--worker NAME]`: what
// the profiled run would cost per instance type, and what adding CPU instances for
// preprocessing would buy (see profile/cost_planner.h for the arithmetic and its assumptions).
// `loom plan RUN_DIR --workers N [--servers 1,2,4] [--link-gbit G]`: ring all-reduce or
// parameter servers for the run's gradients on such a cluster (profile/exchange_planner.h).
// `--json` prints both as one JSON object, for scripts and tests, instead of the tables.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/cli/commands.h"
#include "loom/core/error.h"
#include "loom/profile/cost_plan.h"
#include "loom/profile/exchange_planner.h"

namespace loom::cli {
namespace {

struct PlanArgs {
  std::string run_dir, prices;
  double samples = 1e9;
  std::string trainer, worker;
  // Gradient exchange: ring all-reduce or parameter servers for this many workers.
  int workers = 0;
  std::vector<int> servers;
  double link_gbit = 0;
  bool json = false;  // one JSON object instead of the tables
};

profile::RunMeasurement measurement_of(const std::string& run_dir) {
  const std::string path = run_dir + "/summary.json";
  return profile::measurement_from_summary(read_user_file(path, "RUN_DIR"), path);
}

void print_instances(const std::vector<profile::InstanceEstimate>& all, double samples) {
  std::printf("%-16s %6s %5s %9s %10s %12s %10s %10s %10s  %s\n", "instance", "vcpus", "gpus",
              "$/hour", "samples/s", "samples/$", "hours", "cost $", "spot $", "basis");
  for (const auto& e : all) {
    const auto& t = e.instance;
    if (!e.samples_per_second) {
      std::printf("%-16s %6d %5d %9.4f %10s %12s %10s %10s %10s  %s\n", t.name.c_str(), t.vcpus,
                  t.gpus, t.price_per_hour, "-", "-", "-", "-", "-", e.basis.c_str());
      continue;
    }
    char spot[32] = "-";
    if (t.spot_price_per_hour > 0)
      std::snprintf(spot, sizeof spot, "%.2f", e.spot_cost_for(samples));
    std::printf("%-16s %6d %5d %9.4f %10.1f %12.0f %10.2f %10.2f %10s  %s\n", t.name.c_str(),
                t.vcpus, t.gpus, t.price_per_hour, *e.samples_per_second, e.samples_per_dollar(),
                e.hours_for(samples), e.cost_for(samples), spot, e.basis.c_str());
  }
}

void print_what_if(const profile::WhatIf& w, const profile::RunMeasurement& run,
                   const std::string& trainer, const std::string& worker) {
  std::printf("\nwhat if %s trains and k x %s preprocess:\n", trainer.c_str(), worker.c_str());
  if (w.shared_cores) {
    std::printf(
        "  the trainer's %.2f busy cores train (%.3f CPU ms/sample), build locally (%.3f) and "
        "receive from workers (%.3f, %s)\n",
        run.cpu_budget, 1e3 * run.train_cpu_seconds_per_sample, 1e3 * run.cpu_seconds_per_sample,
        1e3 * run.receive_cpu_seconds_per_sample, run.receive_basis.c_str());
  }
  std::printf(
      "  the model consumes %.1f samples/s when never waiting for data; the trainer's own loader "
      "supplies %.1f; one %s supplies %.1f\n",
      w.model_rate, w.local_input_rate, worker.c_str(), w.per_instance_rate);
  std::printf(
      "  break-even: k = %d (more CPU instances add cost, not speed); most samples per dollar: "
      "k = %d\n",
      w.break_even, w.best_value);
  std::printf("  %3s %10s %9s %12s %11s %14s\n", "k", "samples/s", "$/hour", "samples/$",
              "spot $/hour", "spot samples/$");
  for (const auto& r : w.rows) {
    std::printf("  %3d %10.1f %9.4f %12.0f %11.4f %14.0f\n", r.cpu_instances, r.samples_per_second,
                r.price_per_hour, r.samples_per_dollar(), r.spot_price_per_hour,
                r.spot_samples_per_dollar());
  }
}

void print_costs(const profile::CostPlan& plan, const PlanArgs& a) {
  const profile::RunMeasurement& run = plan.run;
  std::printf(
      "run %s: %.1f samples/s on %d cores, data wait %.1f%% of the step, input pipeline %.3g "
      "CPU ms/sample\n\n",
      a.run_dir.c_str(), run.samples_per_second, run.usable_cores, 100 * run.data_wait_share,
      1e3 * run.cpu_seconds_per_sample);
  std::printf("to train %.3g samples:\n", a.samples);
  print_instances(plan.instances, a.samples);
  if (!plan.what_if) {
    std::printf(
        "\n(no what-if: the price list needs an instance with a throughput and a CPU-only one)\n");
    return;
  }
  print_what_if(*plan.what_if, run, plan.trainer, plan.worker);
}

// The exchange plan and where its M and B came from.
struct ExchangeReport {
  profile::ExchangePlan plan;
  std::string m_basis, b_basis;
};

// M and B for the exchange plan: the run's gradient bytes per step (else its parameters as
// fp32), and the link speed given, else what the run's own exchange reached.
ExchangeReport plan_exchange_of(const PlanArgs& a) {
  const std::string path = a.run_dir + "/summary.json";
  const nlohmann::json s = nlohmann::json::parse(read_user_file(path, "RUN_DIR"));
  const nlohmann::json dp = s.value("data_parallel", nlohmann::json::object());
  double m = dp.value("bytes_per_step", 0.0);
  std::string m_basis = "the run's gradient bytes per step";
  if (m <= 0) {
    m = 4.0 * s.value("parameters", 0.0);
    m_basis = "the model's parameters as fp32";
  }
  double b = a.link_gbit * 1e9 / 8;
  std::string b_basis = "given";
  const int ranks = dp.value("ranks", 1);
  const double t = dp.value("comm_seconds_per_step", 0.0);
  if (b <= 0 && ranks > 1 && t > 0 && m > 0) {
    const std::string exchange = dp.value("exchange", std::string());
    const nlohmann::json ps = s.value("parameter_servers", nlohmann::json());
    const double r = ranks;
    if (ps.is_object()) {
      const double k = ps.value("servers", 1.0);
      b = std::max(m, r * m / k) / t;
    } else {
      b = 2 * (r - 1) / r * m / t;
    }
    b_basis = "measured: " + (exchange.empty() ? std::string("the run's exchange") : exchange) +
              " between " + std::to_string(ranks) + " ranks took " + std::to_string(t) +
              " s per step";
  }
  if (b <= 0) {
    throw ConfigError(
        "--link-gbit: the run measured no exchange between ranks; give each "
        "host's link speed");
  }
  std::vector<int> servers = a.servers;
  if (servers.empty()) {
    for (int k = 1; k <= 2 * a.workers; k *= 2) servers.push_back(k);
  }
  return {profile::plan_exchange(m, a.workers, b, servers), m_basis, b_basis};
}

void print_exchange_plan(const ExchangeReport& report) {
  const profile::ExchangePlan& plan = report.plan;
  std::printf(
      "gradient exchange for %d workers: M = %.1f MB per step (%s), B = %.1f MB/s per "
      "host link (%s)\n",
      plan.workers, plan.gradient_bytes / 1e6, report.m_basis.c_str(),
      plan.link_bytes_per_second / 1e6, report.b_basis.c_str());
  std::printf("  ring all-reduce: %s\n", plan.ring_arithmetic.c_str());
  for (const auto& option : plan.options) {
    std::printf("  %d server%s: %s (%.2fx the ring's time)\n", option.servers,
                option.servers == 1 ? "" : "s", option.arithmetic.c_str(),
                option.seconds / plan.ring_seconds);
  }
  if (plan.best_servers > 0) {
    const auto& best = *std::find_if(plan.options.begin(), plan.options.end(),
                                     [&](const auto& o) { return o.servers == plan.best_servers; });
    std::printf(
        "  choose %d servers: %.2fx faster than the ring (servers beat it once k > "
        "n^2/(2(n-1)) = %.2f): parallel.mode=ps, parallel.ps.servers=%d\n",
        plan.best_servers, plan.ring_seconds / best.seconds, plan.break_even_servers,
        plan.best_servers);
  } else {
    std::printf(
        "  choose ring all-reduce (parallel.mode=data): servers would need k > "
        "n^2/(2(n-1)) = %.2f to beat it, and for 2 workers they can at best tie\n",
        plan.break_even_servers);
  }
}

// --json: the numbers the tables and sentences show, under the names the Python package's
// loom.plan_costs() uses for the same things.
nlohmann::ordered_json exchange_json(const ExchangeReport& report) {
  const profile::ExchangePlan& p = report.plan;
  nlohmann::ordered_json options = nlohmann::ordered_json::array();
  for (const auto& o : p.options)
    options.push_back({{"servers", o.servers}, {"seconds", o.seconds}});
  return {{"workers", p.workers},
          {"gradient_bytes", p.gradient_bytes},
          {"gradient_bytes_basis", report.m_basis},
          {"link_bytes_per_second", p.link_bytes_per_second},
          {"link_basis", report.b_basis},
          {"ring_seconds", p.ring_seconds},
          {"options", options},
          {"break_even_servers", p.break_even_servers},
          {"best_servers", p.best_servers},
          {"choice", p.best_servers > 0 ? "parameter_servers" : "ring"}};
}

nlohmann::ordered_json costs_json(const profile::CostPlan& plan, double samples) {
  nlohmann::ordered_json instances = nlohmann::ordered_json::array();
  for (const auto& e : plan.instances) {
    nlohmann::ordered_json row = {{"name", e.instance.name},
                                  {"vcpus", e.instance.vcpus},
                                  {"gpus", e.instance.gpus},
                                  {"price_per_hour", e.instance.price_per_hour},
                                  {"spot_price_per_hour", e.instance.spot_price_per_hour},
                                  {"basis", e.basis},
                                  {"samples_per_second", nullptr}};
    if (e.samples_per_second) {
      row["samples_per_second"] = *e.samples_per_second;
      row["samples_per_dollar"] = e.samples_per_dollar();
      row["hours"] = e.hours_for(samples);
      row["cost"] = e.cost_for(samples);
      row["spot_cost"] = e.instance.spot_price_per_hour > 0
                             ? nlohmann::ordered_json(e.spot_cost_for(samples))
                             : nlohmann::ordered_json(nullptr);
    }
    instances.push_back(row);
  }
  nlohmann::ordered_json what_if = nullptr;
  if (plan.what_if) {
    const profile::WhatIf& w = *plan.what_if;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const auto& r : w.rows) {
      rows.push_back({{"cpu_instances", r.cpu_instances},
                      {"samples_per_second", r.samples_per_second},
                      {"price_per_hour", r.price_per_hour},
                      {"samples_per_dollar", r.samples_per_dollar()},
                      {"spot_price_per_hour", r.spot_price_per_hour},
                      {"spot_samples_per_dollar", r.spot_samples_per_dollar()}});
    }
    what_if = {{"model_rate", w.model_rate},
               {"local_input_rate", w.local_input_rate},
               {"shared_cores", w.shared_cores},
               {"per_instance_rate", w.per_instance_rate},
               {"break_even", w.break_even},
               {"best_value", w.best_value},
               {"rows", rows}};
  }
  const profile::RunMeasurement& r = plan.run;
  return {{"run",
           {{"samples_per_second", r.samples_per_second},
            {"usable_cores", r.usable_cores},
            {"data_wait_share", r.data_wait_share},
            {"cpu_seconds_per_sample", r.cpu_seconds_per_sample}}},
          {"samples", samples},
          {"instances", instances},
          {"trainer", plan.trainer.empty() ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(plan.trainer)},
          {"worker", plan.worker.empty() ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(plan.worker)},
          {"what_if", what_if}};
}

int run_plan(PlanArgs a) {
  if (a.workers <= 0 && a.prices.empty()) {
    throw ConfigError("--prices: give a price list, or --workers N for the gradient exchange");
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (a.workers > 0) {
    const ExchangeReport exchange = plan_exchange_of(a);
    if (a.json) {
      out["exchange"] = exchange_json(exchange);
    } else {
      print_exchange_plan(exchange);
      if (!a.prices.empty()) std::printf("\n");
    }
  }
  if (!a.prices.empty()) {
    const auto run = measurement_of(a.run_dir);
    const auto prices = profile::parse_prices(read_user_file(a.prices, "--prices"), a.prices);
    const profile::CostPlan plan = profile::plan_costs(run, prices, a.trainer, a.worker);
    if (a.json) {
      out["costs"] = costs_json(plan, a.samples);
    } else {
      print_costs(plan, a);
    }
  }
  if (a.json) std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Price a profiled run per instance type, with a CPU-preprocessing what-if");
  sub->add_option("run_dir", args->run_dir, "Output directory of a `loom train` run")->required();
  sub->add_option("--prices", args->prices, "Price list (YAML; see examples/prices.yaml)");
  sub->add_option("--samples", args->samples, "Samples to train, for time and cost")
      ->capture_default_str();
  sub->add_option("--trainer", args->trainer,
                  "Instance that trains in the what-if (default: picked)");
  sub->add_option("--worker", args->worker,
                  "CPU instance that preprocesses in the what-if (default: picked)");
  const char* group = "Gradient exchange: ring all-reduce or parameter servers";
  sub->add_option("--workers", args->workers,
                  "Data-parallel workers of the cluster to plan the exchange for")
      ->check(CLI::PositiveNumber)
      ->group(group);
  sub->add_option("--servers", args->servers,
                  "Server counts to compare (comma-separated; default 1, 2, 4 ... 2 x workers)")
      ->delimiter(',')
      ->group(group);
  sub->add_option("--link-gbit", args->link_gbit,
                  "Each host's link in Gbit/s (default: what the run's own exchange reached)")
      ->group(group);
  sub->add_flag("--json", args->json,
                "Print the plan as one JSON object (keys \"exchange\" and \"costs\") instead "
                "of tables");
  return {sub, [args] { return run_plan(*args); }};
}

}  // namespace loom::cli
