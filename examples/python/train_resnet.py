#!/usr/bin/env python3
"""A typical PyTorch training loop on an image folder, with its torch.utils.data.DataLoader
replaced by loom.data.Loader and nothing else changed. `--loader torchvision` runs the
original, so the two can be timed on the same machine (bench/python_loader.py does).

    loom data synth-images /tmp/imagenet-like --count 1000
    python3 examples/python/train_resnet.py /tmp/imagenet-like --steps 30
    python3 examples/python/train_resnet.py /tmp/imagenet-like --steps 30 --loader torchvision

--model small trains a tiny CNN instead of ResNet-18, and --blur N adds N Gaussian blurs to the
augmentation: an input-bound job, where the loader decides the speed. Prints one JSON line with
samples/s over the steps after the first (which includes start-up).
"""
import argparse
import json
import time

import torch
import torchvision
from torchvision import transforms as T

import loom


def torchvision_loader(a):
    steps = [T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor()]
    steps += [T.GaussianBlur(11, sigma=2.0)] * a.blur
    steps += [T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    dataset = torchvision.datasets.ImageFolder(a.data, T.Compose(steps))
    return torch.utils.data.DataLoader(dataset, batch_size=a.batch, shuffle=True,
                                       num_workers=a.workers, drop_last=True)


def loom_loader(a):
    # The same pipeline, described as `loom train`'s data section: decoding only the crop,
    # transforms on uint8, normalisation in the one conversion pass, threads instead of
    # processes, and mid-epoch resume through state_dict().
    transforms = [{"random_resized_crop": a.size}, "random_horizontal_flip"]
    transforms += [{"gaussian_blur": {"kernel": 11, "sigma": 2}}] * a.blur
    return loom.data.Loader({"data": {"source": "image_folder", "path": a.data,
                                      "batch_size": a.batch, "workers": a.workers or "auto",
                                      "transforms": transforms}})


def small_cnn(classes):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=4, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(16 * 16, classes))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", help="image folder: one subfolder per class")
    p.add_argument("--loader", choices=["loom", "torchvision"], default="loom")
    p.add_argument("--model", choices=["resnet18", "small"], default="resnet18")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--blur", type=int, default=0)
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader worker processes, or Loom loader threads")
    a = p.parse_args()

    loader = loom_loader(a) if a.loader == "loom" else torchvision_loader(a)
    classes = len(torchvision.datasets.folder.find_classes(a.data)[0])
    model = torchvision.models.resnet18(num_classes=classes) if a.model == "resnet18" \
        else small_cnn(classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    step, samples, start = 0, 0, None
    while step < a.steps:
        for images, labels in loader:
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == 1:
                start = time.perf_counter()
            else:
                samples += images.shape[0]
            if step == a.steps:
                break
    seconds = time.perf_counter() - start
    print(json.dumps({"loader": a.loader, "model": a.model, "steps": step,
                      "samples_per_second": samples / seconds, "loss": loss.item()}))


if __name__ == "__main__":
    main()
