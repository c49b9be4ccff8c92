# Finds the LibTorch Loom builds against and defines LibTorch::LibTorch: its headers, libtorch_cpu
# and libc10, nothing of CUDA. Used by the build and, installed, by find_package(Loom).
#
# Where torch comes from, first match wins:
#   -DLOOM_TORCH_PREFIX=DIR      a torch package folder or an unpacked LibTorch (include/, lib/)
#   -DCMAKE_PREFIX_PATH=DIR      an unpacked LibTorch, or `torch.utils.cmake_prefix_path`
#   -DLOOM_PYTHON=PYTHON         the torch importable by that Python (default: the project's
#                                .venv, which scripts/install-deps.sh makes from
#                                scripts/requirements.txt)
#
# Why not find_package(Torch): the pip wheel is a CUDA build, and its TorchConfig refuses to
# configure without nvcc and the CUDA toolkit's headers, though Loom's CPU engine needs neither;
# it links `torch` (which loads libtorch_cuda, cuBLAS, cuDNN and NCCL into every process: 0.4 s
# and 350 MB more per start, measured); and its find_library calls search the system's default
# paths, where a Debian libtorch-dev would hand over its own libc10 1.13 beside the wheel's.
#
# The wheel's include/ also carries protobuf 3.13's headers (include/google/protobuf), which would
# shadow the system's protobuf that Loom's gRPC code is generated for. Loom includes torch from a
# folder of links to every entry of include/ but google/.
include_guard(GLOBAL)

set(LOOM_TORCH_MIN_VERSION 2.11)
set(LOOM_TORCH_PREFIX "${LOOM_TORCH_PREFIX}" CACHE PATH
  "The torch Loom builds against: a torch package folder or an unpacked LibTorch")
set(LOOM_PYTHON "" CACHE FILEPATH
  "The Python whose torch Loom builds against, runs its package in, and benchmarks against")
# The project's environment once scripts/install-deps.sh has made it, even in a build folder
# configured before it existed.
if(NOT LOOM_PYTHON AND DEFINED LOOM_SOURCE_DIR AND EXISTS "${LOOM_SOURCE_DIR}/.venv/bin/python")
  set_property(CACHE LOOM_PYTHON PROPERTY VALUE "${LOOM_SOURCE_DIR}/.venv/bin/python")
endif()

