#!/usr/bin/env bash
# The build's layer check (cmake/CheckLayers.cmake) passes on the tree as it is and fails, naming
# the file and the include, when data/ includes train/ (a copy of src/loom with one planted
# include).
set -euo pipefail
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check() { cmake -DSOURCE_DIR="$1" -P "$source_dir/cmake/CheckLayers.cmake" > "$work/out.txt" 2>&1; }

check "$source_dir/src/loom"
cp -r "$source_dir/src/loom" "$work/loom"
printf '#include "loom/data/loader.h"\n#include "loom/train/trainer.h"\n' > "$work/loom/data/planted.cpp"
if check "$work/loom"; then
  echo "layer_rule: data/ including train/ was not refused"; exit 1
fi
grep -q 'src/loom/data/planted.cpp: #include "loom/train/trainer.h": data/ may use core, data, not train/' "$work/out.txt" ||
  { cat "$work/out.txt"; exit 1; }
echo "layer_rule: ok"
