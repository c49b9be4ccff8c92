"""loom.train() and loom.plan(): the trainer and the cost planner from Python."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import loom
from conftest import FASHION_MNIST, loom_binary, read_safetensors, synthetic_sgd_config

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="dataset-fashion-mnist missing")
def test_train_the_demo_and_plan_its_cost(tmp_path):
    # The demo's configuration for 150 of its steps, as tests/e2e/train_run_test.cpp runs it
    # (the whole demo, 2,811 steps, took 141 s of the suite; `make demo` runs it): Python's
    # loom.train() trains and reports like `loom train`. 150 steps of 64 images beat 75% (83%
    # on an AVX2 EPYC). fp32 is pinned: auto picks bf16 only on CPUs with native bf16, and the
    # bar must not follow the host.
    summary = loom.train(overrides=["runtime.precision=fp32", "train.max_steps=150"],
                         out=tmp_path / "demo")
    assert summary["model"] == "cnn"
    assert summary["test_accuracy"] >= 0.75, summary["test_accuracy"]
    assert summary["steps"] == 150
    assert os.path.isfile(tmp_path / "demo" / "summary.json")

    plan = loom.plan(tmp_path / "demo", os.path.join(SOURCE, "examples", "prices.yaml"),
                     samples=1e8)
    assert plan["run"]["samples_per_second"] == pytest.approx(summary["samples_per_second"])
    by_name = {i["name"]: i for i in plan["instances"]}
    cpu = by_name["c7i.2xlarge"]
    # CPU instances are scaled from the run by vCPUs; cost = hours x price.
    assert cpu["samples_per_second"] > 0
    assert cpu["cost"] == pytest.approx(cpu["hours"] * cpu["price_per_hour"])
    assert cpu["hours"] == pytest.approx(1e8 / cpu["samples_per_second"] / 3600)


def test_train_raises_config_error_naming_the_key(tmp_path):
    with pytest.raises(loom.ConfigError, match="train.epochs"):
        loom.train(overrides=["train.epochs=0"], out=tmp_path / "bad")
    with pytest.raises(loom.ConfigError, match="run_dir"):
        loom.plan(tmp_path / "nothing", os.path.join(SOURCE, "examples", "prices.yaml"))


def test_resume_without_a_config_goes_on_with_the_runs_own(tmp_path):
    first = loom.train(synthetic_sgd_config(tmp_path, 1, "mlp"), out=tmp_path / "run")
    # No configuration: OUT/config.yaml's, with the override over it (not the default CNN on
    # Fashion-MNIST, which the checkpoint cannot take).
    summary = loom.train(overrides=["train.epochs=2"], out=tmp_path / "run", resume=True)
    assert summary["model"] == "mlp"
    assert summary["resumed_from_step"] == first["steps"]
    assert summary["steps"] == 2 * first["steps"]


def test_ctrl_c_stops_training_with_keyboard_interrupt(tmp_path):
    run = tmp_path / "run"
    script = f"""
import json, sys, loom
try:
    loom.train(overrides=["data=synthetic", "data.image_size=16", "model=mlp",
                          "train.epochs=100000"], out={str(run)!r})
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(3)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run / "metrics.jsonl").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        time.sleep(0.5)  # into the steps
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 3 and out.strip() == "interrupted", (proc.returncode, out, err)


# Calls loom.train() as every rank of a job; each training rank writes what it returned.
LAUNCHED_SCRIPT = """
import json, os, sys
import loom
summary = loom.train(sys.argv[1], out=sys.argv[2])
with open(os.path.join(sys.argv[3], "rank%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(summary, f)
"""


