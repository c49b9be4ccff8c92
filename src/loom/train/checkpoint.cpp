#include "loom/train/checkpoint.h"

#include <ATen/core/grad_mode.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "loom/core/durable_file.h"
#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/train/safetensors.h"

namespace fs = std::filesystem;

namespace loom::train {
namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kPrefix = "step-";
const std::string kRankRngPrefix = "rng/cpu/rank";
const std::string kDeviceRng = "rng/cuda";
// checkpoint.keep_best's record: {"checkpoint": "step-N", "step", "metric", "value"}.
constexpr const char* kBestRecord = "best.json";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kPrefix, static_cast<long long>(step));
  return buf;
}

bool is_complete(const fs::path& dir) { return fs::exists(dir / "manifest.json"); }

// Hidden directories of saves that did not finish, and of checkpoints being deleted.
bool is_debris(const std::string& name) {
  return name.rfind(".tmp-", 0) == 0 || name.rfind(".old-", 0) == 0 ||
         name.rfind(".pruned-", 0) == 0;
}

// What a checkpoint of these tensors takes on disk, near enough: the tensors, and a margin for
// the safetensors headers and the manifest (which holds the config).
int64_t bytes_needed(const CheckpointData& data) {
  int64_t bytes = 64 << 10;
  for (const auto* tensors : {&data.model, &data.optimizer}) {
    for (const auto& [name, t] : *tensors) bytes += static_cast<int64_t>(t.nbytes()) + 256;
  }
  for (const auto* tensors : {&data.model_to_fetch, &data.optimizer_to_fetch}) {
    for (const TensorToFetch& t : *tensors) bytes += t.nbytes() + 256;
  }
  return bytes + static_cast<int64_t>(data.rng_state.nbytes());
}

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

models::NamedTensors with_prefix(const std::string& prefix, const models::NamedTensors& tensors) {
  models::NamedTensors out;
  for (const auto& [name, t] : tensors) out.emplace_back(prefix + name, t);
  return out;
}

nlohmann::json loader_json(const std::optional<data::LoaderState>& state) {
  if (!state) return nullptr;
  return {{"epoch", state->epoch},
          {"step", state->step},
          {"seed", state->seed},
          {"samples", state->samples},
          {"steps_per_epoch", state->steps_per_epoch},
          {"rank", state->rank},
          {"world", state->world},
          {"batch", state->batch}};
}

data::LoaderState loader_from_json(const nlohmann::ordered_json& j) {
  data::LoaderState s;
  s.epoch = j.at("epoch");
  s.step = j.at("step");
  s.seed = j.at("seed");
  s.samples = j.at("samples");
  s.steps_per_epoch = j.at("steps_per_epoch");
  s.rank = j.at("rank");
  s.world = j.at("world");
  s.batch = j.value("batch", int64_t{0});  // absent before the number of ranks could change
  return s;
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, int64_t keep, int64_t kill_in_save_step,
                                 int64_t pause_in_save_ms)
    : dir_(std::move(dir)),
      keep_(std::max<int64_t>(1, keep)),
      kill_in_save_step_(kill_in_save_step),
      pause_in_save_ms_(pause_in_save_ms) {
  fs::create_directories(dir_);
}

void CheckpointStore::remove_unfinished() {
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (is_debris(entry.path().filename().string())) fs::remove_all(entry.path());
  }
}

std::string CheckpointStore::save(const CheckpointData& data) {
  const std::string name = step_name(data.position.step);
  const fs::path tmp_dir = fs::path(dir_) / (".tmp-" + name + "-" + std::to_string(::getpid()));
  try {
    return commit(data, name, tmp_dir);
  } catch (const std::exception& e) {
    // Whatever was written goes, so that a full disk has its space back for the next try; the
    // previous checkpoint was never touched.
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    const int64_t needed = bytes_needed(data);
    std::string room;
    if (struct statvfs fs_stats{}; ::statvfs(dir_.c_str(), &fs_stats) == 0) {
      const auto free_bytes = static_cast<int64_t>(fs_stats.f_bavail) * fs_stats.f_frsize;
      room =
          ", " + megabytes(free_bytes) + " (" + std::to_string(free_bytes) + " bytes) free there";
    }
    const auto previous = latest();
    throw Error("checkpoint of step " + std::to_string(data.position.step) + " in " + dir_ + ": " +
                e.what() + "; it needs about " + megabytes(needed) + " (" + std::to_string(needed) +
                " bytes)" + room + "; " +
                (previous ? "the previous checkpoint " + *previous + " is intact"
                          : std::string("there is no earlier checkpoint")));
  }
}

