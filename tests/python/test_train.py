"""loom.train() and loom.plan(): the trainer and the cost planner from Python."""

import os
import signal
import subprocess
import sys
import time

import pytest

import loom
from conftest import FASHION_MNIST

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST), reason="dataset-fashion-mnist missing")
def test_train_the_demo_and_plan_its_cost(tmp_path):
    # The demo's configuration for 400 of its steps (the whole demo, 2,811 steps, took 141 s of
    # the suite; `make demo` runs it): Python's loom.train() trains and reports like `loom train`
    # (tests/e2e/train_run_test.cpp checks 150 steps). fp32 is pinned: auto picks bf16 only on
    # CPUs with native bf16, and the bar must not follow the host.
    summary = loom.train(overrides=["runtime.precision=fp32", "train.max_steps=400"],
                         out=tmp_path / "demo")
    assert summary["model"] == "cnn"
    assert summary["test_accuracy"] >= 0.80, summary["test_accuracy"]
    assert summary["steps"] == 400
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


def test_ctrl_c_stops_training_with_keyboard_interrupt(tmp_path):
    run = tmp_path / "run"
    script = f"""
import sys, loom
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
