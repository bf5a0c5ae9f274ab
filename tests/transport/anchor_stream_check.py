"""Reads a streamed anchor with the `safetensors` package and compares it with the model.

    anchor_stream_check.py ANCHOR_DIR TENSORS_JSON

TENSORS_JSON lists the model: [{"name", "dtype" (safetensors name), "shape", "file" (the raw
little-endian bytes)}]. Every tensor is found through model.safetensors.index.json, loaded with
safetensors.safe_open(framework="pt"), and must have the listed dtype, shape and bytes; each
shard must hold exactly the tensors the index assigns it, with the metadata {"format": "pt"}
Hugging Face's loader requires, and must also parse with safetensors.deserialize (raw bytes,
no framework) to the same bytes. Exits 1 with the first difference.
"""

import json
import os
import sys

import safetensors
import torch
from safetensors import safe_open

TORCH_DTYPES = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}
# Integer views of each element size, so bytes compare exactly (NaN payloads, -0.0).
RAW_VIEWS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def raw_bytes(tensor):
    flat = tensor.contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    else:
        flat = flat.view(RAW_VIEWS[flat.element_size()])
    return flat.numpy().tobytes()


def fail(message):
    print("anchor_stream_check: FAIL: " + message)
    sys.exit(1)


def main():
    anchor_dir, tensors_json = sys.argv[1], sys.argv[2]
    with open(tensors_json) as f:
        expected = json.load(f)
    with open(os.path.join(anchor_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    if sorted(weight_map) != sorted(t["name"] for t in expected):
        fail("index names %s, model %s" % (sorted(weight_map), [t["name"] for t in expected]))
    shards = sorted(set(weight_map.values()))
    deserialized = {}  # shard -> {name: {"dtype", "shape", "data"}}
    total = 0
    for shard in shards:
        path = os.path.join(anchor_dir, shard)
        with safe_open(path, framework="pt") as f:
            if f.metadata() != {"format": "pt"}:
                fail("%s has metadata %r" % (shard, f.metadata()))
            names = sorted(f.keys())
            if names != sorted(n for n, s in weight_map.items() if s == shard):
                fail("%s holds %s, the index says otherwise" % (shard, names))
        with open(path, "rb") as raw:
            parsed = {name: info for name, info in safetensors.deserialize(raw.read())}
        if sorted(parsed) != names:
            fail("safetensors.deserialize of %s gives %s" % (shard, sorted(parsed)))
        deserialized[shard] = parsed
    for t in expected:
        shard = os.path.join(anchor_dir, weight_map[t["name"]])
        with safe_open(shard, framework="pt") as f:
            tensor = f.get_tensor(t["name"])
        with open(t["file"], "rb") as raw:
            want = raw.read()
        if tensor.dtype != TORCH_DTYPES[t["dtype"]]:
            fail("%s: dtype %s, expected %s" % (t["name"], tensor.dtype, t["dtype"]))
        if list(tensor.shape) != t["shape"]:
            fail("%s: shape %s, expected %s" % (t["name"], list(tensor.shape), t["shape"]))
        if raw_bytes(tensor) != want:
            fail("%s: the bytes differ from the model" % t["name"])
        if bytes(deserialized[weight_map[t["name"]]][t["name"]]["data"]) != want:
            fail("%s: safetensors.deserialize gives other bytes" % t["name"])
        total += len(want)
    if total != index["metadata"]["total_size"]:
        fail("total_size %d, the tensors have %d bytes" % (index["metadata"]["total_size"], total))
    print(
        "anchor_stream_check: %d tensors in %d shards equal the model" % (len(expected), len(shards))
    )


if __name__ == "__main__":
    main()