@pytest.mark.parametrize("servers", [0, 1])
def test_train_under_launch_trains_as_one_job_like_loom_train(tmp_path, servers):
    """`loom launch -- python3 script.py` whose script calls loom.train() trains one job in the
    configured layout (2 data-parallel ranks; 2 workers and a parameter server), as `loom launch
    -- loom train` does: the same steps, losses and checkpoint, bit for bit. Rank 0 writes the
    run; the other worker writes nothing there and returns None; the server serves and ends."""
    config_path = synthetic_sgd_config(tmp_path, seed=5, model={"name": "mlp"})
    launch = [loom_binary(), "launch", "--nproc-per-node", "2", "--servers", str(servers), "--"]
    env = {**os.environ, "LOOM_LOG_LEVEL": "warn"}

    cli = tmp_path / "cli"
    result = subprocess.run([*launch, loom_binary(), "train", str(config_path), "--out",
                             str(cli)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    python = tmp_path / "python"
    returned = tmp_path / "returned"
    returned.mkdir()
    script = tmp_path / "train.py"
    script.write_text(LAUNCHED_SCRIPT)
    result = subprocess.run([*launch, sys.executable, str(script), str(config_path), str(python),
                             str(returned)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr

    expected = json.loads((cli / "summary.json").read_text())
    got = json.loads((python / "summary.json").read_text())
    assert got["layout"]["servers"] == expected["layout"]["servers"] == servers
    assert got["layout"]["mesh"] == expected["layout"]["mesh"] == {"data": 2}
    assert got["layout"]["ranks"] == 2 + servers and got["data_parallel"]["ranks"] == 2
    assert got["steps"] == expected["steps"] == 8  # 256 samples, 16 a rank, 2 ranks
    assert got["final_train_loss"] == expected["final_train_loss"]
    # Rank 0 returned the summary it wrote; the other worker None; the server never returned.
    assert json.loads((returned / "rank0.json").read_text()) == got
    assert json.loads((returned / "rank1.json").read_text()) is None
    assert sorted(os.listdir(returned)) == ["rank0.json", "rank1.json"]

    # One run in the directory, rank 0's: a line a step, with the losses of `loom train`.
    def losses(run):
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [(line["step"], line["loss"]) for line in lines if line["type"] == "step"]

    assert losses(python) == losses(cli) and len(losses(python)) == 8

    def newest(run):
        checkpoints = run / "checkpoints"
        folder = checkpoints / (checkpoints / "latest").read_text().strip()
        return {part: read_safetensors(folder / part)
                for part in ("model.safetensors", "state.safetensors")}

    want, have = newest(cli), newest(python)
    for part in want:
        assert have[part].keys() == want[part].keys(), part
        for name, tensor in want[part].items():
            assert torch.equal(have[part][name], tensor), f"{part}: {name}"


def test_train_refuses_a_layout_other_than_the_joined_jobs(tmp_path):
    # Joined as two data-parallel ranks, the job cannot turn into workers and a server: every
    # rank refuses at once, naming the key and both layouts, without waiting for the others.
    script = tmp_path / "train.py"
    script.write_text(f"""
import json, sys, loom
job = loom.distributed.init()
print("joined", job.layout.servers, job.layout.mesh, flush=True)
try:
    loom.train(overrides=["data=synthetic", "data.image_size=16", "model=mlp",
                          "parallel.mode=ps", "parallel.ps.servers=1"], out={str(tmp_path / "run")!r})
except loom.ConfigError as e:
    print("refused:", json.dumps(e.fields), flush=True)
    sys.exit(2)
""")
    result = subprocess.run([loom_binary(), "launch", "--nproc-per-node", "2", "--", sys.executable,
                             str(script)], capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert output.count("joined 0 {'data': 2}") == 2, output
    lead = "refused: "  # after loom launch's "[rank N] "
    refusals = [json.loads(line[line.index(lead) + len(lead):]) for line in output.splitlines()
                if lead in line]
    assert sorted(r["rank"] for r in refusals) == ["0", "1"], output
    for refusal in refusals:
        assert refusal["key"] == "parallel.mode", refusal
        assert refusal["joined"].startswith("data parallel over 2 ranks:"), refusal
        assert refusal["configured"].startswith("1 workers and 1 sync parameter servers"), refusal
    assert not (tmp_path / "run" / "summary.json").exists()
