#!/usr/bin/env bash
# Runs every benchmark against its peer; results go to bench/out/. Record them, with the
# machine, in bench/RESULTS.md.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
# The project's environment (scripts/install-deps.sh): torch 2.11 and torchvision, the peers.
python=$(cd "$here/.." && pwd)/.venv/bin/python
mkdir -p "$here/out"
"$python" "$here/train_vs_pytorch.py" --loom "$build/bin/loom" --json "$here/out/train_vs_pytorch.json"
"$python" "$here/loader_vs_torchvision.py" --loom "$build/bin/loom"
"$build/bin/loom" launch --nproc-per-node 2 -- "$build/bin/loom" bench comm --json "$here/out/comm.json"
"$python" "$here/data_parallel_vs_ddp.py" --loom "$build/bin/loom" --json "$here/out/data_parallel.json"
"$python" "$here/accounting_overhead.py" --loom "$build/bin/loom"
"$python" "$here/blas.py" --json "$here/out/blas.json"
"$python" "$here/autotune.py" --loom "$build/bin/loom" --json "$here/out/autotune.json"
"$python" "$here/pipeline_partition.py" --loom "$build/bin/loom" --json "$here/out/pipeline_partition.json"
"$python" "$here/pipeline_vs_simulation.py" --loom "$build/bin/loom" --json "$here/out/pipeline_vs_simulation.json"
"$python" "$here/pipeline_train_memory.py" --loom "$build/bin/loom" --json "$here/out/pipeline_train_memory.json"
"$python" "$here/remote_workers_offload.py" --loom "$build/bin/loom" --json "$here/out/remote_workers_offload.json"
"$python" "$here/python_loader.py" --build "$build" --json "$here/out/python_loader.json"
"$python" "$here/python_steps_overhead.py" --build "$build" --json "$here/out/python_steps_overhead.json"
"$python" "$here/python_pipeline.py" --loom "$build/bin/loom" --json "$here/out/python_pipeline.json"
"$python" "$here/ps_one_host.py" --loom "$build/bin/loom" --json "$here/out/ps_one_host.json"
# Multi-host (network namespaces; each skips, saying why, where they cannot be made).
"$python" "$here/ps_vs_ring.py" --loom "$build/bin/loom" --part-mb 1 --json "$here/out/ps_vs_ring.json"
"$python" "$here/netbed_tcp.py"
# Language models (token data: the Jargon File, tokenized by each benchmark).
"$python" "$here/gpt_vs_pytorch.py" --loom "$build/bin/loom" --json "$here/out/gpt_vs_pytorch.json"
"$python" "$here/gpt_recompute_memory.py" --loom "$build/bin/loom" --json "$here/out/gpt_recompute_memory.json"
"$python" "$here/zero_memory.py" --loom "$build/bin/loom" --json "$here/out/zero_memory.json"
"$python" "$here/async_checkpoint.py" --loom "$build/bin/loom" --json "$here/out/async_checkpoint.json"
