"""Shared pieces of the loom Python package's tests (run by CTest with PYTHONPATH set to the
build tree's python/ folder and LOOM_BINARY to the `loom` command)."""

import json
import os
import re
import struct
import subprocess
import sys
import warnings

import pytest
import torch

FASHION_MNIST = os.environ.get("LOOM_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
# A user's own script: two heads, its own loss and loop, loom.parallel.DataParallel.
TWO_HEADS = os.path.join(os.path.dirname(__file__), "scripts", "two_heads.py")


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


def run_script(out, *flags, ranks=1, servers=0, launch=(), env=None):
    """Runs scripts/two_heads.py OUT FLAGS: alone, or on `ranks` ranks (and `servers` parameter
    servers) under `loom launch`; returns its completed process."""
    command = [sys.executable, TWO_HEADS, str(out), *flags]
    if ranks > 1 or servers:
        command = [loom_binary(), "launch", "--nproc-per-node", str(ranks), "--servers",
                   str(servers), *launch, "--", *command]
    return subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "LOOM_LOG_LEVEL": "warn", **(env or {})})


def loom_errors(stderr):
    """The Loom errors the test scripts ended on, from their `loom-error` lines on `stderr`
    (scripts/script_errors.py): [{"kind": "ConfigError", "fields": {...}}], one a rank that got
    to say it (`loom launch` prefixes each line with "[rank N] " and stops the others)."""
    lines = (re.match(r"(?:\[rank \d+\] )?loom-error (.*)$", line) for line in stderr.splitlines())
    return [json.loads(m.group(1)) for m in lines if m]


def two_heads_model():
    """The script's model (TwoHeads), as a plain torch module in this process."""
    sys.path.insert(0, os.path.dirname(TWO_HEADS))
    from two_heads import TwoHeads
    return TwoHeads()


def assert_same_parameters(a, b, tolerance=1e-5):
    """The same tensors: integers equal, floating point within `tolerance` of the largest
    magnitude of each of `b`'s tensors."""
    for name, tensor in a.items():
        if not tensor.is_floating_point():
            assert torch.equal(tensor, b[name]), name
            continue
        error = (tensor - b[name]).abs().max() / b[name].abs().max().clamp_min(1e-12)
        assert error <= tolerance, f"{name}: relative error {error:.3g}"


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


def save_torchscript(module, path):
    """Writes `module` as a TorchScript file, for Loom's C++ `model: {torchscript: FILE}` (which
    reads it with torch::jit::load). TorchScript is that path's file format, so these tests make
    one on purpose, although torch 2.5+ deprecates scripting from Python: torch.jit.script's
    DeprecationWarning is expected here and ignored here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.script` is deprecated",
                                DeprecationWarning)
        torch.jit.script(module).save(str(path))


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
