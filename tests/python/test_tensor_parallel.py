"""loom.parallel.TensorParallel on a user's own transformer blocks, on real processes started by
`loom launch`: two ranks, each holding its slices of the fused query/key/value, projection and
MLP linears, end with the parameters of one process on the same batches; the whole state dict
moves from one process into the slices and back; loom.checkpoint writes what one process writes
and resumes across the two layouts; with 4 ranks, two data-parallel replicas of a tensor group of
2 (loom.parallel.DataParallel around the TensorParallel, under ZeRO) do the same; a plan that
cannot be done names its entry. Hugging Face's own LlamaForCausalLM, split by a plan kept outside
it, trains like one process too."""
import collections
import os
import subprocess
import sys

import pytest
import torch

import loom

from conftest import loom_binary, loom_errors, read_safetensors

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "tp_blocks.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import tp_blocks  # noqa: E402  (the script's model, to load its state dict in this process)


def run_script(out, *flags, ranks=2):
    command = [sys.executable, SCRIPT, str(out), *flags]
    if ranks > 1:
        command = [loom_binary(), "launch", "--nproc-per-node", str(ranks), "--", *command]
    return subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "LOOM_LOG_LEVEL": "warn"})


def trained(out, *flags, ranks=2):
    result = run_script(out, *flags, ranks=ranks)
    assert result.returncode == 0, result.stdout + result.stderr
    return torch.load(out)


def assert_close(got, expected, atol):
    assert list(got) == list(expected)
    for name, tensor in got.items():
        assert tensor.shape == expected[name].shape, name
        error = (tensor - expected[name]).abs().max().item()
        assert error <= atol, f"{name}: off by {error:.3g}"


