"""Models for the journal interop test, written and read with the real safetensors package.

  journal_models.py write DIR                  model-v0/1/2.safetensors (v1, v2: ~1 % changed)
  journal_models.py read-anchor STEP_DIR REF   load every shard the index names; compare to REF
  journal_models.py compare A B                every tensor of A equals B's, bit for bit
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file


def make_models(out_dir):
    g = torch.Generator().manual_seed(5)
    model = {
        "embed.weight": torch.randn(300, 256, generator=g).to(torch.bfloat16),
        "layers.0.q.weight": torch.randn(256, 256, generator=g).to(torch.bfloat16),
        "layers.0.norm.weight": torch.randn(256, generator=g),
        "layers.0.mlp.weight": torch.randn(512, 256, generator=g).to(torch.float16),
        "lm_head.bias": torch.randn(7, generator=g),
        "step": torch.tensor([3], dtype=torch.int64),
    }
    for v in range(3):
        if v > 0:
            for name, t in model.items():
                if t.dtype == torch.int64:
                    continue
                flat = t.view(-1)
                idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 100),), generator=g)
                flat[idx] = (flat[idx].float() * 1.01 + 0.001).to(t.dtype)
        save_file({k: t.contiguous() for k, t in model.items()},
                  os.path.join(out_dir, "model-v%d.safetensors" % v))


def same(a, b, what):
    if set(a) != set(b):
        raise SystemExit("%s: tensor names differ: %s vs %s" % (what, sorted(a), sorted(b)))
    for name in a:
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            raise SystemExit("%s: %s is %s%s, expected %s%s" % (what, name, x.dtype, tuple(x.shape), y.dtype, tuple(y.shape)))
        if x.numel() and not torch.equal(x.view(torch.uint8) if x.dim() else x, y.view(torch.uint8) if y.dim() else y):
            raise SystemExit("%s: bytes of %s differ" % (what, name))


def read_anchor(step_dir, reference):
    with open(os.path.join(step_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2:
        raise SystemExit("expected several shards, the index names %s" % shards)
    loaded = {}
    for shard in shards:
        tensors = load_file(os.path.join(step_dir, shard))
        for name in tensors:
            if index["weight_map"][name] != shard:
                raise SystemExit("%s found in %s, the index says %s" % (name, shard, index["weight_map"][name]))
        loaded.update(tensors)
    total = sum(t.numel() * t.element_size() for t in loaded.values())
    if index["metadata"]["total_size"] != total:
        raise SystemExit("index total_size %s != %s" % (index["metadata"]["total_size"], total))
    same(loaded, load_file(reference), "anchor " + step_dir)
    print("anchor read through its index: %d tensors in %d shards" % (len(loaded), len(shards)))


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        make_models(sys.argv[2])
    elif cmd == "read-anchor":
        read_anchor(sys.argv[2], sys.argv[3])
    elif cmd == "compare":
        same(load_file(sys.argv[2]), load_file(sys.argv[3]), sys.argv[2])
        print("materialized file equals the model")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
