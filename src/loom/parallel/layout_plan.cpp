#include "loom/parallel/layout_plan.h"

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom::parallel {
namespace {

PsMode parse_ps_mode(const std::string& text) {
  if (text == "async") return PsMode::kAsync;
  if (text == "ssp") return PsMode::kSsp;
  return PsMode::kSync;  // the schema admits only these three
}

// The samples one replica reads per micro-batch: data.global_batch shared by the replicas when
// set, else data.batch_size.
int64_t replica_batch_of(const Config& config, int replicas) {
  const int64_t global = config.data.global_batch;
  if (global <= 0) return config.data.batch_size;
  if (global % replicas != 0) {
    throw ConfigError("config key 'data.global_batch': " + std::to_string(global) +
                      " samples do not divide evenly over " + std::to_string(replicas) + " ranks");
  }
  return global / replicas;
}

void plan_servers(const Config& config, LayoutPlan& plan) {
  const PsConfig& ps = config.parallel.ps;
  if (plan.world < 2) {
    throw ConfigError(
        "config key 'parallel.mode': ps needs parameter servers besides the workers: loom launch "
        "--nproc-per-node N --servers K -- loom train ...");
  }
  ServerDim servers;
  servers.servers = static_cast<int>(ps.servers);
  plan.trainers = plan.world - servers.servers;
  if (plan.trainers < 1) {
    throw ConfigError("config key 'parallel.ps.servers': " + std::to_string(servers.servers) +
                      " servers leave no worker among the job's " + std::to_string(plan.world) +
                      " ranks (start workers and servers: loom launch --nproc-per-node N "
                      "--servers K)");
  }
  servers.mode = parse_ps_mode(ps.mode);
  servers.optimizer_on_server = ps.optimizer_on == "server";
  servers.staleness = servers.mode == PsMode::kSsp ? ps.staleness : 0;
  plan.servers = servers;
}

void plan_pipeline(const Config& config, LayoutPlan& plan) {
  const PipelineConfig& pc = config.parallel.pipeline;
  const std::string stages = std::to_string(pc.stages);
  if (plan.world == 1) {
    throw ConfigError("config key 'parallel.pipeline.stages': " + stages +
                      " stages need as many ranks; start them with `loom launch --nproc-per-node " +
                      stages + " -- loom train ...`");
  }
  if (plan.world % pc.stages != 0) {
    throw ConfigError::at_key(
        "parallel.pipeline.stages",
        stages + " stages do not divide the " + std::to_string(plan.world) + " ranks; it may be " +
            divisors_in_words(plan.world, 2) + ", or launch a multiple of " + stages +
            " (each group of " + stages +
            " neighbouring ranks, times parallel.tensor, runs one pipeline, and the pipelines run "
            "data parallel)",
        {{"value", stages}, {"allowed", divisors_in_words(plan.world, 2)}});
  }
  if (config.train.grad_accum != 1) {
    throw ConfigError(
        "config key 'train.grad_accum': a pipeline accumulates over its "
        "micro-batches already; set parallel.pipeline.microbatches instead");
  }
  if (config.autotune.enabled) {
    throw ConfigError(
        "config key 'autotune.enabled': the autotuner does not tune pipelines; "
        "`loom pipeline plan` shows the partition and schedule to adjust by hand");
  }
  plan.pipeline = PipelineDim{static_cast<int>(pc.stages), 0};
}

// The training ranks' mesh, outermost first: the replicas, then a pipeline's ranks, then a
// tensor group's (so that a pipeline's ranks are neighbours, and a tensor group's the closest),
// and this rank's place in it. A serving rank is outside it.
void lay_out_mesh(LayoutPlan& plan) {
  const int per_replica =
      (plan.pipeline ? plan.pipeline->ranks : 1) * (plan.tensor ? plan.tensor->ranks : 1);
  plan.data.replicas = plan.trainers / per_replica;
  std::vector<MeshDim> dims = {{std::string(kDataDim), plan.data.replicas}};
  if (plan.pipeline) dims.push_back({std::string(kPipelineDim), plan.pipeline->ranks});
  if (plan.tensor) dims.push_back({std::string(kTensorDim), plan.tensor->ranks});
  plan.mesh = Mesh(std::move(dims));
  if (plan.serves()) return;
  plan.data.replica = plan.mesh.coordinate(plan.rank, kDataDim);
  if (plan.pipeline) plan.pipeline->rank = plan.mesh.coordinate(plan.rank, kPipelineDim);
  if (plan.tensor) plan.tensor->rank = plan.mesh.coordinate(plan.rank, kTensorDim);
}

// The data dimension's part of describe(): the replicas of `replica` (the words of the
// dimensions inside data; empty: the whole model) and what ZeRO shards over them.
std::string data_words(const DataDim& data, const std::string& replica) {
  const int zero = data.replicas > 1 ? data.zero_stage : 0;
  const std::string sharded = zero == 1   ? " (optimizer state sharded, ZeRO-1)"
                              : zero == 2 ? " (optimizer state and gradients sharded, ZeRO-2)"
                              : zero == 3
                                  ? " (optimizer state, gradients and parameters sharded, ZeRO-3)"
                                  : "";
  const std::string replicas = std::to_string(data.replicas);
  if (replica.empty()) {
    return data.replicas > 1 ? "data parallel over " + replicas + " ranks" + sharded
                             : "one process";
  }
  if (data.replicas == 1) return replica;
  return replica + ", data parallel over " + replicas + " such groups" + sharded;
}

}  // namespace

const char* ps_mode_name(PsMode mode) {
  switch (mode) {
    case PsMode::kSync:
      return "sync";
    case PsMode::kAsync:
      return "async";
    case PsMode::kSsp:
      return "ssp";
  }
  return "?";
}

KeepAfterForward keep_after_forward(const std::string& word) {
  if (word == "none") return KeepAfterForward::kNone;
  if (word == "last") return KeepAfterForward::kLast;
  if (word == "all") return KeepAfterForward::kAll;
  throw ConfigError("config key 'parallel.zero3_keep': '" + word + "' is not none, last or all");
}

LayoutPlan plan_layout(const Config& config, int world, int rank) {
  LayoutPlan plan;
  plan.world = world;
  plan.rank = rank;
  plan.trainers = world;
  if (config.parallel.parameter_servers()) {
    if (config.parallel.pipeline.stages > 1) {
      throw ConfigError(
          "config key 'parallel.mode': ps exchanges whole models' gradients; it does not combine "
          "with parallel.pipeline.stages > 1");
    }
    plan_servers(config, plan);
  } else {
    if (config.parallel.pipeline.stages > 1) plan_pipeline(config, plan);
    if (config.parallel.tensor > 1) {
      const int t = static_cast<int>(config.parallel.tensor);
      const int per_replica = t * (plan.pipeline ? plan.pipeline->ranks : 1);
      if (world % per_replica != 0) {
        // With a pipeline, a tensor group in each of its ranks: T divides world / P.
        const int64_t room = world / (plan.pipeline ? plan.pipeline->ranks : 1);
        throw ConfigError::at_key(
            "parallel.tensor",
            std::to_string(world) + " ranks do not split into tensor groups of " +
                std::to_string(t) +
                (plan.pipeline ? " in each of " + std::to_string(plan.pipeline->ranks) +
                                     " pipeline ranks (parallel.pipeline.stages)"
                               : std::string()) +
                "; it may be " + divisors_in_words(room),
            {{"value", std::to_string(t)}, {"allowed", divisors_in_words(room)}});
      }
      plan.tensor = TensorDim{t, 0, config.parallel.tensor_sequence};
    }
    // Over the replicas (each stage's, in a pipeline), where there are some.
    if (world > 1) plan.data.zero_stage = config.parallel.zero;
    plan.data.zero3_keep = keep_after_forward(config.parallel.zero3_keep);
  }
  lay_out_mesh(plan);
  if (config.optimizer.lr_scaling == "linear") plan.data.lr_scale = plan.data.replicas;

  StepShape& step = plan.step;
  const int replicas = plan.data.replicas;
  if (plan.pipeline) {
    // A pipeline's step batch, split into its micro-batches.
    const int64_t microbatches = config.parallel.pipeline.microbatches;
    step.replica_batch = replica_batch_of(config, replicas);
    if (step.replica_batch % microbatches != 0) {
      throw ConfigError("config key 'parallel.pipeline.microbatches': the batch of " +
                        std::to_string(step.replica_batch) +
                        " samples (data.batch_size) does not split into " +
                        std::to_string(microbatches) + " equal micro-batches");
    }
    step.micro_batches = microbatches;
    step.micro_batch = step.replica_batch / microbatches;
  } else {
    // Each rank reads its batch train.grad_accum times a step.
    step.micro_batches = config.train.grad_accum;
    step.micro_batch = replica_batch_of(config, replicas);
    step.replica_batch = step.micro_batch * step.micro_batches;
  }
  step.global_batch = step.replica_batch * replicas;
  return plan;
}

LayoutPlan plan_script_pipeline(int trainers, int rank, int pipeline_ranks, int64_t microbatches) {
  const std::string ranks = std::to_string(pipeline_ranks);
  if (pipeline_ranks < 2 || trainers % pipeline_ranks != 0) {
    throw ConfigError("pipeline_ranks: pipelines of " + ranks + " ranks do not divide the job's " +
                      std::to_string(trainers) +
                      " training ranks; a pipeline needs at least 2 ranks (loom launch "
                      "--nproc-per-node P x D -- python3 ...)");
  }
  if (microbatches < 1) {
    throw ConfigError("microbatches: " + std::to_string(microbatches) +
                      " micro-batches a step; at least 1");
  }
  LayoutPlan plan;
  plan.world = plan.trainers = trainers;
  plan.rank = rank;
  plan.pipeline = PipelineDim{pipeline_ranks, 0};
  lay_out_mesh(plan);
  plan.step.micro_batches = microbatches;
  plan.step.global_batch = plan.step.replica_batch = plan.step.micro_batch = 0;
  return plan;
}

std::string LayoutPlan::describe() const {
  std::string what;
  if (servers) {
    what = std::to_string(trainers) + " workers and " + std::to_string(servers->servers) + " " +
           ps_mode_name(servers->mode) + " parameter servers" +
           (servers->optimizer_on_server ? " (the optimizer on the servers)" : "");
  } else {
    // One replica of the model, its dimensions innermost first; empty: the whole model.
    std::string replica;
    if (tensor) {
      replica = "tensor parallel over " + std::to_string(tensor->ranks) + " ranks" +
                (tensor->sequence ? " (and the sequence)" : "");
    }
    if (pipeline) {
      replica = "a pipeline of " + std::to_string(pipeline->ranks) + " stages" +
                (tensor ? ", each " + replica : "");
    }
    what = data_words(data, replica);
  }
  // A mesh of more than the data dimension says how its ranks are laid out.
  const std::string grid = pipeline || tensor ? "; mesh " + mesh.describe() : "";
  // A script's job has no step shape of its own: its loop decides the batch.
  if (step.global_batch == 0) return what + ": the script's own batch" + grid;
  return what + ": " + std::to_string(step.global_batch) + " samples a step, " +
         std::to_string(step.replica_batch) + " a replica (" + std::to_string(step.micro_batches) +
         " x " + std::to_string(step.micro_batch) + ")" + grid;
}

std::string LayoutPlan::manifest_json() const {
  nlohmann::ordered_json layout{{"ranks", trainers}, {"data_parallel", data.replicas}};
  if (tensor) layout["tensor_parallel"] = tensor->ranks;
  return layout.dump();
}

}  // namespace loom::parallel
