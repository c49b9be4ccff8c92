// ReplicaSync for Python: the gradient exchange of a user's own module replicated on every
// training rank, or of the slices a TensorParallel left it over the ranks holding the same ones
// (parallel/replicated_layout.h's make_replica_sync), with its tensors shared with
// PyTorch, not copied, and ZeRO's partition of it (parallel/data_replicas.h) when asked for.
// Under ZeRO-3 the module's blocks run as ShardedModel's blocks (parallel/sharded_model.h): the
// Python side calls before_block() and after_block() from forward hooks on the block modules.
// loom.parallel.DataParallel wraps it.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <map>
#include <optional>
#include <string>

#include "bindings.h"
#include "loom/core/error.h"
#include "loom/models/block_chain_model.h"
#include "loom/parallel/data_replicas.h"
#include "loom/parallel/replicated_layout.h"
#include "loom/parallel/sharded_model.h"
#include "loom/train/job.h"
#include "loom/train/step_accounting.h"

namespace loom::python {
namespace {

using NamedTensors = parallel::NamedTensors;

// A block of the script's module as ZeRO-3 sees it: its name and the tensors of its parameters.
struct BlockTensors {
  std::string name;
  std::vector<at::Tensor> parameters;
};

// The script's blocks as a models::Model whose blocks() name each block's parameters, as
// ShardedModel needs them. A parameter belongs to the first block that holds it and is tied in
// the later ones (torch modules share one tensor); the parameters in no block make
// one more block, first ("outside blocks": the module's forward runs it around the others).
// The blocks' forwards are the modules' own, run by the script, never by this model.
std::unique_ptr<models::Model> block_model(const NamedTensors& parameters,
                                           const std::vector<BlockTensors>& blocks,
                                           bool& has_outer) {
  std::map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& [name, t] : parameters) name_of.emplace(t.unsafeGetTensorImpl(), name);
  std::map<const c10::TensorImpl*, bool> owned;
  std::vector<models::Block> chain;
  for (const BlockTensors& b : blocks) {
    models::Block block;
    block.name = b.name;
    for (const at::Tensor& t : b.parameters) {
      auto it = name_of.find(t.unsafeGetTensorImpl());
      if (it == name_of.end()) {
        throw ConfigError("blocks: block '" + b.name + "' has a parameter the module does not");
      }
      // Frozen ones too: ZeRO-3 shards them (a LoRA fine-tune's base), so a block gathers them.
      auto& list = owned[t.unsafeGetTensorImpl()] ? block.tied : block.parameters;
      list.emplace_back(it->second, t);
      owned[t.unsafeGetTensorImpl()] = true;
    }
    if (block.parameters.empty() && block.tied.empty()) {
      throw ConfigError("blocks: block '" + b.name + "' has no parameters");
    }
    chain.push_back(std::move(block));
  }
  models::Block outer;
  outer.name = "outside blocks";
  for (const auto& [name, t] : parameters) {
    if (!owned[t.unsafeGetTensorImpl()]) outer.parameters.emplace_back(name, t);
  }
  has_outer = !outer.parameters.empty();
  if (has_outer) chain.insert(chain.begin(), std::move(outer));
  for (models::Block& block : chain) {
    block.forward = [name = block.name](const at::Tensor&) -> at::Tensor {
      throw Error("ZeRO-3: block '" + name + "' runs through its module's hooks");
    };
  }
  return std::make_unique<models::BlockChainModel>("script", std::move(chain));
}

// The gradient exchange of one replica, the no_sync() scope a `with` statement holds open, and
// under ZeRO the partition (and, for stage 3, the blocks that gather its parameters).
class ReplicaSync {
 public:
  // `parted` is the layout of a module that a dimension inside data already parted (a
  // TensorParallel's: the replicas are then the ranks holding the same slices, a group named
  // after `index`); null for a whole module, replicated over every training rank.
  ReplicaSync(train::Job& job, NamedTensors parameters, NamedTensors buffers,
              parallel::DataParallelOptions options, int zero,
              const std::vector<BlockTensors>& blocks, parallel::KeepAfterForward keep,
              const parallel::LayoutPlan* parted, int index)
      : layout_(parted ? *parted : job.plan) {
    parallel::ReplicatedLayoutOptions replicated;
    replicated.data_parallel = options;
    replicated.data_parallel.finish_in_backward = true;  // the script calls its optimizer itself
    replicated.groups.ps_world = job.communicator.get();
    replicated.groups.ps = job.ps;
    comm::Communicator* replicas = job.trainers();
    if (parted) {
      group_ = parallel::make_replica_group(layout_, job.group_maker(),
                                            "script" + std::to_string(index) + "-");
      replicas = group_.get();
    }
    // ZeRO-3's buckets are the script's blocks; the partition is made before the exchange,
    // which then gives every rank rank 0's values, as loom train does.
    if (zero == 3) chain_ = block_model(parameters, blocks, has_outer_);
    parallel::DataDim data = layout_.data;
    data.zero_stage = zero;
    data.zero3_keep = keep;
    data_ = std::make_unique<parallel::DataReplicas>(data, replicas, parameters,
                                                     replicated.data_parallel, chain_.get());
    parallel::ZeroPartition* partition = data_->partition();
    sync_ = parallel::make_replica_sync(layout_, std::move(parameters), std::move(buffers),
                                        replicas, replicated, parallel::StartOptions{});
    // Every rank now holds rank 0's values: ZeRO-3 keeps its shards of them only.
    data_->keep_own_shards(nullptr);
    layout_.data.zero_stage = partition ? partition->stage() : 0;
  }

