// Tar shards in WebDataset layout: each sample is a group of members sharing a key (the member
// path up to the first dot of its file name): `key.jpg` (or .jpeg, .png) holds the image and
// `key.cls` its class number as text. Samples are numbered shard by shard, in member order, so an
// index is stable for the same shards.
//
// The shards are indexed once by walking their 512-byte headers (and reading the tiny .cls
// members); images are then read with pread on demand. Nothing is held in memory but the index,
// and the sample order stays a pure function of (seed, epoch, position), which exact resume needs.
// Reads ustar, pax ('x' headers: long paths and sizes, as Python's tarfile writes by default) and
// GNU ('L' long names) archives. A shard cut short keeps the samples before the cut (logged).
// Thread-safe: read() only preads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/data/dataset.h"

namespace loom::data {

class TarShards : public Dataset {
 public:
  // `path`: a .tar file, or a directory whose *.tar files are taken in name order. Throws
  // DataError naming the shard when one cannot be opened, a sample has no .cls, or none is found.
  explicit TarShards(const std::string& path);
  ~TarShards() override;
  TarShards(const TarShards&) = delete;
  TarShards& operator=(const TarShards&) = delete;

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Sample read(int64_t index) const override;
  const std::vector<std::string>& class_names() const override { return classes_; }
  int64_t shard_count() const { return static_cast<int64_t>(shards_.size()); }

 private:
  struct Shard {
    std::string path;
    int fd = -1;
  };
  struct Member {
    int32_t shard = 0;
    int64_t offset = 0, size = 0;  // of the image bytes
    int64_t label = 0;
    std::string name;
  };
  void index_shard(int32_t shard);

  std::vector<Shard> shards_;
  std::vector<Member> samples_;
  std::vector<std::string> classes_;  // "0" .. max label
};

}  // namespace loom::data
