#!/usr/bin/env python3
"""`loom train` against the same training loop in PyTorch (the project environment's torch,
whose LibTorch Loom links), side by side in one run. Each pair runs R times interleaved; the
table shows median samples/s and the ratio Loom / PyTorch. The bf16 cases are skipped on CPUs
without bf16 arithmetic (bench/host.py).

Usage: bench/train_vs_pytorch.py [--loom build/bin/loom] [--repeats R] [--only NAME]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

from host import native_bf16

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "peers", "torch_train.py")

RESNET = ["--set", "model=resnet18", "--set", "data=synthetic", "--set", "data.image_size=224",
          "--set", "data.classes=1000", "--set", "data.train_samples=384",
          "--set", "data.test_samples=32", "--set", "data.batch_size=32",
          "--set", "train.max_steps=12"]
RESNET_PEER = ["--model", "resnet18", "--data", "synthetic", "--image-size", "224",
               "--classes", "1000", "--samples", "384", "--batch", "32", "--steps", "12"]
CNN = ["--set", "train.max_steps=300"]
CNN_PEER = ["--model", "cnn", "--data", "fashion_mnist", "--batch", "64", "--steps", "300"]

SAME_FP32 = (["--set", "runtime.precision=fp32", "--set", "runtime.memory_format=contiguous",
              "--set", "runtime.threads=2"], ["--precision", "fp32", "--threads", "2"])
SAME_FP32_CL = (["--set", "runtime.precision=fp32", "--set", "runtime.memory_format=channels_last",
                 "--set", "runtime.threads=2"], ["--precision", "fp32", "--channels-last", "--threads", "2"])
SAME_BF16 = (["--set", "runtime.precision=bf16", "--set", "runtime.memory_format=channels_last",
              "--set", "runtime.threads=2"],
             ["--precision", "bf16", "--channels-last", "--threads", "2"])

# name, loom args, peer args, target ratio
CASES = [
    ("resnet18-224 defaults vs defaults", RESNET, RESNET_PEER, 3.0),
    ("resnet18-224 same settings fp32", RESNET + SAME_FP32[0], RESNET_PEER + SAME_FP32[1], 1.0),
    ("resnet18-224 same settings bf16+CL", RESNET + SAME_BF16[0], RESNET_PEER + SAME_BF16[1], 1.0),
    ("fmnist-cnn same settings bf16+CL", CNN + SAME_BF16[0], CNN_PEER + SAME_BF16[1], 1.1),
    ("fmnist-cnn same settings fp32+CL", CNN + SAME_FP32_CL[0], CNN_PEER + SAME_FP32_CL[1], 1.1),
    ("fmnist-cnn same settings fp32", CNN + SAME_FP32[0], CNN_PEER + SAME_FP32[1], 1.1),
]


def run_loom(loom, args):
    with tempfile.TemporaryDirectory() as out:
        cmd = [loom, "train", "--out", out, "--set", "train.eval=false",
               "--set", "checkpoint.enabled=false"] + args
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    return s["samples_per_second"], f"{s['precision']}/{s['memory_format']}/{s['threads']}t"


def run_peer(args):
    out = subprocess.run([sys.executable, PEER] + args, check=True, capture_output=True,
                         text=True).stdout
    s = json.loads(out.strip().splitlines()[-1])
    fmt = "channels_last" if s["channels_last"] else "contiguous"
    return s["samples_per_second"], f"{s['precision']}/{fmt}/{s['threads']}t"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default="")
    p.add_argument("--json", default="")
    a = p.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"medians of {a.repeats} interleaved runs")
    print(f"{'case':38} {'loom samples/s':>15} {'pytorch samples/s':>18} {'ratio':>6} {'target':>7}")
    results = []
    for name, loom_args, peer_args, target in CASES:
        if a.only and a.only not in name:
            continue
        if "bf16" in name and not native_bf16():
            print(f"{name:38} skipped: this CPU has no bf16 arithmetic", flush=True)
            continue
        loom_rates, peer_rates = [], []
        for _ in range(a.repeats):
            rate, loom_mode = run_loom(a.loom, loom_args)
            loom_rates.append(rate)
            rate, peer_mode = run_peer(peer_args)
            peer_rates.append(rate)
        lm, pm = statistics.median(loom_rates), statistics.median(peer_rates)
        ratio = lm / pm
        print(f"{name:38} {lm:15.1f} {pm:18.1f} {ratio:6.2f} {'>=' + str(target):>7}"
              f"   loom {loom_mode}, pytorch {peer_mode}", flush=True)
        results.append({"case": name, "loom": loom_rates, "pytorch": peer_rates, "ratio": ratio,
                        "target": target, "loom_mode": loom_mode, "pytorch_mode": peer_mode})
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
