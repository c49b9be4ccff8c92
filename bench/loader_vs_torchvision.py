#!/usr/bin/env python3
"""`loom data bench` against torchvision's DataLoader on the same ImageNet-like JPEG folder
(made by `loom data synth-images`), with RandomResizedCrop(224) + flip + normalize, batch 64.
Runs interleaved, R repeats, medians; prints Loom's best over torchvision's best and Loom's
pipeline over the full-image decode-only rate.

Usage: bench/loader_vs_torchvision.py [--loom build/bin/loom] [--repeats R]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def loom_rate(loom, folder, threads, decode_only):
    cmd = [loom, "data", "bench", "--set", "data=image_folder", "--set", f"data.path={folder}",
           "--set", f"data.workers={threads}", "--batches", "12"]
    if decode_only:
        cmd.append("--decode-only")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["images_per_second"]


def torchvision_rate(folder, workers):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "peers", "torchvision_loader.py"), folder,
           "--workers", str(workers), "--batches", "12"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["images_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--folder", default=os.path.join(HERE, "out", "imagenet-like-1000"))
    a = p.parse_args()
    if not os.path.isdir(a.folder):
        subprocess.run([a.loom, "data", "synth-images", a.folder, "--count", "1000"], check=True)
    runs = {}
    for _ in range(a.repeats):
        for t in (1, 2):
            runs.setdefault(f"loom pipeline {t} thread(s)", []).append(loom_rate(a.loom, a.folder, t, False))
            runs.setdefault(f"loom decode-only {t} thread(s)", []).append(loom_rate(a.loom, a.folder, t, True))
        for w in (0, 1, 2):
            runs.setdefault(f"torchvision num_workers={w}", []).append(torchvision_rate(a.folder, w))
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in med.items():
        print(f"{k:34} {v:8.1f} img/s   runs {[round(x) for x in runs[k]]}")
    best_tv = max(v for k, v in med.items() if k.startswith("torchvision"))
    best_loom = max(med["loom pipeline 1 thread(s)"], med["loom pipeline 2 thread(s)"])
    print(f"loom best / torchvision best       {best_loom / best_tv:5.2f}x   (target >= 3.5x)")
    for t in (1, 2):
        r = med[f"loom pipeline {t} thread(s)"] / med[f"loom decode-only {t} thread(s)"]
        print(f"pipeline / decode-only, {t} thread(s) {r:5.2f}    (target >= 1.00)")


if __name__ == "__main__":
    sys.exit(main())
