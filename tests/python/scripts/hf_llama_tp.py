"""Hugging Face's LlamaForCausalLM, as transformers builds it, under loom.parallel.TensorParallel
(run by test_tensor_parallel.py): the plan torchtitan gives a Llama, kept outside the model
(q, k, v, gate and up column-parallel, o and down row-parallel; the embedding and the head
whole), on a random model of 4 query heads over 2 key/value heads. Every rank reads the same
batches from the same seed; 3 SGD steps of transformers' own loss; rank 0 saves
{"state": the whole state dict, "logits": the trained model's logits on a fixed batch} to OUT.

    hf_llama_tp.py OUT [--plain]

--plain trains the model unsplit in one process.
"""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import loom

PLAN = {"model.layers.*.self_attn.q_proj": "colwise",
        "model.layers.*.self_attn.k_proj": "colwise",
        "model.layers.*.self_attn.v_proj": "colwise",
        "model.layers.*.self_attn.o_proj": "rowwise",
        "model.layers.*.mlp.gate_proj": "colwise",
        "model.layers.*.mlp.up_proj": "colwise",
        "model.layers.*.mlp.down_proj": "rowwise"}


def main(out, plain):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        attn_implementation="sdpa"))
    job = None if plain else loom.distributed.init()
    split = model if plain else loom.parallel.TensorParallel(model, PLAN)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    data = torch.Generator().manual_seed(1)
    for _ in range(3):
        ids = torch.randint(0, 96, (4, 16), generator=data)
        loss = split(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        logits = split(input_ids=torch.arange(16).view(1, 16)).logits
    state = model.state_dict() if plain else split.full_state_dict()
    if job is None or job.rank == 0:
        torch.save({"state": state, "logits": logits}, out)


if __name__ == "__main__":
    main(sys.argv[1], "--plain" in sys.argv[2:])
