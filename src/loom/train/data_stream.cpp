#include "loom/train/data_stream.h"

#include "loom/core/error.h"
#include "loom/core/topology.h"
#include "loom/train/train_data.h"

namespace loom::train {

at::ScalarType parse_stream_dtype(const std::string& text, const std::string& key) {
  if (text == "float32" || text == "float") return at::kFloat;
  if (text == "bfloat16") return at::kBFloat16;
  if (text == "float16" || text == "half") return at::kHalf;
  throw ConfigError(key + ": expected float32, bfloat16 or float16, got '" + text + "'");
}

DataStream::DataStream(const Config& config, DataStreamOptions options)
    : options_(std::move(options)), device_(data::parse_feed_device(options_.device, "device")) {
  if (options_.world < 1 || options_.rank < 0 || options_.rank >= options_.world) {
    throw ConfigError("rank: expected 0 <= rank < world, got rank " +
                      std::to_string(options_.rank) + " of world " +
                      std::to_string(options_.world));
  }
  if (options_.dtype != at::kFloat && options_.dtype != at::kBFloat16 &&
      options_.dtype != at::kHalf) {
    throw ConfigError(std::string("dtype: expected float32, bfloat16 or float16, got ") +
                      c10::toString(options_.dtype));
  }
  const int cores =
      options_.usable_cores > 0 ? options_.usable_cores : detect_topology().usable_cores;
  // Only the training split: a training loop evaluates with its own code.
  TrainData data =
      load_train_data(config, config.data.batch_size, cores, options_.rank, options_.world,
                      /*pin_memory=*/device_.is_cuda(), /*with_test=*/false);
  source_ = std::move(data.train);
  channel_stats_ = data.stats;
  loader_threads_ = data.loader_threads;
  decodes_ = data.decoded;
  tokens_per_sample_ = data.input.tokens_per_sample();
  if (options_.normalize) {
    feeder_ = std::make_unique<data::Feeder>(
        channel_stats_,
        options_.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous,
        device_);
  }
  source_->seek(0, 0);
}

DataStream::~DataStream() = default;

std::optional<StreamBatch> DataStream::next() {
  if (step_ >= steps_per_epoch()) {
    ++epoch_;
    step_ = 0;
    source_->seek(epoch_, 0);
    return std::nullopt;
  }
  StreamBatch out = to_output(source_->batch(epoch_, step_));
  out.epoch = epoch_;
  out.step = step_++;
  return out;
}

StreamBatch DataStream::to_output(data::Batch batch) const {
  StreamBatch out;
  const bool to_device = !device_.is_cpu();
  out.targets = to_device ? batch.targets.to(device_, /*non_blocking=*/true) : batch.targets;
  if (!feeder_) {
    out.inputs = to_device ? batch.inputs.to(device_, /*non_blocking=*/true) : batch.inputs;
    return out;
  }
  out.inputs = feeder_->to_input(batch.inputs);
  if (options_.dtype != at::kFloat && out.inputs.is_floating_point()) {
    out.inputs = out.inputs.to(options_.dtype);
  }
  return out;
}

void DataStream::set_epoch(int64_t epoch) {
  if (epoch < 0)
    throw ConfigError("set_epoch: expected an epoch >= 0, got " + std::to_string(epoch));
  if (epoch == epoch_) return;
  epoch_ = epoch;
  step_ = 0;
  source_->seek(epoch_, 0);
}

data::LoaderState DataStream::state() const {
  data::LoaderState s = source_->identity();
  const bool ended = step_ >= steps_per_epoch();
  s.epoch = ended ? epoch_ + 1 : epoch_;
  s.step = ended ? 0 : step_;
  return s;
}

void DataStream::restore(const data::LoaderState& saved) {
  data::check_same_sequence(saved, source_->identity(), "state_dict");
  if (saved.epoch < 0 || saved.step < 0 || saved.step >= steps_per_epoch()) {
    throw DataError("state_dict: position epoch " + std::to_string(saved.epoch) + " step " +
                    std::to_string(saved.step) + " is outside an epoch of " +
                    std::to_string(steps_per_epoch()) + " batches");
  }
  epoch_ = saved.epoch;
  step_ = saved.step;
  source_->seek(epoch_, step_);
}

}  // namespace loom::train
