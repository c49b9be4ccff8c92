// Loom's configuration: typed structs with their defaults, one schema (visit_config) that every
// reader, writer and the documentation walk, and load_config() which turns YAML plus
// `--set key=value` overrides into a validated Config. Errors are ConfigError and name the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/transform_config.h"

namespace loom {

// The GPT family's shape (model.name: gpt): a preset, and any of its sizes replaced.
struct GptModelConfig {
  std::string preset = "gpt_tiny";  // gpt_tiny | gpt_mini | gpt2
  int64_t n_layer = 0;              // 0 = the preset's
  int64_t n_head = 0;
  int64_t n_embd = 0;
  double dropout = 0.0;
};

// The Llama family's shape (model.name: llama): a preset, and any of its sizes replaced.
struct LlamaModelConfig {
  std::string preset = "llama_tiny";  // llama_tiny | llama3.2_1b | llama3.2_3b | llama3.1_8b
  int64_t n_layer = 0;                // 0 = the preset's
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t n_embd = 0;
  int64_t hidden = 0;
  double rope_theta = 0;
  std::string embeddings = "preset";  // preset | tied | untied: the head and the token embedding
};

// LoRA adapters on a model's linears (model.lora); rank 0: none.
struct LoraModelConfig {
  int64_t rank = 0;
  double alpha = 16;
  double dropout = 0.0;
  std::vector<std::string> targets;  // fnmatch patterns over the linears' names
};

struct ModelConfig {
  // mlp | cnn | resnet18 | resnet50 | vit_tiny | gpt | llama | torchscript
  std::string name = "cnn";
  std::string torchscript;  // path of a TorchScript module, when name is torchscript
  std::string pretrained;   // gpt, llama: a Hugging Face model folder to start from
  int64_t width = 32;       // cnn: channels of the first stage
  int64_t depth = 1;        // cnn: convolutions per stage
  double dropout = 0.25;
  int64_t patch_size = 16;  // vit_tiny
  GptModelConfig gpt;
  LlamaModelConfig llama;
  LoraModelConfig lora;
};

// Remote data workers (`loom data-worker`) that build training batches for this trainer.
struct RemoteDataConfig {
  std::vector<std::string> workers;  // host:port of each; empty = local loading only
  std::string token_file;            // the workers' shared secret ("" = they need none)
  std::string tls_ca;                // PEM certificate to trust for TLS ("" = plaintext)
  int64_t local_threads = -1;        // local loader threads besides them; -1 = data.workers'
  double timeout_s = 30;             // a request not answered by then fails over
  double reconnect_s = 3;            // between tries to reach a worker that is down
  int64_t max_inflight_bytes = int64_t{256} << 20;  // batches requested or waiting, in bytes
  std::string compression = "none";                 // none | lz4: of images on the wire
};

struct DataConfig {
  std::string source =
      "fashion_mnist";       // fashion_mnist | idx | synthetic | image_folder | tar_shards | tokens
  std::string path;          // folder of IDX files, the training image folder, or token shards
  int64_t seq_len = 0;       // tokens: tokens per window (0 = the model's context)
  std::string val_path;      // encoded sources: validation data ("" = no evaluation)
  int64_t batch_size = 64;   // per rank
  int64_t global_batch = 0;  // all ranks; 0 = batch_size x ranks, else batch_size is derived
  std::string shard = "drop";  // drop | pad: how an epoch splits into equal rank shares
  int64_t eval_batch_size = 500;
  bool augment = false;  // random flip and shift of training images (IDX sources)
  std::vector<TransformConfig> transforms;       // training; empty = the source's default
  std::vector<TransformConfig> eval_transforms;  // evaluation; empty = resize + center crop
  int64_t workers = 0;                           // loader threads; 0 = auto
  int64_t prefetch_batches = 4;                  // batches prepared ahead
  int64_t prefetch_bytes = int64_t{512} << 20;   // and at most this many bytes of them
  std::string bad_samples = "skip";              // skip | substitute | fail
  double max_bad_fraction = 0.05;
  int64_t max_pixels = 100000000;  // larger images are refused as bad samples
  int64_t image_size = 224;        // synthetic: height and width; encoded: default crop size
  int64_t channels = 3;            // synthetic
  int64_t classes = 10;            // synthetic
  int64_t train_samples = 1024;    // synthetic
  int64_t test_samples = 256;      // synthetic
  RemoteDataConfig remote;
};

struct TrainConfig {
  int64_t epochs = 3;
  int64_t max_steps = 0;  // optimizer steps; 0 = run all epochs
  int64_t grad_accum = 1;
  double grad_clip = 0.0;  // max global L2 norm; 0 = off
  double label_smoothing = 0.0;
  int64_t log_every = 50;
  bool eval = true;              // evaluate on the test split after every epoch
  bool tensorboard = true;       // write TensorBoard scalars to the run directory
  double preempt_grace_s = 30;   // SIGTERM: finish the step and commit a checkpoint by then
  double stall_timeout_s = 600;  // no progress for this long: report, dump stacks, exit 1 (0 = off)
  std::string activation_checkpointing = "none";  // none | blocks | every_k
  int64_t activation_checkpointing_k = 2;         // every_k: every k-th block is recomputed
};

struct OptimizerConfig {
  std::string name = "sgd";  // sgd | adam | adamw
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = 5e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  std::string lr_scaling = "none";  // none | linear (lr x ranks)
};

struct ScheduleConfig {
  std::string name = "cosine";  // constant | step | cosine
  int64_t warmup_steps = 100;
  int64_t step_size = 1000;  // step: multiply by gamma every step_size steps
  double gamma = 0.1;
  double min_lr = 0.0;  // cosine floor
};

struct RuntimeConfig {
  std::string device = "cpu";          // auto | cpu | cuda | cuda:N
  std::string precision = "auto";      // auto | fp32 | bf16
  std::string memory_format = "auto";  // auto | contiguous | channels_last
  int64_t threads = 0;                 // 0 = auto (usable cores)
  std::string allocator = "caching";   // caching | system
  bool deterministic = false;          // torch's deterministic algorithms (cuDNN's, cuBLAS's)
};

struct CheckpointConfig {
  bool enabled = true;
  int64_t every_steps = 0;  // 0 = at the end of every epoch
  int64_t keep = 3;
  // none | test_loss | test_accuracy | test_perplexity: the best evaluation's checkpoint is kept
  // beside the last `keep`
  std::string keep_best = "none";
  std::string on_error = "stop";  // stop | warn: a save that fails (disk full) stops the run
  bool async = false;  // copy the state at the step boundary, write and commit it in the background
};

struct ProfileConfig {
  bool trace = false;  // write a Chrome trace of some steps (loom train --trace)
  int64_t trace_wait = 5;
  int64_t trace_warmup = 1;
  int64_t trace_active = 10;
};

// `loom train --autotune`: the first steps try other values of the settings that trade cores and
// memory for speed (see profile/autotuner.h).
struct AutotuneConfig {
  bool enabled = false;
  int64_t samples = 3;  // per candidate; the score is their median
  int64_t sample_steps = 5;
  double sample_seconds = 0.2;
  int64_t warmup_steps = 2;  // after each change
  double min_gain = 0.03;
  double max_share = 0.25;  // of the run's steps at most
};

// Data-parallel runs (started by `loom launch` or another launcher with more than one rank).
struct CommConfig {
  std::string backend = "auto";  // auto | shm | tcp
  double timeout_s = 300;
  bool check_calls = false;
};

// Pipeline model parallelism: the model's blocks split into stages on several ranks.
struct PipelineConfig {
  int64_t stages = 1;             // pipeline ranks (P)
  int64_t microbatches = 4;       // per optimizer step (M)
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb_h1 | FILE.csv
  int64_t chunks = 1;             // stages per rank (interleaved)
  std::string split;              // blocks per stage, "4,6"; empty = the partitioner's choice
  double memory_cap_mb = 0;       // per rank; 0 = no cap
};

// Parameter servers (parallel.mode: ps); parallel::plan_layout reads them into typed values.
struct PsConfig {
  int64_t servers = 1;                  // K server ranks after the workers
  double part_mb = 4;                   // parts gradients are cut into (BytePS's 4 MB)
  std::string mode = "sync";            // sync | async | ssp
  int64_t staleness = 0;                // SSP bound s
  std::string optimizer_on = "worker";  // worker | server
};

struct ParallelConfig {
  std::string mode = "data";  // data (all-reduce) | ps (parameter servers)
  double first_bucket_mb = 1;
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  std::string compression = "none";  // none | bf16 | fp16
  int64_t zero = 0;  // 0 | 1: optimizer state | 2: and gradients | 3: and parameters sharded
  std::string zero3_keep = "last";  // none | last | all: gathered blocks kept for backward
  double memory_cap_mb = 0;         // a rank's parameters, gradients and optimizer state; 0: none
  int64_t tensor = 1;            // ranks each transformer layer is split over (tensor parallelism)
  bool tensor_sequence = false;  // and the LayerNorm/dropout regions over the sequence
  PipelineConfig pipeline;
  PsConfig ps;
  // parallel.mode, the one place its words are compared: parameter servers (ps), or data
  // parallel (data: all-reduce, with or without pipeline stages).
  bool parameter_servers() const { return mode == "ps"; }
};

struct Config {
  int64_t seed = 0;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  RuntimeConfig runtime;
  CheckpointConfig checkpoint;
  ProfileConfig profile;
  AutotuneConfig autotune;
  CommConfig comm;
  ParallelConfig parallel;
};

// The schema, as a visitor over every field. Keys are dotted paths ("train.epochs").
class ConfigVisitor {
 public:
  virtual ~ConfigVisitor() = default;
  virtual void integer(const char* key, int64_t& value, int64_t min, const char* help) = 0;
  virtual void number(const char* key, double& value, double min, const char* help) = 0;
  virtual void boolean(const char* key, bool& value, const char* help) = 0;
  virtual void text(const char* key, std::string& value, const char* help) = 0;
  virtual void choice(const char* key, std::string& value, const std::vector<std::string>& options,
                      const char* help) = 0;
  // An integer >= 1, or "auto" stored as 0.
  virtual void count_or_auto(const char* key, int64_t& value, const char* help) = 0;
  // A list of strings: a YAML sequence, or one comma-separated string (for --set).
  virtual void text_list(const char* key, std::vector<std::string>& value, const char* help) = 0;
  // A list of transforms (see transform_config.h).
  virtual void transforms(const char* key, std::vector<TransformConfig>& value,
                          const char* help) = 0;
};

void visit_config(Config& config, ConfigVisitor& visitor);

// Defaults, with data.path taken from LOOM_FASHION_MNIST_DIR.
Config default_config();

// YAML text (may be empty) plus "key=value" overrides -> validated Config. `origin` names the
// YAML's source in messages. Throws ConfigError naming the key.
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides);

// Reads the files in order (none: the defaults), each key of a later file replacing the same
// key of an earlier one (a list, such as data.transforms, is replaced whole), then applies the
// overrides; keys no file sets keep their defaults.
Config load_config(const std::vector<std::string>& paths,
                   const std::vector<std::string>& overrides);

// The resolved configuration with every field written out, as YAML and as JSON text.
std::string config_to_yaml(const Config& config);
std::string config_to_json(const Config& config);

// One row per key for the configuration reference: key, type, default, description.
struct ConfigKeyDoc {
  std::string key, type, default_value, help;
};
std::vector<ConfigKeyDoc> describe_config();

}  // namespace loom
