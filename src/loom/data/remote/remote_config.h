// What a trainer tells a data worker about its data, and what the worker accepts: YAML text
// holding the configuration's `seed` and `data:` section, nothing else (a batch depends on
// nothing else). The worker validates it with the same parser and messages as `loom train` and
// opens only files under its data roots.
#pragma once

#include <string>
#include <vector>

#include "loom/core/config.h"

namespace loom::data {

// `seed:` and `data:` (without data.remote, which is the trainer's own business) of `config`,
// asking for batches of `batch_size` (the rank's loader's: data.batch_size, or the micro-batch
// its layout plan derived).
std::string remote_config_text(const Config& config, int64_t batch_size);

// The worker's side: a full Config from that text. Throws ConfigError naming the key for any
// other top-level key or an invalid value.
Config parse_remote_config(const std::string& text);

// Throws DataError naming the path when the data `config` reads (data.path for file sources)
// lies outside every folder of `roots` once symbolic links and ".." are resolved.
void check_under_roots(const Config& config, const std::vector<std::string>& roots);

}  // namespace loom::data
