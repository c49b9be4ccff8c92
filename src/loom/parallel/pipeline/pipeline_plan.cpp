#include "loom/parallel/pipeline/pipeline_plan.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "loom/comm/comm_benchmark.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/models/loss.h"
#include "loom/models/model.h"
#include "loom/models/recompute.h"
#include "loom/models/vocab_parallel_loss.h"
#include "loom/parallel/mesh.h"
#include "loom/parallel/model_state.h"
#include "loom/parallel/pipeline/block_profiler.h"
#include "loom/parallel/pipeline/planning_tensor_group.h"
#include "loom/parallel/pipeline/schedule_csv.h"
#include "loom/parallel/pipeline/validator.h"

namespace loom::parallel::pipeline {
namespace {

double ms(double seconds) { return seconds * 1e3; }
double mb(double bytes) { return bytes / (1 << 20); }

// printf into a std::string.
template <typename... Args>
void append(std::string& out, const char* format, Args... args) {
  char line[512];
  std::snprintf(line, sizeof line, format, args...);
  out += line;
}

}  // namespace

Schedule pipeline_schedule(const PipelineConfig& c) {
  if (!ends_with(c.schedule, ".csv")) {
    Schedule s = make_schedule(c.schedule, static_cast<int>(c.stages), static_cast<int>(c.chunks),
                               static_cast<int>(c.microbatches));
    validate(s);  // generated schedules are valid by construction; a cheap guard
    return s;
  }
  std::ifstream in(c.schedule);
  if (!in) {
    throw ConfigError("config key 'parallel.pipeline.schedule': cannot read '" + c.schedule + "'");
  }
  std::ostringstream text;
  text << in.rdbuf();
  Schedule s = schedule_from_csv(text.str(), c.schedule);
  if (s.ranks != c.stages || s.stages != c.stages * c.chunks || s.microbatches != c.microbatches) {
    throw ConfigError("config key 'parallel.pipeline.schedule': '" + c.schedule + "' has " +
                      std::to_string(s.ranks) + " ranks, " + std::to_string(s.stages) +
                      " stages and " + std::to_string(s.microbatches) +
                      " micro-batches; the configuration asks for " + std::to_string(c.stages) +
                      " ranks (parallel.pipeline.stages), " + std::to_string(c.stages * c.chunks) +
                      " stages (x parallel.pipeline.chunks) and " + std::to_string(c.microbatches) +
                      " micro-batches");
  }
  validate(s);
  return s;
}

namespace {

std::vector<StageCosts> stage_costs(const Partition& partition,
                                    const std::vector<BlockProfile>& blocks,
                                    double bytes_per_second) {
  std::vector<StageCosts> out;
  for (const auto& stage : partition.stages) {
    StageCosts c;
    for (int b = stage.first_block; b < stage.first_block + stage.blocks; ++b) {
      const auto& block = blocks[static_cast<size_t>(b)];
      c.forward_seconds += block.forward_seconds;
      c.backward_input_seconds += block.backward_input_seconds;
      c.backward_weight_seconds += block.backward_weight_seconds;
      c.activation_bytes += block.activation_bytes;
    }
    const auto& last = blocks[static_cast<size_t>(stage.first_block + stage.blocks - 1)];
    c.send_seconds = last.output_bytes / bytes_per_second;
    out.push_back(c);
  }
  return out;
}

// A bubble over 10% shrinks with more micro-batches: try 2x and 4x M (when the batch divides),
// with every cost scaled to the smaller micro-batch (compute, activations and transfers grow
// with the samples), and keep the smaller bubble if it is at most three quarters of today's
// (what stage imbalance costs does not shrink with M). Generated schedules only.
void suggest_microbatches(const PipelineConfig& pc, int64_t batch_size, PipelinePlan& plan) {
  if (plan.simulation.bubble_fraction <= 0.10 || ends_with(pc.schedule, ".csv")) return;
  for (int64_t factor : {2, 4}) {
    const int64_t m = pc.microbatches * factor;
    if (batch_size % m != 0) break;
    Schedule more;
    try {
      more = make_schedule(pc.schedule, static_cast<int>(pc.stages), static_cast<int>(pc.chunks),
                           static_cast<int>(m));
    } catch (const ConfigError&) {
      break;
    }
    std::vector<StageCosts> costs = plan.stage_costs;
    for (auto& c : costs) {
      const double scale = 1.0 / static_cast<double>(factor);
      c.forward_seconds *= scale;
      c.backward_input_seconds *= scale;
      c.backward_weight_seconds *= scale;
      c.activation_bytes *= scale;
      c.send_seconds *= scale;
    }
    const Simulation sim = simulate(more, costs);
    const double best =
        plan.better_microbatches > 0 ? plan.better_bubble : 0.75 * plan.simulation.bubble_fraction;
    if (sim.bubble_fraction <= best) {
      plan.better_microbatches = m;
      plan.better_bubble = sim.bubble_fraction;
      plan.better_step_seconds = sim.step_seconds;
    }
  }
}

}  // namespace

double PipelinePlan::samples_per_second() const {
  return simulation.step_seconds > 0
             ? static_cast<double>(microbatch_samples * schedule.microbatches) /
                   simulation.step_seconds
             : 0.0;
}

std::vector<int> parse_split(const std::string& text) {
  std::vector<int> split;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      size_t used = 0;
      const int n = std::stoi(part, &used);
      if (part.find_first_not_of(" \t", used) != std::string::npos) throw std::invalid_argument("");
      split.push_back(n);
    } catch (const std::logic_error&) {
      throw ConfigError("config key 'parallel.pipeline.split': '" + text +
                        "' is not a comma-separated list of block counts (e.g. 4,6)");
    }
  }
  return split;
}

