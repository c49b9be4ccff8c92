#include "loom/core/blas_library.h"

#include <dlfcn.h>

#include <filesystem>

namespace loom {
namespace {

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

std::string file_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

BlasLibrary classify_blas_library(const std::string& resolved_path) {
  BlasLibrary blas;
  blas.path = resolved_path;
  const std::string name = file_name(resolved_path);
  if (contains(resolved_path, "openblas")) {
    blas.name = contains(resolved_path, "openblas-openmp")    ? "openblas-openmp"
                : contains(resolved_path, "openblas-pthread") ? "openblas-pthread"
                                                              : "openblas";
  } else if (contains(name, "mkl") || contains(name, "libtorch_cpu")) {
    blas.name = "mkl";
  } else if (contains(name, "blis") || contains(resolved_path, "/blis")) {
    blas.name = "blis";
  } else if (contains(name, "atlas") || contains(resolved_path, "/atlas/")) {
    blas.name = "atlas";
  } else if (contains(resolved_path, "/blas/libblas.so")) {
    blas.name = "reference";  // netlib's, as Debian's libblas3 installs it
  } else {
    blas.name = "unknown";
  }
  return blas;
}

BlasLibrary loaded_blas_library() {
  // LibTorch calls the Fortran interface; the dynamic linker binds it to the first library in
  // the process's lookup scope that defines it, whatever else is mapped (OpenCV maps Debian's
  // libblas.so.3 and OpenBLAS too).
  void* symbol = ::dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (!symbol || ::dladdr(symbol, &info) == 0 || !info.dli_fname) return {"none", ""};
  std::error_code error;
  const auto resolved = std::filesystem::canonical(info.dli_fname, error);
  return classify_blas_library(error ? info.dli_fname : resolved.string());
}

}  // namespace loom
