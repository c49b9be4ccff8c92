#!/usr/bin/env bash
# Installs Loom into a temporary prefix, builds examples/embed against it with
# find_package(Loom), runs it, and checks that it trained.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/lib/cmake/Loom/LoomConfig.cmake"
test -f "$work/prefix/include/loom/train/trainer.h"
test -x "$work/prefix/bin/loom"

# Only the public headers are installed, and they are closed: every loom/ include resolves in
# the prefix, none names a library other than LibTorch and the standard library, and the export
# names no path of this machine (LoomConfig.cmake may: it remembers the torch Loom was built
# against, as a default).
include="$work/prefix/include"
test ! -e "$include/loom/train/training_run.h"  # internal
test ! -e "$include/loom/pch.h"
grep -rhoE '#include "loom/[^"]+"' "$include" | sed -E 's/#include "(.*)"/\1/' | sort -u |
  while read -r header; do test -f "$include/$header" || { echo "$header is not installed"; exit 1; }; done
if grep -rlE '#include <(nlohmann|yaml-cpp|grpc|grpcpp|google/protobuf|opencv2|CLI|lz4|openssl|turbojpeg|png)' "$include"; then
  echo "an installed header includes a library find_package(Loom) does not find"; exit 1
fi
if grep -E '"/(usr|home|work|opt)' "$work"/prefix/lib/cmake/Loom/LoomTargets*.cmake; then
  echo "the export names a path of this machine"; exit 1
fi
# The Python bindings use the public API only.
for header in $(grep -hoE '#include "loom/[^"]+"' "$source_dir"/python/src/*.cpp | sed -E 's/#include "(.*)"/\1/' | sort -u); do
  test -f "$include/$header" || { echo "python/src includes $header, which is not public"; exit 1; }
done

cmake -S "$source_dir/examples/embed" -B "$work/embed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/embed" > "$work/build.log"

cd "$work"
output=$("$work/embed/embed" data=synthetic data.image_size=16 data.train_samples=128 \
  data.test_samples=32 data.batch_size=16 train.epochs=2 model=mlp runtime.threads=1 2>&1) || {
  status=$?
  echo "$output"
  echo "examples/embed, built against the installed package, exited with $status"
  exit 1
}
echo "$output"
grep -q "^epoch 2: test accuracy" <<<"$output"
grep -q "^mlp: " <<<"$output"
test -f "$work/embed-run/summary.json"

# The Python package, installed beside the library, loads the installed libloom (its RPATH is
# relative to the prefix) and trains from there.
site=$(ls -d "$work"/prefix/lib/python3*/dist-packages 2>/dev/null | head -1 || true)
if [ -n "$site" ]; then
  loaded=$(ldd "$site"/loom/_loom*.so | awk '/libloom.so/ {print $3}')
  test "$(realpath "$loaded")" = "$(realpath "$work/prefix/lib/libloom.so")"
  python=$(sed -n 's/^LOOM_PYTHON:FILEPATH=//p' "$build_dir/CMakeCache.txt")
  PYTHONPATH="$site" "$python" -c "
import loom, sys
assert loom.__file__.startswith('$site'), loom.__file__
s = loom.train(overrides=['data=synthetic', 'data.image_size=16', 'data.train_samples=128',
                          'data.test_samples=32', 'data.batch_size=16', 'model=mlp'],
               out='$work/python-run')
assert s['steps'] == 3 * 8, s['steps']
print('python package: ok')"
fi
echo "install_and_embed: ok"
