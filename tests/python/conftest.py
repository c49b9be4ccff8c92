"""Shared pieces of the loom Python package's tests (run by CTest with PYTHONPATH set to the
build tree's python/ folder and LOOM_BINARY to the `loom` command)."""

import json
import os
import struct
import subprocess

import pytest
import torch

FASHION_MNIST = os.environ.get("LOOM_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def loom_binary():
    binary = os.environ.get("LOOM_BINARY", "")
    if not binary:
        pytest.skip("LOOM_BINARY is not set (CTest sets it)")
    return binary


def run_loom(*args, check=True):
    """Runs the `loom` command; returns its completed process (stdout and stderr as text)."""
    result = subprocess.run([loom_binary(), *args], capture_output=True, text=True,
                            env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    if check and result.returncode != 0:
        raise AssertionError(f"loom {' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def read_safetensors(path):
    """A safetensors file as {name: tensor} (the format is 8 bytes of header length, a JSON
    header with dtype, shape and byte range per tensor, then the data)."""
    dtypes = {"U8": torch.uint8, "I64": torch.int64, "F32": torch.float32}
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtypes[info["dtype"]])
        tensors[name] = flat.reshape(info["shape"])
    return tensors


@pytest.fixture(scope="session")
def jpeg_folder(tmp_path_factory):
    """A small ImageNet-like JPEG folder made by `loom data synth-images`."""
    folder = tmp_path_factory.mktemp("jpegs") / "train"
    run_loom("data", "synth-images", str(folder), "--count", "96", "--classes", "4", "--width",
             "80", "--height", "64", "--seed", "3")
    return folder


def folder_config(folder, seed=11, **data):
    """A config dict for `folder`: random crops and flips (so the batches depend on the seed and
    the epoch), no test split."""
    config = {"seed": seed,
              "data": {"source": "image_folder", "path": str(folder), "batch_size": 16,
                       "workers": 2,
                       "transforms": [{"random_resized_crop": {"size": 32}},
                                      "random_horizontal_flip"]}}
    config["data"].update(data)
    return config


def synthetic_sgd_config(tmp_path, seed, model):
    """A small run's config written to tmp_path/config.yaml (its path is returned): `model` on
    256 synthetic 8x8 samples of 4 classes, 16 a batch, SGD with momentum at a constant rate,
    fp32 on one thread, a log line every step and no evaluation: steps and losses to compare
    bit for bit between ways of running it."""
    config = {"seed": seed, "model": model,
              "data": {"source": "synthetic", "image_size": 8, "channels": 1, "classes": 4,
                       "train_samples": 256, "test_samples": 32, "batch_size": 16},
              "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": False,
                            "weight_decay": 0},
              "schedule": {"name": "constant", "warmup_steps": 0},
              "train": {"epochs": 1, "eval": False, "log_every": 1},
              "runtime": {"precision": "fp32", "threads": 1}}
    path = tmp_path / "config.yaml"  # JSON is YAML
    path.write_text(json.dumps(config))
    return path
