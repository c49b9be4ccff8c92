#!/usr/bin/env python3
"""`loom train` against the same training loop in PyTorch (the project environment's torch,
whose LibTorch Loom links), side by side in one run. Each pair runs R times interleaved; the
table shows median samples/s and the ratio Loom / PyTorch. The bf16 cases are skipped on CPUs
without bf16 arithmetic (bench/host.py).

With --device cuda the cases are issue 52's ResNet-50 on a GPU (224 px, batch 256, bf16,
channels_last, SGD): `loom train` on synthetic images against torch eager and torch.compile with
the data set already on the GPU (target >= 1.0x eager), and `loom train` from a JPEG folder
(`loom data synth-images`, RandomResizedCrop + flip on the CPU's loader threads) against the
same eager loop (target >= 0.95x: the input pipeline keeps the GPU fed).

Usage: bench/train_vs_pytorch.py [--loom build/bin/loom] [--repeats R] [--only NAME]
                                 [--device cpu|cuda] [--steps N]
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


def gpu_cases(jpegs, steps):
    """ResNet-50 on a GPU: (name, loom args, peer args, target ratio)."""
    same = ["--set", "model=resnet50", "--set", "data.image_size=224", "--set",
            "data.batch_size=256", "--set", f"train.max_steps={steps}", "--set",
            "train.epochs=1000", "--set", "runtime.device=cuda", "--set", "runtime.precision=bf16",
            "--set", "runtime.memory_format=channels_last"]
    synthetic = same + ["--set", "data=synthetic", "--set", "data.classes=1000",
                        "--set", "data.train_samples=2560", "--set", "data.test_samples=256"]
    from_jpegs = same + ["--set", "data=image_folder", "--set", f"data.path={jpegs}",
                         "--set", "data.transforms=[random_resized_crop: 224, "
                         "random_horizontal_flip]"]
    peer = ["--model", "resnet50", "--data", "synthetic", "--image-size", "224", "--samples",
            "2560", "--batch", "256", "--steps", str(steps), "--precision", "bf16",
            "--channels-last", "--device", "cuda"]
    return [
        ("resnet50 synthetic vs eager", synthetic, peer + ["--classes", "1000"], 1.0),
        ("resnet50 synthetic vs compiled", synthetic, peer + ["--classes", "1000", "--compile"],
         1.0),
        ("resnet50 from JPEGs vs eager on GPU data", from_jpegs, peer + ["--classes", "100"],
         0.95),
    ]


def run_loom(loom, args):
    with tempfile.TemporaryDirectory() as out:
        cmd = [loom, "train", "--out", out, "--set", "train.eval=false",
               "--set", "checkpoint.enabled=false"] + args
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    mode = f"{s['precision']}/{s['memory_format']}/{s['threads']}t"
    # The input target's other half: the step's share waiting for data, on the host's clock and,
    # on a GPU, on the GPU's (its idle wait for the input).
    waits = [f"data_wait {100 * s['step_time']['share']['data_wait']:.1f}%"]
    if s["step_time"].get("device"):
        waits.append(f"on the device {100 * s['step_time']['device']['share']['data_wait']:.1f}%")
    return s["samples_per_second"], mode + " " + " ".join(waits)


def run_peer(args):
    out = subprocess.run([sys.executable, PEER] + args, check=True, capture_output=True,
                         text=True).stdout
    s = json.loads(out.strip().splitlines()[-1])
    if "skipped" in s:
        return None, s["skipped"]
    fmt = "channels_last" if s["channels_last"] else "contiguous"
    return s["samples_per_second"], f"{s['precision']}/{fmt}/{s['threads']}t"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", default="")
    p.add_argument("--json", default="")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=40, help="cuda: steps of each run")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as jpegs:
        cases = CASES
        if a.device == "cuda":
            # 10 batches of 500 x 375 JPEGs in 100 classes, as the ImageNet-like images the
            # issue's figures were measured on.
            subprocess.run([a.loom, "data", "synth-images", jpegs, "--count", "2560",
                            "--classes", "100", "--width", "500", "--height", "375"],
                           check=True, stdout=subprocess.DEVNULL)
            cases = gpu_cases(jpegs, a.steps)
        return compare(a, cases)


def compare(a, cases):
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{a.device}; medians of {a.repeats} interleaved runs")
    print(f"{'case':38} {'loom samples/s':>15} {'pytorch samples/s':>18} {'ratio':>6} {'target':>7}")
    results = []
    for name, loom_args, peer_args, target in cases:
        if a.only and a.only not in name:
            continue
        if a.device == "cpu" and "bf16" in name and not native_bf16():
            print(f"{name:38} skipped: this CPU has no bf16 arithmetic", flush=True)
            continue
        loom_rates, peer_rates = [], []
        for _ in range(a.repeats):
            rate, loom_mode = run_loom(a.loom, loom_args)
            loom_rates.append(rate)
            rate, peer_mode = run_peer(peer_args)
            peer_rates.append(rate)
        if None in peer_rates:
            print(f"{name:38} skipped: {peer_mode}", flush=True)
            continue
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