namespace {

// What the plan may change to fit a stage's memory within the cap, chosen before anything is
// built (the configuration stays as it was read): the ZeRO stage over the pipelines, and every
// k-th block recomputing its activations (0: none).
struct MemoryChoice {
  int zero_stage = 0;
  int64_t recompute_every = 0;
};

// The model's blocks measured on one real micro-batch as `config` runs them (its precision)
// with every `recompute_every`-th block recomputed, with what the plan needs besides.
struct ProfiledBlocks {
  std::string model;
  int64_t microbatch_samples = 0;
  std::vector<BlockProfile> blocks;
  double data_bytes = 0;  // every rank's data in memory
  double link_bytes_per_second = 0;
};

ProfiledBlocks profile_blocks_of(const Config& config, int64_t recompute_every, int64_t step_batch,
                                 const Topology& topology, const MakeModelOnBatch& model_on_batch) {
  const PipelineConfig& pc = config.parallel.pipeline;
  if (step_batch % pc.microbatches != 0) {
    throw ConfigError("config key 'parallel.pipeline.microbatches': the batch of " +
                      std::to_string(step_batch) +
                      " samples (data.batch_size) does not "
                      "split into " +
                      std::to_string(pc.microbatches) + " equal micro-batches");
  }
  ProfiledBlocks out;
  out.microbatch_samples = step_batch / pc.microbatches;

  // One real micro-batch, as the first stage would feed it.
  use_configured_allocator("caching", topology.memory_bytes);
  ModelOnBatch setup = model_on_batch(step_batch, recompute_every);
  models::Model& model = *setup.model;
  out.model = model.name();
  at::set_num_threads(1);  // a stage runs on one rank's threads; profile as one of two ranks
  const int64_t n = std::min<int64_t>(out.microbatch_samples, setup.input.size(0));
  const at::Tensor input = setup.input.narrow(0, 0, n);
  const at::Tensor labels = setup.targets.narrow(0, 0, n);
  models::check_blocks(model, input);

  BlockProfileOptions profile_options;
  profile_options.autocast = setup.autocast;
  profile_options.device = setup.device;
  std::unique_ptr<models::Loss> loss =
      models::make_task_loss(setup.task, config.train.label_smoothing);
  // Tensor groups in the stages: the blocks measured as a group's rank runs them (its slices),
  // with the bytes their collectives would move.
  std::unique_ptr<PlanningTensorGroup> group;
  if (config.parallel.tensor > 1) {
    group = std::make_unique<PlanningTensorGroup>(static_cast<int>(config.parallel.tensor),
                                                  config.parallel.tensor_sequence);
    if (models::apply_tensor_plan(model, *group).output_split)
      loss = std::make_unique<models::VocabParallelCrossEntropyLoss>(*group);
    profile_options.tensor_bytes_moved = [&group] { return group->bytes_moved(); };
  }
  out.blocks = profile_blocks(model, input, labels, *loss, profile_options,
                              installed_caching_cpu_allocator());
  // Handing a stage's output to a rank of the same host over shared memory is a copy, and so is
  // a tensor group's collectives' every byte (its ranks are neighbours).
  out.link_bytes_per_second = comm::measure_memcpy_gbps() * 1e9;
  for (BlockProfile& block : out.blocks) {
    const double forward = block.tensor_forward_bytes / out.link_bytes_per_second;
    const double backward = block.tensor_backward_bytes / out.link_bytes_per_second;
    block.forward_seconds += forward;
    block.backward_input_seconds += backward;
    block.tensor_comm_seconds = forward + backward;
  }
  out.data_bytes = setup.data_bytes;
  return out;
}

// The plan for `profiled` blocks, with the configured optimizer's state sharded by `zero_stage`
// over `replicas` pipelines in the memory model.
PipelinePlan plan_from_profile(const Config& config, int zero_stage, int64_t step_batch,
                               const ProfiledBlocks& profiled, int replicas) {
  const PipelineConfig& pc = config.parallel.pipeline;
  PipelinePlan plan;
  plan.schedule = pipeline_schedule(pc);
  plan.model = profiled.model;
  plan.microbatch_samples = profiled.microbatch_samples;
  plan.blocks = profiled.blocks;
  plan.link_bytes_per_second = profiled.link_bytes_per_second;
  plan.replicas = replicas;
  plan.tensor_ranks = static_cast<int>(config.parallel.tensor);

  // Activations held per stage come from the schedule itself (a dry run); a rank's memory cap
  // is shared by its chunks.
  PartitionOptions options;
  options.in_flight = simulate(plan.schedule, uniform_costs(plan.schedule.stages)).peak_in_flight;
  options.memory_cap_bytes = pc.memory_cap_mb * (1 << 20) / static_cast<double>(pc.chunks);
  options.link_bytes_per_second = plan.link_bytes_per_second;
  options.state_per_parameter_byte =
      state_per_parameter_byte(optimizer_states(config.optimizer), zero_stage, replicas);
  // Every rank loads the data: charge it to every stage (chunks share one rank's copy).
  plan.resident_bytes = profiled.data_bytes;
  options.resident_bytes = profiled.data_bytes / static_cast<double>(pc.chunks);
  const std::vector<int> split = parse_split(pc.split);
  if (split.empty()) {
    plan.partition = partition_blocks(plan.blocks, options);
  } else {
    plan.manual_split = true;
    plan.partition = evaluate_split(plan.blocks, split, options);
    if (options.memory_cap_bytes > 0 &&
        plan.partition.peak_memory_bytes() > options.memory_cap_bytes) {
      throw ConfigError("config key 'parallel.pipeline.split': " + pc.split + " needs " +
                        std::to_string(plan.partition.peak_memory_bytes() / (1 << 20)) +
                        " MB in its largest stage, over parallel.pipeline.memory_cap_mb; leave "
                        "the split empty to let the partitioner fit the cap");
    }
  }
  const int stages = plan.schedule.stages;
  plan.uniform_slowest_seconds =
      evaluate_split(plan.blocks, uniform_split(static_cast<int>(plan.blocks.size()), stages),
                     options)
          .slowest_seconds();
  plan.parameter_balanced_slowest_seconds =
      evaluate_split(plan.blocks, parameter_balanced_split(plan.blocks, stages), options)
          .slowest_seconds();
  plan.stage_costs = stage_costs(plan.partition, plan.blocks, plan.link_bytes_per_second);
  plan.simulation = simulate(plan.schedule, plan.stage_costs);
  suggest_microbatches(pc, step_batch, plan);
  return plan;
}

}  // namespace