  // The job's layout with the ZeRO stage in force (loom.profile.Steps' summary reports it).
  const parallel::LayoutPlan& layout() const { return layout_; }

  parallel::GradSync& sync() { return *shared_sync(); }
  const std::shared_ptr<parallel::GradSync>& shared_sync() {
    if (!sync_) throw Error("loom.parallel: the module's exchange was closed");
    return sync_;
  }
  parallel::ZeroPartition* partition() const { return data_->partition(); }
  parallel::ShardedModel& sharded() {
    if (!data_->sharded()) {
      throw Error("loom.parallel: the module's blocks are not sharded (ZeRO-3)");
    }
    return *data_->sharded();
  }
  bool has_outer_block() const { return has_outer_; }
  const parallel::DataReplicas& data() const { return *data_; }

  void step(double lr, const std::function<void()>& local_step) {
    sync().step(lr, local_step);
    // Under ZeRO the optimizer reads the shards' gradients, never the parameters': clearing
    // these lets the next backward start afresh (loom train's executor calls zero_grad() so),
    // where the script's optimizer.zero_grad() only reaches the shards.
    if (partition()) sync().zero_grad();
  }
  void enter_no_sync() { no_sync_.emplace(sync()); }
  void exit_no_sync() { no_sync_.reset(); }
  // The last step is done: every worker ends with the same (whole) parameters, and the servers
  // hear that this worker has finished.
  void close() {
    if (!sync_) return;
    no_sync_.reset();
    sync_->end_training();
    closed_stats_ = sync_->last_stats();
    sync_.reset();
    data_->stop_running_sharded();
  }
  // The last exchanged step's, also once closed.
  const parallel::SyncStats& last_stats() { return sync_ ? sync_->last_stats() : closed_stats_; }

  // ZeRO-3: every bucket's parameters whole on every rank (collective), and then each rank's
  // shard taken out of them again (after a checkpoint read them, or wrote into them).
  void gather_whole() {
    parallel::ZeroPartition* zero = partition();
    if (!zero || !zero->shards_parameters() || !sync_) return;
    comm::Communicator& group = *data_->group();
    for (std::size_t b = 0; b < zero->bucket_count(); ++b) zero->gather_bucket(b, group);
    for (std::size_t b = 0; b < zero->bucket_count(); ++b) zero->wait_whole(b, group);
  }
  void shard_again() {
    if (partition() && sync_) partition()->shard_parameters();
  }

