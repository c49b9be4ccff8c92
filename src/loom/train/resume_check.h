// What a resume may not change. A checkpoint's tensors and state were made for one model, one
// optimizer and one shape of data; a configuration that differs in any of those cannot resume it
// (it would fail half-way through loading, or worse, load and train something else). The check
// reads only the checkpoint's manifest, so it runs before anything is built or written: a
// refused resume leaves the run's folder as it was.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/core/config.h"

namespace loom::train {

// The keys a checkpoint is bound to, as data: a key ending in '.' stands for every key under it.
// Hyperparameters (learning rate, dropout, epochs, the layout) may change on resume.
const std::vector<std::string>& checkpoint_bound_keys();

// The checkpoint `out_dir`/checkpoints would resume from (its `latest`, else the newest complete
// one); nullopt when there is none. Creates nothing.
std::optional<std::string> checkpoint_to_resume(const std::string& out_dir);

// Throws ConfigError naming the first bound key whose value in `config` differs from the one the
// checkpoint at `checkpoint_path` was written with, with fields "key", "checkpoint_value" and
// "value". A key the checkpoint's configuration lacks (written by an older Loom) is not checked.
void check_resume_config(const Config& config, const std::string& checkpoint_path);

}  // namespace loom::train
