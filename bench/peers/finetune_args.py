"""The options the fine-tuning peers share (hf_finetune.py, torchtune_finetune.py): the same
windows, batch, steps, learning rate, LoRA adapters and threads as `loom train` is given."""
import os


def add_finetune_arguments(parser):
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lora", type=int, default=0, help="LoRA rank; 0: a full fine-tune")
    parser.add_argument("--alpha", type=float, default=16)
    parser.add_argument("--targets", default="q_proj,v_proj")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--compile", action="store_true")


def warmup_steps(steps, compiled):
    """The first steps not timed: min(5, steps / 10), and with torch.compile at least 3."""
    return max(3, min(5, steps // 10)) if compiled else min(5, steps // 10)
