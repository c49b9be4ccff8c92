// A Dataset over an ImageSet held in memory (IDX files, synthetic images): samples are pixel
// views, so the loader runs the same transforms on them as on decoded files, minus the decode.
#pragma once

#include "loom/data/dataset.h"
#include "loom/data/image_set.h"

namespace loom::data {

class InMemoryDataset : public Dataset {
 public:
  explicit InMemoryDataset(ImageSet set);

  int64_t size() const override { return set_.size(); }
  Sample read(int64_t index) const override;
  const std::vector<std::string>& class_names() const override { return class_names_; }
  const ImageSet& set() const { return set_; }

 private:
  ImageSet set_;
  std::vector<std::string> class_names_;  // "0", "1", ...
};

}  // namespace loom::data
