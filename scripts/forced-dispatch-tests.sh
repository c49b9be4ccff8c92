#!/usr/bin/env bash
# Runs the tests of Loom's hand-vectorised kernels, and a small end-to-end subset, once per
# forced instruction set below the host's own (LOOM_CPU_CAPABILITY=avx2, then default), so that
# the paths of hosts CI does not have are tested on the host it has. `make test` has already
# run everything on the host's own path.
#   scripts/forced-dispatch-tests.sh [BUILD]     (after `make build`; BUILD defaults to build)
set -euo pipefail
build=${1:-build}
jobs=${JOBS:-$(nproc)}
# Kernel tests (every kernel's own tests run each path they can; these run the rest of each
# suite, the fused optimizers and the losses under the forced path) and the end-to-end subset.
tests='^(CpuCapability|GaussianBlur|BilinearResize|Transforms|TransformPipeline|ReduceKernels'
tests+='|FusedSgd|FusedAdam|CrossEntropyLoss|TokenCrossEntropyLoss|RowKernels|RuntimeChoice)\.'
tests+='|^TrainRun\.FashionMnistWritesConfigMetricsSummaryAndCheckpoints$'
tests+='|^ImageFolderRun\.TrainsThroughCorruptFiles$'
tests+='|^LanguageModelTrain\.RecomputedBlocksTrainAsKeptOnes$'
for capability in avx2 default; do
  echo "forced-dispatch-tests: LOOM_CPU_CAPABILITY=$capability"
  (cd "$build" && LOOM_CPU_CAPABILITY=$capability ctest -j "$jobs" --output-on-failure -R "$tests")
done
