#include "loom/core/blas_library.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(BlasLibrary, NamesDebiansBlasLibrariesByTheirPaths) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/";
  EXPECT_EQ(classify_blas_library(lib + "blas/libblas.so.3.11.0").name, "reference");
  EXPECT_TRUE(classify_blas_library(lib + "blas/libblas.so.3.11.0").reference());
  EXPECT_EQ(classify_blas_library(lib + "openblas-openmp/libblas.so.3").name, "openblas-openmp");
  EXPECT_EQ(classify_blas_library(lib + "openblas-pthread/libblas.so.3").name, "openblas-pthread");
  EXPECT_EQ(classify_blas_library(lib + "libopenblas.so.0").name, "openblas");
  EXPECT_EQ(classify_blas_library(lib + "blis-openmp/libblas.so.3").name, "blis");
  EXPECT_EQ(classify_blas_library(lib + "atlas/libblas.so.3.10.3").name, "atlas");
  EXPECT_EQ(classify_blas_library("/opt/intel/mkl/lib/libmkl_rt.so.2").name, "mkl");
  EXPECT_EQ(classify_blas_library("/venv/site-packages/torch/lib/libtorch_cpu.so").name, "mkl");
  EXPECT_EQ(classify_blas_library("/somewhere/libblas.so.3").name, "unknown");
  EXPECT_FALSE(classify_blas_library(lib + "openblas-openmp/libblas.so.3").reference());
}

// This test program links libloom, which links libtorch_cpu (MKL inside) ahead of OpenCV, whose
// libopencv_core maps Debian's libblas.so.3 and OpenBLAS: torch's products must still bind to the
// wheel's own MKL, not to whichever BLAS came in behind it.
TEST(BlasLibrary, TorchsMatrixProductsBindToTheMklInsideLibTorch) {
  const BlasLibrary blas = loaded_blas_library();
  EXPECT_EQ(blas.name, "mkl") << blas.path;
  EXPECT_NE(blas.path.find("libtorch_cpu.so"), std::string::npos) << blas.path;
  EXPECT_EQ(blas.name, classify_blas_library(blas.path).name);
}

}  // namespace
}  // namespace loom
