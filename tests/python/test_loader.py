"""loom.data.Loader: the batches `loom data bench` makes, exact mid-epoch resume, bad samples
counted and skipped, configuration errors naming the key."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

import loom
from conftest import FASHION_MNIST, folder_config, read_safetensors, run_loom


def all_batches(loader):
    return [(images.clone(), labels.clone()) for images, labels in loader]


def assert_same_batches(got, expected):
    assert len(got) == len(expected)
    for step, ((images, labels), (want_images, want_labels)) in enumerate(zip(got, expected)):
        assert torch.equal(images, want_images), f"images of batch {step} differ"
        assert torch.equal(labels, want_labels), f"labels of batch {step} differ"


def test_raw_batches_equal_those_of_loom_data_bench(jpeg_folder, tmp_path):
    config = folder_config(jpeg_folder)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(json.dumps(config))  # JSON is YAML
    run_loom("data", "bench", str(config_file), "--batches", "3", "--loader-only", "--save",
             str(tmp_path / "bench.safetensors"))
    saved = read_safetensors(tmp_path / "bench.safetensors")
    loader = loom.data.Loader(config, normalize=False)
    batches = [batch for _, batch in zip(range(4), loader)]
    assert len(batches) == 4
    for step, (images, labels) in enumerate(batches):
        assert images.dtype == torch.uint8 and images.shape == (16, 32, 32, 3)
        assert torch.equal(images, saved[f"batch{step}.inputs"]), f"batch {step}"
        assert torch.equal(labels, saved[f"batch{step}.targets"]), f"batch {step}"


def test_normalised_batches_are_the_raw_ones_scaled_per_channel(jpeg_folder):
    raw = next(iter(loom.data.Loader(folder_config(jpeg_folder), normalize=False)))[0]
    images, labels = next(iter(loom.data.Loader(folder_config(jpeg_folder))))
    assert images.dtype == torch.float32 and images.shape == (16, 3, 32, 32)
    assert labels.dtype == torch.int64 and labels.shape == (16,)
    # Without a normalize transform image folders use ImageNet's statistics.
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    expected = (raw.permute(0, 3, 1, 2).float() / 255 - mean) / std
    torch.testing.assert_close(images, expected, rtol=1e-5, atol=1e-5)

    bf16 = next(iter(loom.data.Loader(folder_config(jpeg_folder), dtype=torch.bfloat16,
                                      channels_last=True)))[0]
    assert bf16.dtype == torch.bfloat16
    assert bf16.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(bf16.float(), expected, rtol=1e-2, atol=2e-2)


def test_state_dict_resumes_the_identical_sequence_mid_epoch(jpeg_folder):
    config = folder_config(jpeg_folder)
    reference = loom.data.Loader(config, normalize=False)
    assert len(reference) == 6  # 96 images, 16 per batch
    expected = []
    for epoch in range(2):
        reference.set_epoch(epoch)
        expected += all_batches(reference)
    # Transforms are random per (seed, epoch, sample): the two epochs differ.
    assert not torch.equal(expected[0][0], expected[6][0])

    first = loom.data.Loader(config, normalize=False)
    got = [batch for _, batch in zip(range(4), first)]
    state = first.state_dict()
    assert (state["epoch"], state["step"]) == (0, 4)
    del first

    second = loom.data.Loader(config, normalize=False, overrides=["data.workers=1"])
    second.load_state_dict(state)
    for epoch in range(2):
        second.set_epoch(epoch)  # keeps the restored position inside epoch 0
        got += all_batches(second)
    assert second.state_dict()["epoch"] == 2 and second.state_dict()["step"] == 0
    assert_same_batches(got, expected)


def test_a_state_dict_of_another_sequence_is_refused(jpeg_folder):
    state = loom.data.Loader(folder_config(jpeg_folder)).state_dict()
    other = loom.data.Loader(folder_config(jpeg_folder, seed=12))
    with pytest.raises(loom.DataError, match="seed"):
        other.load_state_dict(state)
    with pytest.raises(loom.DataError, match="format"):
        other.load_state_dict({**state, "format": "something else"})


def test_ranks_read_disjoint_shares_of_each_epoch(jpeg_folder):
    config = folder_config(jpeg_folder, batch_size=8)
    ranks = [loom.data.Loader(config, rank=r, world=2, normalize=False) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 6
    whole = loom.data.Loader(folder_config(jpeg_folder, batch_size=16), normalize=False)
    steps = 0
    for (a, _), (b, _), (both, _) in zip(ranks[0], ranks[1], whole):
        # Rank r takes positions r, r + 2, ... of the epoch's order, and a sample's random crop
        # is keyed by its index: together the ranks see one process's global batch.
        assert torch.equal(a, both[0::2]) and torch.equal(b, both[1::2])
        steps += 1
    assert steps == 6
    with pytest.raises(loom.ConfigError, match="rank"):
        loom.data.Loader(config, rank=2, world=2)


def test_corrupt_files_are_counted_and_skipped(jpeg_folder, tmp_path):
    folder = tmp_path / "mixed"
    for class_dir in sorted(os.listdir(jpeg_folder)):
        os.makedirs(folder / class_dir)
        for name in sorted(os.listdir(jpeg_folder / class_dir)):
            shutil.copy(jpeg_folder / class_dir / name, folder / class_dir / name)
    first_class = sorted(os.listdir(folder))[0]
    (folder / first_class / "zz-garbage.jpg").write_bytes(b"this is not a JPEG at all" * 10)
    good = (jpeg_folder / first_class / sorted(os.listdir(jpeg_folder / first_class))[0])
    (folder / first_class / "zz-truncated.jpg").write_bytes(good.read_bytes()[:300])

    loader = loom.data.Loader(folder_config(folder, batch_size=14, max_bad_fraction=0.1),
                              normalize=False)
    seen = sum(images.shape[0] for images, _ in loader)
    stats = loader.stats()
    assert stats["bad"]["undecodable"] + stats["bad"]["truncated"] == 2, stats
    assert stats["bad_total"] == 2
    assert seen == stats["samples"] - 2  # 98 files, 7 batches of 14
    assert stats["samples"] == 98
    assert stats["bad_fraction"] == pytest.approx(2 / 98)
    assert stats["cpu_seconds"] > 0


def test_bad_configuration_raises_config_error_naming_the_key(jpeg_folder):
    with pytest.raises(loom.ConfigError, match="data.batch_size"):
        loom.data.Loader(folder_config(jpeg_folder, batch_size=0))
    with pytest.raises(loom.ConfigError, match="bach_size"):
        loom.data.Loader({"data": {"bach_size": 3}})
    with pytest.raises(loom.ConfigError, match="data.transforms"):
        loom.data.Loader(folder_config(jpeg_folder, transforms=["random_resized_crap"]))
    with pytest.raises(loom.ConfigError, match="dtype"):
        loom.data.Loader(folder_config(jpeg_folder), dtype=torch.int32)
    with pytest.raises(loom.DataError, match="/no/such/folder"):
        loom.data.Loader({"data": {"source": "image_folder", "path": "/no/such/folder"}})
    assert issubclass(loom.ConfigError, loom.Error) and issubclass(loom.Error, RuntimeError)


def test_yaml_text_and_paths_are_configs_too(jpeg_folder, tmp_path):
    text = f"data:\n  source: image_folder\n  path: {jpeg_folder}\n  batch_size: 32\n"
    assert len(loom.data.Loader(text)) == 3
    (tmp_path / "c.yaml").write_text(text)
    assert len(loom.data.Loader(str(tmp_path / "c.yaml"))) == 3
    assert len(loom.data.Loader(tmp_path / "c.yaml", overrides=["data.batch_size=48"])) == 2


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="dataset-fashion-mnist missing")
def test_fashion_mnist_by_default():
    loader = loom.data.Loader(None)
    images, labels = next(iter(loader))
    assert images.shape == (64, 1, 28, 28) and labels.max() < 10
    assert len(loader) == 60000 // 64


def test_import_changes_nothing_process_wide():
    script = """
