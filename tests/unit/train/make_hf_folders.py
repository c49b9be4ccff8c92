"""Makes the Hugging Face model folders pretrained_test.cpp loads, with transformers' own logits;
and gives transformers' logits of a folder Loom wrote.

    make_hf_folders.py OUT [--vocab N]
    make_hf_folders.py --logits FOLDER OUT.safetensors [FOLDER OUT.safetensors ...]
    make_hf_folders.py --peft BASE ADAPTER MERGED OUT.safetensors
    make_hf_folders.py --bf16 FOLDER COPY

OUT/<name>/ is a folder save_pretrained wrote, OUT/<name>.logits.safetensors the token ids it
was run on ("ids", int64 [2, 12]) and the logits transformers computed ("logits", fp32, in
eval mode). The models are random (nothing can be downloaded), their norms moved off one so that
the check sees them:
  llama        a Llama of 2 layers, 4 query heads over 2 key/value heads, an untied head and
               Llama 3.1's rope scaling, in transformers 5's config (rope_parameters);
  llama_tied   the same tied, in shards of an index, its config.json rewritten in the older
               form the published Llama 3 folders have (rope_theta and rope_scaling);
  gpt2         a GPT-2 of 2 layers (its Conv1D weights stored transposed, GELU's tanh form).
--vocab sets the Llamas' vocabulary (64 by default; the GPT-2's is 50). --logits loads FOLDER with
transformers' Auto classes and writes the logits of ids drawn from seed 0 the same way. --peft
writes the logits of BASE with the PEFT adapter ADAPTER loaded onto it by peft ("peft") and of
the folder MERGED ("merged"), on the same ids. --bf16 copies FOLDER (one model.safetensors) to
COPY with its weights in bf16, as most published folders hold them.
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM)


def llama(tied, vocab):
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=tied, rope_parameters=rope))


def gpt2():
    return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2,
                                      n_head=4, bos_token_id=0, eos_token_id=0))


def to_legacy_rope(folder):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = rope
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def logits_of(model):
    """(ids, logits) of 2 x 12 ids drawn from seed 0, in eval mode without gradients."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=generator)
    with torch.no_grad():
        return ids, model.eval()(ids).logits.float().contiguous()


def make_folders(out, vocab):
    for name, make, shard in (("llama", lambda: llama(False, vocab), None),
                              ("llama_tied", lambda: llama(True, vocab), "16KB"),
                              ("gpt2", gpt2, None)):
        torch.manual_seed(len(name))
        model = make().eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        folder = os.path.join(out, name)
        if shard:
            model.save_pretrained(folder, max_shard_size=shard)
        else:
            model.save_pretrained(folder)
        if name == "llama_tied":
            to_legacy_rope(folder)
        ids, logits = logits_of(model)
        save_file({"ids": ids, "logits": logits},
                  os.path.join(out, name + ".logits.safetensors"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("paths", nargs="+")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--logits", action="store_true")
    p.add_argument("--peft", action="store_true")
    p.add_argument("--bf16", action="store_true")
    a = p.parse_args()
    if a.bf16:
        import shutil
        from safetensors.torch import load_file
        folder, copy = a.paths
        shutil.copytree(folder, copy)
        weights = load_file(os.path.join(folder, "model.safetensors"))
        save_file({k: v.to(torch.bfloat16) for k, v in weights.items()},
                  os.path.join(copy, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(copy, "config.json")) as f:
            config = json.load(f)
        config["dtype"] = "bfloat16"
        with open(os.path.join(copy, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
    elif a.peft:
        from peft import PeftModel
        base, adapter, merged, out = a.paths
        ids, adapted = logits_of(PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(base), adapter))
        _, whole = logits_of(AutoModelForCausalLM.from_pretrained(merged))
        save_file({"ids": ids, "peft": adapted, "merged": whole}, out)
    elif a.logits:
        for folder, out in zip(a.paths[::2], a.paths[1::2]):
            ids, logits = logits_of(AutoModelForCausalLM.from_pretrained(folder))
            save_file({"ids": ids, "logits": logits}, out)
    else:
        make_folders(a.paths[0], a.vocab)


if __name__ == "__main__":
    main()
