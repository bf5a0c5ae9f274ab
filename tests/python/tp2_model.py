"""The small model and tensor-parallel layout the layout tests share: a q_proj split by rows, an
o_proj split by columns and a norm held whole by both ranks of one replica."""

import torch

import weightcast

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


def slice_engine(config, rank, src, endpoints):
    """An engine rank of a layout: its block of every tensor of ``src`` registered with
    register_slice, connected. Returns (subscriber, {name: (block index, its shard)})."""
    sub = weightcast.Subscriber(config, rank, threads=1)
    endpoints.append(sub)
    held = {}
    for k, v in src.items():
        block = sub.slice_of(k, v.shape)
        held[k] = (block, torch.zeros_like(v[block]).contiguous())
        sub.register_slice(k, held[k][1], v.shape)
    sub.connect()
    return sub, held