 private:
  parallel::LayoutPlan layout_;
  std::unique_ptr<comm::Communicator> group_;  // the replicas of a parted module's part
  std::unique_ptr<models::Model> chain_;       // ZeRO-3: the script's blocks, which data_ shards
  std::unique_ptr<parallel::DataReplicas> data_;
  bool has_outer_ = false;  // ZeRO-3: block 0 is the parameters outside the script's blocks
  // Shared only with the step accountings watching it (weakly): close() ends it.
  std::shared_ptr<parallel::GradSync> sync_;
  std::optional<parallel::GradSync::NoSync> no_sync_;
  parallel::SyncStats closed_stats_;
};

py::dict stats_to_dict(const parallel::SyncStats& s) {
  py::dict d;
  d["buckets"] = s.buckets;
  d["bytes"] = s.bytes;
  d["comm_seconds"] = s.comm_seconds;
  d["exposed_seconds"] = s.exposed_seconds;
  d["overlap"] = s.overlap();
  return d;
}

py::list named_list(const NamedTensors& named) {
  py::list out;
  for (const auto& [name, t] : named) out.append(py::make_tuple(name, t));
  return out;
}

parallel::DataParallelOptions script_data_parallel_options(
    double first_bucket_mb, double bucket_cap_mb, bool find_unused_parameters,
    bool broadcast_buffers, const std::string& compression, int zero) {
  // As loom train makes them from the same settings (parallel.*).
  ParallelConfig settings;
  settings.first_bucket_mb = first_bucket_mb;
  settings.bucket_cap_mb = bucket_cap_mb;
  settings.find_unused_parameters = find_unused_parameters;
  settings.broadcast_buffers = broadcast_buffers;
  settings.compression = compression;
  parallel::DataParallelOptions o = parallel::data_parallel_options(settings);
  if (compression != "none" && !o.compression) {
    throw ConfigError("compression: expected none, bf16 or fp16, got '" + compression + "'");
  }
  // Refused before the partition moves any memory, and alike on one rank and on many.
  if (zero > 0 && o.compression) {
    throw ConfigError("compression: ZeRO (zero=" + std::to_string(zero) +
                      ") reduce-scatters the gradients as they are; compressed buckets do not "
                      "combine with it");
  }
  return o;
}

}  // namespace

