"""An FP8 group (the config's ``fp8`` section) end to end: the trainer publishes bf16, the
engine holds block-FP8 (float8_e4m3fn values and ``<name>_scale_inv`` fp32), and after every
version its bytes equal the NumPy + ml_dtypes reference quantiser's of the trainer's weights
(tests/codec/fp8_reference.py). A changed scale with unchanged values and the reverse are both
carried; the anchor is an FP8 checkpoint the ``safetensors`` package opens; hooked writes give
the same bytes.

The engine's FP8 values are uint8 tensors registered as float8_e4m3fn (the torch of Debian 12,
1.13, has no float8 dtype); the anchor is opened with ``safetensors.safe_open`` and its FP8
bytes read at the offsets its header gives (NumPy has no float8 either)."""

import json
import os
import struct
import sys

import numpy as np
import pytest
import torch

import weightcast
from conftest import WAIT

sys.path.insert(0, os.path.join(os.environ.get("WEIGHTCAST_SOURCE_DIR", "../.."), "tests", "codec"))
fp8_reference = pytest.importorskip("fp8_reference", reason="tests/codec/fp8_reference.py")
safetensors = pytest.importorskip("safetensors")
pytest.importorskip("ml_dtypes")

# Ragged edges (200 x 300: a 2 x 3 grid of 128 x 128 blocks, the last ones partial), a square
# one, and what stays bf16: a norm and the LM head (not "_proj.weight").
SHAPES = {"layers.0.self_attn.q_proj.weight": (200, 300),
          "layers.0.mlp.down_proj.weight": (128, 256),
          "layers.0.input_layernorm.weight": (300,),
          "lm_head.weight": (64, 300)}
QUANTISED = [n for n in SHAPES if n.endswith("_proj.weight")]


def reference(t):
    return fp8_reference.reference(t.float().numpy())


def engine_tensors():
    out = {}
    for name, shape in SHAPES.items():
        if name in QUANTISED:
            out[name] = torch.zeros(shape, dtype=torch.uint8)
            grid = tuple((d + 127) // 128 for d in shape)
            out[name + "_scale_inv"] = torch.zeros(grid, dtype=torch.float32)
        else:
            out[name] = torch.zeros(shape, dtype=torch.bfloat16)
    return out


def check_engine(src, dst, version):
    for name in SHAPES:
        if name not in QUANTISED:
            assert torch.equal(dst[name], src[name]), f"{name} differs at v{version}"
            continue
        q, scale = reference(src[name])
        assert np.array_equal(dst[name].numpy(), q), f"{name} at v{version}"
        assert np.array_equal(dst[name + "_scale_inv"].numpy(), scale), f"{name} at v{version}"


def trainer_and_engine(g, endpoints, seed, hooked=False):
    """The trainer's bf16 tensors registered with a publisher, the engine's FP8 pairs with a
    connected subscriber, and the generator: (src, dst, pub, sub, gen)."""
    gen = torch.Generator().manual_seed(seed)
    src = {n: torch.randn(s, generator=gen).to(torch.bfloat16) for n, s in SHAPES.items()}
    dst = engine_tensors()
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=2)
    endpoints.append(pub)
    for n, t in src.items():
        pub.register(n, t, hooked=hooked)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    for n, t in dst.items():
        sub.register(n, t, dtype="float8_e4m3fn" if n in QUANTISED else None)
    sub.connect()
    return src, dst, pub, sub, gen


def test_engine_holds_the_reference_quantisation_of_every_version(make_group, endpoints):
    g = make_group(fp8=True, anchor_every=4)
    src, dst, pub, sub, gen = trainer_and_engine(g, endpoints, 11)

    q = src["layers.0.self_attn.q_proj.weight"]
    down = src["layers.0.mlp.down_proj.weight"]
    reports = {}
    for version in range(1, 6):
        if version == 2:
            # Values only: one element that is not its block's amax moves; the scale stays.
            block = q[0:128, 0:128].float().abs()
            r, c = divmod(int(((block > 0.5) & (block < 1.0)).view(-1).nonzero()[0]), 128)
            assert block.max() > 2.0  # so the halved element is not the block's amax
            q[r, c] = q[r, c] * 0.5
        elif version == 3:
            # Scale only: a whole block doubles, so every value quantises to the same byte.
            down[0:128, 128:256] *= 2
        elif version == 4:
            # Sparse optimizer-like changes everywhere, the norm too.
            for t in src.values():
                flat = t.view(-1)
                idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 100),), generator=gen)
                flat[idx] += 0.01
        before = {n: sub.checksum(n) for n in dst} if version > 1 else {}
        h = pub.publish(version)
        reports[version] = h.wait_published(WAIT)
        sub.wait_for_version(version, WAIT)
        h.wait_committed(WAIT)
        check_engine(src, dst, version)
        after = {n: sub.checksum(n) for n in dst}
        changed = {n for n in dst if version > 1 and after[n] != before[n]}
        if version == 2:
            assert changed == {"layers.0.self_attn.q_proj.weight"}
        elif version == 3:
            assert changed == {"layers.0.mlp.down_proj.weight_scale_inv"}
        elif version == 5:
            assert changed == set()
    assert reports[1]["anchor"] and not reports[2]["anchor"] and not reports[3]["anchor"]
    assert reports[2]["changed_tensors"] == 1 and reports[3]["changed_tensors"] == 1
    assert sub.stats()["nacks"] == 0


