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

cmake -S "$source_dir/examples/embed" -B "$work/embed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/embed" > "$work/build.log"

cd "$work"
output=$("$work/embed/embed" data=synthetic data.image_size=16 data.train_samples=128 \
  data.test_samples=32 data.batch_size=16 train.epochs=2 model=mlp runtime.threads=1)
echo "$output"
grep -q "^epoch 2: test accuracy" <<<"$output"
grep -q "^mlp: " <<<"$output"
test -f "$work/embed-run/summary.json"
echo "install_and_embed: ok"
