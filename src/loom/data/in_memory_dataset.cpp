#include "loom/data/in_memory_dataset.h"

namespace loom::data {

InMemoryDataset::InMemoryDataset(ImageSet set) : set_(std::move(set)) {
  set_.images = set_.images.contiguous();
  set_.labels = set_.labels.contiguous();
  for (int64_t c = 0; c < set_.classes; ++c) class_names_.push_back(std::to_string(c));
}

Sample InMemoryDataset::read(int64_t index) const {
  Sample s;
  s.pixels = set_.images[index];
  s.label = set_.labels.data_ptr<int64_t>()[index];
  s.key = "#" + std::to_string(index);
  return s;
}

}  // namespace loom::data
