#!/usr/bin/env bash
# Runs the whole test suite N times in a row (default 3) on an existing build and reports every
# test that ever failed, with how often, so that a test that fails now and then is found before
# CI finds it. Each run's output is kept in BUILD/flake-hunt/run-K.log.
#   scripts/flake-hunt.sh [N] [BUILD]     (after `make build`; BUILD defaults to build)
# Exit status: 0 when every run passed, 1 otherwise.
set -uo pipefail
runs=${1:-3}
build=${2:-build}
jobs=${JOBS:-$(nproc)}
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
  (cd "$build" && ctest -j "$jobs" --output-on-failure) > "$logs/run-$run.log" 2>&1
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
