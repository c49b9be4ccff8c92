#!/usr/bin/env python3
"""Checkpoints written in the background (`checkpoint.async: true`) against synchronous ones, side
by side: GPT-2 small (the `gpt2` preset, its 50257-token vocabulary: the Jargon File tokenized at
that size) with AdamW, a checkpoint every 20 steps (parameters + AdamW state, about 1.5 GB).
Reports, from metrics.jsonl's checkpoint records, the time each checkpoint held training up
(`blocked_seconds`) and took in the background, and the ratio of async's blocking time to
sync's. Target (issue 41): async blocks at most 0.10x of sync's time.

The first background checkpoint allocates its host buffers (page faults over 1.5 GB); the later
ones reuse them, so both the mean over every checkpoint and over the later ones are reported.
Steps are shortened (context 64, one window a step) so that the run fits in minutes on 2 cores:
the checkpoint is the same size whatever the context. Throughput between checkpoints and the
runs' wall time are reported too: the background write shares the host's cores with training.

Usage: bench/async_checkpoint.py [--loom build/bin/loom] [--repeats R] [--checkpoints K]
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
EVERY = 20
GPT2_VOCAB = 50257


def host():
    """The CPU model, family/model, logical CPUs and the vector flags that matter here."""
    info, cpus = {}, 0
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "processor":
                cpus += 1
            info.setdefault(key, value.strip())
    wanted = ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_bf16", "amx_tile")
    flags = [f for f in wanted if f in info.get("flags", "").split()]
    return (f"{info.get('model name', '?')} (family {info.get('cpu family', '?')} model "
            f"{info.get('model', '?')}), {cpus} CPUs, flags: {' '.join(flags) or 'none'}")


def run(loom, data, async_, checkpoints):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([loom, "train", "--out", out, "--set", "data=tokens",
                        "--set", f"data.path={data}", "--set", "model=gpt",
                        "--set", "model.gpt.preset=gpt2", "--set", "data.seq_len=64",
                        "--set", "data.batch_size=1", "--set", "optimizer.name=adamw",
                        "--set", f"train.max_steps={EVERY * checkpoints}",
                        "--set", "train.eval=false", "--set", f"train.log_every={EVERY}",
                        "--set", f"checkpoint.every_steps={EVERY}", "--set", "checkpoint.keep=2",
                        "--set", f"checkpoint.async={'true' if async_ else 'false'}"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        records = []
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                if r["type"] == "checkpoint":
                    records.append(r)
        ckpt = os.path.join(out, "checkpoints", open(os.path.join(out, "checkpoints",
                                                                  "latest")).read().strip())
        size = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
    return {"blocked": [r["blocked_seconds"] for r in records],
            "background": [r["background_seconds"] for r in records],
            "samples_per_second": s["samples_per_second"], "wall_seconds": s["wall_seconds"],
            "parameters": s["parameters"], "checkpoint_bytes": size}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--checkpoints", type=int, default=3, help=f"a run's checkpoints, {EVERY} "
                   "steps apart")
    p.add_argument("--json", default="")
    a = p.parse_args()
    with jargon_tokens(a.loom, GPT2_VOCAB) as data:
        if data is None:
            return 0
        seen = {"sync": [], "async": []}
        for _ in range(a.repeats):
            for mode in seen:  # interleaved: the host's load falls on both alike
                seen[mode].append(run(a.loom, data, mode == "async", a.checkpoints))
    first = seen["sync"][0]
    print(f"host: {host()}")
    print(f"GPT-2 small ({first['parameters'] / 1e6:.1f}M parameters), AdamW, checkpoint "
          f"{first['checkpoint_bytes'] / 1e9:.2f} GB every {EVERY} steps, {a.checkpoints} a run; "
          f"{a.repeats} runs each, interleaved")
    summary = {}
    for mode, runs in seen.items():
        blocked = [b for r in runs for b in r["blocked"]]
        later = [b for r in runs for b in r["blocked"][1:]]
        background = [b for r in runs for b in r["background"]]
        summary[mode] = {
            "blocked_mean": statistics.mean(blocked),
            "blocked_first_mean": statistics.mean(r["blocked"][0] for r in runs),
            "blocked_later_mean": statistics.mean(later) if later else float("nan"),
            "background_mean": statistics.mean(background),
            "samples_per_second": statistics.median(r["samples_per_second"] for r in runs),
            "wall_seconds": statistics.median(r["wall_seconds"] for r in runs)}
    print(f"{'':6}{'blocked s':>10}{'first':>8}{'later':>8}{'background s':>14}"
          f"{'steps/s':>9}{'wall s':>8}   (means per checkpoint; medians per run)")
    for mode, m in summary.items():
        print(f"{mode:6}{m['blocked_mean']:10.3f}{m['blocked_first_mean']:8.3f}"
              f"{m['blocked_later_mean']:8.3f}{m['background_mean']:14.3f}"
              f"{m['samples_per_second']:9.3f}{m['wall_seconds']:8.1f}")
    s, y = summary["sync"], summary["async"]
    ratio = y["blocked_mean"] / s["blocked_mean"]
    later = y["blocked_later_mean"] / s["blocked_later_mean"]
    speed = y["samples_per_second"] / s["samples_per_second"]
    print(f"async / sync blocking time: {ratio:.3f}x over every checkpoint, {later:.3f}x once "
          f"the host buffers exist (target <= 0.10x); training steps/s {speed:.2f}x, wall "
          f"{y['wall_seconds'] / s['wall_seconds']:.2f}x")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"host": host(), "summary": summary, "runs": seen,
                       "ratio": ratio, "ratio_later": later}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
