#!/usr/bin/env python3
"""The PyTorch peer of `loom train`: the same model, data feed and optimizer in a plain Python
training loop, so a ratio of the two measures Loom and not a different kernel library (Debian's
python3-torch wraps the same LibTorch as libtorch-dev).

Prints one JSON object: samples_per_second (steady state: the first min(5, steps/10) steps are
warm-up and not timed, as in Loom's summary; with --compile at least 3), and the settings used.

--device cuda trains on the GPU with the data set already there (uint8, normalised on the device
each step): the compute-only reference an input pipeline is measured against (issue 52); the
loss is then read after the timed steps only. torchvision (for the ResNets) and numpy (for
Fashion-MNIST) are imported only when needed: a lent GPU machine's environment may have torch
alone.
"""
import argparse
import contextlib
import gzip
import json
import os
import time

import torch
import torch.nn as nn


def fashion_mnist(path):
    import numpy as np

    def read(name):
        with gzip.open(os.path.join(path, name), "rb") as f:
            data = f.read()
        dims = data[3]
        shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)

    images = torch.from_numpy(read("train-images-idx3-ubyte.gz").copy()).unsqueeze(-1)
    labels = torch.from_numpy(read("train-labels-idx1-ubyte.gz").astype(np.int64))
    return images, labels, 10


def synthetic(samples, size, classes):
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (samples, size, size, 3), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, classes, (samples,), generator=g)
    return images, labels, classes


def cnn(channels, classes, height, width=32, depth=1, dropout=0.25):
    """Loom's `cnn` model, layer for layer."""
    layers, c = [], channels
    for stage in range(2):
        out = width << stage
        for _ in range(depth):
            layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]
            c = out
        layers.append(nn.MaxPool2d(2))
    flat = c * (height // 4) * (height // 4)
    return nn.Sequential(*layers, nn.Flatten(), nn.Dropout(dropout), nn.Linear(flat, 256),
                         nn.ReLU(), nn.Dropout(dropout), nn.Linear(256, classes))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn", choices=["cnn", "resnet18", "resnet50"])
    p.add_argument("--data", default="fashion_mnist", choices=["fashion_mnist", "synthetic"])
    p.add_argument("--path", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=0, help="0 = PyTorch's default")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    a = p.parse_args()
    device = torch.device(a.device)
    gpu = device.type == "cuda"

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.data == "fashion_mnist":
        images, labels, classes = fashion_mnist(a.path)
    else:
        images, labels, classes = synthetic(a.samples, a.image_size, a.classes)
    c, h = images.shape[3], images.shape[1]
    pixels = images.reshape(-1, c).double() / 255
    mean = pixels.mean(0).float().view(1, c, 1, 1)
    std = pixels.std(0).float().view(1, c, 1, 1)

    if a.model == "cnn":
        model = cnn(c, classes, h)
    else:
        try:
            import torchvision
        except ImportError:
            print(json.dumps({"skipped": "torchvision is not installed"}))
            return
        model = getattr(torchvision.models, a.model)(num_classes=classes)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=fmt)
    model.train()
    images, labels = images.to(device), labels.to(device)
    mean, std = mean.to(device), std.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True,
                          weight_decay=5e-4, fused=gpu or None)
    loss_fn = nn.CrossEntropyLoss()
    step_model = torch.compile(model) if a.compile else model
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if a.precision == "bf16"
                else contextlib.nullcontext())

    def now():
        if gpu:
            torch.cuda.synchronize()
        return time.perf_counter()

    n = images.shape[0]
    order = torch.randperm(n).to(device)
    warmup = max(3, min(5, a.steps // 10)) if a.compile else min(5, a.steps // 10)
    start = None
    for step in range(a.steps):
        if step == warmup:
            start = now()  # the timed steps as one span: no wait for the device between them
        begin = (step * a.batch) % (n - a.batch + 1)
        idx = order[begin:begin + a.batch]
        x = images.index_select(0, idx).permute(0, 3, 1, 2).float()
        x = x.contiguous(memory_format=fmt).div_(255).sub_(mean).div_(std)
        y = labels.index_select(0, idx)
        opt.zero_grad()
        with autocast:
            out = step_model(x)
        loss = loss_fn(out.float(), y)
        loss.backward()
        opt.step()
        if not gpu:
            loss.item()
    timed_seconds = now() - start
    timed_samples = (a.steps - warmup) * a.batch
    print(json.dumps({"samples_per_second": timed_samples / timed_seconds,
                      "threads": torch.get_num_threads(), "precision": a.precision,
                      "channels_last": a.channels_last, "model": a.model, "steps": a.steps,
                      "device": a.device, "compiled": a.compile, "final_loss": loss.item()}))


if __name__ == "__main__":
    main()
