#!/usr/bin/env python3
"""A user's script running torchvision's ResNet-18, cut into the same ten blocks as Loom's zoo
model (stem, eight residual blocks, head), as a loom.pipeline.Pipeline on a fixed batch: the
peer of `loom bench pipeline` in bench/python_pipeline.py. Run under `loom launch`; rank 0
writes the median step time to --json.

    loom launch --nproc-per-node 2 -- python3 bench/peers/pipeline_script.py --split 4,6 ...
"""
import argparse
import json
import statistics
import time

import torch
import torchvision

import loom


def blocks_of_resnet18(classes):
    net = torchvision.models.resnet18(num_classes=classes)
    stem = torch.nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
    residual = [block for layer in (net.layer1, net.layer2, net.layer3, net.layer4)
                for block in layer]
    head = torch.nn.Sequential(net.avgpool, torch.nn.Flatten(), net.fc)
    return torch.nn.Sequential(stem, *residual, head)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--split", required=True, help="blocks per stage, as loom's plan chose")
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--allocator", default="caching", choices=["caching", "system"])
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(1)  # one core per rank, as loom's ranks on this machine
    # `loom train`'s allocator (loom.runtime opts in; `import loom` alone changes nothing).
    loom.runtime.configure(allocator=a.allocator)
    torch.manual_seed(0)
    job = loom.distributed.init()
    model = blocks_of_resnet18(a.classes).to(memory_format=torch.channels_last)
    pipe = loom.pipeline.Pipeline(model, loss_fn=torch.nn.functional.cross_entropy,
                                  microbatches=a.microbatches, schedule=a.schedule,
                                  split=[int(n) for n in a.split.split(",")])
    optimizer = torch.optim.SGD(pipe.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, a.image_size, a.image_size).to(
        memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (a.batch,))

    def step():
        pipe.step(x, y) if pipe.is_first else pipe.step()
        optimizer.step()

    for _ in range(2):  # warm-up: allocator, oneDNN kernels
        step()
    seconds = []
    for _ in range(a.steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    pipe.close()
    if job.rank == 0 and a.json:
        median = sorted(seconds)[len(seconds) // 2]  # the upper median, as loom bench's
        with open(a.json, "w") as f:
            json.dump({"measured_step_seconds": median,
                       "measured_samples_per_second": a.batch / median,
                       "describe": pipe.describe()}, f)


if __name__ == "__main__":
    main()
