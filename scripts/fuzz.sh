#!/usr/bin/env bash
# `make fuzz`: builds every libFuzzer target of tests/fuzz with clang (libloom instrumented for
# coverage, ASan and UBSan) in $FUZZ_BUILD, then runs each for $FUZZ_SECONDS from the corpus in
# the repository. New inputs that reach new code go to $FUZZ_BUILD/corpus/<target>/, crashes,
# leaks and timeouts to $FUZZ_BUILD/findings/<target>/. Prints executions, coverage and findings
# per target and writes them to $FUZZ_BUILD/fuzz-report.md. Exits 1 when anything was found.
#
# A finding is fixed, then copied into tests/fuzz/corpus/<target>/ as crash-<what>, where
# `make test` replays it ever after (FuzzRegression.<target>).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${FUZZ_BUILD:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-$(sed -n '/^set(LOOM_FUZZ_TARGETS/,/)/p' tests/fuzz/CMakeLists.txt |
  grep -v "set(" | tr -d ' )')}

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
    -DLOOM_FUZZ=ON -DLOOM_BUILD_TESTS=OFF
fi
cmake --build "$build" --target fuzz_targets

report="$build/fuzz-report.md"
{
  echo "| target | seconds | executions | exec/s | coverage (edges) | corpus | findings |"
  echo "|---|---|---|---|---|---|---|"
} > "$report"
found=0
for t in $targets; do
  corpus="$build/corpus/$t" findings="$build/findings/$t" log="$build/findings/$t.log"
  mkdir -p "$corpus" "$findings"
  echo "fuzz: $t for ${seconds} s"
  # -rss_limit_mb: a decoder that believes a header's size must not take the machine's memory.
  set +e
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} LOOM_LOG_LEVEL=off \
    "$build/fuzz/fuzz_$t" "$corpus" "tests/fuzz/corpus/$t" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$findings/" > "$log" 2>&1
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
  kept=$(find "$corpus" -type f | wc -l)
  crashes=$(find "$findings" -type f | wc -l)
  found=$((found + crashes))
  echo "| $t | $seconds | ${runs:-0} | ${rate:-0} | ${cov:-0} | $kept | $crashes |" >> "$report"
  if [ "$crashes" -gt 0 ]; then
    echo "fuzz: $t: $crashes finding(s) in $findings (log: $log)"
    grep -m3 -E "ERROR: |runtime error|fuzz invariant|deadly signal" "$log" || true
  fi
done
cat "$report"
[ "$found" -eq 0 ]
