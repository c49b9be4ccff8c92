#!/usr/bin/env python3
"""The PyTorch peer of `loom train` on a GPT: nanoGPT's model and training loop as a user writes
them in Python with torch 2.x's best practice (the project environment's torch, whose LibTorch
Loom links), on the same token shards: attention through F.scaled_dot_product_attention
(is_causal: torch's fused kernels, flash attention on a GPU), AdamW with fused=True, and with
--compile the model through torch.compile (inductor; the first steps compile and are not timed).
--device cuda trains on the GPU as nanoGPT does there: batches pinned and copied without
waiting, the loss read only after the timed steps.

The loop: a batch of random windows from the memory-mapped shard (nanoGPT's get_batch), the
forward pass and loss under the device's autocast when bf16, backward, gradient clipping at 1,
AdamW, zero_grad(set_to_none). Prints one JSON object: tokens_per_second over the steady steps (the
first min(5, steps / 10) are warm-up and not timed, as in Loom's summary; with --compile at
least 3, so that compilation is never timed) and the settings.
"""
import argparse
import contextlib
import glob
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, seq_len):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (y.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, seq_len):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, seq_len)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq_len, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, seq_len) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" not in name:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied, as GPT-2
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def read_shard(path):
    """A Loom token shard (docs/formats.md): a 64-byte header, then the tokens, as int64. Read
    with torch alone: a lent GPU machine's environment has torch and nothing else."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"LOOMTOKS", path
    width = int.from_bytes(data[12:16], "little")
    vocab = int.from_bytes(data[16:24], "little")
    stored = torch.int16 if width == 2 else torch.int32  # torch's uint16/32 cannot widen
    signed = torch.frombuffer(bytearray(data[64:]), dtype=stored)
    return signed.to(torch.int64) & ((1 << (8 * width)) - 1), vocab


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="a `loom data tokenize` folder")
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--compile", action="store_true", help="torch.compile the model (inductor)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    device = torch.device(a.device)
    gpu = device.type == "cuda"
    tokens, vocab = read_shard(sorted(glob.glob(os.path.join(a.data, "train-*.tokens")))[0])
    model = GPT(vocab, a.seq_len, a.n_layer, a.n_head, a.n_embd).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if a.compile else model
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if a.precision == "bf16"
                else contextlib.nullcontext())
    rng = torch.Generator().manual_seed(0)

    def get_batch():
        starts = torch.randint(0, len(tokens) - a.seq_len - 1, (a.batch,), generator=rng)
        rows = torch.stack([tokens[s:s + a.seq_len + 1] for s in starts.tolist()])
        if gpu:
            rows = rows.pin_memory().to(device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]

    def drained():
        if gpu:
            torch.cuda.synchronize()
        return time.perf_counter()

    warmup = max(3, min(5, a.steps // 10)) if a.compile else min(5, a.steps // 10)
    start = None
    for step in range(a.steps):
        if step == warmup:
            start = drained()
        x, y = get_batch()
        with autocast:
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = drained() - start
    timed = a.steps - warmup
    print(json.dumps({"tokens_per_second": timed * a.batch * a.seq_len / seconds,
                      "step_seconds": seconds / timed, "final_loss": loss.item(),
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "precision": a.precision, "threads": torch.get_num_threads(),
                      "compiled": a.compile, "device": a.device, "torch": torch.__version__,
                      "peak_memory_bytes": torch.cuda.max_memory_allocated() if gpu else 0}))


if __name__ == "__main__":
    main()