std::string CheckpointStore::commit(const CheckpointData& data, const std::string& name,
                                    const fs::path& tmp_dir) {
  const fs::path final_dir = fs::path(dir_) / name;
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);

  std::vector<TensorToFetch> model = held(data.model);
  model.insert(model.end(), data.model_to_fetch.begin(), data.model_to_fetch.end());
  write_safetensors((tmp_dir / "model.safetensors").string(), model,
                    {{"format", "loom"}, {"step", std::to_string(data.position.step)}});
  if (pause_in_save_ms_ > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_in_save_ms_));
  }
  if (kill_in_save_step_ > 0 && data.position.step == kill_in_save_step_) {
    std::raise(SIGKILL);  // simulate a crash with the checkpoint half written
  }
  std::vector<TensorToFetch> state = held(with_prefix("optimizer/", data.optimizer));
  for (TensorToFetch t : data.optimizer_to_fetch) {
    t.name = "optimizer/" + t.name;
    state.push_back(std::move(t));
  }
  models::NamedTensors rngs = {{"rng/cpu", data.rng_state}};
  for (const auto& [rank, rng] : data.rank_rng_states) {
    if (rank != 0) rngs.emplace_back(kRankRngPrefix + std::to_string(rank), rng);
  }
  if (data.device_rng_state.defined()) rngs.emplace_back(kDeviceRng, data.device_rng_state);
  for (TensorToFetch& t : held(rngs)) state.push_back(std::move(t));
  write_safetensors((tmp_dir / "state.safetensors").string(), state);

  nlohmann::ordered_json manifest = {{"format", "loom-checkpoint"},
                                     {"version", kFormatVersion},
                                     {"step", data.position.step},
                                     {"epoch", data.position.epoch},
                                     {"step_in_epoch", data.position.step_in_epoch},
                                     {"samples", data.position.samples},
                                     {"loader", loader_json(data.loader)},
                                     {"optimizer", data.optimizer_kind},
                                     {"files", {"model.safetensors", "state.safetensors"}},
                                     {"config", nlohmann::json::parse(data.config_json)}};
  if (!data.layout_json.empty())
    manifest["layout"] = nlohmann::ordered_json::parse(data.layout_json);
  if (!data.autotune_json.empty()) {
    manifest["autotune"] = nlohmann::ordered_json::parse(data.autotune_json);
  }
  if (!data.extra_json.empty()) manifest["extra"] = nlohmann::ordered_json::parse(data.extra_json);
  if (data.loss_scale) {
    manifest["loss_scale"] = {{"scale", data.loss_scale->scale},
                              {"growth_tracker", data.loss_scale->growth_tracker},
                              {"skipped_steps", data.loss_scale->skipped_steps}};
  }
  write_synced((tmp_dir / "manifest.json").string(), manifest.dump(2) + "\n");
  fsync_directory(tmp_dir.string());

  // Re-saving a step (rare: a resumed run that saves where it started) swaps the old one out.
  const fs::path displaced = fs::path(dir_) / (".old-" + name);
  if (fs::exists(final_dir)) fs::rename(final_dir, displaced);
  fs::rename(tmp_dir, final_dir);
  fsync_directory(dir_);
  replace_file_atomically((fs::path(dir_) / "latest").string(), name + "\n");
  fs::remove_all(displaced);
  prune();
  return final_dir.string();
}

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind(kPrefix, 0) == 0 && is_complete(entry.path())) {
      names.push_back(n);
    }
  }
  std::sort(names.begin(), names.end());  // zero-padded steps sort by number
  std::vector<std::string> paths;
  for (const auto& n : names) paths.push_back((fs::path(dir_) / n).string());
  return paths;
}

std::optional<std::string> CheckpointStore::latest() const {
  const fs::path pointer = fs::path(dir_) / "latest";
  if (fs::exists(pointer)) {
    std::string name = read_file(pointer.string());
    name.erase(name.find_last_not_of(" \n") + 1);
    if (is_complete(fs::path(dir_) / name)) return (fs::path(dir_) / name).string();
  }
  // A crash between the rename and the pointer update leaves a complete, newer directory.
  auto all = list();
  if (all.empty()) return std::nullopt;
  LOOM_LOG(kWarn, "checkpoint") << "'latest' in " << dir_ << " is missing or names an incomplete "
                                << "checkpoint; using the newest complete one, " << all.back();
  return all.back();
}

void CheckpointStore::prune() {
  remove_unfinished();
  auto all = list();
  for (size_t i = 0; i + keep_ < all.size(); ++i) {
    if (!spared_.empty() && fs::path(all[i]).filename() == spared_) continue;
    LOOM_LOG(kDebug, "checkpoint")
        << "pruning " << all[i] << " (checkpoint.keep = " << keep_ << ")";
    // Out of sight first: a crash halfway through deleting must not leave a directory that
    // looks committed but has lost its tensors.
    const fs::path doomed = fs::path(dir_) / (".pruned-" + fs::path(all[i]).filename().string());
    fs::rename(all[i], doomed);
    fs::remove_all(doomed);
  }
}

void CheckpointStore::set_best(const BestCheckpoint& best) {
  const std::string name = fs::path(best.path).filename().string();
  const nlohmann::ordered_json record = {
      {"checkpoint", name}, {"step", best.step}, {"metric", best.metric}, {"value", best.value}};
  replace_file_atomically((fs::path(dir_) / kBestRecord).string(), record.dump() + "\n");
  spared_ = name;
  prune();
}

