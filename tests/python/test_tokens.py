"""loom.data.Tokenizer and loom.data.TokenWindows on a `loom data tokenize` folder of the Jargon
File (Debian's jargon-text): the windows are the shards' own tokens, read back independently."""
import os
import struct

import pytest
import torch

import loom

from conftest import run_loom

JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    if not os.path.exists(JARGON):
        pytest.skip(f"{JARGON} missing (jargon-text)")
    out = tmp_path_factory.mktemp("jargon")
    run_loom("data", "tokenize", JARGON, "--out", str(out), "--vocab-size", "500")
    return out


def read_shard(path):
    """A token shard's header and tokens, by the format of docs/formats.md."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"LOOMTOKS"
    version, width, vocab, count, fingerprint = struct.unpack("<IIQQQ", data[8:40])
    assert version == 1 and width == 2
    tokens = torch.frombuffer(bytearray(data[64:]), dtype=torch.int16).to(torch.int64) & 0xFFFF
    assert tokens.numel() == count
    return vocab, fingerprint, tokens


def test_windows_are_the_shards_tokens(folder):
    tokenizer = loom.data.Tokenizer(str(folder / "tokenizer.model"))
    assert tokenizer.vocab_size == 500
    vocab, fingerprint, tokens = read_shard(folder / "train-00000.tokens")
    assert vocab == 500 and f"{fingerprint:016x}" == tokenizer.fingerprint
    windows = loom.data.TokenWindows(str(folder), "train", seq_len=32, seed=3)
    assert windows.tokens == tokens.numel() and windows.vocab_size == 500
    assert len(windows) == (tokens.numel() - 32) // 32
    batch = windows.batch(0, 0, 4)
    assert batch.dtype == torch.int64 and batch.shape == (4, 33)
    text = tokens.tolist()
    for row in batch.tolist():
        # Somewhere in the shard, 33 tokens in a row.
        starts = [i for i in range(len(text) - 32) if text[i:i + 33] == row]
        assert starts, row
    # Text in, the same text out (SentencePiece keeps words, collapses spaces).
    ids = tokenizer.encode("Hackers say foo and bar.")
    assert tokenizer.decode(ids) == "Hackers say foo and bar."
    # Two ranks split the epoch; the same arguments give the same batch.
    halves = [loom.data.TokenWindows(str(folder), "train", seq_len=32, seed=3, rank=r, world=2)
              for r in range(2)]
    assert len(halves[0]) == len(halves[1]) == len(windows) // 2
    fresh = loom.data.TokenWindows(str(folder), "train", seq_len=32, seed=3, rank=1, world=2)
    assert torch.equal(fresh.batch(2, 1, 3), halves[1].batch(2, 1, 3))
    assert not torch.equal(halves[0].batch(0, 0, 3), halves[1].batch(0, 0, 3))


def test_a_folder_without_shards_is_named(tmp_path, folder):
    with pytest.raises(loom.DataError) as raised:
        loom.data.TokenWindows(str(tmp_path), "train", seq_len=8)
    assert raised.value.fields == {"path": str(tmp_path), "problem": "tokenizer"}
    with pytest.raises(loom.DataError) as raised:
        loom.data.TokenWindows(str(folder), "test", seq_len=8)
    assert raised.value.fields == {"path": str(folder), "problem": "no_shards", "split": "test"}


def test_the_loader_gives_token_windows_and_their_next_tokens(folder):
    config = {"data": {"source": "tokens", "path": str(folder), "seq_len": 16, "batch_size": 4}}
    loader = loom.data.Loader(config)
    inputs, targets = next(iter(loader))
    assert inputs.dtype == torch.int64 and inputs.shape == (4, 16)
    assert targets.shape == (4, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # the same window, shifted by one
    assert int(inputs.max()) < 500
    # The same windows as loom.data.TokenWindows reads for epoch 0.
    windows = loom.data.TokenWindows(str(folder), "train", seq_len=16, seed=0)
    first = windows.batch(0, 0, 4)
    assert torch.equal(first[:, :-1], inputs) and torch.equal(first[:, 1:], targets)


def test_steps_count_the_tokens_of_a_token_loader(tmp_path, folder):
    import json
    config = {"data": {"source": "tokens", "path": str(folder), "seq_len": 16, "batch_size": 4},
              "train": {"log_every": 2}}
    loader = loom.data.Loader(config)
    embedding = torch.nn.Embedding(500, 8)
    head = torch.nn.Linear(8, 500)
    model = torch.nn.Sequential(embedding, head)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with loom.profile.Steps(tmp_path / "run", loader=loader, model=model, optimizer=optimizer,
                            config=config, warmup_steps=1) as steps:
        for inputs, targets in steps.loop(loader):
            loss = torch.nn.functional.cross_entropy(model(inputs).view(-1, 500),
                                                     targets.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            steps.record(loss=loss)
            if steps.steps >= 6:
                break
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["tokens_per_sample"] == 16
    assert summary["tokens_per_second"] == pytest.approx(16 * summary["samples_per_second"])
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert any("tokens_per_second" in r for r in records if r["type"] == "step")