function(loom_torch_prefix_from_path out)
  foreach(dir IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${dir}/share/cmake/Torch/TorchConfig.cmake")  # an unpacked LibTorch
      set(${out} "${dir}" PARENT_SCOPE)
      return()
    elseif(EXISTS "${dir}/Torch/TorchConfig.cmake")  # torch.utils.cmake_prefix_path
      get_filename_component(prefix "${dir}/../.." ABSOLUTE)
      set(${out} "${prefix}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

if(NOT LOOM_TORCH_PREFIX)
  loom_torch_prefix_from_path(prefix)
  if(NOT prefix AND LOOM_PYTHON)
    execute_process(
      COMMAND "${LOOM_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE cmake_dir OUTPUT_STRIP_TRAILING_WHITESPACE
      ERROR_VARIABLE python_error RESULT_VARIABLE python_status)
    if(NOT python_status EQUAL 0)
      message(FATAL_ERROR "LOOM_PYTHON=${LOOM_PYTHON} cannot import torch:\n${python_error}\n"
        "Run scripts/install-deps.sh (it makes .venv with scripts/requirements.txt), or name a "
        "Python with torch >= ${LOOM_TORCH_MIN_VERSION} (-DLOOM_PYTHON=...).")
    endif()
    get_filename_component(prefix "${cmake_dir}/../.." ABSOLUTE)
  endif()
  # An installed Loom (LoomConfig.cmake) falls back on the torch it was built against.
  if(NOT prefix AND LOOM_TORCH_BUILT_AGAINST AND EXISTS "${LOOM_TORCH_BUILT_AGAINST}")
    set(prefix "${LOOM_TORCH_BUILT_AGAINST}")
  endif()
  if(NOT prefix)
    message(FATAL_ERROR "No torch to build against. Run scripts/install-deps.sh (it makes .venv "
      "with torch from scripts/requirements.txt), or name one: -DLOOM_PYTHON=<python with torch "
      ">= ${LOOM_TORCH_MIN_VERSION}>, -DCMAKE_PREFIX_PATH=<unpacked LibTorch> or "
      "-DLOOM_TORCH_PREFIX=<torch package folder>.")
  endif()
  set(LOOM_TORCH_PREFIX "${prefix}" CACHE PATH
    "The torch Loom builds against: a torch package folder or an unpacked LibTorch" FORCE)
endif()

# The version, from the headers the build will compile against.
set(version_header "${LOOM_TORCH_PREFIX}/include/torch/headeronly/version.h")
if(NOT EXISTS "${version_header}")
  set(version_header "${LOOM_TORCH_PREFIX}/include/torch/version.h")  # before 2.9
endif()
if(NOT EXISTS "${version_header}")
  message(FATAL_ERROR "LOOM_TORCH_PREFIX=${LOOM_TORCH_PREFIX} holds no LibTorch headers "
    "(include/torch/headeronly/version.h)")
endif()
file(STRINGS "${version_header}" version_lines REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
foreach(line IN LISTS version_lines)
  string(REGEX MATCH "TORCH_VERSION_([A-Z]+) ([0-9]+)" _ "${line}")
  set(torch_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
endforeach()
set(LOOM_TORCH_VERSION "${torch_MAJOR}.${torch_MINOR}.${torch_PATCH}")
if(LOOM_TORCH_VERSION VERSION_LESS LOOM_TORCH_MIN_VERSION)
  message(FATAL_ERROR "Loom needs torch >= ${LOOM_TORCH_MIN_VERSION}; ${LOOM_TORCH_PREFIX} is "
    "${LOOM_TORCH_VERSION}")
endif()
# The full build name ("2.11.0+cu130") and the CUDA it was built for, as the package says them:
# version.py in a wheel, build-version in an unpacked LibTorch.
set(LOOM_TORCH_BUILD "${LOOM_TORCH_VERSION}")
set(LOOM_TORCH_CUDA "")
if(EXISTS "${LOOM_TORCH_PREFIX}/version.py")
  file(STRINGS "${LOOM_TORCH_PREFIX}/version.py" build_line REGEX "^__version__ = ")
  string(REGEX MATCH "'([^']+)'" _ "${build_line}")
  set(LOOM_TORCH_BUILD "${CMAKE_MATCH_1}")
  file(STRINGS "${LOOM_TORCH_PREFIX}/version.py" cuda_line REGEX "^cuda.*= '")
  if(cuda_line MATCHES "'([^']+)'")
    set(LOOM_TORCH_CUDA "${CMAKE_MATCH_1}")
  endif()
elseif(EXISTS "${LOOM_TORCH_PREFIX}/build-version")
  file(STRINGS "${LOOM_TORCH_PREFIX}/build-version" LOOM_TORCH_BUILD LIMIT_COUNT 1)
  if(LOOM_TORCH_BUILD MATCHES "\\+cu([0-9]+)([0-9])$")
    set(LOOM_TORCH_CUDA "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
  endif()
endif()

# The C++ standard the headers need: C++17 up to some release after 2.11, C++20 from then on
# (2.15's ATen/ATen.h stops with an #error below C++20). Loom's own code compiles as either.
set(LOOM_TORCH_CXX_FEATURE cxx_std_17)
file(STRINGS "${LOOM_TORCH_PREFIX}/include/ATen/ATen.h" cxx20_line REGEX "C\\+\\+20 or later")
if(cxx20_line)
  set(LOOM_TORCH_CXX_FEATURE cxx_std_20)
endif()

# The libraries, from the prefix only.
foreach(name torch_cpu c10)
  find_library(LOOM_TORCH_${name}_LIBRARY ${name} PATHS "${LOOM_TORCH_PREFIX}/lib"
    NO_DEFAULT_PATH NO_CACHE)
  if(NOT LOOM_TORCH_${name}_LIBRARY)
    message(FATAL_ERROR "${LOOM_TORCH_PREFIX}/lib has no lib${name}.so")
  endif()
endforeach()

# torch's headers without google/ (see the top).
set(LOOM_TORCH_INCLUDE_ROOT "${CMAKE_BINARY_DIR}/loom-torch-include")
file(REMOVE_RECURSE "${LOOM_TORCH_INCLUDE_ROOT}")
file(MAKE_DIRECTORY "${LOOM_TORCH_INCLUDE_ROOT}")
file(GLOB torch_include_entries RELATIVE "${LOOM_TORCH_PREFIX}/include"
  "${LOOM_TORCH_PREFIX}/include/*")
list(REMOVE_ITEM torch_include_entries google)
foreach(entry IN LISTS torch_include_entries)
  file(CREATE_LINK "${LOOM_TORCH_PREFIX}/include/${entry}" "${LOOM_TORCH_INCLUDE_ROOT}/${entry}"
    SYMBOLIC)
endforeach()

if(NOT TARGET LibTorch::LibTorch)
  add_library(LibTorch::c10 SHARED IMPORTED)
  set_target_properties(LibTorch::c10 PROPERTIES
    IMPORTED_LOCATION "${LOOM_TORCH_c10_LIBRARY}")
  add_library(LibTorch::torch_cpu SHARED IMPORTED)
  set_target_properties(LibTorch::torch_cpu PROPERTIES
    IMPORTED_LOCATION "${LOOM_TORCH_torch_cpu_LIBRARY}")
  add_library(LibTorch::LibTorch INTERFACE IMPORTED)
  # Headers as system headers: their warnings are not Loom's to fix. The definitions are the ones
  # the wheel's own torch_cpu target carries (share/cmake/Caffe2/Caffe2Targets.cmake): they open
  # the declarations of torch's distributed headers (c10d's Store, which Loom's store implements).
  set_target_properties(LibTorch::LibTorch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES
      "${LOOM_TORCH_INCLUDE_ROOT};${LOOM_TORCH_INCLUDE_ROOT}/torch/csrc/api/include"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES
      "${LOOM_TORCH_INCLUDE_ROOT};${LOOM_TORCH_INCLUDE_ROOT}/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO;USE_RPC;USE_TENSORPIPE"
    INTERFACE_COMPILE_FEATURES "${LOOM_TORCH_CXX_FEATURE}"
    # torch_cpu first and always (--no-as-needed): it carries MKL's BLAS, which must serve
    # torch's matrix products before any BLAS another library (OpenCV's OpenBLAS) brings in.
    INTERFACE_LINK_LIBRARIES
      "-Wl,--no-as-needed;LibTorch::torch_cpu;LibTorch::c10;-Wl,--as-needed")
endif()
message(STATUS "LibTorch ${LOOM_TORCH_BUILD} (CUDA build: ${LOOM_TORCH_CUDA}) at "
  "${LOOM_TORCH_PREFIX}; Loom links its CPU libraries")
