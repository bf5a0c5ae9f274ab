"""Reads weightcast's published adapters with the real readers and checks every bit.

  read_our_files.py DIR      (DIR as written by `interop_tool write DIR`)

torch.load(weights_only=True) must read the compact artifact with its aliasing preserved
(keys sharing a storage in the file share it in torch); the safetensors package must read the
dense adapter. Exits non-zero with a message on the first difference.
"""
import json
import pathlib
import sys

import numpy as np
import torch
from safetensors.numpy import load_file


def raw(expected_dir, entry):
    return np.fromfile(expected_dir / entry["file"], dtype=np.uint8)


def main():
    root = pathlib.Path(sys.argv[1])
    manifest = json.loads((root / "expected.json").read_text())
    expected_dir = root / "expected"

    shared = manifest["shared"]
    assert shared["format"] == "torch-compact", shared["format"]
    state = torch.load(shared["model"], weights_only=True)
    assert set(state) == set(shared["keys"]), "keys differ"
    storage_ptr = {}
    for key, entry in shared["keys"].items():
        t = state[key]
        assert list(t.shape) == entry["shape"], (key, t.shape)
        assert t.dtype == torch.float32, (key, t.dtype)
        got = t.contiguous().numpy().view(np.uint8).reshape(-1)
        assert np.array_equal(got, raw(expected_dir, entry)), f"{key}: bits differ"
        ptr = t.storage().data_ptr()
        s = entry["storage"]
        if s in storage_ptr:
            assert storage_ptr[s] == ptr, f"{key}: alias lost its shared storage"
        storage_ptr[s] = ptr
    distinct = len(set(storage_ptr.values()))
    assert distinct == len(storage_ptr), "different storages were merged"
    print(f"torch {torch.__version__}: {len(state)} keys over {distinct} shared storages, exact bits")

    dense = manifest["dense"]
    assert dense["format"] == "safetensors", dense["format"]
    tensors = load_file(dense["model"])
    assert set(tensors) == set(dense["keys"]), "keys differ"
    for key, entry in dense["keys"].items():
        a = tensors[key]
        assert list(a.shape) == entry["shape"], key
        assert np.array_equal(a.view(np.uint8).reshape(-1), raw(expected_dir, entry)), f"{key}: bits differ"
    print(f"safetensors: {len(tensors)} keys, exact bits")


if __name__ == "__main__":
    main()
