#include "loom/data/idx.h"

#include <zlib.h>

#include <filesystem>
#include <memory>

#include "loom/core/error.h"

namespace loom::data {
namespace {

// gzread() reads gzip and plain files alike, so one path serves both forms.
struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

void read_exact(gzFile f, void* out, size_t bytes, const std::string& path, const char* what) {
  auto* p = static_cast<char*>(out);
  size_t done = 0;
  while (done < bytes) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
    int n = gzread(f, p + done, chunk);
    if (n <= 0) {
      throw DataError("IDX file '" + path + "': truncated while reading the " + what + " (got " +
                      std::to_string(done) + " of " + std::to_string(bytes) + " bytes)");
    }
    done += static_cast<size_t>(n);
  }
}

std::string find_file(const std::string& dir, const std::string& stem) {
  for (const char* suffix : {"", ".gz"}) {
    std::string path = dir + "/" + stem + suffix;
    if (std::filesystem::exists(path)) return path;
  }
  throw DataError("IDX file '" + dir + "/" + stem + "' (or .gz) does not exist");
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (!f) throw DataError("IDX file '" + path + "' cannot be opened");
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path, "header");
  // Magic: two zero bytes, a type code (0x08 = unsigned byte), and the number of dimensions.
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] == 0 || magic[3] > 4) {
    throw DataError("IDX file '" + path + "': bad magic; expected 00 00 08 <1..4> (uint8 data)");
  }
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path, "dimensions");
    int64_t n = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    dims.push_back(n);
    total *= n;
  }
  if (total <= 0 || total > (int64_t{1} << 34)) {
    throw DataError("IDX file '" + path + "': implausible size " + std::to_string(total));
  }
  at::Tensor out = at::empty(dims, at::kByte);
  read_exact(f.get(), out.data_ptr<uint8_t>(), static_cast<size_t>(total), path, "data");
  return out;
}

ImageSet load_idx_split(const std::string& dir, const std::string& split,
                        const std::string& package_hint) {
  if (!std::filesystem::is_directory(dir)) {
    std::string message = "data folder '" + dir + "' does not exist";
    if (!package_hint.empty()) {
      message += "; install the Debian package " + package_hint + " (apt-get install " +
                 package_hint + ") or set data.path";
    }
    throw DataError(message);
  }
  std::string images_path = find_file(dir, split + "-images-idx3-ubyte");
  std::string labels_path = find_file(dir, split + "-labels-idx1-ubyte");
  at::Tensor images = read_idx(images_path);
  at::Tensor labels = read_idx(labels_path);
  if (images.dim() != 3) {
    throw DataError("IDX file '" + images_path + "': expected 3 dimensions (N, H, W), got " +
                    std::to_string(images.dim()));
  }
  if (labels.dim() != 1 || labels.size(0) != images.size(0)) {
    throw DataError("IDX file '" + labels_path + "': expected " + std::to_string(images.size(0)) +
                    " labels, got shape " + std::to_string(labels.numel()));
  }
  ImageSet set;
  set.images = images.unsqueeze(-1);  // one channel, NHWC
  set.labels = labels.to(at::kLong);
  set.classes = set.labels.max().item<int64_t>() + 1;
  return set;
}

}  // namespace loom::data
