// Which BLAS library LibTorch's fp32 matrix products run on: the file that defines the sgemm_
// symbol this process binds to. torch's pip wheel carries Intel's MKL inside libtorch_cpu.so and
// calls it through the same Fortran names, so any library that comes before it in the lookup
// order and defines them (OpenCV pulls in Debian's libblas.so.3) would take its products over;
// Loom links libtorch_cpu first. A LibTorch built against the system's BLAS instead gets
// whatever the alternatives system points libblas.so.3 at: netlib's reference BLAS computes a
// 1024x1024 fp32 product 16-30x slower than OpenBLAS on the 2-core test machine
// (bench/RESULTS.md). bf16 products go through oneDNN either way.
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
// reference BLAS by its own (blas/libblas.so.3), MKL, BLIS and ATLAS by their file names, and
// libtorch_cpu itself as MKL (the pip wheel links it in).
BlasLibrary classify_blas_library(const std::string& resolved_path);

// The BLAS whose sgemm_ this process calls ("none" when no BLAS is loaded).
BlasLibrary loaded_blas_library();

// The package that gives a LibTorch built against the system's BLAS a fast one on Debian, for
// advice.
constexpr const char* kFastBlasPackage = "libopenblas0-openmp";

}  // namespace loom
