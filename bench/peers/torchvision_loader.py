#!/usr/bin/env python3
"""The torchvision peer of `loom data bench`: ImageFolder + RandomResizedCrop + flip + ToTensor +
Normalize through torch.utils.data.DataLoader. Prints one JSON object with images/s over
`--batches` batches after one warm-up batch (which includes worker start-up)."""
import argparse
import json

import torch
import torchvision
from torchvision import transforms

from timing import images_per_second


def main():
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--blur", type=int, default=0, help="GaussianBlur(11) repetitions after the crop")
    a = p.parse_args()
    steps = [transforms.RandomResizedCrop(a.size), transforms.RandomHorizontalFlip()]
    steps += [transforms.ToTensor()]
    steps += [transforms.GaussianBlur(11, sigma=2.0)] * a.blur
    steps += [transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    data = torchvision.datasets.ImageFolder(a.path, transforms.Compose(steps))
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True,
                                         num_workers=a.workers, drop_last=True)
    rate = images_per_second(loader, a.batches)
    print(json.dumps({"workers": a.workers, "images_per_second": rate}))


if __name__ == "__main__":
    main()
