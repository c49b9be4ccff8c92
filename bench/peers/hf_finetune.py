#!/usr/bin/env python3
"""The Hugging Face peer of `loom train` fine-tuning a pretrained Llama: transformers'
LlamaForCausalLM loaded from a folder (attention through SDPA), with --lora peft's LoRA on the
same linears, AdamW with fused=True over what trains, and with --compile the model through
torch.compile; on windows of a `loom data tokenize` folder, as a user writes the loop (forward
with labels, backward, clip at 1, step, zero_grad). Prints one JSON object: tokens_per_second
over the steady steps (the first min(5, steps / 10) not timed; with --compile at least 3) and the
optimizer state's bytes.

    hf_finetune.py --model DIR --data TOKENS [--lora R] [--targets q_proj,v_proj] [--compile]
"""
import argparse
import glob
import json
import os
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from finetune_args import add_finetune_arguments, warmup_steps
from nanogpt_train import read_shard


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    add_finetune_arguments(p)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(a.model, attn_implementation="sdpa",
                                                 dtype=torch.float32)
    if a.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=a.alpha, lora_dropout=0.0,
                                                 target_modules=a.targets.split(",")))
    model.train()
    trained = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=a.lr, weight_decay=0.0, fused=True)
    step_model = torch.compile(model) if a.compile else model
    tokens, _ = read_shard(sorted(glob.glob(os.path.join(a.data, "train-*.tokens")))[0])
    rng = np.random.default_rng(0)
    warmup = warmup_steps(a.steps, a.compile)
    start = None
    for step in range(a.steps):
        if step == warmup:
            start = time.perf_counter()
        starts = rng.integers(0, len(tokens) - a.seq_len - 1, a.batch)
        ids = torch.from_numpy(np.stack([tokens[s:s + a.seq_len].astype(np.int64)
                                         for s in starts]))
        loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    timed = a.steps - warmup
    state = sum(t.numel() * t.element_size() for s in optimizer.state.values()
                for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
    print(json.dumps({"tokens_per_second": timed * a.batch * a.seq_len / seconds,
                      "optimizer_state_bytes": state, "lora": a.lora, "compiled": a.compile,
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
