// ImageFolder: ROOT/<class>/<image>.{jpg,jpeg,png}, one subfolder per class. Classes are the
// subfolders in sorted order (label = position), images sorted within each class, so the index
// of a file is stable across machines and runs. Other files are ignored.
#pragma once

#include <string>
#include <vector>

#include "loom/data/dataset.h"

namespace loom::data {

class ImageFolder : public Dataset {
 public:
  // Scans `root`. Throws DataError naming the folder when it is missing or holds no images.
  explicit ImageFolder(std::string root);

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Sample read(int64_t index) const override;
  const std::vector<std::string>& class_names() const override { return classes_; }
  const std::string& path(int64_t index) const { return files_[index].path; }

 private:
  struct File {
    std::string path;
    int64_t label;
  };
  std::string root_;
  std::vector<std::string> classes_;
  std::vector<File> files_;
};

}  // namespace loom::data
