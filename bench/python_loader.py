#!/usr/bin/env python3
"""loom.data.Loader (the Python package) against torch.utils.data.DataLoader with torchvision,
and against `loom data bench`, on the same ImageNet-like JPEG folder: RandomResizedCrop(224) +
flip + normalize, batch 64. Then an input-bound PyTorch training script
(examples/python/train_resnet.py --model small --blur 2) with only its loader swapped.
Interleaved runs, medians over R repeats; prints the ratios the issue sets targets for:
  Python loader / best DataLoader (num_workers 0, 1, 2)      >= 3.5x
  Python loader / `loom data bench` (same threads, layout)   >= 0.95
  training script, loom / torchvision loader                 >= 3x

Usage: bench/python_loader.py [--build build] [--repeats R] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable  # the project's .venv: Loom's torch, the peers' torch


def last_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--repeats", type=int, default=3)
    # 3000 images: 46 batches an epoch, so the Loom runs time 40 batches (about 0.5-1 s)
    # rather than a window short enough for the batches prefetched during warm-up to inflate.
    p.add_argument("--folder", default=os.path.join(HERE, "out", "imagenet-like-3000"))
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--train-steps", type=int, default=12)
    p.add_argument("--json")
    a = p.parse_args()
    loom = os.path.join(a.build, "bin", "loom")
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.abspath(a.build), "python"),
           "LOOM_LOG_LEVEL": "warn"}
    if not os.path.isdir(a.folder):
        subprocess.run([loom, "data", "synth-images", a.folder, "--count", "3000"], check=True)

    peer = os.path.join(HERE, "peers", "loom_python_loader.py")
    example = os.path.join(HERE, "..", "examples", "python", "train_resnet.py")
    cases = {
        "loom data bench, 2 threads": lambda: last_json(
            [loom, "data", "bench", "--set", "data=image_folder", "--set", f"data.path={a.folder}",
             "--set", "data.workers=2", "--batches", str(a.batches)]),
        # runtime.allocator: system, as a script that does not call loom.runtime.configure runs
        "loom data bench, 2 threads, system allocator": lambda: last_json(
            [loom, "data", "bench", "--set", "data=image_folder", "--set", f"data.path={a.folder}",
             "--set", "data.workers=2", "--set", "runtime.allocator=system", "--batches",
             str(a.batches)]),
        "loom.data.Loader, 2 threads, channels_last": lambda: last_json(
            [PYTHON, peer, a.folder, "--channels-last", "--batches", str(a.batches)], env),
        "loom.data.Loader, 2 threads, channels_last, caching": lambda: last_json(
            [PYTHON, peer, a.folder, "--channels-last", "--runtime-caching", "--batches",
             str(a.batches)], env),
        "loom.data.Loader, 2 threads, NCHW, caching": lambda: last_json(
            [PYTHON, peer, a.folder, "--runtime-caching", "--batches", str(a.batches)], env),
    }
    for w in (0, 1, 2):
        cases[f"DataLoader num_workers={w}"] = lambda w=w: last_json(
            [PYTHON, os.path.join(HERE, "peers", "torchvision_loader.py"), a.folder, "--workers",
             str(w)])
    for loader in ("loom", "torchvision"):
        cases[f"train script small+2 blurs, {loader}"] = lambda loader=loader: last_json(
            [PYTHON, example, a.folder, "--loader", loader, "--model", "small", "--blur", "2",
             "--steps", str(a.train_steps), "--workers", "2"], env)

    runs = {}
    for _ in range(a.repeats):
        for name, run in cases.items():
            result = run()
            rate = result.get("images_per_second", result.get("samples_per_second"))
            runs.setdefault(name, []).append(rate)
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in med.items():
        print(f"{k:52} {v:8.1f} /s   runs {[round(x, 1) for x in runs[k]]}")
    best_tv = max(v for k, v in med.items() if k.startswith("DataLoader"))
    ratios = {
        # what a script gets after loom.runtime.configure(allocator="caching")
        "python_loader_over_best_dataloader":
            med["loom.data.Loader, 2 threads, channels_last, caching"] / best_tv,
        "python_loader_over_loom_data_bench":
            med["loom.data.Loader, 2 threads, channels_last, caching"] /
            med["loom data bench, 2 threads"],
        # ... and without it (import changes nothing process-wide)
        "python_loader_default_over_best_dataloader":
            med["loom.data.Loader, 2 threads, channels_last"] / best_tv,
        "python_loader_default_over_loom_data_bench_system":
            med["loom.data.Loader, 2 threads, channels_last"] /
            med["loom data bench, 2 threads, system allocator"],
        "train_script_loom_over_torchvision":
            med["train script small+2 blurs, loom"] / med["train script small+2 blurs, torchvision"],
    }
    targets = {"python_loader_over_best_dataloader": 3.5,
               "python_loader_over_loom_data_bench": 0.95,
               "python_loader_default_over_best_dataloader": 3.5,
               "python_loader_default_over_loom_data_bench_system": 0.95,
               "train_script_loom_over_torchvision": 3.0}
    for k, v in ratios.items():
        print(f"{k:44} {v:6.2f}   (target >= {targets[k]})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"medians": med, "runs": runs, "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
