#!/usr/bin/env python3
"""examples/python/train_fashion_mnist.py's loop (its CNN, SGD, loom.data.Loader on
Fashion-MNIST, batch 64) in chunks of N steps that alternate between the plain loop and the loop
accounted by loom.profile.Steps (a fresh one per chunk: its hooks on the model and optimizer,
metrics.jsonl every 10 steps, TensorBoard events, summary.json at close). Alternating inside one
process keeps the machine's drift out of the comparison. Prints, as JSON, the median samples/s of
the plain and the accounted chunks (their steps only) and the median time Steps' construction
plus close() took.

Usage: steps_loop.py [--chunks C] [--chunk-steps N] [--threads T]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
from train_fashion_mnist import Net  # noqa: E402  (the example's own model)

import loom  # noqa: E402


def train_chunk(batches, model, optimizer, steps, count):
    """Seconds for `count` steps of the example's loop over `batches`."""
    start = time.perf_counter()
    for done, (images, labels) in enumerate(batches, 1):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        if steps:
            steps.record(loss=loss)
        if done == count:
            break
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--chunk-steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    config = {"data": {"source": "fashion_mnist", "batch_size": 64, "workers": 1},
              "train": {"log_every": 10, "tensorboard": True}}
    loader = loom.data.Loader(config)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = iter(_forever(loader))
    train_chunk(batches, model, optimizer, None, 10)  # warm-up: threads, allocator, oneDNN
    plain, accounted, overhead = [], [], []
    with tempfile.TemporaryDirectory() as out:
        for chunk in range(a.chunks):
            plain.append(a.chunk_steps * 64 /
                         train_chunk(batches, model, optimizer, None, a.chunk_steps))
            begin = time.perf_counter()
            steps = loom.profile.Steps(os.path.join(out, str(chunk)), loader=loader, model=model,
                                       optimizer=optimizer, config=config)
            made = time.perf_counter() - begin
            seconds = train_chunk(steps.loop(batches), model, optimizer, steps, a.chunk_steps)
            begin = time.perf_counter()
            steps.close()
            overhead.append(made + time.perf_counter() - begin)
            accounted.append(a.chunk_steps * 64 / seconds)
    print(json.dumps({"plain_samples_per_second": statistics.median(plain),
                      "steps_samples_per_second": statistics.median(accounted),
                      "open_and_close_seconds": statistics.median(overhead)}))


def _forever(loader):
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


if __name__ == "__main__":
    main()