PipelinePlan plan_pipeline(const Config& config, int64_t step_batch, const Topology& topology,
                           const MakeModelOnBatch& model_on_batch, int replicas) {
  // Blocks measured by recompute setting: ZeRO changes only the state bytes the memory model
  // adds to them, so choices that differ only in ZeRO share a profile.
  std::map<int64_t, ProfiledBlocks> profiles;
  const auto plan_for = [&](const MemoryChoice& choice) {
    auto it = profiles.find(choice.recompute_every);
    if (it == profiles.end()) {
      it = profiles
               .emplace(choice.recompute_every,
                        profile_blocks_of(config, choice.recompute_every, step_batch, topology,
                                          model_on_batch))
               .first;
    }
    return plan_from_profile(config, choice.zero_stage, step_batch, it->second, replicas);
  };
  const MemoryChoice configured{static_cast<int>(config.parallel.zero),
                                models::recompute_every(config.train)};
  try {
    return plan_for(configured);
  } catch (const OverMemoryCap& as_configured) {
    // What else would fit, cheapest in time first: ZeRO moves the same bytes as all-reduce
    // (about 1.0x the step time here), recompute costs up to one more forward (1.3x for every
    // block), half that for every second block.
    const int zero = configured.zero_stage;
    const bool may_shard = replicas > 1 && !config.parallel.parameter_servers() && zero < 1;
    const bool may_recompute = configured.recompute_every == 0;
    std::vector<MemoryChoice> candidates;
    if (may_shard) candidates.push_back({1, 0});
    if (may_recompute) candidates.push_back({zero, 2});
    if (may_recompute) candidates.push_back({zero, 1});
    if (may_recompute && may_shard) candidates.push_back({1, 1});
    if (candidates.empty()) throw;
    std::string last;
    ErrorFields last_fields;
    for (const MemoryChoice& choice : candidates) {
      try {
        PipelinePlan plan = plan_for(choice);
        plan.zero_chosen = choice.zero_stage > zero ? choice.zero_stage : 0;
        plan.recompute_every_chosen = choice.recompute_every;
        return plan;
      } catch (const ConfigError& e) {
        last = e.what();
        last_fields = e.fields();
      }
    }
    // The last try's fields (its key), and what it tried beyond the configuration.
    last_fields["recompute_tried"] = may_recompute ? "every_block" : "none";
    last_fields["zero_tried"] = may_shard ? "1" : "0";
    throw ConfigError(
        last + " (with " + (may_recompute ? "every block recomputed" : "") +
            (may_recompute && may_shard ? " and " : "") +
            (may_shard ? "ZeRO-1 over " + std::to_string(replicas) + " pipelines" : "") +
            "; as configured: " + as_configured.what() + ")",
        last_fields);
  }
}

