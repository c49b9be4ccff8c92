#include "loom/data/batch_source.h"

#include <string>

#include "loom/core/error.h"

namespace loom::data {

int64_t batches_per_epoch(int64_t samples, int64_t batch_size, bool drop_last) {
  const int64_t batches =
      drop_last ? samples / batch_size : (samples + batch_size - 1) / batch_size;
  if (batches == 0) {
    throw ConfigError("config key 'data.batch_size': " + std::to_string(batch_size) +
                      " is larger than the " + std::to_string(samples) +
                      " samples available, so an epoch has no full batch");
  }
  return batches;
}

}  // namespace loom::data
