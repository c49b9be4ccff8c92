#!/usr/bin/env python3
"""`loom.data.Loader` in a Python loop, timed as bench/peers/torchvision_loader.py times
torch.utils.data.DataLoader: ImageFolder + RandomResizedCrop + flip + normalize, float32 NCHW
batches, images/s over `--batches` batches after one warm-up batch (thread start-up). With
`--epochs N` the loop runs N whole epochs as a training script does (set_epoch, then iterate),
timing every batch after the first.
--runtime-caching also opts in to Loom's caching allocator (loom.runtime.configure), which
`loom data bench` uses by default."""
import argparse
import json

import loom

from timing import epochs_images_per_second, images_per_second


def main():
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--blur", type=int, default=0, help="gaussian_blur(11) repetitions after the crop")
    p.add_argument("--runtime-caching", action="store_true")
    p.add_argument("--epochs", type=int, default=0,
                   help="time N whole epochs (set_epoch + iterate) instead of --batches")
    p.add_argument("--channels-last", action="store_true",
                   help="as `loom data bench` and `loom train` lay out convolutional input")
    a = p.parse_args()
    if a.runtime_caching:
        loom.runtime.configure(allocator="caching")
    transforms = [{"random_resized_crop": a.size}, "random_horizontal_flip"]
    transforms += [{"gaussian_blur": {"kernel": 11, "sigma": 2}}] * a.blur
    loader = loom.data.Loader({"data": {"source": "image_folder", "path": a.path,
                                        "batch_size": a.batch, "workers": a.threads,
                                        "transforms": transforms}},
                              channels_last=a.channels_last)
    if a.epochs:
        rate, batches = epochs_images_per_second(loader, a.epochs)
    else:
        rate, batches = images_per_second(loader, a.batches), a.batches
    print(json.dumps({"threads": a.threads, "batches": batches, "images_per_second": rate}))


if __name__ == "__main__":
    main()