# A run's OUT and the folder of the loom.checkpoint it saved after step 2 (of 4).
Saved = collections.namedtuple("Saved", "out checkpoints")


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("one") / "one.pt", ranks=1)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """TP=2, 4 steps, a background loom.checkpoint after step 2."""
    folder = tmp_path_factory.mktemp("two")
    out = trained(folder / "two.pt", "--save-at", "2", str(folder / "checkpoints"),
                  "--background")
    return Saved(out, folder / "checkpoints")


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The module unsplit in one process, no TensorParallel: 4 steps, a loom.checkpoint after
    step 2."""
    folder = tmp_path_factory.mktemp("plain")
    out = trained(folder / "plain.pt", "--plain", "--save-at", "2", str(folder / "checkpoints"),
                  ranks=1)
    return Saved(out, folder / "checkpoints")


def test_two_tensor_ranks_train_like_one_process(two_ranks, one_process):
    split = two_ranks.out
    assert_close(split["state"], one_process["state"], 1e-5)
    assert_close({"eval": split["eval"]}, {"eval": one_process["eval"]}, 1e-5)
    # The whole tensors under the module's own names: a plain model loads them, and training
    # moved them.
    torch.manual_seed(0)
    plain = tp_blocks.Model()
    untrained = {k: v.clone() for k, v in plain.state_dict().items()}
    plain.load_state_dict(split["state"])
    assert not torch.allclose(untrained["blocks.0.attn.qkv.weight"],
                              plain.blocks[0].attn.qkv.weight)
    x, _ = next(tp_blocks.batches(1))
    with torch.no_grad():
        assert torch.allclose(plain(x), one_process["eval"], atol=1e-5)


def committed(checkpoints):
    """{file: {name: tensor}} of the checkpoint `latest` names in `checkpoints`."""
    with open(checkpoints / "latest") as f:
        step = checkpoints / f.read().strip()
    return {file: read_safetensors(step / file)
            for file in ("model.safetensors", "state.safetensors")}


def test_a_tensor_parallel_checkpoint_holds_what_one_process_writes(two_ranks, plain):
    split, whole = committed(two_ranks.checkpoints), committed(plain.checkpoints)
    assert list(split["model.safetensors"]["blocks.0.attn.qkv.weight"].shape) == [48, 16]
    assert list(split["state.safetensors"][
        "optimizer/blocks.1.mlp.out.weight.momentum_buffer"].shape) == [16, 32]
    for file, tensors in whole.items():
        assert ({name: (t.dtype, list(t.shape)) for name, t in split[file].items()}
                == {name: (t.dtype, list(t.shape)) for name, t in tensors.items()}), file
        # the same values at step 2: the slices and their momentum put together in order
        assert_close({name: t for name, t in split[file].items() if t.is_floating_point()},
                     {name: t for name, t in tensors.items() if t.is_floating_point()}, 1e-5)


def test_one_process_resumes_a_tensor_parallel_checkpoint(tmp_path, two_ranks, plain):
    resumed = trained(tmp_path / "resumed.pt", "--plain", "--resume", str(two_ranks.checkpoints),
                      ranks=1)
    assert_close(resumed["state"], plain.out["state"], 1e-5)


def test_tensor_ranks_resume_a_one_process_checkpoint(tmp_path, plain):
    resumed = trained(tmp_path / "resumed.pt", "--resume", str(plain.checkpoints))
    assert_close(resumed["state"], plain.out["state"], 1e-5)
    assert_close({"eval": resumed["eval"]}, {"eval": plain.out["eval"]}, 1e-5)


def test_a_whole_state_dict_loads_into_the_slices(tmp_path, one_process):
    source = tmp_path / "one.pt"
    torch.save(one_process, source)
    loaded = trained(tmp_path / "loaded.pt", "--load", str(source), "--steps", "0")
    for name, tensor in loaded["state"].items():
        assert torch.equal(tensor, one_process["state"][name]), name
    assert_close({"eval": loaded["eval"]}, {"eval": one_process["eval"]}, 1e-5)


@pytest.fixture(scope="module")
def tensor_by_data(tmp_path_factory):
    """4 ranks as 2 data-parallel replicas (ZeRO-1) of a tensor group of 2: 4 steps, a
    loom.checkpoint after step 2."""
    folder = tmp_path_factory.mktemp("tensor_by_data")
    out = trained(folder / "tp_dp.pt", "--tensor", "2", "--zero", "1", "--save-at", "2",
                  str(folder / "checkpoints"), ranks=4)
    return Saved(out, folder / "checkpoints")


def test_replicas_of_a_tensor_group_under_zero_train_like_one_process(tensor_by_data,
                                                                      one_process):
    # Each replica trains on half of every batch: without the replicas' exchange the state
    # would be that of half the batches.
    assert_close(tensor_by_data.out["state"], one_process["state"], 1e-5)
    assert_close({"eval": tensor_by_data.out["eval"]}, {"eval": one_process["eval"]}, 1e-5)


def test_a_tensor_by_data_checkpoint_holds_what_one_process_writes(tensor_by_data, plain):
    split, whole = committed(tensor_by_data.checkpoints), committed(plain.checkpoints)
    for file, tensors in whole.items():
        assert ({name: (t.dtype, list(t.shape)) for name, t in split[file].items()}
                == {name: (t.dtype, list(t.shape)) for name, t in tensors.items()}), file
        # the slices' ZeRO shards of momentum, put together (in the buckets' order)
        assert_close({name: t for name, t in sorted(split[file].items()) if t.is_floating_point()},
                     {name: t for name, t in sorted(tensors.items()) if t.is_floating_point()},
                     1e-5)


def test_replicas_of_a_tensor_group_under_zero_3_resume_a_one_process_checkpoint(tmp_path,
                                                                                 plain):
    resumed = trained(tmp_path / "resumed.pt", "--tensor", "2", "--zero", "3", "--resume",
                      str(plain.checkpoints), ranks=4)
    assert_close(resumed["state"], plain.out["state"], 1e-5)
    assert_close({"eval": resumed["eval"]}, {"eval": plain.out["eval"]}, 1e-5)


def test_a_dimension_the_ranks_cannot_split_names_the_plan_entry(tmp_path):
    result = run_script(tmp_path / "bad.pt", "--plan-head")
    assert result.returncode != 0
    errors = loom_errors(result.stderr)
    assert errors, result.stderr  # each rank that got to say it names it
    for error in errors:
        assert error["kind"] == "ConfigError", error
        assert (error["fields"]["key"], error["fields"]["pattern"]) == ("plan", "head"), error
        assert error["fields"]["problem"] == "indivisible", error


def model_in_this_process():
    loom.distributed.init()
    torch.manual_seed(0)
    return tp_blocks.Model()


@pytest.mark.parametrize("plan, fields", [
    ({"blocks.*.attn.qkv": "colwise", "blocks.*.attn.wq": "colwise"},
     {"pattern": "blocks.*.attn.wq", "problem": "no_match"}),
    ({"blocks.0.norm1": "rowwise"},
     {"pattern": "blocks.0.norm1", "module": "blocks.0.norm1", "value": "LayerNorm"}),
    ({"blocks.*.mlp.fc": "diagonal"},
     {"pattern": "blocks.*.mlp.fc", "problem": "style", "value": "diagonal"}),
    ({"blocks.*.mlp.*": "colwise", "blocks.0.mlp.out": "rowwise"},
     {"pattern": "blocks.0.mlp.out", "planned_by": "blocks.*.mlp.*"}),
    ({"head": loom.parallel.ColwiseParallel(sections=3)},
     {"pattern": "head", "tensor": "head.weight", "problem": "indivisible"}),
])
def test_a_plan_that_cannot_be_done_names_its_entry(plan, fields):
    model = model_in_this_process()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(loom.ConfigError) as raised:
        loom.parallel.TensorParallel(model, plan)
    assert raised.value.key == "plan"
    assert {k: raised.value.fields.get(k) for k in fields} == fields, raised.value.fields
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name  # nothing was cut


def test_divide_names_an_attribute_that_is_not_a_count():
    model = model_in_this_process()
    with pytest.raises(loom.ConfigError) as raised:
        loom.parallel.TensorParallel(model, tp_blocks.PLAN, divide={"blocks.*.attn.heads"})
    assert (raised.value.key, raised.value.fields["pattern"]) == ("divide", "blocks.*.attn.heads")
    model.blocks[0].attn.n_head = 4.0
    with pytest.raises(loom.ConfigError) as raised:
        loom.parallel.TensorParallel(model, tp_blocks.PLAN, divide={"blocks.*.attn.n_head"})
    assert raised.value.fields["attribute"] == "blocks.0.attn.n_head"
    assert raised.value.fields["problem"] == "not_an_int"


def test_a_tensor_group_larger_than_the_job_is_refused():
    with pytest.raises(loom.ConfigError) as raised:
        loom.parallel.TensorParallel(model_in_this_process(), tp_blocks.PLAN, tensor=2)
    assert raised.value.key == "tensor"
    assert (raised.value.fields["value"], raised.value.fields["ranks"]) == ("2", "1")


def test_a_process_alone_is_a_tensor_group_of_one():
    model = loom.parallel.TensorParallel(model_in_this_process(), tp_blocks.PLAN,
                                         divide={"blocks.*.attn.n_head"})
    assert (model.tensor_rank, model.tensor_ranks) == (0, 1)
    assert model.plan["blocks.0.attn.qkv"] == loom.parallel.ColwiseParallel(sections=3)
    assert model.plan["blocks.1.mlp.out"] == loom.parallel.RowwiseParallel()
    assert "tensor parallel over 1 rank" in repr(model)  # what print(model) shows a user
    with pytest.raises(loom.DataError) as raised:
        state = model.full_state_dict()
        state["head.weight"] = torch.zeros(3, 16)
        model.load_full_state_dict(state)
    assert raised.value.fields == {"tensor": "head.weight", "problem": "shape", "value": "[3, 16]",
                                   "expected": "[5, 16]"}


def test_a_module_split_in_place_stays_known_without_its_wrapper():
    # A script may keep only the module it split: loom.checkpoint must still find the split
    # (else rank 0 would write its slices under the whole tensors' names).
    import gc
    from loom.tensor_parallel import split_by
    module = model_in_this_process()
    names = list(module.state_dict())
    loom.parallel.TensorParallel(module, tp_blocks.PLAN, divide={"blocks.*.attn.n_head"})
    gc.collect()
    split = split_by(module)
    assert split is not None and split.module is module
    assert list(module.state_dict()) == names  # no submodule added


def test_a_checkpoint_tensor_that_does_not_fit_is_named(tmp_path):
    # A checkpoint of a plain module whose MLP is twice as wide, then of one whose momentum of a
    # cut weight has the wrong shape: loading into the split module names the tensor.
    wide = model_in_this_process()
    wide.blocks[0].mlp.fc = torch.nn.Linear(tp_blocks.DIM, 2 * tp_blocks.HIDDEN)
    loom.checkpoint.save(tmp_path / "wide", 1, model=wide)
    model = loom.parallel.TensorParallel(model_in_this_process(), tp_blocks.PLAN,
                                         divide={"blocks.*.attn.n_head"})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(loom.DataError) as raised:
        loom.checkpoint.load(tmp_path / "wide", model=model, optimizer=optimizer)
    assert raised.value.fields["tensor"] == "blocks.0.mlp.fc.weight"
    assert (raised.value.fields["value"], raised.value.fields["expected"]) == ("[64, 16]",
                                                                               "[32, 16]")

    plain = model_in_this_process()
    plain_optimizer = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    plain_optimizer.state[plain.blocks[1].attn.qkv.weight]["momentum_buffer"] = torch.zeros(3, 16)
    loom.checkpoint.save(tmp_path / "momentum", 1, model=plain, optimizer=plain_optimizer)
    with pytest.raises(loom.DataError) as raised:
        loom.checkpoint.load(tmp_path / "momentum", model=model.module, optimizer=optimizer)
    assert raised.value.fields["tensor"] == "blocks.1.attn.qkv.weight.momentum_buffer"
    assert raised.value.fields["value"] == "[3, 16]"


HF_LLAMA = os.path.join(os.path.dirname(__file__), "scripts", "hf_llama_tp.py")


def test_hugging_faces_llama_split_by_a_plan_trains_like_one_process(tmp_path):
    pytest.importorskip("transformers")
    runs = {}
    for name, command in (("one", [sys.executable, HF_LLAMA, str(tmp_path / "one.pt"), "--plain"]),
                          ("two", [loom_binary(), "launch", "--nproc-per-node", "2", "--",
                                   sys.executable, HF_LLAMA, str(tmp_path / "two.pt")])):
        result = subprocess.run(command, capture_output=True, text=True,
                                env={**os.environ, "LOOM_LOG_LEVEL": "warn"})
        assert result.returncode == 0, result.stdout + result.stderr
        runs[name] = torch.load(tmp_path / f"{name}.pt")
    assert_close(runs["two"]["state"], runs["one"]["state"], atol=1e-5)
    assert (runs["two"]["logits"] - runs["one"]["logits"]).abs().max().item() <= 1e-5
