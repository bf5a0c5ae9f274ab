"""The small model and tensor-parallel layout the layout tests share: a q_proj split by rows, an
o_proj split by columns and a norm held whole by both ranks of one replica."""

import torch

LAYOUTS = {"tp2": {"parts": 2, "rules": [
    {"match": r".*\.q_proj\.weight", "dim": 0},
    {"match": r".*\.o_proj\.weight", "dim": 1},
]}}
PLACED = [("tp2", 0, "e0"), ("tp2", 1, "e0")]


def tp2_model(gen):
    return {
        "l.0.q_proj.weight": torch.randn(6, 10, generator=gen).to(torch.bfloat16),
        "l.0.o_proj.weight": torch.randn(10, 7, generator=gen).to(torch.bfloat16),
        "l.0.norm.weight": torch.randn(10, generator=gen).to(torch.bfloat16),
    }
