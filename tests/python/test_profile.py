"""loom.profile.Steps: a script's own loop accounted by phase into the files `loom train` writes,
read back by `loom report` and the advisor."""
import contextlib
import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch

import loom

from conftest import loom_binary, run_loom

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "two_heads.py")
TP_SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "tp_blocks.py")
sys.path.insert(0, os.path.dirname(TP_SCRIPT))
import tp_blocks  # noqa: E402  (the script's batch and model, to count what one process trains)


def read_metrics(folder):
    with open(folder / "metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_summary(folder):
    with open(folder / "summary.json") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def large_jpegs(tmp_path_factory):
    """JPEGs that take one loader thread far longer to decode and crop than a linear model takes
    to train on them: a loop that is input-bound on any machine."""
    folder = tmp_path_factory.mktemp("large") / "train"
    run_loom("data", "synth-images", str(folder), "--count", "64", "--classes", "4", "--width",
             "480", "--height", "360", "--seed", "5")
    return folder


@contextlib.contextmanager
def one_intra_op_thread():
    """The model's compute on one thread, restored after. torch's OpenMP threads (libgomp in the
    pip wheel) spin while they wait, so on a host with no more cores than intra-op threads they
    take the loader thread's cores, and a step of a linear model grows eightfold (measured on 2
    cores with torch 2.11: 50 ms against 6 ms): the loop is then no longer input-bound."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def test_an_input_bound_loop_is_named_and_reported(tmp_path, large_jpegs):
    config = {"seed": 3, "train": {"log_every": 2},
              "data": {"source": "image_folder", "path": str(large_jpegs), "batch_size": 8,
                       "workers": 1, "transforms": [{"random_resized_crop": {"size": 16}}]}}
    loader = loom.data.Loader(config)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    run = tmp_path / "run"
    steps = loom.profile.Steps(run, loader=loader, model=model, optimizer=optimizer,
                               config=config)
    losses = []
    with one_intra_op_thread():
        for epoch in range(2):
            loader.set_epoch(epoch)
            for images, labels in steps.loop(loader):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(images), labels)
                loss.backward()
                optimizer.step()
                steps.record(loss=loss)
                losses.append(loss.item())
    result = steps.close()

    assert result["steps"] == 16 and steps.steps == 16
    assert "input_bound" in result["findings"]
    summary = read_summary(run)
    assert summary["steps"] == 16 and summary["samples"] == 128
    assert summary["data"]["samples_read"] == 128
    assert summary["layout"]["global_batch"] == 8
    share = summary["step_time"]["share"]
    assert math.isclose(sum(share.values()), 1.0, rel_tol=1e-6)
    assert share["data_wait"] > 0.5, share
    finding = next(f for f in summary["findings"] if f["id"] == "input_bound")
    # One loader thread leaves cores to give it, but on a one-core host the advice is cheaper
    # transforms.
    spare_cores = summary["machine"]["usable_cores"] > 1
    assert finding["key"] == ("data.workers" if spare_cores else "data.transforms"), finding

    # A metrics line every 2 steps, with the mean of the window's losses, the optimizer's
    # learning rate and the loader's epoch.
    records = [r for r in read_metrics(run) if r["type"] == "step"]
    assert [r["step"] for r in records] == list(range(2, 17, 2))
    for r in records:
        window = losses[r["step"] - 2:r["step"]]
        assert r["loss"] == pytest.approx(sum(window) / 2, rel=1e-6)
        assert r["lr"] == 0.05
        assert r["epoch"] == (r["step"] - 1) // 8
        assert math.isclose(sum(r["phase_seconds"].values()), r["step_seconds"], rel_tol=1e-6)
    assert summary["final_train_loss"] == pytest.approx(records[-1]["loss"])

    run_loom("report", str(run))
    page = (run / "report.html").read_text()
    assert "input_bound" in page


def test_phases_come_from_hooks_and_blocks(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(12)]
    run = tmp_path / "run"
    with loom.profile.Steps(run, model=model, optimizer=optimizer, name="mlp") as steps:
        for x, y in steps.loop(batches):
            with steps.phase("h2d"):
                time.sleep(0.002)  # the script's own copy to a device, say
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    summary = read_summary(run)
    assert summary["model"] == "mlp" and summary["steps"] == 12 and summary["samples"] == 768
    assert summary["parameters"] == sum(p.numel() for p in model.parameters())
    share = summary["step_time"]["share"]
    for phase in ("h2d", "forward", "backward", "optimizer"):
        assert share[phase] > 0, (phase, share)
    assert share["h2d"] > share["data_wait"], share
    assert share["comm_exposed"] == 0 and share["bubble"] == 0
    # The hooks go with close(): the optimizer's step and the module are the script's again.
    assert "step" not in vars(optimizer)
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_a_bad_phase_is_named(tmp_path):
    steps = loom.profile.Steps(tmp_path / "run")
    with pytest.raises(loom.ConfigError, match="phase: 'thinking'"):
        with steps.phase("thinking"):
            pass


@pytest.mark.parametrize("accounted", ["wrapper", "module"])
def test_data_parallel_ranks_account_one_run(tmp_path, accounted):
    """Steps on a DataParallel, or on its .module: the wrapper's exchange is accounted either
    way."""
    run = tmp_path / "run"
    flags = ["--steps-module"] if accounted == "module" else []
    result = subprocess.run(
        [loom_binary(), "launch", "--nproc-per-node", "2", "--", sys.executable, SCRIPT,
         str(tmp_path / "out.pt"), "--steps", str(run), *flags],
        capture_output=True, text=True, env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    assert result.returncode == 0, result.stdout + result.stderr
    summary = read_summary(run)
    # Both ranks' samples: 5 steps of the global batch of 24.
    assert summary["steps"] == 5 and summary["samples"] == 120
    assert summary["layout"]["mesh"] == {"data": 2} and summary["layout"]["ranks"] == 2
    # The script's step, not the job configuration's data.batch_size.
    assert summary["layout"]["global_batch"] == 24 and summary["layout"]["replica_batch"] == 12
    exchange = summary["data_parallel"]
    assert "all-reduce" in exchange["exchange"]
    # two_heads.py's buckets are 1 KB (its first one 0.5 KB) for its 216 fp32 parameters.
    assert exchange["buckets"] >= 2
    assert exchange["bytes_per_step"] > 0 and 0 <= exchange["overlap"] <= 1
    assert summary["model"] == "TwoHeads"
    assert [r["step"] for r in read_metrics(run) if r["type"] == "step"] == [1, 2, 3, 4, 5]


def test_record_outside_the_loop_raises(tmp_path):
    steps = loom.profile.Steps(tmp_path / "run")
    # Before any loop, and after one ended: no step would count the record.
    with pytest.raises(loom.Error, match=r"steps\.loop\("):
        steps.record(loss=1.0)
    for _ in steps.loop([torch.zeros(3)]):
        steps.record(loss=0.5, samples=3)
    with pytest.raises(loom.Error):
        steps.record(loss=2.0)
    assert steps.close()["steps"] == 1
    summary = read_summary(tmp_path / "run")
    assert summary["steps"] == 1 and summary["samples"] == 3
    assert summary["final_train_loss"] == 0.5


def profiled_tp_blocks(folder, *flags, ranks):
    """tp_blocks.py's 4 steps accounted into folder/run by loom.profile.Steps; its summary."""
    command = [sys.executable, TP_SCRIPT, str(folder / "out.pt"), "--profile",
               str(folder / "run"), *flags]
    if ranks > 1:
        command = [loom_binary(), "launch", "--nproc-per-node", str(ranks), "--", *command]
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    assert result.returncode == 0, result.stdout + result.stderr
    return read_summary(folder / "run")


@pytest.fixture(scope="module")
def profiled_one_process(tmp_path_factory):
    return profiled_tp_blocks(tmp_path_factory.mktemp("one"), "--plain", ranks=1)


@pytest.mark.parametrize("accounted", ["wrapper", "module"])
def test_a_tensor_group_counts_each_sample_once(tmp_path, profiled_one_process, accounted):
    """Steps on a TensorParallel (or on its .module) at TP=2 accounts what one process trains:
    the two ranks share each batch, so the samples are one process's, not twice as many, and the
    group's collectives are tensor_comm."""
    flags = ["--profile-module"] if accounted == "module" else []
    summary = profiled_tp_blocks(tmp_path, *flags, ranks=2)
    alone = profiled_one_process
    assert summary["steps"] == alone["steps"] == 4
    assert summary["samples"] == alone["samples"] == 4 * tp_blocks.BATCH
    assert summary["layout"]["global_batch"] == alone["layout"]["global_batch"] == tp_blocks.BATCH
    assert summary["layout"]["replica_batch"] == tp_blocks.BATCH
    assert summary["layout"]["ranks"] == 2
    assert summary["layout"]["mesh"] == {"data": 1, "tensor": 2}
    # The whole model's parameters, not this rank's slices.
    assert summary["parameters"] == alone["parameters"]
    assert summary["model"] == alone["model"] == "Model"
    share = summary["step_time"]["share"]
    assert share["tensor_comm"] > 0, share
    assert share["forward"] > 0 and share["backward"] > 0, share
    assert math.isclose(sum(share.values()), 1.0, rel_tol=1e-6)
    assert alone["step_time"]["share"]["tensor_comm"] == 0