import signal, torch
threads = torch.get_num_threads()
handlers = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)]
import loom
assert torch.get_num_threads() == threads
assert [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)] == handlers
assert not loom._loom.caching_allocator_installed()
settings = loom.runtime.configure(threads=1, allocator="caching")
assert settings == {"threads": 1, "allocator": "caching"}, settings
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_help_explains_the_loader():
    doc = loom.data.Loader.__doc__
    for word in ("state_dict", "rank", "normalize", "loom.ConfigError", "bad"):
        assert word in doc or word in (loom.data.Loader.state_dict.__doc__ or ""), word


def test_remote_data_workers_named_by_the_config_deliver_the_same_batches(jpeg_folder, tmp_path):
    token = tmp_path / "token"
    token.write_text("a shared secret for this test\n")
    port_file = tmp_path / "port"
    # The worker's log goes to a file: a pipe nobody reads while batches flow could fill and
    # stop it.
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log_file:
        worker = subprocess.Popen(
            [os.environ["LOOM_BINARY"], "data-worker", "--listen", "127.0.0.1:0", "--data-root",
             str(jpeg_folder.parent), "--threads", "2", "--token-file", str(token),
             "--port-file", str(port_file)], stdout=subprocess.DEVNULL, stderr=log_file,
            env={**os.environ, "LOOM_LOG_LEVEL": "info"})
    try:
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert worker.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        address = f"127.0.0.1:{port_file.read_text().strip()}"
        remote = folder_config(jpeg_folder)
        # Workers only (no local loader threads), proving the token.
        remote["data"]["remote"] = {"workers": [address], "local_threads": 0,
                                    "token_file": str(token)}
        got = all_batches(loom.data.Loader(remote, normalize=False))
        assert_same_batches(got, all_batches(loom.data.Loader(folder_config(jpeg_folder),
                                                              normalize=False)))
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    log = log_path.read_text()
    assert "opened a session for" in log, log  # the batches did come from the worker
