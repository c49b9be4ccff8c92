#include "loom/core/settings.h"

#include <cstdlib>
#include <stdexcept>

#include "loom/core/error.h"

namespace loom {

const std::vector<SettingInfo>& all_settings() {
  static const std::vector<SettingInfo> settings = {
      {"LOOM_LOG_LEVEL", "info", "Least severe log level shown: debug, info, warn, error, off."},
      {"LOOM_ERROR_FILE", "",
       "When set, a `loom` command that fails writes its error there as one JSON object (exit "
       "code, kind, message, rank and the error's fields, such as a configuration error's "
       "key), as torchrun's TORCHELASTIC_ERROR_FILE; '{rank}' in the path becomes the rank."},
      {"LOOM_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist",
       "Default folder of the Fashion-MNIST IDX files (Debian package dataset-fashion-mnist)."},
      {"LOOM_FAULT_STOP_AFTER_STEP", "0",
       "Testing aid: stop training as if preempted right after the checkpoint of this step "
       "(0 = never)."},
      {"LOOM_FAULT_KILL_IN_SAVE", "0",
       "Testing aid: SIGKILL the process halfway through writing the checkpoint of this step "
       "(0 = never)."},
      {"LOOM_FAULT_SLOW_SAVE_MS", "0",
       "Testing aid: the checkpoint writer sleeps this many milliseconds halfway through every "
       "save (before LOOM_FAULT_KILL_IN_SAVE strikes), so that a test sees training go on "
       "during a background write (0 = never)."},
      {"LOOM_FAULT_KILL_SERVER_AFTER_STEP", "0",
       "Testing aid: parameter server 0 SIGKILLs itself after serving this many steps "
       "(0 = never)."},
      {"LOOM_FAULT_SLOW_RANK", "",
       "Testing aid: RANK:MS makes training rank RANK sleep MS milliseconds after each step, "
       "a straggler on demand (empty = none)."},
      {"LOOM_FAULT_KILL_RANK_AFTER_STEP", "",
       "Testing aid: RANK:STEP makes training rank RANK SIGKILL itself after that step, in the "
       "first attempt of a job only (LOOM_RESTART_COUNT 0; empty = never)."},
      {"LOOM_FAULT_FREEZE_RANK_AFTER_STEP", "",
       "Testing aid: RANK:STEP makes training rank RANK SIGSTOP itself after that step, a hung "
       "rank for the stall watchdog to find (empty = never)."},
      {"LOOM_FAULT_OVERFLOW_RANK_AT_STEP", "",
       "Testing aid: RANK:STEP makes training rank RANK backpropagate that step (1-based) from "
       "an infinite loss scale under runtime.precision fp16, gradients that overflow (in a "
       "pipeline, a rank of its last stage, where the loss is; empty = never)."},
      {"LOOM_FAULT_LAUNCH_LATE_LAYOUT_MS", "0",
       "Testing aid: the launcher of a node other than 0 waits this many milliseconds after "
       "joining before it reads the job's layout, so that node 0's ranks may end first (0 = "
       "never)."},
      {"LOOM_PS_SERVERS", "0",
       "Set by `loom launch --servers` for the ranks it starts: the job's parameter servers. It "
       "stands for parallel.mode=ps and parallel.ps.servers where the configuration does not "
       "give them (0 = not set)."},
      {"LOOM_RESTART_COUNT", "0",
       "Set by `loom launch --max-restarts` for the ranks it starts: how many times the job "
       "was restarted before (where it is unset, torchrun's TORCHELASTIC_RESTART_COUNT counts "
       "instead). Above 0, `loom train` resumes from its output directory."},
      {"LOOM_RESTARTS", "",
       "Set by `loom launch` with LOOM_RESTART_COUNT: each restart's cause and the step the "
       "failed attempt had reached, as JSON, for summary.json."},
      {"LOOM_STEP_ACCOUNTING", "1",
       "Benchmarking aid: 0 keeps only each step's wall time (no phases), the reference the "
       "accounting's cost is measured against."},
      {"LOOM_LAUNCH_ID", "",
       "Set by `loom launch` for the ranks it starts: its launch's id. Its presence tells a rank "
       "that the launcher serves the rendezvous store."},
      {"LOOM_STORE_TOKEN", "",
       "The job's shared secret: the rendezvous store refuses clients that cannot prove they "
       "hold it (challenge-response, never sent). `loom launch` sets it for its ranks from "
       "--token-file, or draws a fresh one for a one-node job."},
      {"LOOM_STORE_PORT_FILE", "",
       "With MASTER_PORT=0, rank 0 (serving the store itself, without loom launch) binds a free "
       "port and writes its number to this file, for the ranks started after it."},
      {"LOOM_HOST_ID", "",
       "Overrides the host identity ranks compare to find which of them share a host (default: "
       "hostname + kernel boot id). Tests use it to pretend one machine is several hosts."},
      {"LOOM_COMM_HOST", "",
       "Address the tcp backend's listener binds to, one per rank and group (default: 127.0.0.1 "
       "when the group's ranks share a host, else this host's address on its route to the "
       "rendezvous store, MASTER_ADDR)."},
      {"LOOM_CPU_CAPABILITY", "",
       "Instruction set of Loom's own kernels (blur, resize, layout conversion, row kernels, "
       "fused optimizers, reductions): avx512, avx2 or default (portable); lowers, never raises, "
       "what the CPU has (empty = the best the CPU has). ATEN_CPU_CAPABILITY does the same for "
       "LibTorch's."},
      {"LOOM_SHM_CHUNK_BYTES", "524288",
       "Shared-memory collectives move data in chunks of this many bytes per rank (two staging "
       "buffers of this size per rank)."},
      {"LOOM_SHM_MAILBOX_BYTES", "4194304",
       "Shared-memory sends move a message in pieces of at most this many bytes, one mailbox "
       "per pair of ranks (a sparse segment: only what messages touch is used). The default "
       "holds a whole default parameter-server part, so a part needs one hand-over."},
      {"LOOM_SHM_SPIN_US", "50",
       "A shared-memory wait spins this many microseconds before sleeping on a futex (longer: "
       "lower latency, more CPU taken from computation). Not at all where a host runs more "
       "ranks of the group than it has usable cores."},
      {"LOOM_SHM_SMALL_BYTES", "32768",
       "All-reduces up to this size use the copy-in-and-reduce-all path; larger ones use "
       "reduce-scatter + all-gather."},
      {"LOOM_TCP_CHUNK_BYTES", "524288",
       "The tcp backend's ring collectives move each rank's block in chunks of this many bytes "
       "(at least 4096), forwarding a chunk as soon as it has arrived, so steps overlap."},
      {"LOOM_TCP_SMALL_BYTES", "65536",
       "tcp all-reduces up to this size gather every rank's tensor and sum locally (world - 1 "
       "steps); larger ones use ring reduce-scatter + all-gather (2 (world - 1) steps, each rank "
       "sending 2 (world - 1) / world of the data)."},
  };
  return settings;
}

static const SettingInfo& find_setting(std::string_view name) {
  for (const auto& s : all_settings()) {
    if (name == s.name) return s;
  }
  throw Error("settings: '" + std::string(name) + "' is not a declared LOOM_* setting");
}

std::string setting(std::string_view name) {
  const SettingInfo& info = find_setting(name);
  const char* value = std::getenv(info.name);
  return (value && *value) ? std::string(value) : std::string(info.default_value);
}

long long setting_int(std::string_view name) {
  std::string text = setting(name);
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') {
    throw ConfigError("environment variable " + std::string(name) + ": expected an integer, got '" +
                      text + "'");
  }
  return v;
}

std::optional<std::pair<int, long long>> setting_rank_and_number(std::string_view name) {
  const std::string text = setting(name);
  if (text.empty()) return std::nullopt;
  const auto colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument(text);
    return std::make_pair(std::stoi(text.substr(0, colon)), std::stoll(text.substr(colon + 1)));
  } catch (const std::exception&) {
    throw ConfigError(std::string(name) + ": '" + text + "' is not RANK:NUMBER");
  }
}

}  // namespace loom