void CheckpointStore::spare(const std::string& path) {
  spared_ = fs::path(path).filename().string();
}

std::optional<BestCheckpoint> CheckpointStore::recorded_best() const {
  const fs::path file = fs::path(dir_) / kBestRecord;
  if (!fs::exists(file)) return std::nullopt;
  BestCheckpoint best;
  try {
    const auto record = nlohmann::json::parse(read_file(file.string()));
    best.path = (fs::path(dir_) / record.at("checkpoint").get<std::string>()).string();
    best.step = record.at("step");
    best.metric = record.at("metric");
    best.value = record.at("value");
  } catch (const nlohmann::json::exception& e) {
    LOOM_LOG(kWarn, "checkpoint") << file.string() << " is malformed (" << e.what()
                                  << "); no best checkpoint is kept from before";
    return std::nullopt;
  }
  if (!is_complete(best.path)) {
    LOOM_LOG(kWarn, "checkpoint") << file.string() << " names " << best.path
                                  << ", which is not a complete checkpoint; no best checkpoint "
                                  << "is kept from before";
    return std::nullopt;
  }
  return best;
}

CheckpointData CheckpointStore::load(const std::string& path) {
  const fs::path dir(path);
  const std::string manifest_path = (dir / "manifest.json").string();
  if (!fs::exists(manifest_path)) {
    throw DataError("checkpoint '" + path + "' has no manifest.json (not a committed checkpoint)");
  }
  CheckpointData data;
  try {
    // In file order: the autotune result's keys are in the tuner's order.
    const auto manifest = nlohmann::ordered_json::parse(read_file(manifest_path));
    if (manifest.at("format") != "loom-checkpoint" || manifest.at("version") != kFormatVersion) {
      throw DataError("checkpoint '" + manifest_path + "': unsupported format or version");
    }
    data.position.step = manifest.at("step");
    data.position.epoch = manifest.at("epoch");
    data.position.step_in_epoch = manifest.at("step_in_epoch");
    data.position.samples = manifest.at("samples");
    if (manifest.contains("loader") && !manifest.at("loader").is_null()) {
      data.loader = loader_from_json(manifest.at("loader"));
    }
    data.optimizer_kind = manifest.at("optimizer");
    data.config_json = manifest.at("config").dump();
    if (manifest.contains("autotune")) data.autotune_json = manifest.at("autotune").dump();
    if (manifest.contains("layout")) data.layout_json = manifest.at("layout").dump();
    if (manifest.contains("extra")) data.extra_json = manifest.at("extra").dump();
    if (manifest.contains("loss_scale")) {
      const auto& scale = manifest.at("loss_scale");
      data.loss_scale =
          LossScaleState{scale.at("scale").get<double>(), scale.at("growth_tracker").get<int64_t>(),
                         scale.at("skipped_steps").get<int64_t>()};
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError("checkpoint '" + manifest_path + "' is malformed: " + e.what());
  }
  data.model = read_safetensors((dir / "model.safetensors").string());
  for (auto& [name, t] : read_safetensors((dir / "state.safetensors").string())) {
    if (name == "rng/cpu") {
      data.rng_state = t;
    } else if (name == kDeviceRng) {
      data.device_rng_state = t;
    } else if (name.rfind(kRankRngPrefix, 0) == 0) {
      try {
        data.rank_rng_states[std::stoi(name.substr(kRankRngPrefix.size()))] = t;
      } catch (const std::logic_error&) {
        throw DataError("checkpoint '" + path +
                        "': state.safetensors has a malformed tensor name '" + name + "'");
      }
    } else if (name.rfind("optimizer/", 0) == 0) {
      data.optimizer.emplace_back(name.substr(10), t);
    }
  }
  if (!data.rng_state.defined()) {
    throw DataError("checkpoint '" + path + "': state.safetensors has no 'rng/cpu' tensor");
  }
  return data;
}

void restore_model(const CheckpointData& checkpoint, const std::string& path,
                   const models::NamedTensors& parameters, const models::NamedTensors& buffers) {
  std::map<std::string, at::Tensor> saved(checkpoint.model.begin(), checkpoint.model.end());
  at::NoGradGuard no_grad;
  auto find = [&](const std::string& name, const char* what) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      throw DataError("checkpoint '" + path + "' has no " + what + " '" + name + "'");
    }
    return it->second;
  };
  for (const auto& [name, t] : parameters) {
    const at::Tensor value = find(name, "tensor");
    if (value.sizes() != t.sizes()) {
      throw DataError("checkpoint '" + path + "': tensor '" + name + "' has shape " +
                      c10::str(value.sizes()) + ", the model expects " + c10::str(t.sizes()));
    }
    t.copy_(value);
  }
  for (const auto& [name, t] : buffers) t.copy_(find(name, "buffer"));
}

}  // namespace loom::train
