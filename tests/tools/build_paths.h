// Where this build's programs and this checkout's files are, for the tests that run them.
//
// They come from one file CMake writes into the build folder (build_paths.cpp.in), not from -D
// flags: a clone's absolute paths on every test's compile line made each clone's test objects
// miss ccache, and CI builds a fresh clone.
#pragma once

#include <string>

namespace loom::test {

std::string loom_binary();         // bin/loom of this build
std::string source_dir();          // the checkout: docs/, scripts/, tests/ data
std::string test_python();         // the Python of Loom's torch (LOOM_PYTHON); "" if none
std::string python_package_dir();  // the folder holding the built `loom` package; "" if none

// The tests' own worker programs, one rank each, started through `loom launch`.
std::string comm_worker();
std::string dp_worker();
std::string pipeline_worker();
std::string schedule_property_worker();

}  // namespace loom::test
