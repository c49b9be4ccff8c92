#!/usr/bin/env python3
"""A plain PyTorch training script: its own model, loss, optimizer and loop, fed by
loom.data.Loader from Fashion-MNIST (Debian's dataset-fashion-mnist). One process.
train_fashion_mnist_dp.py is the same script on several ranks: `diff` the two.

    python3 examples/python/train_fashion_mnist.py --epochs 1
"""
import argparse

import torch

import loom


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.classify = torch.nn.Linear(64 * 7 * 7, 10)

    def forward(self, x):
        return self.classify(self.features(x).flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    torch.manual_seed(0)
    data = {"data": {"source": "fashion_mnist", "batch_size": a.batch}}
    loader = loom.data.Loader(data)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(a.epochs):
        loader.set_epoch(epoch)
        total, steps = 0.0, 0
        for images, labels in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            total, steps = total + loss.item(), steps + 1
        print(f"epoch {epoch + 1}: mean loss {total / steps:.4f} over {steps} steps")


if __name__ == "__main__":
    main()
