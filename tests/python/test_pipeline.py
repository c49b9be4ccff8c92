"""loom.pipeline.Pipeline on a user's own torch.nn.Sequential, on real processes started by
`loom launch`: every schedule over 2 and 3 ranks, and 2 pipelines x 2 stages, end with the
parameters one process reaches on the same global batches."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

import loom

from conftest import loom_binary, read_safetensors

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "pipeline_seq.py")


def load_script():
    spec = importlib.util.spec_from_file_location("pipeline_seq", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference():
    return load_script().reference()


def launch(out, ranks, *flags):
    result = subprocess.run(
        [loom_binary(), "launch", "--nproc-per-node", str(ranks), "--", sys.executable, SCRIPT,
         str(out), *flags],
        capture_output=True, text=True, env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def gathered(out, schedule, ranks, pipeline=0):
    """A pipeline's stages, each of its ranks' files merged into one state dict."""
    merged = {}
    for rank in range(pipeline * ranks, (pipeline + 1) * ranks):
        part = torch.load(f"{out}.{schedule}.rank{rank}")
        assert not merged.keys() & part.keys(), "two ranks hold the same tensor"
        merged.update(part)
    return merged


def assert_same_parameters(a, reference):
    assert a.keys() == reference.keys()
    for name, tensor in reference.items():
        error = (a[name] - tensor).abs().max() / tensor.abs().max().clamp_min(1e-12)
        assert error <= 1e-5, f"{name}: relative error {error:.3g}"


def test_schedules_on_two_ranks_train_like_one_process(tmp_path, reference):
    out, run, checkpoints = tmp_path / "two", tmp_path / "steps", tmp_path / "checkpoints"
    launch(out, 2, "--schedules", "1f1b,gpipe,interleaved,zb_h1", "--steps", str(run),
           "--checkpoint", str(checkpoints))
    for schedule in ("1f1b", "gpipe", "interleaved", "zb_h1"):
        assert_same_parameters(gathered(out, schedule, 2), reference)
    # Each rank keeps its own stages: 10 children split 5 + 5 for one stage per rank (the
    # LayerNorm, child 5, is the second stage's first).
    first = torch.load(f"{out}.1f1b.rank0")
    assert set(first) == {"0.weight", "0.bias", "3.weight", "3.bias"}

    # loom.profile.Steps heard the schedule's phases on both ranks: rank 0 wrote the run.
    with open(run / "summary.json") as f:
        summary = json.load(f)
    assert summary["steps"] == 4 and summary["samples"] == 4 * 24
    share = summary["step_time"]["share"]
    assert share["forward"] > 0 and share["backward"] > 0, share
    assert math.isclose(sum(share.values()), 1.0, rel_tol=1e-6)

    # The checkpoint holds both stages under the Sequential's own names (with the momentum of
    # each parameter), and a plain torch model loads it.
    newest = checkpoints / (checkpoints / "latest").read_text().strip()
    saved = read_safetensors(newest / "model.safetensors")
    assert_same_parameters(saved, reference)
    plain = load_script().make_model()
    plain.load_state_dict(saved)
    # and each rank of a fresh pipeline takes its own stages from it.
    launch(out, 2, "--schedules", "1f1b", "--load", str(checkpoints))
    assert_same_parameters(gathered(out, "loaded", 2), reference)
    state = read_safetensors(newest / "state.safetensors")
    assert {f"optimizer/{name}.momentum_buffer" for name in reference} <= state.keys()
    with open(newest / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["layout"]["pipeline"]["schedule"] == "1f1b"


def test_schedules_on_three_ranks_train_like_one_process(tmp_path, reference):
    out = tmp_path / "three"
    launch(out, 3, "--schedules", "1f1b,interleaved")
    for schedule in ("1f1b", "interleaved"):
        assert_same_parameters(gathered(out, schedule, 3), reference)


def test_two_pipelines_of_two_ranks_train_like_one_process(tmp_path, reference):
    out = tmp_path / "twobytwo"
    launch(out, 4, "--schedules", "1f1b", "--pipeline-ranks", "2")
    assert_same_parameters(gathered(out, "1f1b", 2), reference)
    assert_same_parameters(gathered(out, "1f1b", 2, pipeline=1), reference)


def test_a_pipeline_needs_ranks_and_an_equal_split():
    script = load_script()
    loom.distributed.init()  # a job of one process
    with pytest.raises(loom.ConfigError, match="pipeline_ranks"):
        loom.pipeline.Pipeline(script.make_model(), loss_fn=script.loss_fn)
    with pytest.raises(loom.ConfigError, match="stages"):
        loom.pipeline.Pipeline(["not a module"], loss_fn=script.loss_fn)
