# Fails the build when a source file includes a header of a layer its own layer may not use
# (docs/architecture.md, "Rooms"): run by the loom_layers target before libloom compiles, as
# `cmake -DSOURCE_DIR=src/loom -P cmake/CheckLayers.cmake`.
#
# The rule (cmake/Layers.cmake): a layer may use the layers it lists, never the others. The
# layers' object libraries (src/CMakeLists.txt) enforce the same rule through their include
# paths; this check names every offending line at once, before anything compiles, where the
# compiler stops at the first.
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/Layers.cmake)

file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/*.h ${SOURCE_DIR}/*.cpp)
set(violations "")
foreach(source ${sources})
  string(REGEX MATCH "^[^/]+" layer ${source})
  if(NOT DEFINED allowed_${layer})
    continue()  # pch.h and other files outside the layers
  endif()
  file(STRINGS ${SOURCE_DIR}/${source} includes REGEX "^#include \"loom/[a-z_]+/")
  foreach(line ${includes})
    string(REGEX REPLACE "^#include \"loom/([a-z_]+)/.*" "\\1" used ${line})
    if(NOT used IN_LIST allowed_${layer})
      string(REPLACE ";" ", " may_use "${allowed_${layer}}")
      string(APPEND violations
        "  src/loom/${source}: ${line}: ${layer}/ may use ${may_use}, not ${used}/\n")
    endif()
  endforeach()
endforeach()
if(violations)
  message(FATAL_ERROR "layer rule broken (docs/architecture.md, \"Rooms\"):\n"
    "${violations}")
endif()
