// The one list of configuration keys. Add a field here and it is read, validated, written to
// config.yaml, stored in checkpoints and documented.
#include "loom/core/config.h"
#include "loom/core/settings.h"

namespace loom {

void visit_config(Config& c, ConfigVisitor& v) {
  v.integer("seed", c.seed, 0, "Seed for initialisation, data order and augmentation.");

  v.choice("model.name", c.model.name,
           {"mlp", "cnn", "resnet18", "resnet50", "vit_tiny", "gpt", "llama", "torchscript"},
           "Model architecture. `model: NAME` is shorthand for this key.");
  v.text("model.torchscript", c.model.torchscript,
         "Path of a TorchScript module to train (`model: {torchscript: PATH}`).");
  v.text("model.pretrained", c.model.pretrained,
         "gpt, llama: a Hugging Face model folder (config.json and model.safetensors, or a "
         "sharded model.safetensors.index.json) to start from: its config.json gives the shape "
         "(the preset and size keys must be left unset) and its tensors the weights, at any "
         "layout. model.name must be its family (gpt2: gpt; llama: llama).");
  v.integer("model.width", c.model.width, 1,
            "cnn: channels of the first stage (x2 in the second).");
  v.integer("model.depth", c.model.depth, 1, "cnn: convolutions per stage.");
  v.number("model.dropout", c.model.dropout, 0.0, "Dropout before the classifier (mlp, cnn).");
  v.integer("model.patch_size", c.model.patch_size, 1, "Patch size of vit_tiny.");
  v.choice("model.gpt.preset", c.model.gpt.preset, {"gpt_tiny", "gpt_mini", "gpt2"},
           "gpt: the shape to start from: gpt_tiny (4 layers, 4 heads, 128 wide, context 64), "
           "gpt_mini (6, 6, 384, context 256) or gpt2 (12, 12, 768, context 1024: GPT-2 small). "
           "The vocabulary is always the token data's.");
  v.integer("model.gpt.n_layer", c.model.gpt.n_layer, 0, "gpt: layers (0 = the preset's).");
  v.integer("model.gpt.n_head", c.model.gpt.n_head, 0,
            "gpt: attention heads; must divide n_embd (0 = the preset's).");
  v.integer("model.gpt.n_embd", c.model.gpt.n_embd, 0, "gpt: width (0 = the preset's).");
  v.number("model.gpt.dropout", c.model.gpt.dropout, 0.0,
           "gpt: dropout after the embeddings, on attention weights and after each residual "
           "branch.");

  v.choice("model.llama.preset", c.model.llama.preset,
           {"llama_tiny", "llama3.2_1b", "llama3.2_3b", "llama3.1_8b"},
           "llama: the shape to start from: llama_tiny (4 layers, 4 heads, 2 key/value heads, "
           "128 wide, MLP 384, context 64), llama3.2_1b (16, 32, 8, 2048, 8192), llama3.2_3b "
           "(28, 24, 8, 3072, 8192) or llama3.1_8b (32, 32, 8, 4096, 14336, untied head); the "
           "last three with theta 500,000, Llama 3.1's frequency scaling and a context of 8,192. "
           "The vocabulary is always the token data's.");
  v.integer("model.llama.n_layer", c.model.llama.n_layer, 0, "llama: layers (0 = the preset's).");
  v.integer("model.llama.n_head", c.model.llama.n_head, 0,
            "llama: query heads; must divide n_embd (0 = the preset's).");
  v.integer("model.llama.n_kv_head", c.model.llama.n_kv_head, 0,
            "llama: key/value heads, each shared by n_head / n_kv_head query heads; must divide "
            "n_head (0 = the preset's).");
  v.integer("model.llama.n_embd", c.model.llama.n_embd, 0, "llama: width (0 = the preset's).");
  v.integer("model.llama.hidden", c.model.llama.hidden, 0,
            "llama: the SwiGLU MLP's width (0 = the preset's).");
  v.number("model.llama.rope_theta", c.model.llama.rope_theta, 0.0,
           "llama: the rotary positions' base (0 = the preset's).");
  v.choice("model.llama.embeddings", c.model.llama.embeddings, {"preset", "tied", "untied"},
           "llama: whether the output head is the token embedding's matrix (tied) or a matrix of "
           "its own (untied); preset = the preset's.");

  v.integer("model.lora.rank", c.model.lora.rank, 0,
            "gpt, llama: LoRA adapters of this rank on the linears model.lora.targets names, the "
            "rest of the model frozen (no gradients, no optimizer state); 0 = none.");
  v.number("model.lora.alpha", c.model.lora.alpha, 0.0,
           "LoRA: the adapters' output is scaled by alpha / rank.");
  v.number("model.lora.dropout", c.model.lora.dropout, 0.0,
           "LoRA: dropout on the adapters' input.");
  v.text_list(
      "model.lora.targets", c.model.lora.targets,
      "LoRA: fnmatch patterns over the model's linear names (\"layers.*.self_attn.q_proj\", "
      "\"*.v_proj\", \"h.*.attn.c_attn\"); each must name at least one linear.");

  v.choice("data.source", c.data.source,
           {"fashion_mnist", "idx", "synthetic", "image_folder", "tar_shards", "tokens"},
           "Where samples come from. `data: SOURCE` is shorthand for this key.");
  v.text("data.path", c.data.path,
         "Folder with the four IDX files (fashion_mnist, idx); the training image folder "
         "(image_folder: one subfolder per class); a .tar shard or a folder of them "
         "(tar_shards: key.jpg + key.cls members); a `loom data tokenize` folder (tokens: "
         "train-*.tokens, val-*.tokens and tokenizer.model).");
  v.integer(
      "data.seq_len", c.data.seq_len, 0,
      "tokens: tokens per training window (the model sees seq_len and predicts the next "
      "token at each); it is also a gpt's or llama's context. 0 = the model preset's context.");
  v.text("data.val_path", c.data.val_path,
         "image_folder, tar_shards: the validation data; empty = no evaluation.");
  v.integer("data.batch_size", c.data.batch_size, 1,
            "Samples per optimizer micro-step on each data-parallel replica (a rank, or a "
            "tensor group or pipeline of ranks, which share one batch). With several replicas "
            "and no data.global_batch the step's batch grows with them, and the run says so.");
  v.integer("data.global_batch", c.data.global_batch, 0,
            "Samples per micro-step over all replicas; when set, data.batch_size is derived from "
            "it (global_batch / replicas, which must divide), so the same file takes the same "
            "batch on any number of ranks. 0 = data.batch_size x replicas.");
  v.choice("data.shard", c.data.shard, {"drop", "pad"},
           "Data-parallel runs: every rank gets an equal share of each epoch; drop leaves out the "
           "last samples that do not divide evenly, pad repeats a few from the start.");
  v.integer("data.eval_batch_size", c.data.eval_batch_size, 1, "Samples per evaluation batch.");
  v.boolean("data.augment", c.data.augment,
            "IDX and synthetic data without data.transforms: random +-2 pixel shift and "
            "horizontal flip of training images.");
  v.transforms("data.transforms", c.data.transforms,
               "Training transforms, in order (see Transforms below). [] = the source's default: "
               "random_resized_crop(image_size) + random_horizontal_flip for encoded images, "
               "nothing (or data.augment) for IDX and synthetic data.");
  v.transforms("data.eval_transforms", c.data.eval_transforms,
               "Evaluation transforms. [] = resize(image_size * 8 / 7) + center_crop(image_size) "
               "for encoded images, nothing for IDX and synthetic data.");
  v.count_or_auto("data.workers", c.data.workers,
                  "Loader threads; auto = the usable cores for encoded images, 1 for data held "
                  "in memory.");
  v.integer("data.prefetch_batches", c.data.prefetch_batches, 1,
            "Batches prepared ahead of training.");
  v.integer("data.prefetch_bytes", c.data.prefetch_bytes, 1,
            "Caps the batches prepared ahead by their bytes (uint8 pixels); at least one batch "
            "is always prepared.");
  v.choice("data.bad_samples", c.data.bad_samples, {"skip", "substitute", "fail"},
           "An unreadable or corrupt sample is skipped (counted, its batch comes out shorter), "
           "substituted (by a deterministic replacement, so batches keep their size), or fails "
           "the run.");
  v.number("data.max_bad_fraction", c.data.max_bad_fraction, 0.0,
           "Fail when more than this share of the samples seen were bad.");
  v.integer("data.max_pixels", c.data.max_pixels, 1,
            "Encoded images with more pixels are refused as bad (decompression bombs).");
  v.integer("data.image_size", c.data.image_size, 1,
            "Synthetic images: height and width. Encoded images: the side of the default "
            "transforms' crop.");
  v.integer("data.channels", c.data.channels, 1, "Synthetic images: channels.");
  v.integer("data.classes", c.data.classes, 2, "Synthetic images: number of classes.");
  v.integer("data.train_samples", c.data.train_samples, 1, "Synthetic images: training samples.");
  v.integer("data.test_samples", c.data.test_samples, 1, "Synthetic images: test samples.");
  v.text_list("data.remote.workers", c.data.remote.workers,
              "Remote data workers (`loom data-worker`) as host:port; training batches come from "
              "them and from local threads at once, identical to local loading. [] = local only.");
  v.text("data.remote.token_file", c.data.remote.token_file,
         "File holding the workers' shared secret (their --token-file); \"\" = none.");
  v.text("data.remote.tls_ca", c.data.remote.tls_ca,
         "PEM certificate (or CA) the workers' TLS certificates are checked against; \"\" = "
         "plaintext gRPC.");
  v.integer("data.remote.local_threads", c.data.remote.local_threads, -1,
            "Local loader threads building batches besides the workers; 0 = workers only (local "
            "threads still take over when every worker is gone); -1 = as data.workers.");
  v.number("data.remote.timeout_s", c.data.remote.timeout_s, 0.001,
           "A worker that has not answered a request by then is timed out and named, and the "
           "batch goes to another producer.");
  v.number("data.remote.reconnect_s", c.data.remote.reconnect_s, 0.01,
           "Seconds between tries to reach a worker that is down, refused, or not started yet.");
  v.integer("data.remote.max_inflight_bytes", c.data.remote.max_inflight_bytes, 1,
            "Batches requested from workers or waiting for the trainer, at most this many bytes.");
  v.choice("data.remote.compression", c.data.remote.compression, {"none", "lz4"},
           "Compression of images on the wire: lz4 for slow links, none where the link is faster "
           "than LZ4 (a few hundred MB/s per core).");

  v.integer("train.epochs", c.train.epochs, 1, "Passes over the training set.");
  v.integer("train.max_steps", c.train.max_steps, 0,
            "Stop after this many optimizer steps (0 = run all epochs).");
  v.integer("train.grad_accum", c.train.grad_accum, 1,
            "Micro-batches accumulated per optimizer step.");
  v.number("train.grad_clip", c.train.grad_clip, 0.0,
           "Clip the global gradient L2 norm to this value (0 = off).");
  v.number("train.label_smoothing", c.train.label_smoothing, 0.0,
           "Label smoothing of the cross-entropy loss, in [0, 1).");
  v.integer("train.log_every", c.train.log_every, 1,
            "Optimizer steps between metric lines (and a line at the last step; every step "
            "when the run is shorter).");
  v.boolean("train.eval", c.train.eval, "Evaluate on the test split after every epoch.");
  v.boolean("train.tensorboard", c.train.tensorboard,
            "Write loss, learning rate, samples/s, test results and each phase's share of the "
            "step time as TensorBoard scalars (events.out.tfevents.* in the run directory).");
  v.number("train.preempt_grace_s", c.train.preempt_grace_s, 1.0,
           "After SIGTERM (spot preemption, loom launch passing one on) the ranks finish the "
           "step they are in, agree on it, commit a checkpoint and exit with status 75 "
           "(preempted, resumable) within this many seconds; past it they exit 1 and the last "
           "committed checkpoint stands.");
  v.number("train.stall_timeout_s", c.train.stall_timeout_s, 0.0,
           "A rank that makes no progress (no step, phase, evaluation batch or checkpoint file) "
           "for this many seconds logs its phase, what it waits for and which ranks lag, "
           "writes every thread's stack to its log and exits 1 (0 = no watchdog).");
  v.choice("train.activation_checkpointing", c.train.activation_checkpointing,
           {"none", "blocks", "every_k"},
           "Recompute blocks' forward passes in backward instead of keeping their activations: "
           "blocks = every block but the last, every_k = every k-th of them "
           "(train.activation_checkpointing_k). Costs about one more forward pass; works in "
           "every parallel mode.");
  v.integer("train.activation_checkpointing_k", c.train.activation_checkpointing_k, 1,
            "every_k: recompute blocks k-1, 2k-1, ... (the k-th, 2k-th, ... block).");

  v.choice("optimizer.name", c.optimizer.name, {"sgd", "adam", "adamw"}, "Optimizer.");
  v.number("optimizer.lr", c.optimizer.lr, 0.0, "Peak learning rate.");
  v.number("optimizer.momentum", c.optimizer.momentum, 0.0, "SGD momentum.");
  v.boolean("optimizer.nesterov", c.optimizer.nesterov, "SGD Nesterov momentum.");
  v.number("optimizer.weight_decay", c.optimizer.weight_decay, 0.0,
           "L2 penalty (sgd, adam) or decoupled weight decay (adamw).");
  v.number("optimizer.beta1", c.optimizer.beta1, 0.0, "Adam/AdamW first-moment decay.");
  v.number("optimizer.beta2", c.optimizer.beta2, 0.0, "Adam/AdamW second-moment decay.");
  v.number("optimizer.eps", c.optimizer.eps, 0.0, "Adam/AdamW denominator epsilon.");
  v.choice("optimizer.lr_scaling", c.optimizer.lr_scaling, {"none", "linear"},
           "linear = multiply optimizer.lr (and schedule.min_lr) by the number of ranks, the "
           "linear scaling rule for a global batch that grows with them.");

  v.choice("schedule.name", c.schedule.name, {"constant", "step", "cosine"},
           "Learning-rate schedule after warm-up.");
  v.integer("schedule.warmup_steps", c.schedule.warmup_steps, 0,
            "Linear warm-up from 0 to optimizer.lr over this many steps.");
  v.integer("schedule.step_size", c.schedule.step_size, 1,
            "step: multiply the rate by schedule.gamma every this many steps.");
  v.number("schedule.gamma", c.schedule.gamma, 0.0, "step: decay factor.");
  v.number("schedule.min_lr", c.schedule.min_lr, 0.0, "cosine: final learning rate.");

  v.text("runtime.device", c.runtime.device,
         "Where the model trains: cpu, cuda (each rank takes the GPU of its local rank), cuda:N, "
         "or auto (cuda where this process can use a GPU, else cpu). docs/gpu.md says what runs "
         "on a GPU so far.");
  v.choice("runtime.precision", c.runtime.precision, {"auto", "fp32", "bf16", "fp16"},
           "auto = bf16 autocast on a GPU with bf16 tensor cores (Ampere on) and on a CPU with "
           "AVX-512 BF16 or AMX; fp16 autocast with dynamic loss scaling on an older GPU with "
           "tensor cores (V100, T4); else fp32.");
  v.choice("runtime.memory_format", c.runtime.memory_format,
           {"auto", "contiguous", "channels_last"},
           "auto = channels_last for convolutional models.");
  v.count_or_auto("runtime.threads", c.runtime.threads,
                  "Compute threads; auto = the cores this process may run on.");
  v.choice("runtime.allocator", c.runtime.allocator, {"caching", "system"},
           "caching = reuse freed tensor memory (up to a quarter of RAM), and let glibc keep "
           "large freed blocks (gRPC's, decoders'), instead of returning them to the OS every "
           "step.");

  v.boolean("runtime.deterministic", c.runtime.deterministic,
            "Only deterministic algorithms (torch.use_deterministic_algorithms; on a GPU "
            "cuDNN's deterministic convolutions, no cuDNN benchmarking, and cuBLAS's fixed "
            "workspace), so that a run, and a resumed run, repeat bit for bit; an operation "
            "without a deterministic implementation stops the run naming it. Slower on a GPU. "
            "false leaves torch's settings as they stand.");

  v.boolean("checkpoint.enabled", c.checkpoint.enabled, "Write checkpoints.");
  v.integer("checkpoint.every_steps", c.checkpoint.every_steps, 0,
            "Optimizer steps between checkpoints (0 = at the end of every epoch).");
  v.integer("checkpoint.keep", c.checkpoint.keep, 1, "Checkpoints kept; older ones are deleted.");
  v.choice("checkpoint.keep_best", c.checkpoint.keep_best,
           {"none", "test_loss", "test_accuracy", "test_perplexity"},
           "Keep the checkpoint of the best evaluation by this metric (lowest test_loss or "
           "test_perplexity, highest test_accuracy) beside the last checkpoint.keep, also "
           "after --resume; every evaluation's step then gets a checkpoint. summary.json names "
           "it (best_checkpoint). test_perplexity needs a language model (data.source tokens); "
           "a language model's test_accuracy is its next-token accuracy.");
  v.choice("checkpoint.on_error", c.checkpoint.on_error, {"stop", "warn"},
           "A checkpoint that cannot be written (disk full, a read-only file system): stop = "
           "the run exits 1 naming the path and the bytes needed; warn = it logs that and "
           "trains on. Either way the previous checkpoint stays intact.");
  v.boolean("checkpoint.async", c.checkpoint.async,
            "At the step boundary copy the state into host buffers kept between checkpoints "
            "and go on training while a thread writes and commits it. A checkpoint waits for "
            "the previous one to commit; preemption and the end of the run wait for the write "
            "in flight; a crash during it leaves the last committed checkpoint. Costs host "
            "memory the size of the checkpoint (on the rank that writes it).");

  v.boolean("profile.trace", c.profile.trace,
            "Write OUT/trace.json, a Chrome trace (Perfetto) of some steps: each step's phases on "
            "the main thread (and on a GPU's clock, on the device's own track), batch building on "
            "each loader thread, prefetch depth. `loom train --trace` sets it.");
  v.integer("profile.trace_wait", c.profile.trace_wait, 0,
            "Steps run before tracing starts (start-up is not typical).");
  v.integer("profile.trace_warmup", c.profile.trace_warmup, 0,
            "Then steps run without recording, to settle.");
  v.integer("profile.trace_active", c.profile.trace_active, 1, "Then steps recorded.");

  v.boolean("autotune.enabled", c.autotune.enabled,
            "Tune data.workers, runtime.threads, data.prefetch_batches and (data parallel) "
            "parallel.bucket_cap_mb during the first steps, one at a time, by measured samples/s; "
            "the result goes to summary.json and OUT/autotune.yaml. Never changes the batch size "
            "or precision. `loom train --autotune` sets it.");
  v.integer("autotune.samples", c.autotune.samples, 1,
            "Samples measured per candidate value; its score is their median.");
  v.integer("autotune.sample_steps", c.autotune.sample_steps, 1, "Steps per sample, at least.");
  v.number("autotune.sample_seconds", c.autotune.sample_seconds, 0.0,
           "Seconds per sample, at least (very short steps are noisy).");
  v.integer("autotune.warmup_steps", c.autotune.warmup_steps, 0,
            "Steps run after each change before measuring.");
  v.number("autotune.min_gain", c.autotune.min_gain, 0.0,
           "A candidate replaces the current value only when this much faster (0.03 = 3%).");
  v.number("autotune.max_share", c.autotune.max_share, 0.0,
           "Share of the run's steps the tuning may take at most; it stops there with the best "
           "values measured so far.");

  v.text("comm.backend", c.comm.backend,
         "How ranks exchange tensors: shm = Loom's shared-memory collectives (ranks of one host), "
         "tcp = Loom's collectives over TCP (any hosts), auto = shm inside each host and tcp "
         "between hosts. A GPU run's tensors: cuda:nccl, cuda:host (through host memory over the "
         "CPU's backend: ranks sharing a GPU) or cuda:auto (nccl where each rank of a host has a "
         "GPU of its own), written beside the CPU's as c10d does: cpu:shm,cuda:nccl.");
  v.number("comm.timeout_s", c.comm.timeout_s, 1.0,
           "Longest wait for another rank; the error names the rank that did not arrive. Under "
           "NCCL, where waits are the GPU stream's, c10d's watchdog ends a rank whose collective "
           "runs past it, naming the collective.");
  v.boolean("comm.check_calls", c.comm.check_calls,
            "Debug: compare every collective's sequence number, size and type across ranks and "
            "report the first mismatch (one small extra exchange per call).");

  v.choice("parallel.mode", c.parallel.mode, {"data", "ps"},
           "How data-parallel ranks combine gradients: data = all-reduce among the ranks, ps = "
           "push to and pull from parameter servers (`loom launch --servers K`; "
           "docs/parameter_servers.md).");
  v.integer("parallel.ps.servers", c.parallel.ps.servers, 1,
            "Server ranks of a parameter-server run (K): the last K ranks of the job serve, the "
            "others train.");
  v.number("parallel.ps.part_mb", c.parallel.ps.part_mb, 0.001,
           "Gradient buffers are cut into parts of at most this size, spread so that every "
           "server receives the same bytes (within one part).");
  v.choice("parallel.ps.mode", c.parallel.ps.mode, {"sync", "async", "ssp"},
           "sync = every step's gradients summed over all workers (as all-reduce); async = each "
           "worker pushes and pulls on its own, its push applied on arrival as 1/workers of a "
           "step; ssp = a step is applied once all workers pushed it, and no worker runs more "
           "than parallel.ps.staleness steps ahead of the slowest.");
  v.integer("parallel.ps.staleness", c.parallel.ps.staleness, 0,
            "SSP bound s: steps a worker may run ahead of the slowest (0 = synchronous).");
  v.choice("parallel.ps.optimizer_on", c.parallel.ps.optimizer_on, {"worker", "server"},
           "worker = each worker runs the optimizer (sync: on the summed gradients; async/ssp: "
           "the servers add its parameter deltas); server = the servers keep the parameters and "
           "the optimizer state and apply the pushed gradients (frees worker memory).");
  v.number("parallel.first_bucket_mb", c.parallel.first_bucket_mb, 0.0,
           "Size of the first gradient bucket: small, so its all-reduce starts early in backward.");
  v.number("parallel.bucket_cap_mb", c.parallel.bucket_cap_mb, 0.0,
           "Size limit of the other gradient buckets.");
  v.boolean("parallel.find_unused_parameters", c.parallel.find_unused_parameters,
            "Tolerate parameters that get no gradient in a step (they count as zero). Off: such "
            "a step fails and names them.");
  v.boolean("parallel.broadcast_buffers", c.parallel.broadcast_buffers,
            "Copy rank 0's buffers (e.g. BatchNorm statistics) to every rank before each forward.");
  v.choice("parallel.compression", c.parallel.compression, {"none", "bf16", "fp16"},
           "Reduce gradient buckets in this 16-bit type: half the bytes on the wire, gradients "
           "rounded once.");
  v.integer("parallel.zero", c.parallel.zero, 0,
            "All-reduce data parallelism, with or without pipeline stages: 1 shards the "
            "optimizer state over the data-parallel ranks (ZeRO-1): gradient buckets are "
            "reduce-scattered, each rank steps its 1/ranks shard of every bucket and the shards "
            "are all-gathered, so the state per rank falls to 1/ranks. 2 also frees each gradient "
            "bucket once reduced, keeping only the rank's shard of the gradients between steps "
            "(ZeRO-2; under gradient accumulation or a pipeline the full buckets live until the "
            "step). 3 also shards the parameters (ZeRO-3, not with pipeline stages): each rank "
            "keeps 1/ranks of them and gathers a block's just before it runs, forward and "
            "backward, the next block's gather overlapping this one's compute. 0 = every rank "
            "keeps it all. A pipeline's planner may choose 1 to fit "
            "parallel.pipeline.memory_cap_mb.");
  v.integer("parallel.tensor", c.parallel.tensor, 1,
            "Tensor parallelism: ranks each transformer layer of gpt or vit_tiny is split over "
            "(it must divide the heads: model.gpt.n_head, vit_tiny's 3), "
            "Megatron's way: attention by heads and the MLP by its hidden width, the first "
            "product of each split by columns and the second by rows, one all-reduce forward and "
            "one backward per sublayer. Ranks of a tensor group are neighbours (one host, shared "
            "memory); the data-parallel replicas are the ranks / tensor groups. 1 = off.");
  v.boolean("parallel.tensor_sequence", c.parallel.tensor_sequence,
            "Sequence parallelism with parallel.tensor (Megatron's): the LayerNorms, dropouts "
            "and residual additions between the split sublayers run on each rank's share of the "
            "sequence, so their activations are split too; each sublayer's all-reduce becomes an "
            "all-gather before it and a reduce-scatter after (the same bytes moved). Needs a "
            "context that divides by parallel.tensor.");
  v.number("parallel.memory_cap_mb", c.parallel.memory_cap_mb, 0.0,
           "A cap on what each rank holds of the model's state (parameters, gradients and "
           "optimizer state, as parallel.zero shards them; not activations), checked once the "
           "model is made: a run over it stops before training with the ZeRO stage that "
           "would fit. Layouts without pipeline stages (those have "
           "parallel.pipeline.memory_cap_mb). 0 = no cap.");
  v.choice("parallel.zero3_keep", c.parallel.zero3_keep, {"none", "last", "all"},
           "ZeRO-3: the blocks whose gathered parameters stay from their forward to their "
           "backward instead of being gathered again: none (least memory), last (the last "
           "block, whose backward comes right after), all (only the time between steps is "
           "sharded).");
  v.integer("parallel.pipeline.stages", c.parallel.pipeline.stages, 1,
            "Pipeline ranks the model's blocks are split over (P); `loom train` needs P ranks, or "
            "P x D for D data-parallel pipelines (`loom launch --nproc-per-node`). `loom pipeline "
            "plan` profiles, partitions and simulates it first.");
  v.integer(
      "parallel.pipeline.microbatches", c.parallel.pipeline.microbatches, 1,
      "Micro-batches per optimizer step (M); data.batch_size, the step's batch, is split into "
      "them, and the loader reads micro-batches (as train.grad_accum = M would).");
  v.text("parallel.pipeline.schedule", c.parallel.pipeline.schedule,
         "gpipe, 1f1b, interleaved, zb_h1, or a .csv file of actions (a row per rank, "
         "torch.distributed.pipelining's `0F1` action strings).");
  v.integer("parallel.pipeline.chunks", c.parallel.pipeline.chunks, 1,
            "Stages per rank: interleaved (and gpipe) place stage s on rank s % stages.");
  v.text("parallel.pipeline.split", c.parallel.pipeline.split,
         "Blocks per stage, comma-separated (`4,6`), instead of the automatic partition; "
         "checked against the memory cap. Empty = automatic.");
  v.number("parallel.pipeline.memory_cap_mb", c.parallel.pipeline.memory_cap_mb, 0.0,
           "Memory one rank may use for its stages (parameters, gradients, optimizer state and "
           "held activations); the partition must fit it. 0 = no cap.");
}

Config default_config() {
  Config c;
  c.data.path = setting("LOOM_FASHION_MNIST_DIR");
  return c;
}

}  // namespace loom
