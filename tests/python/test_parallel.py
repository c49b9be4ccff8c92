"""loom.distributed, loom.parallel and loom.checkpoint in a user's own script, on real processes
started by `loom launch`: the same parameters as one process on the same global batch, and
exact resume from an atomic checkpoint."""
import json
import os
import subprocess
import sys

import pytest
import torch

import loom

from conftest import TWO_HEADS as SCRIPT
from conftest import (assert_same_parameters, loom_binary, loom_errors, read_safetensors,
                      run_script, save_torchscript, synthetic_sgd_config, two_heads_model)


def assert_bit_identical(got, expected):
    """The same tensors under the same names, bit for bit."""
    assert got.keys() == expected.keys()
    for name, tensor in got.items():
        assert torch.equal(tensor, expected[name]), name


@pytest.fixture(scope="module")
def trained_once(tmp_path_factory):
    """The parameters the script ends with for (flags, ranks), each trained once for the whole
    file: the references that several tests below compare with (every run is processes that
    import torch, 4-5 s of this suite's time each)."""
    runs = {}

    def train(*flags, ranks=1):
        if (flags, ranks) not in runs:
            path = tmp_path_factory.mktemp("run") / "final.pt"
            result = run_script(path, *flags, ranks=ranks)
            assert result.returncode == 0, result.stdout + result.stderr
            runs[(flags, ranks)] = torch.load(path)
        return runs[(flags, ranks)]
    return train


@pytest.fixture(scope="module")
def uninterrupted(trained_once):
    """Two ranks that nothing stopped: the reference of every resume, restart and preemption."""
    return trained_once(ranks=2)


@pytest.mark.parametrize("flags", [(), ("--accumulate",)])
def test_data_parallel_ranks_train_like_one_process(trained_once, flags):
    reference = trained_once(*flags)
    parallel = trained_once(*flags, ranks=2)
    assert parallel.keys() == reference.keys()
    assert_same_parameters(parallel, reference)


def test_workers_and_sync_servers_train_like_one_process(tmp_path, trained_once):
    servers = run_script(tmp_path / "ps.pt", "--servers", ranks=2, servers=2)
    assert servers.returncode == 0, servers.stdout + servers.stderr
    assert_same_parameters(torch.load(tmp_path / "ps.pt"), trained_once())


def test_async_workers_end_with_the_servers_parameters(tmp_path):
    result = run_script(tmp_path / "async.pt", "--servers", "--async", ranks=2, servers=1)
    assert result.returncode == 0, result.stdout + result.stderr
    first = torch.load(tmp_path / "async.pt.rank0")
    second = torch.load(tmp_path / "async.pt.rank1")
    assert_bit_identical(first, second)
    # Both started from rank 0's parameters, and trained away from them.
    start = torch.load(tmp_path / "async.pt.start1")
    assert_bit_identical(torch.load(tmp_path / "async.pt.start0"), start)
    assert not torch.equal(first["classes.weight"], start["classes.weight"])


def test_parameter_servers_need_a_job_with_servers():
    with pytest.raises(loom.ConfigError, match="parallel.mode"):
        loom.parallel.ParameterServers(torch.nn.Linear(2, 2), job=loom.distributed.init())


def test_a_parameter_without_gradient_is_named(tmp_path):
    result = run_script(tmp_path / "unused.pt", "--unused", ranks=2)
    assert result.returncode != 0
    # Raised inside backward, where torch's autograd engine turns it into a RuntimeError of the
    # same message (its fields do not survive): the message names the parameter.
    assert "spare.weight" in result.stderr


def test_models_that_differ_between_ranks_are_named(tmp_path):
    result = run_script(tmp_path / "mismatch.pt", "--mismatch", ranks=2)
    assert result.returncode != 0
    errors = {e["fields"].get("rank"): e["fields"] for e in loom_errors(result.stderr)}
    assert errors["1"]["problem"] == "models_differ", result.stderr
    assert (errors["1"]["rank0_tensor"], errors["1"]["tensor"]) == (
        "'classes.weight' [3, 16] Float", "'classes.weight' [4, 16] Float"), errors


