#!/usr/bin/env python3
"""Writes the compute-only schedules of this folder in torch.distributed.pipelining's CSV layout.

One row per rank, one action per cell ("<stage><kind><micro-batch>"), empty cells for idle
slots. The order is the interleaved zero-bubble one (ZB1P of Qi et al., as torch's
ScheduleInterleavedZeroBubble describes it) with looped placement: rank r holds stages r, r + P,
...; micro-batches go in rounds of P, stage by stage; after the warm-up forwards each slot is one
forward and one input-gradient backward, and from its r-th such slot on rank r also runs the
oldest pending weight gradient; the rest of them drain at the end.

Usage: make_schedules.py OUT_DIR (rewrites the files named below).
"""
import os
import sys


def zero_bubble_interleaved(ranks, chunks, microbatches, input_code):
    rounds = max(1, microbatches // ranks)
    per_round = microbatches // rounds
    total = microbatches * chunks
    rows = []
    for r in range(ranks):
        warmup = min((chunks - 1) * per_round + (ranks - 1 - r), total)
        counts = {}

        def next_mb(kind, stage):
            n = counts.get((kind, stage), 0)
            counts[(kind, stage)] = n + 1
            return n

        def forward_stage(k):
            return ((k // per_round) % chunks) * ranks + r

        def backward_stage(k):
            return (chunks - 1 - ((k - warmup) // per_round) % chunks) * ranks + r

        row = [""] * r  # torch pads the start of later ranks with idle slots
        backward_slots = []

        def weight():
            stage = backward_stage(backward_slots[next_mb("slot", -1)])
            row.append(f"{stage}W{next_mb('W', stage)}")

        for k in range(total + warmup):
            if k < total:
                stage = forward_stage(k)
                row.append(f"{stage}F{next_mb('F', stage)}")
                if k == warmup - 1:
                    row.extend([""] * (ranks - 1 - r))
            if k >= warmup:
                stage = backward_stage(k)
                row.append(f"{stage}{input_code}{next_mb('I', stage)}")
                backward_slots.append(k)
                if k - warmup >= r:
                    weight()
        while counts.get(("slot", -1), 0) < len(backward_slots):
            weight()
        rows.append(row)
    return rows


FILES = {
    # B where the input gradient alone is meant, W later: torch's older zero-bubble files.
    "zb_interleaved_2x2_m8.csv": (2, 2, 8, "B"),
    # The same order in torch's newer names: I for the input gradient.
    "zb_interleaved_2x2_m8_iw.csv": (2, 2, 8, "I"),
    "zb_interleaved_3x2_m6.csv": (3, 2, 6, "B"),
}

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, (ranks, chunks, microbatches, code) in FILES.items():
        with open(os.path.join(out, name), "w") as f:
            for row in zero_bubble_interleaved(ranks, chunks, microbatches, code):
                f.write(",".join(row) + "\n")