void bind_replica_sync(py::module_& m) {
  py::class_<ReplicaSync>(m, "ReplicaSync",
                          "The gradient exchange of a module replicated on every training rank.")
      .def(py::init([](train::Job& job, const NamedTensors& parameters, const NamedTensors& buffers,
                       double first_bucket_mb, double bucket_cap_mb, bool find_unused_parameters,
                       bool broadcast_buffers, const std::string& compression, int zero,
                       const std::vector<std::pair<std::string, std::vector<at::Tensor>>>& blocks,
                       const std::string& zero3_keep,
                       const std::optional<parallel::LayoutPlan>& parted, int index) {
             const parallel::DataParallelOptions o = script_data_parallel_options(
                 first_bucket_mb, bucket_cap_mb, find_unused_parameters, broadcast_buffers,
                 compression, zero);
             if (zero > 0 && job.plan.servers) {
               throw ConfigError(
                   "zero: sharding the optimizer state needs all-reduce data parallelism, not "
                   "parameter servers");
             }
             const parallel::KeepAfterForward keep = parallel::keep_after_forward(zero3_keep);
             std::vector<BlockTensors> units;
             for (const auto& [name, tensors] : blocks) units.push_back({name, tensors});
             py::gil_scoped_release release;  // rank 0's parameters go to every rank
             return std::make_unique<ReplicaSync>(job, parameters, buffers, o, zero, units, keep,
                                                  parted ? &*parted : nullptr, index);
           }),
           py::arg("job"), py::arg("parameters"), py::arg("buffers"), py::arg("first_bucket_mb"),
           py::arg("bucket_cap_mb"), py::arg("find_unused_parameters"),
           py::arg("broadcast_buffers"), py::arg("compression"), py::arg("zero") = 0,
           py::arg("blocks") = std::vector<std::pair<std::string, std::vector<at::Tensor>>>{},
           py::arg("zero3_keep") = "last", py::arg("parted") = std::nullopt,
           py::arg("index") = 0, py::keep_alive<1, 2>())
      .def(
          "prepare", [](ReplicaSync& s) { s.sync().prepare(); },
          py::call_guard<py::gil_scoped_release>(), "Before a forward pass.")
      .def(
          "sync_buffers", [](ReplicaSync& s) { s.sync().sync_buffers(); },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "step",
          [](ReplicaSync& s, double lr, const py::function& local_step) {
            py::gil_scoped_release release;
            s.step(lr, [&] {
              py::gil_scoped_acquire acquire;
              local_step();
            });
          },
          py::arg("lr"), py::arg("local_step"),
          "The optimizer step: `local_step` runs this rank's optimizer; servers that keep the "
          "parameters push and pull around it; ZeRO-1/2 then all-gather the stepped shards.")
      .def("close", &ReplicaSync::close, py::call_guard<py::gil_scoped_release>())
      .def(
          "account_in",
          [](ReplicaSync& s, train::StepAccounting& steps) {
            steps.watch_exchange(s.shared_sync());
          },
          py::arg("steps"),
          "`steps` counts the exchange's waits at the end of backward as comm_exposed and "
          "reports its buckets, bytes and overlap.")
      .def("enter_no_sync", &ReplicaSync::enter_no_sync)
      .def("exit_no_sync", &ReplicaSync::exit_no_sync)
      .def("describe",
           [](const ReplicaSync& s) { return const_cast<ReplicaSync&>(s).sync().describe(); })
      .def("last_stats", [](ReplicaSync& s) { return stats_to_dict(s.last_stats()); })
      .def_property_readonly(
          "zero_stage",
          [](const ReplicaSync& s) { return s.partition() ? s.partition()->stage() : 0; },
          "The ZeRO stage in force: 0 where nothing is sharded (zero=0, or one rank).")
      .def(
          "shards",
          [](const ReplicaSync& s) {
            return s.partition() ? named_list(s.partition()->shards()) : py::list();
          },
          "Under ZeRO: what the optimizer steps, this rank's shard of each bucket "
          "[(zero.bucket<b>.rank<r>, tensor)]; [] otherwise.")
      .def_property_readonly("layout", &ReplicaSync::layout,
                             "The job's layout with the ZeRO stage in force.")
      .def_property_readonly("has_outer_block", &ReplicaSync::has_outer_block,
                             "ZeRO-3: block 0 is the parameters in no block.")
      .def(
          "before_block", [](ReplicaSync& s, std::size_t b) { s.sharded().before_block(b); },
          py::arg("block"), py::call_guard<py::gil_scoped_release>(),
          "ZeRO-3: gathers block `block`'s parameters (and starts the next block's).")
      .def(
          "after_block",
          [](ReplicaSync& s, std::size_t b, const std::vector<at::Tensor>& outputs) {
            py::gil_scoped_release release;
            s.sharded().after_block(b, outputs);
          },
          py::arg("block"), py::arg("outputs"),
          "ZeRO-3: hooks the block's backward onto its output tensors (backward gathers the "
          "block again when it reaches the first of them) and frees its parameters.")
      .def("gather_whole", &ReplicaSync::gather_whole, py::call_guard<py::gil_scoped_release>(),
           "ZeRO-3: every parameter whole on every rank (collective), until shard_again().")
      .def("shard_again", &ReplicaSync::shard_again, py::call_guard<py::gil_scoped_release>(),
           "ZeRO-3: each rank keeps its shard of the (whole) parameters only.")
      .def(
          "gather_optimizer_state",
          [](ReplicaSync& s, const NamedTensors& state) -> py::object {
            parallel::CheckpointTensors mine;
            mine.optimizer = state;
            bool holds = false;
            {
              py::gil_scoped_release release;
              holds = s.data().gather_optimizer_state(mine);
            }
            if (!holds) return py::none();
            return named_list(mine.optimizer);
          },
          py::arg("state"),
          "Every rank's optimizer shard state (under shard names) on rank 0, under the "
          "parameters' names; None on the others. Collective under ZeRO.")
      .def(
          "own_optimizer_state",
          [](const ReplicaSync& s, const NamedTensors& saved) {
            return named_list(s.data().own_optimizer_state(saved));
          },
          py::arg("saved"),
          "A checkpoint's optimizer state (under the parameters' names) cut into this rank's "
          "shards' under ZeRO; as it is otherwise.");
}

}  // namespace loom::python
