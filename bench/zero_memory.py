#!/usr/bin/env python3
"""ZeRO-1, 2 and 3 (`parallel.zero: 1 | 2 | 3`) against plain all-reduce data parallelism,
side by side in one run: a GPT (6 x 384, context 256, AdamW, bf16) on the Jargon File. Reports
what rank 0 holds (summary.json memory: parameter_bytes between steps, gradient_bytes after the
step, optimizer_state_bytes, their sum, and the peak of tensor memory, peak_cached_bytes_in_use)
and tokens/s, the medians of interleaved repeats.

Targets. Issue 32 (2 ranks): ZeRO-1's state <= 0.5x the unsharded case + one bucket
(parallel.bucket_cap_mb, 25 MB), at >= 0.9x the throughput; ZeRO-2 also keeps only its half of
the gradients. Issue 41: ZeRO-3's parameters + gradients + state <= 0.55x plain's on 2 ranks
and <= 0.3x on 4 (4 ranks oversubscribe a 2-core host: their speeds say little), its peak tensor
memory below ZeRO-2's and its tokens/s >= 0.85x ZeRO-2's on 2 ranks. Also ZeRO-3 with
parallel.zero3_keep none and all (the default is last) on 2 ranks: memory against speed.

Usage: bench/zero_memory.py [--loom build/bin/loom] [--repeats R] [--steps S] [--no-four]
                            [--no-keep] [--json out.json]
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
MB = 2**20
NAMES = {0: "plain", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def run(loom, data, ranks, zero, keep, steps):
    """One run's rank-0 memory (parameters, gradients, state, peak: bytes) and tokens/s."""
    extra = ["--set", f"parallel.zero3_keep={keep}"] if keep else []
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([loom, "launch", "--nproc-per-node", str(ranks), "--", loom, "train",
                        "--out", out, "--set", "data=tokens", "--set", f"data.path={data}",
                        "--set", "model=gpt", "--set", "model.gpt.n_layer=6",
                        "--set", "model.gpt.n_head=6", "--set", "model.gpt.n_embd=384",
                        "--set", "data.seq_len=256", "--set", "data.global_batch=8",
                        "--set", f"train.max_steps={steps}", "--set", "train.eval=false",
                        "--set", "checkpoint.enabled=false", "--set", "optimizer.name=adamw",
                        "--set", "runtime.precision=bf16", "--set", f"parallel.zero={zero}"]
                       + extra, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    m = s["memory"]
    return {"parameters": m["parameter_bytes"], "gradients": m["gradient_bytes"],
            "state": m["optimizer_state_bytes"], "peak": m["peak_cached_bytes_in_use"],
            "tokens_per_second": s["tokens_per_second"]}


def cases(four, keep):
    """(label, ranks, zero stage, parallel.zero3_keep or None for the default)."""
    out = [(f"{NAMES[z]} x2", 2, z, None) for z in (0, 1, 2, 3)]
    if keep:
        out += [(f"ZeRO-3 x2 keep {k}", 2, 3, k) for k in ("none", "all")]
    if four:
        out += [(f"{NAMES[z]} x4", 4, z, None) for z in (0, 2, 3)]
    return out


def medians(runs):
    row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    row["model_state"] = row["parameters"] + row["gradients"] + row["state"]
    return row


def print_table(title, rows, labels, base, peer):
    print(title)
    print(f"{'':20}{'params':>8}{'grads':>8}{'state':>8}{'p+g+s':>8}{'peak':>8}{'tokens/s':>10}"
          f"   p+g+s/{NAMES[0]}  peak/{peer}  speed/{peer}")
    for label in labels:
        r, b, p = rows[label], rows[base], rows[peer]
        speed = r["tokens_per_second"] / p["tokens_per_second"]
        print(f"{label:20}{r['parameters'] / MB:8.1f}{r['gradients'] / MB:8.1f}"
              f"{r['state'] / MB:8.1f}{r['model_state'] / MB:8.1f}{r['peak'] / MB:8.1f}"
              f"{r['tokens_per_second']:10.0f}   {r['model_state'] / b['model_state']:12.3f}x"
              f"  {r['peak'] / p['peak']:7.3f}x  {speed:8.3f}x")


def verdict(ok):
    return "met" if ok else "MISSED"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--four", action=argparse.BooleanOptionalAction, default=True,
                   help="also 4 ranks (plain, ZeRO-2, ZeRO-3)")
    p.add_argument("--keep", action=argparse.BooleanOptionalAction, default=True,
                   help="also ZeRO-3 with parallel.zero3_keep none and all on 2 ranks")
    p.add_argument("--json", default="")
    a = p.parse_args()
    plan = cases(a.four, a.keep)
    with jargon_tokens(a.loom) as data:
        if data is None:
            return 0
        seen = {label: [] for label, *_ in plan}
        for _ in range(a.repeats):  # interleaved: every case sees the same drift of the host
            for label, ranks, zero, keep in plan:
                seen[label].append(run(a.loom, data, ranks, zero, keep, a.steps))
    rows = {label: medians(runs) for label, runs in seen.items()}
    cores = os.cpu_count()
    head = (f"GPT 6 x 384, context 256, global batch 8, AdamW, bf16; medians of {a.repeats}; "
            "rank 0; MB")
    two = [label for label, ranks, *_ in plan if ranks == 2]
    print_table(f"2 ranks on {cores} cores, {head}", rows, two, "plain x2", "ZeRO-2 x2")
    r0, r1, r2, r3 = (rows[f"{NAMES[z]} x2"] for z in (0, 1, 2, 3))
    bound = 0.5 * r0["state"] + BUCKET_BYTES
    print(f"issue 32: ZeRO-1 state {r1['state'] / MB:.1f} MB <= 0.5x + one bucket "
          f"({bound / MB:.1f} MB): {verdict(r1['state'] <= bound)}; speed "
          f"{r1['tokens_per_second'] / r0['tokens_per_second']:.3f}x >= 0.9x plain: "
          f"{verdict(r1['tokens_per_second'] >= 0.9 * r0['tokens_per_second'])}; ZeRO-2 grads "
          f"{r2['gradients'] / r0['gradients']:.3f}x <= 0.5x: "
          f"{verdict(r2['gradients'] <= 0.5 * r0['gradients'])}")
    ms = r3["model_state"] / r0["model_state"]
    peak = r3["peak"] / r2["peak"]
    speed = r3["tokens_per_second"] / r2["tokens_per_second"]
    print(f"issue 41, 2 ranks: ZeRO-3 p+g+s {ms:.3f}x plain (<= 0.55x): {verdict(ms <= 0.55)}; "
          f"peak {peak:.3f}x ZeRO-2 (< 1): {verdict(peak < 1)}; speed {speed:.3f}x ZeRO-2 "
          f"(>= 0.85x): {verdict(speed >= 0.85)}")
    if a.four:
        four = [label for label, ranks, *_ in plan if ranks == 4]
        print()
        over = " (oversubscribed: speeds are not comparable)" if cores < 4 else ""
        print_table(f"4 ranks on {cores} cores{over}, {head}", rows, four, "plain x4", "ZeRO-2 x4")
        ms4 = rows["ZeRO-3 x4"]["model_state"] / rows["plain x4"]["model_state"]
        print(f"issue 41, 4 ranks: ZeRO-3 p+g+s {ms4:.3f}x plain (<= 0.3x): {verdict(ms4 <= 0.3)}")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"cores": cores, "repeats": a.repeats, "steps": a.steps, "medians": rows,
                       "runs": seen}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
