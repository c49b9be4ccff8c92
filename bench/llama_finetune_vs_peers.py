#!/usr/bin/env python3
"""Fine-tuning a pretrained Llama with `loom train` (model.pretrained, and model.lora) against
the same fine-tune in a transformers (+ peft) loop (bench/peers/hf_finetune.py: SDPA, fused
AdamW) and in torchtune's own single-device recipes (bench/peers/torchtune_finetune.py), side
by side in one run: the same folder (a random Llama transformers makes here, at llama_tiny's
shape or with --shape 1b Llama 3.2 1B's layers, and the corpus's vocabulary of 4000), the Jargon
File in the same tokens (Loom's
tokenizer of it, which torchtune reads as a Llama 2 SentencePiece model), windows of the same
length, batch, steps, fp32 and threads. Prints median tokens/s, Loom's ratio to each peer
(target >= 1.3 on CPUs, issue 53) and the optimizer state's bytes (target: LoRA's <= 2% of a
full fine-tune's). With --compile, each peer runs a second time with torch.compile (inductor;
its compiling steps are not timed), and Loom's ratio to its better run is printed.

Usage: bench/llama_finetune_vs_peers.py [--loom build/bin/loom] [--repeats R] [--steps N]
                                        [--shape tiny|1b] [--layers L] [--compile]
"""
import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

from jargon_tokens import JARGON, jargon_tokens

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = os.path.join(HERE, "peers", "hf_finetune.py")
TORCHTUNE = os.path.join(HERE, "peers", "torchtune_finetune.py")
SEQ, BATCH, RANK = 128, 8, 8


# (hidden, MLP, layers, query heads, key/value heads): llama_tiny's, and Llama 3.2 1B's layer
# (its 16 layers cut to --layers: a CPU step of all 16 takes minutes).
SHAPES = {"tiny": (128, 384, 4, 4, 2), "1b": (2048, 8192, 16, 32, 8)}


def make_folder(out, shape, layers):
    """A random LlamaForCausalLM of `shape` with a vocabulary of 4000 (the corpus's tokenizer's),
    tied, saved as a Hugging Face folder."""
    hidden, mlp, depth, heads, kv_heads = SHAPES[shape]
    code = ("import sys, torch\n"
            "from transformers import LlamaConfig, LlamaForCausalLM\n"
            "torch.manual_seed(0)\n"
            f"LlamaForCausalLM(LlamaConfig(vocab_size=4000, hidden_size={hidden}, "
            f"intermediate_size={mlp}, num_hidden_layers={layers or depth}, "
            f"num_attention_heads={heads}, num_key_value_heads={kv_heads}, "
            "max_position_embeddings=512, tie_word_embeddings=True))"
            ".save_pretrained(sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, out], check=True, capture_output=True)


def run_loom(loom, folder, data, lora, steps):
    with tempfile.TemporaryDirectory() as out:
        cmd = [loom, "train", "--out", out, "--set", "data=tokens", "--set", f"data.path={data}",
               "--set", "model=llama", "--set", f"model.pretrained={folder}",
               "--set", f"data.seq_len={SEQ}", "--set", f"data.batch_size={BATCH}",
               "--set", f"train.max_steps={steps}", "--set", "train.eval=false",
               "--set", "checkpoint.enabled=false", "--set", "optimizer.name=adamw",
               "--set", "optimizer.lr=0.001", "--set", "optimizer.weight_decay=0",
               "--set", "schedule.warmup_steps=0", "--set", "train.grad_clip=1",
               "--set", "runtime.precision=fp32", "--set", "runtime.threads=2"]
        if lora:
            cmd += ["--set", f"model.lora.rank={RANK}", "--set", "model.lora.alpha=16",
                    "--set", "model.lora.targets=layers.*.self_attn.q_proj,"
                                 "layers.*.self_attn.v_proj"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
    return s["tokens_per_second"], s["memory"]["optimizer_state_bytes"]


def run_script(script, args, lora, steps, compiled):
    """One peer's run: its script with the shared window, batch, steps and threads; the JSON
    object it prints last."""
    cmd = [sys.executable, script, *args, "--seq-len", str(SEQ), "--batch", str(BATCH),
           "--steps", str(steps), "--threads", "2"]
    if lora:
        cmd += ["--lora", str(RANK)]
    if compiled:
        cmd.append("--compile")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_peer(folder, data, lora, steps, compiled):
    s = run_script(PEER, ["--model", folder, "--data", data], lora, steps, compiled)
    return s["tokens_per_second"], s["optimizer_state_bytes"]


def run_torchtune(folder, data, text, lora, steps, compiled):
    args = ["--model", folder, "--tokenizer", os.path.join(data, "tokenizer.model"),
            "--text", text]
    return run_script(TORCHTUNE, args, lora, steps, compiled)["tokens_per_second"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    p.add_argument("--layers", type=int, default=0, help="layers of the shape to keep (0: all)")
    p.add_argument("--compile", action="store_true",
                   help="also run each peer with torch.compile (inductor)")
    a = p.parse_args()
    modes = (False, True) if a.compile else (False,)
    with jargon_tokens(a.loom) as data, tempfile.TemporaryDirectory() as tmp:
        if data is None:
            return 0
        folder = os.path.join(tmp, "llama")
        make_folder(folder, a.shape, a.layers)
        text = os.path.join(tmp, "jargon.txt")
        with gzip.open(JARGON, "rb") as src, open(text, "wb") as dst:
            dst.write(src.read())
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
              f"shape {a.shape} ({SHAPES[a.shape]}, layers {a.layers or SHAPES[a.shape][2]}), "
              f"vocabulary 4000, {SEQ} tokens x {BATCH}, {a.steps} steps, fp32; "
              f"medians of {a.repeats} interleaved runs")
        peers = [("hf", run_peer), ("tune", run_torchtune)]
        columns = [f"{name}{'+c' if compiled else ''}" for name, _ in peers for compiled in modes]
        print(f"{'fine-tune':10} {'loom tok/s':>11} "
              + " ".join(f"{c + ' tok/s':>11} {'ratio':>6}" for c in columns)
              + f" {'best':>6} {'loom state B':>13} {'hf state B':>11}")
        for lora in (False, True):
            loom_rates, peer_rates = [], {c: [] for c in columns}
            for _ in range(a.repeats):
                rate, loom_state = run_loom(a.loom, folder, data, lora, a.steps)
                loom_rates.append(rate)
                for compiled in modes:
                    suffix = "+c" if compiled else ""
                    rate, peer_state = run_peer(folder, data, lora, a.steps, compiled)
                    peer_rates["hf" + suffix].append(rate)
                    peer_rates["tune" + suffix].append(
                        run_torchtune(folder, data, text, lora, a.steps, compiled))
            lm = statistics.median(loom_rates)
            medians = {c: statistics.median(r) for c, r in peer_rates.items()}
            print(f"{'lora' if lora else 'full':10} {lm:11.0f} "
                  + " ".join(f"{medians[c]:11.0f} {lm / medians[c]:6.2f}" for c in columns)
                  + f" {lm / max(medians.values()):6.2f} {loom_state:13.0f} {peer_state:11.0f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
