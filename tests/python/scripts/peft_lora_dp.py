"""LoRA from Hugging Face's peft on a user's model, trained through loom.parallel.DataParallel
(run by test_zero.py): transformers' LlamaForCausalLM with peft's adapters on q_proj and v_proj,
its base frozen (ZeRO-3: sharded between the layers' runs); every rank reads its half of each
global batch; 3 SGD steps over what trains; rank 0 saves {"adapters": peft's adapter state dict,
"start": the same before training, "base": the frozen base's, "base_freed": whether a layer's
frozen weight held no memory after each step} to OUT.

    peft_lora_dp.py OUT [--plain] [--zero N]

--plain trains the whole batch in one process.
"""
import sys

import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import LlamaConfig, LlamaForCausalLM

import loom

GLOBAL_BATCH = 8


def main(out, plain, zero):
    torch.manual_seed(0)
    model = get_peft_model(
        LlamaForCausalLM(LlamaConfig(
            vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
            attn_implementation="sdpa")),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                   init_lora_weights=False))  # random B: the adapters change the output at once
    start = {n: t.clone() for n, t in get_peft_model_state_dict(model).items()}
    job = None if plain else loom.distributed.init()
    # ZeRO-3 gathers a decoder layer's parameters (the frozen base's among them) just before it
    # runs.
    blocks = list(model.base_model.model.model.layers) if zero == 3 else None
    wrapped = model if plain else loom.parallel.DataParallel(model, zero=zero, blocks=blocks)
    trained = (wrapped.optimizer_parameters() if zero else
               [p for p in model.parameters() if p.requires_grad])
    # SGD: Adam steps an element whose gradient is a rounding error from zero by the whole
    # learning rate, either way, which no exact comparison of two summation orders survives.
    optimizer = torch.optim.SGD(trained, lr=0.5)
    data = torch.Generator().manual_seed(1)
    rank, world = (0, 1) if plain else (job.rank, job.world)
    share = GLOBAL_BATCH // world
    layer_base = model.base_model.model.model.layers[0].mlp.up_proj.weight  # frozen, no adapter
    base_freed = []  # ZeRO-3: between steps a rank holds its shard of the frozen base alone
    for _ in range(3):
        ids = torch.randint(0, 96, (GLOBAL_BATCH, 16), generator=data)
        mine = ids[rank * share:(rank + 1) * share]
        loss = wrapped(input_ids=mine, labels=mine).loss
        optimizer.zero_grad()
        loss.backward()
        if plain:
            optimizer.step()
        else:
            wrapped.step(optimizer)
        base_freed.append(layer_base.untyped_storage().nbytes() == 0)
    if not plain:
        wrapped.close()
    if rank == 0:
        base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
        torch.save({"adapters": get_peft_model_state_dict(model), "start": start, "base": base,
                    "base_freed": base_freed}, out)


if __name__ == "__main__":
    zero = int(sys.argv[sys.argv.index("--zero") + 1]) if "--zero" in sys.argv else 0
    main(sys.argv[1], "--plain" in sys.argv[2:], zero)
