#!/usr/bin/env python3
"""train_fashion_mnist.py's network as a torch.nn.Sequential, split into pipeline stages over
the job's ranks by loom.pipeline.Pipeline: the first rank reads the batches and runs the
convolutions, the last runs the classifier and the loss; activations and gradients pass between
them micro-batch by micro-batch, as the schedule says.

    loom launch --nproc-per-node 2 -- python3 examples/python/train_fashion_mnist_pipeline.py
    loom launch --nproc-per-node 4 -- python3 examples/python/train_fashion_mnist_pipeline.py \\
        --pipeline-ranks 2              # 2 pipelines of 2 ranks, data parallel
"""
import argparse

import torch

import loom


def network():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="samples a step, per pipeline")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--schedule", default="1f1b", help="gpipe, 1f1b, interleaved, zb_h1")
    p.add_argument("--pipeline-ranks", type=int, default=0, help="ranks a pipeline (all)")
    a = p.parse_args()
    # Loom's caching allocator, as `loom train` runs: a pipeline's activations and messages reuse
    # freed memory instead of fresh pages (0.74 -> 0.99 of loom train's pipeline, RESULTS.md).
    loom.runtime.configure(allocator="caching")
    torch.manual_seed(0)  # every rank builds the same network and keeps its own stages
    job = loom.distributed.init()
    pipe = loom.pipeline.Pipeline(network(), loss_fn=torch.nn.functional.cross_entropy,
                                  microbatches=a.microbatches, schedule=a.schedule,
                                  pipeline_ranks=a.pipeline_ranks or None)
    if job.rank == 0:
        print(pipe.describe())
    optimizer = torch.optim.SGD(pipe.parameters(), lr=0.05, momentum=0.9)
    # Every rank makes the loader, to know the epoch's steps; only each pipeline's first rank
    # reads from it (its pipeline's share of every epoch).
    data = {"data": {"source": "fashion_mnist", "batch_size": a.batch}}
    loader = loom.data.Loader(data, rank=pipe.replica, world=pipe.replicas)
    for epoch in range(a.epochs):
        loader.set_epoch(epoch)
        batches = iter(loader) if pipe.is_first else None
        total = 0.0
        for _ in range(len(loader)):
            loss = pipe.step(*next(batches)) if pipe.is_first else pipe.step()
            optimizer.step()
            total += loss
        if job.rank == 0:
            print(f"epoch {epoch + 1}: mean loss {total / len(loader):.4f} over "
                  f"{len(loader)} steps")
    pipe.close()


if __name__ == "__main__":
    main()
