#!/usr/bin/env python3
"""`loom data bench` against torchvision's DataLoader on the same ImageNet-like JPEG folder
(made by `loom data synth-images`), with RandomResizedCrop(224) + flip + normalize, batch 64.
Runs interleaved, R repeats, medians; prints Loom's best over torchvision's best, Loom's
pipeline over the full-image decode-only rate, and the pipeline's memory against its budget.

--blur N adds N x GaussianBlur(11, sigma 2) after the crop (the heavy-preprocessing case);
torchvision is then timed over 6 batches (it runs at 15-60 img/s); with 2 workers the
first timed batch was prepared during the warm-up, which favours torchvision a little.

--cpu-capabilities avx512,avx2,default runs Loom once per path of its kernels
(LOOM_CPU_CAPABILITY) in the same interleaved rounds, each against the same torchvision figures:
a forced AVX2 run on an AVX-512 host stands in for an AVX2-only host. Default: the host's own.

Usage: bench/loader_vs_torchvision.py [--loom build/bin/loom] [--repeats R] [--blur N]
                                      [--cpu-capabilities LIST]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def loom_run(loom, folder, threads, decode_only, blur=0, capability=""):
    cmd = [loom, "data", "bench", "--set", "data=image_folder", "--set", f"data.path={folder}",
           "--set", f"data.workers={threads}", "--batches", "12"]
    if blur:
        steps = ["random_resized_crop: 224", "random_horizontal_flip"]
        steps += ["{gaussian_blur: {kernel: 11, sigma: 2}}"] * blur
        cmd += ["--set", "data.transforms=[" + ", ".join(steps) + "]"]
    if decode_only:
        cmd.append("--decode-only")
    env = dict(os.environ, LOOM_CPU_CAPABILITY=capability)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def loom_rate(loom, folder, threads, decode_only, blur=0, capability=""):
    return loom_run(loom, folder, threads, decode_only, blur, capability)["images_per_second"]


def label(capability):
    return f"loom[{capability}]" if capability else "loom"


def torchvision_rate(folder, workers, blur=0):
    cmd = [sys.executable, os.path.join(HERE, "peers", "torchvision_loader.py"), folder,
           "--workers", str(workers), "--batches", "6" if blur else "12", "--blur", str(blur)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["images_per_second"]


def blur_case(a):
    runs = {}
    for _ in range(a.repeats):
        for c in a.cpu_capabilities:
            for t in (1, 2):
                runs.setdefault(f"{label(c)} {a.blur}x blur {t} thread(s)", []).append(
                    loom_rate(a.loom, a.folder, t, False, a.blur, c))
        for w in (0, 1, 2):
            runs.setdefault(f"torchvision {a.blur}x blur num_workers={w}", []).append(
                torchvision_rate(a.folder, w, a.blur))
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in med.items():
        print(f"{k:38} {v:8.1f} img/s   runs {[round(x, 1) for x in runs[k]]}")
    best_tv = max(v for k, v in med.items() if k.startswith("torchvision"))
    for c in a.cpu_capabilities:
        best_loom = max(v for k, v in med.items() if k.startswith(label(c) + " "))
        print(f"{label(c) + ' best / torchvision best':38} {best_loom / best_tv:5.1f}x   "
              "(target >= 30x)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--folder", default=os.path.join(HERE, "out", "imagenet-like-1000"))
    p.add_argument("--blur", type=int, default=0)
    p.add_argument("--cpu-capabilities", default="",
                   help="comma-separated LOOM_CPU_CAPABILITY values to run Loom under")
    a = p.parse_args()
    a.cpu_capabilities = a.cpu_capabilities.split(",") if a.cpu_capabilities else [""]
    if not os.path.isdir(a.folder):
        subprocess.run([a.loom, "data", "synth-images", a.folder, "--count", "1000"], check=True)
    if a.blur:
        return blur_case(a)
    runs, memory = {}, []
    for _ in range(a.repeats):
        for c in a.cpu_capabilities:
            for t in (1, 2):
                run = loom_run(a.loom, a.folder, t, False, capability=c)
                runs.setdefault(f"{label(c)} pipeline {t} thread(s)", []).append(
                    run["images_per_second"])
                memory.append(run)
                runs.setdefault(f"{label(c)} decode-only {t} thread(s)", []).append(
                    loom_rate(a.loom, a.folder, t, True, capability=c))
        for w in (0, 1, 2):
            runs.setdefault(f"torchvision num_workers={w}", []).append(torchvision_rate(a.folder, w))
    med = {k: statistics.median(v) for k, v in runs.items()}
    for k, v in med.items():
        print(f"{k:34} {v:8.1f} img/s   runs {[round(x) for x in runs[k]]}")
    best_tv = max(v for k, v in med.items() if k.startswith("torchvision"))
    for c in a.cpu_capabilities:
        best_loom = max(med[f"{label(c)} pipeline 1 thread(s)"],
                        med[f"{label(c)} pipeline 2 thread(s)"])
        print(f"{label(c) + ' best / torchvision best':34} {best_loom / best_tv:5.2f}x   "
              "(target >= 5x)")
        for t in (1, 2):
            r = med[f"{label(c)} pipeline {t} thread(s)"] / med[f"{label(c)} decode-only {t} thread(s)"]
            print(f"{label(c)} pipeline / decode-only, {t} thread(s) {r:5.2f}    (target >= 1.00)")
    worst = max(memory, key=lambda m: m["rss_growth_mb"] - m["prefetch_budget_mb"])
    print(f"memory: peak RSS growth {worst['rss_growth_mb']:.0f} MB, prefetch budget "
          f"{worst['prefetch_budget_mb']:.0f} MB + 64 MB allowed "
          f"({'within' if worst['rss_growth_mb'] <= worst['prefetch_budget_mb'] + 64 else 'OVER'})")


if __name__ == "__main__":
    sys.exit(main())
