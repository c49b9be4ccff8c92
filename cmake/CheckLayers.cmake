# Fails the build when a source file includes a header of a layer its own layer may not use
# (../shared/DESIGN.md, "Layers and rooms"): run by the loom_layers target before libloom
# compiles, as `cmake -DSOURCE_DIR=src/loom -P cmake/CheckLayers.cmake`.
#
# The rule: a layer may use the layers it lists below, never the others. Naming the offending
# line here is quicker to act on than the link or include error a misplaced dependency would
# give much later, or never (every layer shares libloom and the src/ include root).
cmake_minimum_required(VERSION 3.25)
set(allowed_core core)
set(allowed_data core data)
set(allowed_comm core comm)
set(allowed_models core models)
set(allowed_parallel core comm models parallel)
set(allowed_profile core profile)
set(allowed_train core data comm models parallel profile train)
set(allowed_cli core data comm models parallel profile train cli)

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
  message(FATAL_ERROR "layer rule broken (../shared/DESIGN.md, \"Layers and rooms\"):\n"
    "${violations}")
endif()
