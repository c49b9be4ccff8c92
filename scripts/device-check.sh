#!/usr/bin/env bash
# The one prepared run for a lent GPU machine (Ubuntu 24.04, torch 2.11.0+cu130 in
# /opt/torch/.venv, no Debian packages): builds tests/device (Loom's torch discovery and the
# parts of Loom nearest torch's API) with that machine's torch, CMake, Python and compiler, runs
# its checks, and leaves the results in $OUT (or /tmp/device-check). Usage:
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
echo "device-check: exit $status"
exit $status
