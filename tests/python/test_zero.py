"""loom.parallel.DataParallel(zero=N) in a user's own script, on real processes started by `loom
launch`: ZeRO-1/2/3 end with the parameters of one process on the same global batch (SGD) and of
plain DataParallel (AdamW), and a ZeRO checkpoint holds the model and its optimizer state under
the module's own names, so it loads in one process."""
import os
import subprocess
import sys

import pytest
import torch

import loom

from conftest import loom_binary, read_safetensors

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "zero_blocks.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import zero_blocks  # noqa: E402  (the script's model, to load its checkpoint in this process)


def run_script(out, *flags, ranks=2):
    command = [sys.executable, SCRIPT, str(out), *flags]
    if ranks > 1:
        command = [loom_binary(), "launch", "--nproc-per-node", str(ranks), "--", *command]
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    return result


def trained(tmp_path, name, *flags, ranks=2):
    result = run_script(tmp_path / name, *flags, ranks=ranks)
    assert result.returncode == 0, result.stdout + result.stderr
    return torch.load(tmp_path / name)


class Run:
    """A finished run: its final parameters, and the checkpoint it wrote after its last step."""

    def __init__(self, parameters, checkpoints):
        self.parameters, self.checkpoints = parameters, checkpoints


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Trains each (flags, ranks) once for the whole file, with a checkpoint after its last step:
    every ZeRO stage is compared with the same one-process or plain DataParallel run, and the
    checkpoint tests read the checkpoints of the runs the other tests compare (every run is a
    `loom launch` of processes that import torch, 4-5 s of this suite's time each)."""
    runs = {}

    def trained_once(*flags, ranks=2):
        if (flags, ranks) not in runs:
            folder = tmp_path_factory.mktemp("run")
            checkpoints = str(folder / "checkpoints")
            parameters = trained(folder, "final.pt", *flags, "--checkpoint", checkpoints,
                                 ranks=ranks)
            runs[(flags, ranks)] = Run(parameters, checkpoints)
        return runs[(flags, ranks)]
    return trained_once


ADAMW_BLOCKS = ("--optimizer", "adamw", "--model", "list")


def assert_close(got, expected, tolerance):
    assert got.keys() == expected.keys()
    for name, tensor in got.items():
        error = (tensor - expected[name]).abs().max() / expected[name].abs().max().clamp_min(1e-12)
        assert error <= tolerance, f"{name}: relative error {error:.3g}"


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_ranks_train_like_one_process(run, zero):
    one = run(ranks=1).parameters
    sharded = run("--zero", str(zero)).parameters
    assert_close(sharded, one, 1e-5)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_with_adamw_matches_plain_data_parallel(run, zero):
    plain = run(*ADAMW_BLOCKS).parameters
    sharded = run(*ADAMW_BLOCKS, "--zero", str(zero)).parameters
    assert_close(sharded, plain, 1e-6)


def test_zero3_blocks_in_a_module_list_accumulate_like_one_process(run):
    # The stem, norm and head are in no block: gathered around the whole forward.
    flags = ("--model", "list", "--accumulate")
    one = run(*flags, ranks=1).parameters
    sharded = run(*flags, "--zero", "3").parameters
    assert_close(sharded, one, 1e-5)


@pytest.mark.parametrize("zero", [2, 3])
def test_a_zero_checkpoint_loads_in_one_process(run, zero):
    plain, sharded = run(*ADAMW_BLOCKS), run(*ADAMW_BLOCKS, "--zero", str(zero))
    # The same names and values as plain DataParallel's checkpoint writes.
    step = "step-00000004"
    plain_state = read_safetensors(os.path.join(plain.checkpoints, step, "state.safetensors"))
    zero_state = read_safetensors(os.path.join(sharded.checkpoints, step, "state.safetensors"))
    optimizer_keys = {k for k in plain_state if k.startswith("optimizer/")}
    assert optimizer_keys and optimizer_keys == {k for k in zero_state if k.startswith("optimizer/")}
    assert_close({k: zero_state[k] for k in optimizer_keys},
                 {k: plain_state[k] for k in optimizer_keys}, 1e-5)
    # It loads into the plain module and torch's AdamW in this process.
    model = zero_blocks.Blocks()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    loaded = loom.checkpoint.load(sharded.checkpoints, model=model, optimizer=optimizer)
    assert loaded["step"] == 4
    assert_close(model.state_dict(), sharded.parameters, 0)
    state = optimizer.state[model.head.weight]
    assert float(state["step"]) == 4 and state["exp_avg"].shape == model.head.weight.shape


@pytest.mark.parametrize("zero", [2, 3])
def test_a_zero_run_resumes_from_its_checkpoint(tmp_path, run, zero):
    flags = (*ADAMW_BLOCKS, "--zero", str(zero))
    full = run(*flags).parameters
    checkpoints = str(tmp_path / "checkpoints")
    trained(tmp_path, "first.pt", *flags, "--checkpoint", checkpoints, "--stop-after", "2")
    resumed = trained(tmp_path, "resumed.pt", *flags, "--checkpoint", checkpoints, "--resume")
    assert_close(resumed, full, 0)


def test_zero_needs_the_optimizer_to_step_the_shards(tmp_path):
    result = run_script(tmp_path / "wrong.pt", "--zero", "2", "--wrong-optimizer")
    assert result.returncode != 0
    assert "model.optimizer_parameters()" in result.stderr, result.stderr


@pytest.mark.parametrize("zero", [-1, 4, True, "2"])
def test_a_zero_that_is_no_stage_is_refused(zero):
    with pytest.raises(ValueError, match="zero"):
        loom.parallel.DataParallel(torch.nn.Linear(2, 2), zero=zero)


def test_zero3_without_blocks_asks_for_them():
    loom.distributed.init()
    with pytest.raises(ValueError, match="blocks="):
        loom.parallel.DataParallel(torch.nn.Linear(2, 2), zero=3)


def test_zero_on_one_rank_shards_nothing():
    loom.distributed.init()
    model = loom.parallel.DataParallel(torch.nn.Sequential(torch.nn.Linear(2, 2)), zero=3)
    assert model.zero_stage == 0
    assert model.optimizer_parameters() == list(model.module.parameters())


def test_zero_refuses_compression_alike_on_one_rank():
    loom.distributed.init()
    with pytest.raises(loom.ConfigError, match="compression"):
        loom.parallel.DataParallel(torch.nn.Linear(2, 2), zero=1, compression="bf16")
    with pytest.raises(ValueError, match="blocks"):
        layer = torch.nn.Linear(2, 2)
        loom.parallel.DataParallel(torch.nn.Sequential(layer), zero=2, blocks=[layer])


PEFT_LORA = os.path.join(os.path.dirname(__file__), "scripts", "peft_lora_dp.py")


def run_peft_lora(command, out):
    result = subprocess.run(command, capture_output=True, text=True,
                            env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    assert result.returncode == 0, result.stdout + result.stderr
    return torch.load(out)


@pytest.fixture(scope="module")
def peft_lora_one_process(tmp_path_factory):
    """The one-process run every ZeRO stage is compared with, trained once for the file (a
    process that imports peft and transformers: several seconds of the suite each)."""
    pytest.importorskip("peft")
    out = tmp_path_factory.mktemp("peft") / "one.pt"
    return run_peft_lora([sys.executable, PEFT_LORA, str(out), "--plain"], out)


@pytest.mark.parametrize("zero", [0, 2, 3])
def test_peft_lora_adapters_train_through_data_parallel_like_one_process(
        tmp_path, zero, peft_lora_one_process):
    """LoRA on a user's model is peft's: its frozen base has no gradient, so DataParallel (and
    ZeRO's shards) exchange and step the adapters alone, and two ranks end with one process's
    adapters; the base is where it started (ZeRO-3 shards it between the layers' runs)."""
    one = peft_lora_one_process
    two = run_peft_lora([loom_binary(), "launch", "--nproc-per-node", "2", "--", sys.executable,
                         PEFT_LORA, str(tmp_path / "two.pt"), "--zero", str(zero)],
                        tmp_path / "two.pt")
    assert one["adapters"].keys() == two["adapters"].keys() and len(one["adapters"]) == 8
    for name, tensor in one["adapters"].items():
        assert torch.allclose(two["adapters"][name], tensor, atol=1e-5), name
        assert (tensor - one["start"][name]).abs().max() > 1e-4, name  # they trained
    for name, tensor in one["base"].items():
        assert torch.equal(two["base"][name], tensor), name
    assert two["base_freed"] == [zero == 3] * 3
