#!/usr/bin/env bash
# The one prepared run for a lent GPU machine (Ubuntu 24.04, torch 2.11.0+cu130 in
# /opt/torch/.venv, no Debian packages): builds tests/device (Loom's torch discovery and the
# parts of Loom nearest torch's API) with that machine's torch, CMake, Python and compiler, runs
# its checks, and leaves the results in $OUT (or /tmp/device-check). Where a bundle of a build
# made on a CPU machine travels with the tree (device-bundle/, scripts/device-bundle.sh), it then
# runs the suite's GPU tests from it: `loom train` on the GPU against the CPU, checkpoints moved
# between the two, every zoo model on the GPU. Usage:
#   scripts/device-check.sh [PYTHON]     PYTHON: the one whose torch to build against
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-/opt/torch/.venv/bin/python}
out=${OUT:-/tmp/device-check}
build=${DEVICE_CHECK_BUILD:-/tmp/loom-device-check}
mkdir -p "$out"

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -srm), $(nproc) cores"
  grep -m1 "model name" /proc/cpuinfo || true
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  echo "cmake: $(cmake --version | head -1)"
  echo "c++: $(c++ --version | head -1)"
  "$python" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda available', torch.cuda.is_available())"
} | tee "$out/machine.txt"

generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
start=$(date +%s)
cmake -S "$root/tests/device" -B "$build" "${generator[@]}" -DLOOM_PYTHON="$python" \
  > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$out/build.log" 2>&1 || { tail -60 "$out/build.log"; exit 1; }
echo "configure + build: $(( $(date +%s) - start )) s" | tee -a "$out/machine.txt"
grep -i "warning" "$out/build.log" | head -20 || true

status=0
"$build/torch_port_check" | tee "$out/torch_port_check.jsonl" || status=$?

# The bundle's programs find their libraries, each other, torch and the source tree by the paths
# they were built with: make those paths lead here (a link only where nothing is).
run_bundle_tests() {
  local bundle=/tmp/loom-device-bundle built_in build torch_lib
  rm -rf "$bundle" && mkdir -p "$bundle"
  tar -C "$bundle" -xJf "$root/device-bundle/bundle.tar.xz"
  built_in=$(sed -n 's/^built_in=//p' "$bundle/BUILT")
  build=$(sed -n 's/^build=//p' "$bundle/BUILT")
  torch_lib=$(sed -n 's/^torch_lib=//p' "$bundle/BUILT")
  echo "bundle: $(sed -n 's/^commit=//p' "$bundle/BUILT")" | tee -a "$out/machine.txt"
  local here_torch
  here_torch=$("$python" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
  link() {
    if [[ ! -e "$2" ]]; then mkdir -p "$(dirname "$2")" && ln -s "$1" "$2"; fi
    [[ "$(readlink -f "$2")" == "$(readlink -f "$1")" ]] || {
      echo "device-check: $2 exists and is not $1" >&2
      return 1
    }
  }
  link "$root" "$built_in"
  link "$bundle/build" "$build"
  link "$here_torch" "$torch_lib"
  local jargon=/usr/share/doc/jargon-text/jargon.txt.gz
  if [[ -f "$bundle/share/jargon.txt.gz" && ! -e "$jargon" ]]; then
    link "$bundle/share/jargon.txt.gz" "$jargon"
  fi
  export LD_LIBRARY_PATH="$bundle/lib"
  "$build/tests/models_test" --gtest_filter='ModelDevice.*:DrawKey.*:Recompute.*' 2>&1 |
    tee "$out/models_test.txt" || return 1
  "$build/tests/dist_test" --gtest_filter='*OnAGpu*:*Nccl*' 2>&1 |
    tee "$out/dist_test.txt" || return 1
  "$build/tests/e2e_test" --gtest_filter='DeviceTrain.*:*OnAGpu*' 2>&1 |
    tee "$out/e2e_test.txt" || return 1
  "$python" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" || return 0
  # Issue 52's benchmarks, once each (DEVICE_CHECK_BENCH: which, "gpt,resnet" by default; about
  # 2-3 minutes each, torch.compile's compiling included). GPT-2 124M's layers at a context of
  # 1024, batch 16, bf16: `loom train` against nanoGPT's loop eager and compiled (target >= 1.0x
  # compiled, MFU >= 40%). ResNet-50, batch 256, bf16: `loom train` against torch with the data
  # already on the GPU (>= 1.0x eager), and from JPEGs (>= 0.95x).
  local benches=${DEVICE_CHECK_BENCH:-gpt,resnet}
  if [[ ",$benches," == *,gpt,* ]]; then
    "$python" "$root/bench/gpt_vs_pytorch.py" --loom "$build/bin/loom" --device cuda \
      --shape gpt2 --batch 16 --steps 40 --repeats 1 --precisions bf16 \
      --json "$out/gpt_vs_pytorch.json" 2>&1 | tee "$out/gpt_vs_pytorch.txt" || return 1
  fi
  if [[ ",$benches," == *,resnet,* ]]; then
    "$python" "$root/bench/train_vs_pytorch.py" --loom "$build/bin/loom" --device cuda \
      --steps 40 --repeats 1 --json "$out/resnet50_vs_torch.json" 2>&1 |
      tee "$out/resnet50_vs_torch.txt" || return 1
  fi
}
if [[ -f "$root/device-bundle/bundle.tar.xz" ]]; then
  run_bundle_tests || status=1
else
  echo "device-check: no device-bundle/ (scripts/device-bundle.sh): the suite's GPU tests not run"
fi
echo "device-check: exit $status"
exit $status
