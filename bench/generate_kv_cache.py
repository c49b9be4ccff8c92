#!/usr/bin/env python3
"""`loom generate` with its KV cache against running the whole window again for every token
(--no-cache), for a GPT and a Llama of the same size, side by side in one run: tokens a second
of decoding (the model's load and the tokenizer left out: decode_seconds), medians of R runs,
and the ratio. Both draw the same tokens (greedy). The models train 2 steps on the Jargon File
first: generation needs a run's checkpoint, and its speed does not depend on what it learned.

Usage: bench/generate_kv_cache.py [--loom build/bin/loom] [--repeats R] [--tokens N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from jargon_tokens import jargon_tokens

HERE = os.path.dirname(os.path.abspath(__file__))

# 6 layers, 384 wide, context 256 (nanoGPT's Shakespeare size), each family's own layers.
MODELS = {
    "gpt": ["--set", "model=gpt", "--set", "model.gpt.preset=gpt_mini",
            "--set", "model.gpt.dropout=0"],
    "llama": ["--set", "model=llama", "--set", "model.llama.n_layer=6",
              "--set", "model.llama.n_embd=384", "--set", "model.llama.n_head=6",
              "--set", "model.llama.n_kv_head=2", "--set", "model.llama.hidden=1024"],
}


def trained(loom, data, model, out):
    subprocess.run([loom, "train", "--out", out, "--set", "data=tokens", "--set",
                    f"data.path={data}", "--set", "data.seq_len=256", "--set",
                    "data.batch_size=2", "--set", "train.max_steps=2", "--set", "train.eval=false",
                    "--set", "schedule.warmup_steps=0", "--set", "runtime.precision=fp32",
                    *MODELS[model]],
                   check=True, stdout=subprocess.DEVNULL)


def tokens_per_second(loom, run, tokens, cache):
    out = subprocess.run([loom, "generate", run, "--prompt", "The hacker", "--tokens",
                          str(tokens), "--temperature", "0", "--ignore-eos", "--json",
                          *([] if cache else ["--no-cache"])],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return len(result["tokens"]) / result["decode_seconds"], result["tokens"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tokens", type=int, default=200)
    a = p.parse_args()
    with jargon_tokens(a.loom) as data, tempfile.TemporaryDirectory() as tmp:
        if data is None:
            return 0
        print(f"{'model':6} {'cached tok/s':>13} {'recomputed tok/s':>17} {'ratio':>6}")
        for model in MODELS:
            run = os.path.join(tmp, model)
            trained(a.loom, data, model, run)
            seen = {True: [], False: []}
            drawn = {}
            for _ in range(a.repeats):
                for cache in seen:
                    rate, ids = tokens_per_second(a.loom, run, a.tokens, cache)
                    seen[cache].append(rate)
                    drawn[cache] = ids
            if drawn[True] != drawn[False]:
                print(f"{model}: the cache drew other tokens than recomputing", file=sys.stderr)
                return 1
            cached, recomputed = (statistics.median(seen[c]) for c in (True, False))
            print(f"{model:6} {cached:13.1f} {recomputed:17.1f} {cached / recomputed:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
