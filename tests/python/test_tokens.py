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


# Llama 3's pre-tokenizer expression (its tokenizer.json's Split pattern).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Text a byte-level BPE must split as the tokenizers library does: contractions in both cases,
# runs of spaces, tabs and line breaks, digits (Llama 3 takes three at a time), accents, CJK, an
# emoji (four UTF-8 bytes), an added token inside text, and the empty text.
HARD_TEXTS = [
    "Hello  world\n\n  tabs\tand  spaces ", "don't you'll I'M THEY'RE we'Ve", "café naïve Ünïcödé",
    "日本語のテキスト", "robot 🤖 says hi", "12345 3.14159 1,000,000", "a<|endoftext|>b <|end_of_text|>",
    "trailing   ", "   leading", "\n", "", "x\r\ny", "!!!??? ... --- ***",
]


def hugging_face_tokenizer(out, jargon_lines, llama3):
    """A byte-level BPE tokenizer trained on the Jargon File with the tokenizers library, GPT-2's
    pre-tokenizer or Llama 3's (a Split expression, ignore_merges), saved by transformers."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    if llama3:
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        specials = ["<|endoftext|>"]
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(jargon_lines, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=specials[-1]).save_pretrained(out)
    return out


@pytest.mark.parametrize("llama3", [False, True], ids=["gpt2", "llama3"])
def test_hugging_face_tokenizer_json_gives_transformers_ids(tmp_path, llama3):
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    if not os.path.exists(JARGON):
        pytest.skip(f"{JARGON} missing (jargon-text)")
    import gzip
    with gzip.open(JARGON, "rt", encoding="utf-8", errors="replace") as f:
        lines = [line.rstrip("\n") for line in f][:6000]
    model = hugging_face_tokenizer(tmp_path / "model", lines, llama3)
    theirs = transformers.AutoTokenizer.from_pretrained(str(model))
    ours = loom.data.Tokenizer(str(model / "tokenizer.json"))
    assert ours.vocab_size == len(theirs)
    assert ours.eos_id == theirs.eos_token_id
    for text in HARD_TEXTS + lines[::7]:
        ids = theirs.encode(text, add_special_tokens=False)
        assert ours.encode(text) == ids, repr(text)
        assert ours.decode(ids) == text, repr(text)
        assert theirs.decode(ids, clean_up_tokenization_spaces=False) == text, repr(text)

    # `loom data tokenize --tokenizer DIR` writes each paragraph's ids and the end-of-text.
    paragraphs = [" ".join(lines[i:i + 3]).strip() for i in range(0, 600, 3)]
    paragraphs = [p for p in paragraphs if p]
    (tmp_path / "corpus.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    run_loom("data", "tokenize", str(tmp_path / "corpus.txt"), "--tokenizer", str(model),
             "--out", str(tmp_path / "tok"), "--val-fraction", "0")
    vocab, fingerprint, tokens = read_shard(tmp_path / "tok" / "train-00000.tokens")
    expected = []
    for paragraph in paragraphs:
        expected += theirs.encode(paragraph, add_special_tokens=False) + [theirs.eos_token_id]
    assert vocab == len(theirs) and tokens.tolist() == expected
    assert (tmp_path / "tok" / "tokenizer.json").exists()
