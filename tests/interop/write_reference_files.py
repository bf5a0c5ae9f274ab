"""Writes files with the real writers for weightcast's readers to check.

  write_reference_files.py DIR

DIR/ref.safetensors (safetensors package: f32, bf16, f16, i64, u8 and a scalar) and
DIR/ref.pt (torch.save of a dict whose keys share storage, with an offset view and a
transposed view) and DIR/ref_param.pt (torch.save of nn.Parameter values, which torch pickles
through _rebuild_parameter), each with DIR/<name>.expected/expected.json and the raw bytes of
every key.
"""
import json
import pathlib
import sys

import numpy as np
import torch
from safetensors.torch import save_file


def expect(out_dir, tensors, storage_of=None):
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for i, (key, t) in enumerate(tensors.items()):
        name = f"{i}.bin"
        t.contiguous().view(torch.uint8).numpy().tofile(out_dir / name) if t.dim() else \
            t.reshape(1).view(torch.uint8).numpy().tofile(out_dir / name)
        dtype = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
                 torch.int64: "I64", torch.uint8: "U8"}[t.dtype]
        manifest[key] = {"file": name, "dtype": dtype, "shape": list(t.shape)}
    (out_dir / "expected.json").write_text(json.dumps(manifest))


def main():
    root = pathlib.Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(7)
    st = {
        "w.f32": torch.randn(3, 5, generator=g),
        "w.bf16": torch.randn(4, 2, generator=g).to(torch.bfloat16),
        "w.f16": torch.randn(7, generator=g).to(torch.float16),
        "ids": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "mask": torch.tensor([1, 0, 1], dtype=torch.uint8),
        "scalar": torch.tensor(2.5),
    }
    st["w.f32"][0, 0] = -0.0
    save_file(st, str(root / "ref.safetensors"))
    expect(root / "ref.safetensors.expected", st)

    base = torch.randn(4, 6, generator=g)
    base[1, 1] = float("nan")
    shared = {
        "a": base,
        "a.alias": base,
        "a.rows": base[1:3],
        "a.t": base.t(),
        "b": torch.randn(5, generator=g).to(torch.bfloat16),
    }
    torch.save(shared, root / "ref.pt")
    expect(root / "ref.pt.expected", shared)

    params = {
        "w": torch.nn.Parameter(torch.ones(3)),
        "proj": torch.nn.Parameter(torch.randn(2, 4, generator=g)),
    }
    torch.save(params, root / "ref_param.pt")
    back = torch.load(root / "ref_param.pt", weights_only=True)
    assert all(torch.equal(back[k], v) for k, v in params.items()), "torch cannot read ref_param.pt"
    expect(root / "ref_param.pt.expected", {k: v.detach() for k, v in params.items()})
    print(f"torch {torch.__version__}: wrote {root / 'ref.safetensors'}, {root / 'ref.pt'} "
          f"and {root / 'ref_param.pt'}")


if __name__ == "__main__":
    main()
