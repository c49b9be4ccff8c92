#!/usr/bin/env python3
"""The torchtune peer of `loom train` fine-tuning a pretrained Llama: torchtune's own recipe
(lora_finetune_single_device, or full_finetune_single_device), run as `tune run` runs it, on a
config written here: the Hugging Face folder through torchtune's FullModelHFCheckpointer, the
model built by torchtune's Llama 3.2 component builders at the folder's shape (LoRA on the same
linears), a SentencePiece tokenizer (Loom's of the corpus, through torchtune's Llama 2
tokenizer), the corpus as a packed text-completion dataset of windows of --seq-len tokens, fused
AdamW, CEWithChunkedOutputLoss, clipping at 1, fp32 on the CPU, with --compile the recipe's
torch.compile. Prints one JSON object: the median of the recipe's own tokens_per_second_per_gpu
over the steady steps (the first min(5, steps / 10) not counted; with --compile at least 3).

    torchtune_finetune.py --model DIR --tokenizer MODEL --text FILE [--lora R] [--compile]
"""
import argparse
import glob
import json
import os
import re
import runpy
import statistics
import sys
import tempfile

import torch

from finetune_args import add_finetune_arguments, warmup_steps

# The torchao torchtune 0.6.1 imports, kept out of the environment's own path (peft refuses it):
# scripts/install-deps.sh installs it here.
sys.path.insert(0, os.path.join(sys.prefix, "torchtune-torchao"))


def config(a, out):
    with open(os.path.join(a.model, "config.json")) as f:
        hf = json.load(f)
    shape = {
        "vocab_size": hf["vocab_size"], "num_layers": hf["num_hidden_layers"],
        "num_heads": hf["num_attention_heads"], "num_kv_heads": hf["num_key_value_heads"],
        "embed_dim": hf["hidden_size"], "intermediate_dim": hf["intermediate_size"],
        "max_seq_len": hf["max_position_embeddings"], "rope_base": hf.get("rope_theta", 10000),
        "norm_eps": hf.get("rms_norm_eps", 1e-6),
    }
    if a.lora:
        model = {"_component_": "torchtune.models.llama3_2.lora_llama3_2",
                 "lora_attn_modules": a.targets.split(","), "apply_lora_to_mlp": False,
                 "apply_lora_to_output": False, "lora_rank": a.lora, "lora_alpha": a.alpha,
                 "lora_dropout": 0.0, **shape}
    else:
        model = {"_component_": "torchtune.models.llama3_2.llama3_2", **shape}
    files = [os.path.basename(p) for p in glob.glob(os.path.join(a.model, "*.safetensors"))]
    return {
        "output_dir": out,
        "model": model,
        "tokenizer": {"_component_": "torchtune.models.llama2.llama2_tokenizer",
                      "path": a.tokenizer, "max_seq_len": a.seq_len},
        "checkpointer": {"_component_": "torchtune.training.FullModelHFCheckpointer",
                         "checkpoint_dir": a.model, "checkpoint_files": files,
                         "recipe_checkpoint": None, "output_dir": out,
                         "model_type": "LLAMA3_2"},
        "resume_from_checkpoint": False,
        "save_adapter_weights_only": True,
        "dataset": {"_component_": "torchtune.datasets.text_completion_dataset",
                    "source": "text", "data_files": a.text, "column": "text", "split": "train",
                    "packed": True},
        "seed": 0,
        "shuffle": True,
        "batch_size": a.batch,
        "optimizer": {"_component_": "torch.optim.AdamW", "fused": True, "weight_decay": 0.0,
                      "lr": a.lr},
        "lr_scheduler": {
            "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
            "num_warmup_steps": 0},
        "optimizer_in_bwd": False,
        "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
        "epochs": 1,
        "max_steps_per_epoch": a.steps,
        "gradient_accumulation_steps": 1,
        "clip_grad_norm": 1.0,
        "compile": a.compile,
        "metric_logger": {"_component_": "torchtune.training.metric_logging.DiskLogger",
                          "log_dir": os.path.join(out, "logs"), "filename": "log.txt"},
        "log_every_n_steps": 1,
        "log_peak_memory_stats": False,
        "device": "cpu",
        "dtype": "fp32",
        "enable_activation_checkpointing": False,
        "enable_activation_offloading": False,
        "profiler": {"_component_": "torchtune.training.setup_torch_profiler", "enabled": False},
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, help="a Hugging Face Llama folder")
    p.add_argument("--tokenizer", required=True, help="a SentencePiece .model of the corpus")
    p.add_argument("--text", required=True, help="the corpus, plain text")
    add_finetune_arguments(p)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    import yaml
    with tempfile.TemporaryDirectory() as out:
        path = os.path.join(out, "config.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(config(a, out), f)
        recipe = "lora_finetune_single_device" if a.lora else "full_finetune_single_device"
        sys.argv = [recipe, "--config", path]
        # The recipe's logs and progress bar go to stderr; stdout is this script's JSON.
        stdout, sys.stdout = sys.stdout, sys.stderr
        try:
            # Where `tune run` finds it: the recipes folder the torchtune wheel installs.
            import torchtune
            recipes = os.path.join(os.path.dirname(os.path.dirname(torchtune.__file__)),
                                   "recipes")
            runpy.run_path(os.path.join(recipes, recipe + ".py"), run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise
        finally:
            sys.stdout = stdout
        with open(os.path.join(out, "logs", "log.txt")) as f:
            rates = [float(m) for m in re.findall(r"tokens_per_second_per_gpu:([0-9.e+-]+)",
                                                  f.read())]
    warmup = warmup_steps(a.steps, a.compile)
    print(json.dumps({"tokens_per_second": statistics.median(rates[warmup:]),
                      "steps": len(rates), "lora": a.lora, "compiled": a.compile,
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
