#!/usr/bin/env python3
"""Batches across epoch boundaries. On a 600-image JPEG folder (9 batches of 64 an epoch),
RandomResizedCrop(224) + flip + normalize, 2 loader threads:

  1. `loom.data.Loader` in a Python loop over 6 whole epochs (set_epoch, then iterate), in the
     default contiguous NCHW layout and in channels_last, against `loom data bench` reading the
     same 54 batches (it runs on over the epoch boundaries; channels_last, as `loom train` feeds
     a convolutional model). Interleaved, medians of R repeats. Target: >= 0.9.
  2. `loom train` on the same folder (the CNN on 64x64 crops, one compute thread, 6 epochs, a
     metrics line per step; the loader keeps up, so any wait is the epoch boundary's): the data
     wait of each epoch's first steps against the other steps'. With batches prefetched into the
     next epoch the first steps of an epoch should wait no longer than the rest.

Usage: bench/loader_epochs.py [--loom build/bin/loom] [--repeats R] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable  # the project's .venv: Loom's torch, the peers' torch
EPOCHS = 6


def last_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def epoch_boundary_waits(loom, folder, steps_per_epoch):
    """Median data wait (ms) of each epoch's first two steps and of the other steps, from
    metrics.jsonl of a `loom train` run with a line per step."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [loom, "train", "--set", "data=image_folder", "--set", f"data.path={folder}",
             "--set", "data.workers=2", "--set", f"train.epochs={EPOCHS}",
             "--set", "train.log_every=1", "--set", "train.eval=false",
             "--set", "checkpoint.enabled=false", "--set", "model=cnn",
             "--set", "runtime.threads=1",
             "--set", "data.transforms=[{random_resized_crop: 64}, random_horizontal_flip]",
             "--out", out],
            check=True, capture_output=True, text=True)
        steps = []
        with open(os.path.join(out, "metrics.jsonl")) as f:
            for line in f:
                record = json.loads(line)
                if record.get("type") == "step":
                    steps.append(record)
    first, rest = [], []
    for r in steps:
        if r["step"] <= steps_per_epoch:  # epoch 1: thread start-up
            continue
        wait_ms = 1e3 * r["phase_seconds"]["data_wait"]
        (first if (r["step"] - 1) % steps_per_epoch < 2 else rest).append(wait_ms)
    return statistics.median(first), statistics.median(rest), len(first), len(rest)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--folder", default=os.path.join(HERE, "out", "imagenet-like-600"))
    p.add_argument("--json")
    a = p.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(a.loom)))
    env = {**os.environ, "PYTHONPATH": os.path.join(build, "python"), "LOOM_LOG_LEVEL": "warn"}
    if not os.path.isdir(a.folder):
        subprocess.run([a.loom, "data", "synth-images", a.folder, "--count", "600"], check=True)
    steps_per_epoch = 600 // 64
    timed = EPOCHS * steps_per_epoch - 1  # every batch but the first

    peer = os.path.join(HERE, "peers", "loom_python_loader.py")
    cases = {
        "loom data bench (channels_last)": lambda: last_json(
            [a.loom, "data", "bench", "--set", "data=image_folder", "--set", f"data.path={a.folder}",
             "--set", "data.workers=2", "--batches", str(timed)]),
        "loom.data.Loader, NCHW (default)": lambda: last_json(
            [PYTHON, peer, a.folder, "--epochs", str(EPOCHS)], env),
        "loom.data.Loader, channels_last": lambda: last_json(
            [PYTHON, peer, a.folder, "--epochs", str(EPOCHS), "--channels-last"], env),
    }
    runs = {}
    for _ in range(a.repeats):
        for name, run in cases.items():
            result = run()
            assert result["batches"] == timed, result
            runs.setdefault(name, []).append(result["images_per_second"])
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in med.items():
        print(f"{k:36} {v:8.1f} img/s   runs {[round(x, 1) for x in runs[k]]}")
    bench = med["loom data bench (channels_last)"]
    ratios = {"python_nchw_over_data_bench": med["loom.data.Loader, NCHW (default)"] / bench,
              "python_channels_last_over_data_bench":
                  med["loom.data.Loader, channels_last"] / bench}
    for k, v in ratios.items():
        print(f"{k:40} {v:6.2f}   (target >= 0.9)")

    first, rest, n_first, n_rest = epoch_boundary_waits(a.loom, a.folder, steps_per_epoch)
    print(f"loom train data wait: first two steps of epochs 2-{EPOCHS} {first:.1f} ms "
          f"(median of {n_first}), other steps {rest:.1f} ms (median of {n_rest})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"medians": med, "runs": runs, "ratios": ratios,
                       "train_data_wait_ms": {"epoch_start": first, "other": rest}}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
