#!/usr/bin/env python3
"""What `loom train --autotune` buys: a run started from given settings, the same run with
--autotune, and a run started from the autotune.yaml the tuned run wrote, interleaved R times;
medians of steady-state samples/s (the tuned run's steady state starts after its tuning) and
the ratios to the untuned run. The peer is the untuned run: PyTorch has no autotuner for
DataLoader workers vs intra-op threads.

Two cases:
  input-bound    a small MLP behind ten GaussianBlur(11) on JPEGs made by `loom data
                 synth-images`, started with 1 loader thread (too few for the blur chain)
  compute-bound  the demo CNN on Fashion-MNIST with its automatic settings (tuning must not make
                 it slower)

Usage: bench/autotune.py [--loom build/bin/loom] [--repeats 3] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def blur_chain():
    blurs = ", ".join(["{gaussian_blur: {kernel: 11, sigma: 2}}"] * 10)
    return f"[center_crop: 256, {blurs}, resize: [24, 24]]"


def cases(images):
    return {
        "input-bound": ["--set", "data=image_folder", "--set", f"data.path={images}",
                        "--set", f"data.transforms={blur_chain()}", "--set", "data.batch_size=20",
                        "--set", "model=mlp", "--set", "train.epochs=20",
                        "--set", "data.workers=1", "--set", "runtime.threads=2"],
        "compute-bound": ["--set", "train.max_steps=1200", "--set", "train.epochs=2"],
    }


def train(loom, args, extra=()):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([loom, "train", "--out", out, "--set", "train.eval=false",
                        "--set", "checkpoint.enabled=false", "--set", "train.tensorboard=false",
                        *args, *extra], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        snippet = None
        if os.path.exists(os.path.join(out, "autotune.yaml")):
            with open(os.path.join(out, "autotune.yaml")) as f:
                snippet = f.read()
    return summary, snippet


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        images = os.path.join(work, "images")
        subprocess.run([a.loom, "data", "synth-images", images, "--count", "600", "--classes",
                        "4", "--width", "320", "--height", "256"], check=True,
                       stdout=subprocess.DEVNULL)
        for name, args in cases(images).items():
            start, tuned, reused, chosen, tuning = [], [], [], [], []
            for _ in range(a.repeats):
                start.append(train(a.loom, args)[0]["samples_per_second"])
                summary, snippet = train(a.loom, args, ["--autotune"])
                tuned.append(summary["samples_per_second"])
                tune = summary["autotune"]
                chosen.append(tune["chosen"])
                tuning.append((tune["steps"], tune["seconds"], len(tune["trials"])))
                assert snippet and "workers:" in snippet
                # The snippet's keys on top of the case's own settings (which name them too).
                sets = [kv for k, v in tune["chosen"].items() for kv in ("--set", f"{k}={v}")]
                reused.append(train(a.loom, args, sets)[0]["samples_per_second"])
            m = {k: statistics.median(v) for k, v in
                 (("start", start), ("tuned", tuned), ("reused", reused))}
            results[name] = {"start": start, "tuned": tuned, "reused": reused, "chosen": chosen,
                             "tuning_steps_seconds_trials": tuning, "medians": m}
            print(f"{name}: medians of {a.repeats} interleaved runs (samples/s)")
            print(f"  start settings  {m['start']:8.1f}   runs: {', '.join(f'{x:.0f}' for x in start)}")
            print(f"  --autotune      {m['tuned']:8.1f}   runs: {', '.join(f'{x:.0f}' for x in tuned)}"
                  f"   ratio {m['tuned'] / m['start']:.2f}")
            print(f"  autotune.yaml   {m['reused']:8.1f}   runs: {', '.join(f'{x:.0f}' for x in reused)}"
                  f"   ratio {m['reused'] / m['start']:.2f}")
            for c, (steps, seconds, trials) in zip(chosen, tuning):
                print(f"  chose {c} in {steps} steps, {seconds:.1f} s, {trials} trials")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