std::vector<int> PipelinePlan::stage_ranks(size_t stage) const {
  const Mesh mesh({{std::string(kDataDim), replicas},
                   {std::string(kPipelineDim), schedule.ranks},
                   {std::string(kTensorDim), tensor_ranks}});
  std::vector<int> out;
  for (int rank = 0; rank < mesh.ranks(); ++rank) {
    if (mesh.coordinate(rank, kPipelineDim) == schedule.stage_rank[stage]) out.push_back(rank);
  }
  return out;
}

namespace {

// [2, 3, 6, 7] -> "ranks 2-3, 6-7"; [1] -> "rank 1".
std::string ranks_in_words(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string out = "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string describe_plan(const PipelinePlan& p) {
  const auto& s = p.schedule;
  std::string out;
  // A pipeline rank is one rank, or a tensor group of them.
  const std::string holders = p.tensor_ranks > 1 ? std::to_string(s.ranks) + " tensor groups of " +
                                                       std::to_string(p.tensor_ranks) + " ranks"
                                                 : std::to_string(s.ranks) + " ranks";
  append(out,
         "pipeline: %s, %s x %d stage%s each, %d micro-batches of %lld samples (%s, %zu "
         "blocks)\n",
         s.name.c_str(), holders.c_str(), s.chunks(), s.chunks() == 1 ? "" : "s", s.microbatches,
         static_cast<long long>(p.microbatch_samples), p.model.c_str(), p.blocks.size());
  if (p.tensor_ranks > 1) {
    double seconds = 0;
    for (const BlockProfile& b : p.blocks) seconds += b.tensor_comm_seconds;
    append(out,
           "tensor groups of %d in each stage: blocks measured as one rank runs its slices, with "
           "the group's collectives (%.2f ms a micro-batch at %.1f GB/s) in their times\n",
           p.tensor_ranks, ms(seconds), p.link_bytes_per_second / 1e9);
  }
  append(out, "partition (%s):\n", p.manual_split ? "parallel.pipeline.split" : "automatic");
  if (p.zero_chosen > 0) {
    append(out,
           "ZeRO-%d over the %d data-parallel pipelines (no split fits "
           "parallel.pipeline.memory_cap_mb otherwise)\n",
           p.zero_chosen, p.replicas);
  }
  if (p.recompute_every_chosen == 1) {
    append(out,
           "activation recompute: every block (no split fits parallel.pipeline.memory_cap_mb "
           "with the activations kept)\n");
  } else if (p.recompute_every_chosen > 1) {
    const int64_t k = p.recompute_every_chosen;
    const char* suffix = k % 10 == 2 && k % 100 != 12   ? "nd"
                         : k % 10 == 3 && k % 100 != 13 ? "rd"
                                                        : "th";
    append(out,
           "activation recompute: every %lld%s block (no split fits "
           "parallel.pipeline.memory_cap_mb with the activations kept)\n",
           static_cast<long long>(k), suffix);
  }
  for (size_t i = 0; i < p.partition.stages.size(); ++i) {
    const auto& stage = p.partition.stages[i];
    const auto& first = p.blocks[static_cast<size_t>(stage.first_block)];
    const auto& last = p.blocks[static_cast<size_t>(stage.first_block + stage.blocks - 1)];
    const auto& cost = p.stage_costs[i];
    append(out,
           "  stage %zu on %s: %d block%s %s..%s  forward %.2f ms, backward %.2f ms (input "
           "%.2f + weight %.2f), send %.3f ms, memory %.1f MB (activations of %d micro-batch%s)\n",
           i, ranks_in_words(p.stage_ranks(i)).c_str(), stage.blocks, stage.blocks == 1 ? "" : "s",
           first.name.c_str(), last.name.c_str(), ms(cost.forward_seconds),
           ms(cost.backward_input_seconds + cost.backward_weight_seconds),
           ms(cost.backward_input_seconds), ms(cost.backward_weight_seconds), ms(cost.send_seconds),
           mb(stage.memory_bytes), p.simulation.peak_in_flight[i],
           p.simulation.peak_in_flight[i] == 1 ? "" : "es");
  }
  if (p.resident_bytes > 0) {
    append(out, "  (each rank's memory includes %.1f MB of data in memory)\n",
           mb(p.resident_bytes));
  }
  append(out, "slowest stage %.2f ms; uniform split %.2f ms, parameter-balanced %.2f ms\n",
         ms(p.partition.slowest_seconds()), ms(p.uniform_slowest_seconds),
         ms(p.parameter_balanced_slowest_seconds));
  append(out, "simulated step %.1f ms, bubble %.1f%%, %.1f samples/s per pipeline\n",
         ms(p.simulation.step_seconds), 100 * p.simulation.bubble_fraction, p.samples_per_second());
  if (p.better_microbatches > 0) {
    append(out,
           "bubble %.0f%%: raise parallel.pipeline.microbatches to %lld (simulated bubble %.1f%%, "
           "step %.1f ms; micro-batches of %lld samples)\n",
           100 * p.simulation.bubble_fraction, static_cast<long long>(p.better_microbatches),
           100 * p.better_bubble, ms(p.better_step_seconds),
           static_cast<long long>(p.microbatch_samples * s.microbatches / p.better_microbatches));
  }
  return out;
}

}  // namespace loom::parallel::pipeline
