#!/usr/bin/env python3
"""Activation recompute on a GPT step: `train.activation_checkpointing: blocks` against none, on
the same model, data and settings (fp32, AdamW), side by side. Peak memory is the caching
allocator's peak of bytes in use over the run (summary.json); the activations' part is that peak
less what the step holds whatever it recomputes: parameters, gradients and AdamW's two moments,
16 bytes a parameter in fp32. Targets (issue 32): recomputed activations <= 40% of kept ones at
<= 1.4x the step time.

Usage: bench/gpt_recompute_memory.py [--loom build/bin/loom] [--repeats R]
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


def run(loom, data, mode, steps):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([loom, "train", "--out", out, "--set", "data=tokens",
                        "--set", f"data.path={data}", "--set", "model=gpt",
                        "--set", "model.gpt.n_layer=6", "--set", "model.gpt.n_head=6",
                        "--set", "model.gpt.n_embd=384", "--set", "data.seq_len=256",
                        "--set", "data.batch_size=8", "--set", f"train.max_steps={steps}",
                        "--set", "train.eval=false", "--set", "checkpoint.enabled=false",
                        "--set", "optimizer.name=adamw", "--set", "runtime.precision=fp32",
                        "--set", "runtime.threads=2",
                        "--set", f"train.activation_checkpointing={mode}"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    step_seconds = s["step_time"]["seconds_per_step"]
    state = 16 * s["parameters"]
    return s["memory"]["peak_cached_bytes_in_use"], state, step_seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--json", default="")
    a = p.parse_args()
    with jargon_tokens(a.loom) as data:
        if data is None:
            return 0
        seen = {"none": [], "blocks": []}
        for _ in range(a.repeats):
            for mode in seen:
                seen[mode].append(run(a.loom, data, mode, a.steps))
    rows = {}
    for mode, runs in seen.items():
        peak = statistics.median(r[0] for r in runs)
        state = runs[0][1]
        rows[mode] = {"peak_bytes": peak, "state_bytes": state, "activation_bytes": peak - state,
                      "step_seconds": statistics.median(r[2] for r in runs)}
    memory = rows["blocks"]["activation_bytes"] / rows["none"]["activation_bytes"]
    time = rows["blocks"]["step_seconds"] / rows["none"]["step_seconds"]
    print(f"GPT 6 x 384, context 256, batch 8, fp32, AdamW; medians of {a.repeats} runs")
    for mode, r in rows.items():
        print(f"{mode:7} peak {r['peak_bytes'] / 2**20:7.1f} MB  activations "
              f"{r['activation_bytes'] / 2**20:7.1f} MB  step {1e3 * r['step_seconds']:7.1f} ms")
    print(f"recompute: activations {100 * memory:.1f}% of kept (target <= 40%), step time "
          f"{time:.2f}x (target <= 1.4x)")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "memory_ratio": memory, "time_ratio": time}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
