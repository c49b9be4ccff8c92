// Which BLAS library LibTorch's fp32 matrix products run on: the file that defines the sgemm_
// symbol this process binds to. Debian's LibTorch links libblas.so.3, and the alternatives system points that at
// netlib's reference BLAS unless an optimised one is installed: Debian's OpenBLAS for OpenMP
// (libopenblas0-openmp) computes a 1024x1024 fp32 product 16-30x faster on the 2-core test
// machine (bench/RESULTS.md). bf16 products go through oneDNN either way.
#pragma once

#include <string>

namespace loom {

struct BlasLibrary {
  std::string name;  // openblas-openmp, openblas-pthread, openblas, reference, mkl, blis, atlas,
                     // unknown; "none" when no BLAS is mapped
  std::string path;  // the file actually mapped (symbolic links resolved)
  bool reference() const { return name == "reference"; }
};

// What a resolved library path is: OpenBLAS by its Debian folder (openblas-openmp/), netlib's
// reference BLAS by its own (blas/libblas.so.3), MKL, BLIS and ATLAS by their file names.
BlasLibrary classify_blas_library(const std::string& resolved_path);

// The BLAS whose sgemm_ this process calls ("none" when no BLAS is loaded).
BlasLibrary loaded_blas_library();

// The package that gives LibTorch a fast fp32 BLAS on Debian, for advice.
constexpr const char* kFastBlasPackage = "libopenblas0-openmp";

}  // namespace loom
