#!/usr/bin/env python3
"""ZeRO-1 and ZeRO-2 (`parallel.zero: 1 | 2`) against plain all-reduce data parallelism on 2 ranks,
side by side: a GPT (6 x 384, context 256, AdamW, bf16) on the Jargon File. Reports what rank 0
holds (summary.json memory: optimizer_state_bytes, gradient_bytes after the step, and the peak of
tensor memory, peak_cached_bytes_in_use) and tokens/s. Targets (issue 32): ZeRO-1's state
<= 0.5x the unsharded case + one bucket (parallel.bucket_cap_mb, 25 MB), at >= 0.9x the
throughput; ZeRO-2 also keeps only its half of the gradients.

Usage: bench/zero_memory.py [--loom build/bin/loom] [--repeats R]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from jargon_tokens import jargon_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
BUCKET_BYTES = 25 * 2**20


def run(loom, data, zero, steps):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([loom, "launch", "--nproc-per-node", "2", "--", loom, "train", "--out", out,
                        "--set", "data=tokens", "--set", f"data.path={data}", "--set", "model=gpt",
                        "--set", "model.gpt.n_layer=6", "--set", "model.gpt.n_head=6",
                        "--set", "model.gpt.n_embd=384", "--set", "data.seq_len=256",
                        "--set", "data.global_batch=8", "--set", f"train.max_steps={steps}",
                        "--set", "train.eval=false", "--set", "checkpoint.enabled=false",
                        "--set", "optimizer.name=adamw", "--set", "runtime.precision=bf16",
                        "--set", f"parallel.zero={zero}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    m = s["memory"]
    return (m["optimizer_state_bytes"], m["gradient_bytes"], m["peak_cached_bytes_in_use"],
            s["tokens_per_second"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--json", default="")
    a = p.parse_args()
    with jargon_tokens(a.loom) as data:
        if data is None:
            return 0
        seen = {0: [], 1: [], 2: []}
        for _ in range(a.repeats):
            for zero in seen:
                seen[zero].append(run(a.loom, data, zero, a.steps))
    mb = 2**20
    state = {z: runs[0][0] for z, runs in seen.items()}
    grads = {z: runs[0][1] for z, runs in seen.items()}
    peak = {z: statistics.median(r[2] for r in runs) for z, runs in seen.items()}
    rate = {z: statistics.median(r[3] for r in runs) for z, runs in seen.items()}
    bound = 0.5 * state[0] + BUCKET_BYTES
    print(f"2 ranks, GPT 6 x 384, context 256, global batch 8, AdamW, bf16; medians of "
          f"{a.repeats}; rank 0")
    print(f"{'':8}{'state MB':>10}{'grads MB':>10}{'peak MB':>10}{'tokens/s':>10}  vs plain")
    for z, name in ((0, "plain"), (1, "ZeRO-1"), (2, "ZeRO-2")):
        print(f"{name:8}{state[z] / mb:10.1f}{grads[z] / mb:10.1f}{peak[z] / mb:10.1f}"
              f"{rate[z]:10.0f}  state {state[z] / state[0]:.3f}x, grads "
              f"{grads[z] / grads[0]:.3f}x, peak {peak[z] / peak[0]:.3f}x, "
              f"speed {rate[z] / rate[0]:.3f}x")
    print(f"targets: state <= 0.5x + one bucket ({bound / mb:.1f} MB), speed >= 0.9x; ZeRO-2 "
          "grads <= 0.5x")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"state_bytes": state, "gradient_bytes": grads, "peak_bytes": peak,
                       "tokens_per_second": rate, "runs": seen}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
