// The tar-shard index: a shard is a file anyone may have written. The input is one shard; it
// must index or be refused with a DataError, and every sample it indexes must read back (or be
// refused) without reading outside the shard.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fuzz_target.h"
#include "loom/core/error.h"
#include "loom/data/tar_shards.h"

LOOM_FUZZ_TARGET(tar_shards) {
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("loom-fuzz-" + std::to_string(::getpid()) + ".tar"))
                                      .string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    loom::data::TarShards shards(path);
    for (int64_t i = 0; i < shards.size(); ++i) {
      const auto sample = shards.read(i);
      if (sample.bytes.size() > size) loom::fuzz::broken("a sample larger than its shard");
    }
  } catch (const loom::DataError&) {
  }
  std::remove(path.c_str());
}
