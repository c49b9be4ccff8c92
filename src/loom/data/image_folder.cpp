#include "loom/data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "loom/core/error.h"
#include "loom/data/sample_error.h"

namespace fs = std::filesystem;

namespace loom::data {
namespace {

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

ImageFolder::ImageFolder(std::string root) : root_(std::move(root)) {
  if (!fs::is_directory(root_)) {
    throw DataError("image folder '" + root_ + "' does not exist or is not a directory");
  }
  for (const auto& entry : fs::directory_iterator(root_)) {
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  for (size_t label = 0; label < classes_.size(); ++label) {
    std::vector<std::string> paths;
    for (const auto& entry : fs::directory_iterator(fs::path(root_) / classes_[label])) {
      if (entry.is_regular_file() && is_image(entry.path())) paths.push_back(entry.path().string());
    }
    std::sort(paths.begin(), paths.end());
    for (auto& p : paths) files_.push_back({std::move(p), static_cast<int64_t>(label)});
  }
  if (files_.empty()) {
    throw DataError("image folder '" + root_ +
                    "' has no .jpg, .jpeg or .png files in class "
                    "subfolders (" +
                    std::to_string(classes_.size()) + " subfolders found)");
  }
}

Sample ImageFolder::read(int64_t index) const {
  const File& f = files_.at(static_cast<size_t>(index));
  std::ifstream in(f.path, std::ios::binary);
  Sample s;
  s.label = f.label;
  s.key = f.path;
  if (in) {
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    in.seekg(0);
    if (size >= 0) {
      s.bytes.resize(static_cast<size_t>(size));
      in.read(s.bytes.data(), size);
    }
  }
  if (!in) throw SampleError(SampleFault::kUnreadable, "image '" + f.path + "' cannot be read");
  return s;
}

}  // namespace loom::data
