#!/usr/bin/env bash
# Runs the whole test suite N times in a row (default 3) on an existing build and reports every
# test that ever failed, with how often, so that a test that fails now and then is found before
# CI finds it. Each run's output is kept in BUILD/flake-hunt/run-K.log.
#   scripts/flake-hunt.sh [--hostile] [N] [BUILD]   (after `make build`; BUILD defaults to build)
# --hostile plays a host worse than this one: Loom's kernels forced onto their AVX2 path
# (LOOM_CPU_CAPABILITY=avx2, LibTorch's too), every test pinned to one core (taskset) and a
# busy loop on that core beside them, so that timing assumptions and races show up.
# CTEST_ARGS (e.g. "-R Pipeline") narrows the tests.
# Exit status: 0 when every run passed, 1 otherwise.
set -uo pipefail
hostile=0
if [ "${1:-}" = "--hostile" ]; then
  hostile=1
  shift
fi
runs=${1:-3}
build=${2:-build}
jobs=${JOBS:-$(nproc)}
runner=()
if [ "$hostile" -eq 1 ]; then
  export LOOM_CPU_CAPABILITY=avx2 ATEN_CPU_CAPABILITY=avx2
  runner=(taskset -c 0)
  # The hog: a shell busy loop on the same core, ended with this script.
  taskset -c 0 bash -c 'while :; do :; done' &
  hog=$!
  trap 'kill "$hog" 2>/dev/null' EXIT
  echo "flake-hunt: hostile host: AVX2 kernels, core 0 only, a busy loop beside the tests"
fi
if [ ! -f "$build/CTestTestfile.cmake" ]; then
  echo "flake-hunt: no test build in $build (run make build first)" >&2
  exit 2
fi
logs="$build/flake-hunt"
mkdir -p "$logs"
declare -A failures=()
total=0
for run in $(seq 1 "$runs"); do
  start=$(date +%s)
  # shellcheck disable=SC2086  # CTEST_ARGS is a list of arguments
  (cd "$build" && "${runner[@]}" ctest -j "$jobs" --output-on-failure ${CTEST_ARGS:-}) \
    > "$logs/run-$run.log" 2>&1
  status=$?
  seconds=$(( $(date +%s) - start ))
  summary=$(grep -E "tests passed|tests failed" "$logs/run-$run.log" | tail -1)
  echo "flake-hunt: run $run of $runs: ${summary:-no summary (ctest status $status)} in ${seconds} s"
  # ctest lists the failed tests of the last run as "NUMBER:NAME" lines.
  failed_list="$build/Testing/Temporary/LastTestsFailed.log"
  if [ "$status" -ne 0 ] && [ -f "$failed_list" ]; then
    while IFS=: read -r _ name; do
      failures[$name]=$(( ${failures[$name]:-0} + 1 ))
      total=$((total + 1))
    done < "$failed_list"
  elif [ "$status" -ne 0 ]; then
    failures["(ctest itself, status $status)"]=1
    total=$((total + 1))
  fi
done
if [ "$total" -eq 0 ]; then
  echo "flake-hunt: no test failed in $runs runs"
  exit 0
fi
echo "flake-hunt: tests that failed (times out of $runs runs):"
for name in "${!failures[@]}"; do echo "  ${failures[$name]}  $name"; done | sort -rn
exit 1