def test_a_process_alone_is_a_job_of_one_rank():
    job = loom.distributed.init()
    assert (job.rank, job.world) == (0, 1)
    assert job.layout.mesh == {"data": 1} and job.layout.servers == 0 and job.trainers == 1
    assert isinstance(job.layout, loom.distributed.Layout) and job.layout.replicas == 1
    assert str(job.layout).startswith("one process: ")
    # The script's loop decides its batch: the layout has none of the configuration's default.
    assert job.layout.global_batch == 0 and job.layout.replica_batch == 0
    assert not hasattr(job, "serve") and not hasattr(job, "serves")  # init() serves
    model = loom.parallel.DataParallel(torch.nn.Linear(3, 2))
    model(torch.randn(4, 3)).sum().backward()
    assert model.module.weight.grad is not None
    assert "local" in repr(model)


def test_a_checkpoint_resumes_exactly_and_loads_into_plain_torch(tmp_path, uninterrupted):
    checkpoints = str(tmp_path / "checkpoints")
    first = run_script(tmp_path / "first.pt", "--checkpoint", checkpoints, "--stop-after", "3",
                       ranks=2)
    assert first.returncode == 0, first.stderr
    resumed = run_script(tmp_path / "resumed.pt", "--checkpoint", checkpoints, "--resume",
                         ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    expected = uninterrupted
    assert_bit_identical(torch.load(tmp_path / "resumed.pt"), expected)
    # The newest checkpoint is a plain safetensors file under the module's own names.
    plain = two_heads_model()
    newest = os.path.join(checkpoints, open(os.path.join(checkpoints, "latest")).read().strip())
    assert newest.endswith("step-00000005")
    plain.load_state_dict(read_safetensors(os.path.join(newest, "model.safetensors")))
    assert_bit_identical(plain.state_dict(), expected)
    manifest = json.load(open(os.path.join(newest, "manifest.json")))
    assert manifest["step"] == 5 and manifest["optimizer"] == "sgd"
    assert manifest["extra"] == {"script": "two_heads"}


def test_adam_state_goes_under_loom_train_names_and_comes_back(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()
    loom.checkpoint.save(tmp_path / "ck", 2, model=model, optimizer=optimizer)
    newest = tmp_path / "ck" / "step-00000002"
    state = read_safetensors(newest / "state.safetensors")
    # As `loom train` names AdamW's state: the step count an int64, whatever torch keeps.
    assert torch.equal(state["optimizer/weight.step"], torch.tensor(2, dtype=torch.int64))
    assert torch.equal(state["optimizer/bias.exp_avg_sq"],
                       optimizer.state[model.bias]["exp_avg_sq"])
    assert json.load(open(newest / "manifest.json"))["layout"] == {"ranks": 1, "data_parallel": 1}

    fresh = torch.nn.Linear(3, 2)
    restored = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    loom.checkpoint.load(tmp_path / "ck", model=fresh, optimizer=restored)
    for p, q in zip(model.parameters(), fresh.parameters()):
        for field, value in optimizer.state[p].items():
            assert torch.equal(restored.state[q][field], value), field

    amsgrad = torch.optim.Adam(model.parameters(), amsgrad=True)
    model(torch.randn(4, 3)).sum().backward()
    amsgrad.step()
    with pytest.raises(loom.ConfigError, match="max_exp_avg_sq"):
        loom.checkpoint.save(tmp_path / "ams", 1, model=model, optimizer=amsgrad)


def test_save_returns_on_every_rank_once_committed_blocking_or_not(tmp_path):
    # Rank 0's writes pause halfway: a rank that returned before the commit would load nothing.
    script = os.path.join(os.path.dirname(__file__), "scripts", "save_then_load.py")
    result = subprocess.run(
        [loom_binary(), "launch", "--nproc-per-node", "2", "--", sys.executable, script,
         str(tmp_path)], capture_output=True, text=True,
        env={**os.environ, "LOOM_LOG_LEVEL": "warn", "LOOM_FAULT_SLOW_SAVE_MS": "300"})
    assert result.returncode == 0, result.stdout + result.stderr
    checkpoints = tmp_path / "checkpoints"
    for rank in (0, 1):
        seen = json.load(open(tmp_path / f"rank{rank}.json"))
        assert seen["blocking_loaded_step"] == 1 and seen["blocking_same"], seen
        assert seen["background_loaded_step"] == 2, seen
        # What was written is the state at save(), not the step trained after it.
        assert seen["background_holds_the_copy"], seen
        if rank == 0:
            assert seen["blocking_path"] == str(checkpoints / "step-00000001"), seen
            assert seen["background_path"] == str(checkpoints / "step-00000002"), seen
            assert not seen["done_at_once"], seen
            assert seen["background_seconds"] >= 0.3, seen
            assert seen["blocked_seconds"] < seen["background_seconds"], seen
        else:
            assert seen["blocking_path"] is None and seen["background_path"] is None, seen
            assert seen["done_at_once"] and seen["background_seconds"] is None, seen
    # The save left in flight was committed before the process exited.
    assert (checkpoints / "latest").read_text() == "step-00000003\n"


def test_a_background_save_is_a_handle_and_reuses_its_buffers(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    checkpoints = tmp_path / "ck"
    for step in (1, 2, 3):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()
        expected = {name: t.detach().clone() for name, t in model.state_dict().items()}
        pending = loom.checkpoint.save(checkpoints, step, model=model, optimizer=optimizer,
                                       blocking=False)
        assert pending.step == step
        with torch.no_grad():
            model.weight.add_(1.0)  # changed in place at once: the copy is what is written
        assert pending.wait() == str(checkpoints / f"step-0000000{step}")
        assert pending.done() and pending.background_seconds > 0
        assert pending.wait() == str(checkpoints / f"step-0000000{step}")  # again: the same
        fresh = torch.nn.Linear(3, 2)
        restored = torch.optim.AdamW(fresh.parameters(), lr=0.1)
        assert loom.checkpoint.load(checkpoints, model=fresh, optimizer=restored)["step"] == step
        assert_bit_identical(fresh.state_dict(), expected)
        for p, q in zip(model.parameters(), fresh.parameters()):
            assert torch.equal(restored.state[q]["exp_avg"], optimizer.state[p]["exp_avg"])
    writer = loom.checkpoint._writers[(os.path.abspath(checkpoints), 3)]
    # Weight, bias, their 3 state fields each and the generator: allocated once, for step 1.
    assert writer.buffer_allocations == 9
    # A save into the directory waits for the one in flight; a blocking one returns its path.
    loom.checkpoint.save(checkpoints, 4, model=model, blocking=False)
    assert loom.checkpoint.save(checkpoints, 5, model=model) == str(checkpoints / "step-00000005")
    assert sorted(os.listdir(checkpoints)) == ["latest", "step-00000003", "step-00000004",
                                               "step-00000005"]
    # A copy that fails is raised by wait() with its own type, once the ranks agreed (so that a
    # job's collectives stay in step), and the previous checkpoint stands.
    stranger = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1, momentum=0.9)
    stranger.param_groups[0]["params"][0].grad = torch.ones(2)
    stranger.step()
    failed = loom.checkpoint.save(checkpoints, 6, model=model, optimizer=stranger, blocking=False)
    with pytest.raises(loom.ConfigError) as raised:
        failed.wait()
    assert raised.value.fields["problem"] == "foreign_parameter"
    assert (checkpoints / "latest").read_text().strip() == "step-00000005"


def test_a_rank_killed_under_max_restarts_ends_bit_identical(tmp_path, uninterrupted):
    # Rank 1 dies right after step 3's checkpoint; the launcher restarts both ranks, which
    # resume from it by themselves.
    restarted = run_script(tmp_path / "restarted.pt", "--checkpoint", str(tmp_path / "ck"),
                           "--preemptible", ranks=2, launch=("--max-restarts", "1"),
                           env={"LOOM_FAULT_KILL_RANK_AFTER_STEP": "1:3"})
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert "rank 1" in restarted.stderr and "SIGKILL" in restarted.stderr, restarted.stderr
    # The second attempt went on from step 3's checkpoint, not from the start.
    output = restarted.stdout + restarted.stderr
    assert "rank 0: resumed_from=3" in output and "rank 1: resumed_from=3" in output
    assert_bit_identical(torch.load(tmp_path / "restarted.pt"), uninterrupted)


def test_a_sigterm_stops_every_rank_resumably(tmp_path, uninterrupted):
    checkpoints = tmp_path / "ck"
    # SIGTERM reaches rank 1 alone during step 3 (index 2): both ranks stop after it.
    stopped = run_script(tmp_path / "stopped.pt", "--checkpoint", str(checkpoints),
                         "--preemptible", "--sigterm-at", "2", ranks=2)
    assert stopped.returncode == loom.PREEMPTED == 75, stopped.stdout + stopped.stderr
    assert (checkpoints / "latest").read_text().strip() == "step-00000003"
    resumed = run_script(tmp_path / "resumed.pt", "--checkpoint", str(checkpoints), "--resume",
                         "--preemptible", ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed_from=3" in resumed.stdout + resumed.stderr
    assert_bit_identical(torch.load(tmp_path / "resumed.pt"), uninterrupted)


def test_the_watchdog_names_a_python_rank_that_hangs(tmp_path):
    # Rank 1 stops itself (SIGSTOP) after step 3; rank 0 waits for it in should_stop(3).
    result = run_script(tmp_path / "hung.pt", "--preemptible", "--stall-timeout", "3", ranks=2,
                        launch=("--grace", "2"),
                        env={"LOOM_FAULT_FREEZE_RANK_AFTER_STEP": "1:3"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("rank 0 made no progress for 3.0 s (train.stall_timeout_s), in comm_exposed of "
            "step 3") in result.stderr, result.stderr
    # Named as silent: with its pid when its first heartbeat went out before it froze, as never
    # heard from when it froze first (its watchdog starts with its first should_stop()).
    assert "not heard from rank 1" in result.stderr, result.stderr
    assert "loom launch: stall watchdog: rank 0 made no progress" in result.stderr


def test_loom_train_goes_on_from_a_python_checkpoint(tmp_path):
    """A script trains 3 steps of a TorchScript module data parallel and commits a checkpoint;
    `loom train --resume` trains the epoch's 5 other steps from it and ends where `loom train`
    alone ends."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.Tanh(),
                                 torch.nn.Linear(32, 4))
    save_torchscript(module, tmp_path / "model.pt")
    config_path = synthetic_sgd_config(
        tmp_path, seed=3, model={"name": "torchscript", "torchscript": str(tmp_path / "model.pt")})

    def loom_train(run, *flags):
        result = subprocess.run(
            [loom_binary(), "launch", "--nproc-per-node", "2", "--", loom_binary(), "train",
             str(config_path), "--out", str(run), *flags],
            capture_output=True, text=True, env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
        assert result.returncode == 0, result.stdout + result.stderr
        with open(run / "summary.json") as f:
            return json.load(f)

    alone = loom_train(tmp_path / "alone")
    handoff = tmp_path / "handoff"
    script = os.path.join(os.path.dirname(SCRIPT), "handoff.py")
    first = subprocess.run([loom_binary(), "launch", "--nproc-per-node", "2", "--",
                            sys.executable, script, str(config_path),
                            str(handoff / "checkpoints"), "3"],
                           capture_output=True, text=True,
                           env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
    assert first.returncode == 0, first.stdout + first.stderr
    resumed = loom_train(handoff, "--resume")
    assert alone["steps"] == 8 and resumed["steps"] == 8
    assert resumed["resumed_from_step"] == 3

    def final(run):
        newest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
        return read_safetensors(newest / "model.safetensors")

    expected, got = final(tmp_path / "alone"), final(handoff)
    assert got.keys() == expected.keys()
    assert_same_parameters(got, expected)


def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path):
    checkpoints = str(tmp_path / "checkpoints")
    result = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "x.pt"), "--checkpoint",
                             checkpoints], capture_output=True, text=True,
                            env={**os.environ, "LOOM_FAULT_KILL_IN_SAVE": "4"})
    assert result.returncode == -9, result.stderr  # SIGKILL halfway through step 4's save
    model = two_heads_model()
    state = loom.checkpoint.load(checkpoints, model=model)
    assert state["step"] == 3
    assert state["extra"] == {"script": "two_heads"}
