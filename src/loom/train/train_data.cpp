#include "loom/train/train_data.h"

#include <unistd.h>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/topology.h"
#include "loom/data/configured_loaders.h"
#include "loom/data/remote/remote_batch_source.h"
#include "loom/data/remote/remote_config.h"
#include "loom/data/token_batch_source.h"
#include "loom/models/model.h"

namespace loom::train {
namespace {

// The training loader fed by data.remote.workers as well as by its own threads.
std::unique_ptr<data::BatchSource> with_remote_workers(
    const Config& config, std::unique_ptr<data::LocalBatchSource> local, int loader_threads,
    int rank, int world) {
  const int64_t batch_size = local->layout().batch_size;
  const RemoteDataConfig& remote = config.data.remote;
  data::RemoteSourceOptions options;
  options.workers = remote.workers;
  options.local_threads =
      remote.local_threads < 0 ? loader_threads : static_cast<int>(remote.local_threads);
  options.fallback_threads = loader_threads;
  options.max_inflight_bytes = remote.max_inflight_bytes;
  options.prefetch_batches = static_cast<int>(config.data.prefetch_batches);
  options.max_bad_fraction = config.data.max_bad_fraction;
  options.reconnect_every =
      std::chrono::milliseconds(static_cast<int64_t>(remote.reconnect_s * 1000));
  data::ConnectionOptions& c = options.connection;
  if (!remote.token_file.empty()) {
    c.token = read_token_file(remote.token_file, "config key 'data.remote.token_file'");
  }
  if (!remote.tls_ca.empty()) {
    try {
      c.tls_ca = read_file(remote.tls_ca);
    } catch (const Error& e) {
      throw ConfigError(std::string("config key 'data.remote.tls_ca': ") + e.what());
    }
  }
  c.timeout = std::chrono::milliseconds(static_cast<int64_t>(remote.timeout_s * 1000));
  c.lz4 = remote.compression == "lz4";
  c.client = host_name("?") + " pid " + std::to_string(::getpid());
  c.config = data::remote_config_text(config, batch_size);
  c.rank = rank;
  c.world = world;
  return std::make_unique<data::RemoteBatchSource>(std::move(local), std::move(options));
}

// Windows of the token shards in data.path: training ones of this rank's share (from
// data.remote.workers too where it names some), evaluation ones of the validation split.
TrainData load_token_data(const Config& config, int64_t batch_size, int rank, int world,
                          bool with_test) {
  const int64_t seq_len = token_seq_len(config);
  data::ConfiguredTokens tokens =
      data::make_token_batches(config, seq_len, batch_size, rank, world, with_test);
  TrainData out;
  if (config.data.remote.workers.empty()) {
    out.train = std::move(tokens.train);
  } else {
    Config sent = config;  // the workers make windows of the length a GPT preset implies
    sent.data.seq_len = seq_len;
    out.train = with_remote_workers(sent, std::move(tokens.train), 1, rank, world);
  }
  out.test = std::move(tokens.test);
  out.input.task = models::Task::kLanguageModel;
  // The model's vocabulary is the shards', which TokenWindows::open checked against the
  // tokenizer's and every id of every shard against (TokenShard::open): no id reaches the
  // embedding that it has no row for.
  out.input.classes = tokens.vocab_size;
  out.input.seq_len = seq_len;
  out.loss_masked = tokens.loss_masked;
  return out;
}

}  // namespace

int64_t token_seq_len(const Config& config) {
  if (config.data.seq_len > 0) return config.data.seq_len;
  if (const int64_t context = models::configured_context(config.model); context > 0) {
    return context;
  }
  throw ConfigError("config key 'data.seq_len': needed for tokens with model " + config.model.name);
}

TrainData load_train_data(const Config& config, int64_t batch_size, int usable_cores, int rank,
                          int world, bool pin_memory, bool with_test) {
  if (config.data.source == "tokens") {
    return load_token_data(config, batch_size, rank, world, with_test);
  }
  data::ConfiguredLoaders loaders =
      data::make_loaders(config, batch_size, usable_cores, rank, world, pin_memory, with_test);
  TrainData out;
  out.train =
      config.data.remote.workers.empty()
          ? std::move(loaders.train)
          : with_remote_workers(config, std::move(loaders.train), loaders.threads, rank, world);
  out.test = std::move(loaders.test);
  // Evaluation reads the test set as epoch 0 every time: nothing of a next epoch to prepare.
  if (out.test) out.test->set_epoch_limit(1);
  out.stats = loaders.stats;
  out.input.channels = loaders.channels;
  out.input.height = loaders.height;
  out.input.width = loaders.width;
  out.input.classes = loaders.classes;
  out.loader_threads = loaders.threads;
  out.decoded = loaders.decoded;
  return out;
}

}  // namespace loom::train
