"""torch.compile over loom.parallel.DataParallel: a user's own module, wrapped for data
parallelism and then compiled, as a user writes it

    model = torch.compile(loom.parallel.DataParallel(TwoHeads()))

trains on two real ranks (`loom launch`) like the uncompiled module in one process on the same
global batch. The backend is torch's default, inductor, which generates C++ kernels and builds
them with the machine's g++. Only the forward is compiled: Loom's gradient exchange starts from
C++ hooks on the parameters' gradient accumulators, which run after the compiled backward as
after an eager one; compiled autograd (which refuses such hooks) stays off, as it is by default.
"""
import json
import os
import shutil

import pytest
import torch

from conftest import assert_same_parameters, run_script, two_heads_model

# Inductor's kernels add and fuse in another order than eager ATen: the two agree to float32
# rounding, not bit for bit. Relative to each tensor's (or loss's) largest magnitude.
TOLERANCE = 1e-5


def records(out, ranks):
    return [json.load(open(f"{out}.record{rank}.json")) for rank in range(ranks)]


def test_compiled_data_parallel_trains_like_one_process(tmp_path):
    compiler = os.environ.get("CXX", "g++")  # the compiler inductor builds its kernels with
    if shutil.which(compiler) is None:
        pytest.skip(f"inductor needs a C++ compiler: no {compiler} (Debian: g++)")
    one = run_script(tmp_path / "one.pt", "--record")
    assert one.returncode == 0, one.stderr
    two = run_script(tmp_path / "two.pt", "--record", "--compile", "inductor", ranks=2)
    assert two.returncode == 0, two.stdout + two.stderr

    (reference,) = records(tmp_path / "one.pt", 1)
    compiled = records(tmp_path / "two.pt", 2)
    assert reference["compiled"]["unique_graphs"] == 0  # the reference ran eagerly
    for rank in compiled:
        # The module's forward ran as a compiled graph, through inductor, on every rank...
        assert rank["compiled"]["unique_graphs"] >= 1, rank
        assert rank["compiled"]["calls_captured"] >= 5, rank  # 3 linears, tanh, layer norm
        assert rank["compiled"]["inductor_graphs"] >= 1, rank
        # ...and its gradients were exchanged (the exchange's last step moved every parameter).
        assert rank["exchange"]["buckets"] >= 1 and rank["exchange"]["bytes"] > 0, rank

    # Each rank's loss is the mean over its half of the global batch: their mean is the loss of
    # the whole batch, which the one process computed.
    steps = len(reference["losses"])
    assert steps == 5 and all(len(rank["losses"]) == steps for rank in compiled)
    for step in range(steps):
        expected = reference["losses"][step]
        got = sum(rank["losses"][step] for rank in compiled) / 2
        assert abs(got - expected) <= TOLERANCE * abs(expected), (step, got, expected)

    parallel, alone = torch.load(tmp_path / "two.pt"), torch.load(tmp_path / "one.pt")
    assert parallel.keys() == alone.keys()
    assert_same_parameters(parallel, alone, TOLERANCE)
    # Training moved every parameter far beyond the tolerance: the comparison means something.
    torch.manual_seed(0)  # rank 0's start, which DataParallel gave every rank
    start = two_heads_model().state_dict()
    for name, tensor in alone.items():
        moved = (tensor - start[name]).abs().max() / tensor.abs().max()
        assert moved >= 100 * TOLERANCE, (name, float(moved))