def raw_bytes(path, name):
    """Tensor `name`'s bytes in safetensors file `path`, at its header's data_offsets."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        begin, end = json.loads(f.read(n))[name]["data_offsets"]
        f.seek(8 + n + begin)
        return np.frombuffer(f.read(end - begin), dtype=np.uint8)


def test_the_anchor_is_an_fp8_checkpoint(make_group, endpoints):
    g = make_group(fp8=True)
    gen = torch.Generator().manual_seed(5)
    src = {n: torch.randn(s, generator=gen).to(torch.bfloat16) for n, s in SHAPES.items()}
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for n, t in src.items():
        pub.register(n, t)
    pub.publish(1).wait_published(WAIT)
    anchor = os.path.join(g.journal, f"v{1:020d}")
    with open(os.path.join(anchor, "model.safetensors.index.json")) as f:
        index = json.load(f)
    with open(os.path.join(anchor, "config.json")) as f:
        config = json.load(f)
    assert config["quantization_config"] == {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [128, 128]}
    assert set(index["weight_map"]) == set(engine_tensors())
    for name, shard in index["weight_map"].items():
        path = os.path.join(anchor, shard)
        with safetensors.safe_open(path, framework="np") as f:
            assert name in f.keys()
            piece = f.get_slice(name)
            dtype, shape = piece.get_dtype(), tuple(piece.get_shape())
            scales = f.get_tensor(name) if dtype == "F32" else None
        base = name[:-len("_scale_inv")] if name.endswith("_scale_inv") else name
        if base not in QUANTISED:
            assert (dtype, shape) == ("BF16", SHAPES[name])
            assert np.array_equal(raw_bytes(path, name), src[name].view(torch.int16).numpy()
                                  .view(np.uint8).reshape(-1))
            continue
        q, scale = reference(src[base])
        if name == base:
            assert (dtype, shape) == ("F8_E4M3", SHAPES[name])
            assert np.array_equal(raw_bytes(path, name), q.reshape(-1))
        else:
            assert (dtype, shape) == ("F32", scale.shape)
            assert np.array_equal(scales, scale)
            # Dequantised (q * s), the checkpoint is the trainer's matrix to FP8's precision.
            import ml_dtypes
            full = q.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.kron(
                scale, np.ones((128, 128), np.float32))[:q.shape[0], :q.shape[1]]
            assert np.allclose(full, src[base].float().numpy(), rtol=0.07, atol=1e-3)


def test_a_selected_tensor_that_is_not_a_matrix_is_refused_by_name(make_group, endpoints):
    g = make_group(fp8=[r".*\.weight$"])
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    with pytest.raises(weightcast.InvalidArgumentError, match="'norm.weight'.*2-D"):
        pub.register("norm.weight", torch.zeros(300, dtype=torch.bfloat16))


def test_hooked_writes_reach_the_engine_as_the_reference_quantisation(make_group, endpoints):
    """The trainer writes through the hooked step (q_proj whole, down_proj in runs of 50 rows,
    so bands complete across writes); the engine holds the reference quantisation of every
    version, the anchor written during the step included."""
    g = make_group(fp8=True, anchor_every=3)
    src, dst, pub, sub, gen = trainer_and_engine(g, endpoints, 23, hooked=True)
    for version in range(0, 5):
        new = {n: t.clone() for n, t in src.items()}
        if version > 0:
            for t in new.values():
                flat = t.view(-1)
                idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 50),), generator=gen)
                flat[idx] = (flat[idx].float() * 1.05 + 0.001).to(torch.bfloat16)
        with pub.step(version) as step:
            for n, t in src.items():
                if n == "layers.0.mlp.down_proj.weight":
                    for r in range(0, t.shape[0], 50):
                        step.write(t[r:r + 50], new[n][r:r + 50].contiguous())
                else:
                    step.write(t, new[n])
        step.handle.wait_committed(WAIT)
        sub.wait_for_version(version, WAIT)
        for n in src:
            assert torch.equal(src[n], new[n]), f"{n}: the step did not write v{version}"
        check_engine(src, dst, version)
    assert sub.stats()["nacks"] == 0
