#!/usr/bin/env bash
# The layer rule of docs/architecture.md ("Rooms"), held two ways:
#  1. the build's layer check (cmake/CheckLayers.cmake) passes on the tree as it is and fails,
#     naming the file and the include, when data/ includes train/ (a copy of src/loom with one
#     planted include);
#  2. each layer compiles as its own target that sees only the layers it may use: a file
#     compiled with the data layer's own compile command can include core/ and data/ headers,
#     and including train/ is "No such file".
# Usage: layer_rule_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check() { cmake -DSOURCE_DIR="$1" -P "$source_dir/cmake/CheckLayers.cmake" > "$work/out.txt" 2>&1; }

check "$source_dir/src/loom"
cp -r "$source_dir/src/loom" "$work/loom"
printf '#include "loom/data/loader.h"\n#include "loom/train/trainer.h"\n' > "$work/loom/data/planted.cpp"
if check "$work/loom"; then
  echo "layer_rule: data/ including train/ was not refused by the check"; exit 1
fi
grep -q 'src/loom/data/planted.cpp: #include "loom/train/trainer.h": data/ may use core, data, not train/' "$work/out.txt" ||
  { cat "$work/out.txt"; exit 1; }

# The data layer's compile command for one of its files, from the build's own rules.
object=$(ninja -C "$build_dir" -t targets all | grep -oE '^[^:]*loom_data\.dir/[^:]*/loader\.cpp\.o' | head -1)
[ -n "$object" ] || { echo "layer_rule: no object of the loom_data target in $build_dir"; exit 1; }
command=$(ninja -C "$build_dir" -t commands "$object" | tail -1)
compile() {  # compile FILE: the same command, on FILE, checking syntax only
  local cmd=$command
  cmd=$(sed -E "s# -MD##; s# -MT [^ ]+##; s# -MF [^ ]+##; s# -o [^ ]+# -fsyntax-only#; s# -c [^ ]+# -c $1#" <<<"$cmd")
  (cd "$build_dir" && eval "$cmd") > "$work/compile.txt" 2>&1
}
# In a folder of their own: a quoted include looks beside the including file first.
mkdir "$work/planted"
printf '#include "loom/core/error.h"\n#include "loom/data/loader.h"\n' > "$work/planted/allowed.cpp"
compile "$work/planted/allowed.cpp" || { echo "layer_rule: data/ cannot include core/ and data/:"; cat "$work/compile.txt"; exit 1; }
printf '#include "loom/train/trainer.h"\n' > "$work/planted/wrong.cpp"
if compile "$work/planted/wrong.cpp"; then
  echo "layer_rule: the data layer's target compiled an include of train/"; exit 1
fi
grep -q 'loom/train/trainer.h: No such file or directory' "$work/compile.txt" ||
  { cat "$work/compile.txt"; exit 1; }
echo "layer_rule: ok"
