"""Publisher -> Subscriber through a rank group on loopback (journal path): every dtype,
strided views of packed tensors, NumPy arrays; the subscriber's tensors equal the trainer's
bit for bit after every version."""

import numpy as np
import pytest
import torch

import weightcast
import weightcast.journal
from conftest import WAIT

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _source_tensors(gen):
    out = {}
    for dt in DTYPES:
        name = str(dt).replace("torch.", "")
        if dt.is_floating_point:
            out[name] = torch.randn(37, 11, generator=gen).to(dt)
        elif dt == torch.bool:
            out[name] = torch.rand(37, 11, generator=gen) > 0.5
        else:
            out[name] = torch.randint(0, 100, (37, 11), generator=gen).to(dt)
    return out


def _change(t, gen, count=5):
    flat = t.view(-1)
    idx = torch.randint(0, flat.numel(), (count,), generator=gen)
    if t.dtype == torch.bool:
        flat[idx] = ~flat[idx]
    elif t.dtype.is_floating_point:
        flat[idx] += 1
    else:
        flat[idx] = (flat[idx] + 1) % 100


def test_every_dtype_round_trips_bit_for_bit(make_group, endpoints):
    g = make_group()
    gen = torch.Generator().manual_seed(7)
    src = _source_tensors(gen)
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for k, v in src.items():
        pub.register(k, v)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    for k, v in dst.items():
        sub.register(k, v)
    sub.connect()
    sums = {}
    for version in range(1, 5):
        if version > 1:
            for k in ("bfloat16", "int32", "bool"):
                _change(src[k], gen)
        h = pub.publish(version)
        h.wait_for_reads(WAIT)
        report = h.wait_published(WAIT)
        assert report["version"] == version
        assert report["anchor"] == (version == 1)
        sub.wait_for_version(version, WAIT)
        h.wait_committed(WAIT)
        assert sub.current_version == version
        for k in src:
            assert torch.equal(src[k], dst[k]), f"{k} differs at v{version}"
        sums[version] = {k: sub.checksum(k) for k in src}
        if version > 1:
            assert report["changed_tensors"] == 3
            changed = {k for k in src if sums[version][k] != sums[version - 1][k]}
            assert changed == {"bfloat16", "int32", "bool"}
    stats = sub.stats()
    assert stats["versions_applied"] == 4
    assert stats["anchors_loaded"] == 1
    assert stats["nacks"] == 0
    assert pub.committed == 4 and pub.head == 4


def test_strided_views_of_packed_tensors_and_numpy(make_group, endpoints):
    g = make_group()
    gen = torch.Generator().manual_seed(3)
    # The trainer holds q, k, v apart; the engine packs them into one qkv allocation and
    # registers three strided column views of it, plus a transposed view and a NumPy array.
    q, k, v = (torch.randn(16, 8, generator=gen) for _ in range(3))
    wt = torch.randn(6, 10, generator=gen)
    arr = np.arange(50, dtype=np.float32)
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for name, t in (("q", q), ("k", k), ("v", v), ("wt", wt.t()), ("np", arr)):
        pub.register(name, t)
    qkv = torch.zeros(16, 24)
    w_engine = torch.zeros(10, 6)
    arr_engine = np.zeros(50, dtype=np.float32)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    for name, t in (("q", qkv[:, 0:8]), ("k", qkv[:, 8:16]), ("v", qkv[:, 16:24]),
                    ("wt", w_engine), ("np", arr_engine)):
        sub.register(name, t)
    sub.connect()
    for version in (1, 2, 3):
        if version > 1:
            k[version, 3] += 1.5
            wt[1, version] -= 2.0
            arr[version * 4] = -version
        pub.publish(version).wait_for_reads(WAIT)
        sub.wait_for_version(version, WAIT)
        assert torch.equal(qkv[:, 0:8], q)
        assert torch.equal(qkv[:, 8:16], k)
        assert torch.equal(qkv[:, 16:24], v)
        assert torch.equal(w_engine, wt.t())
        assert np.array_equal(arr_engine, arr)
    assert sub.names == ["q", "k", "v", "wt", "np"]


def test_fp8_values_held_as_uint8_round_trip(make_group, endpoints):
    # torch 1.13 has no float8: the bytes are held as uint8 and labeled by dtype=.
    g = make_group()
    gen = torch.Generator().manual_seed(5)
    src = {n: torch.randint(0, 256, (64, 8), generator=gen, dtype=torch.uint8)
           for n in ("float8_e4m3fn", "float8_e5m2")}
    dst = {n: torch.zeros_like(t) for n, t in src.items()}
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    for n in src:
        pub.register(n, src[n], dtype=n)
        sub.register(n, dst[n], dtype=n)
    sub.connect()
    for version in (1, 2):
        if version == 2:
            for t in src.values():
                t[3, :2] ^= 1  # one mantissa bit of two elements
        report = pub.publish(version).wait_published(WAIT)
        sub.wait_for_version(version, WAIT)
        assert all(torch.equal(src[n], dst[n]) for n in src)
    assert report["changed_elements"] == 4
    j = weightcast.journal.open(pub.journal_root)
    assert [t["dtype"] for t in j.tensors()] == ["float8_e4m3fn", "float8_e5m2"]


def test_register_module_by_state_dict_names(make_group, endpoints):
    g = make_group()
    torch.manual_seed(0)

    def model():
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4))
        m.register_buffer("step", torch.zeros(1, dtype=torch.int64))
        return m

    trainer, engine = model(), model()
    with torch.no_grad():
        for p in engine.parameters():
            p.zero_()
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    pub.register_module(trainer)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    sub.register_module(engine)
    assert pub.names == list(trainer.state_dict().keys())
    assert sub.names == pub.names
    sub.connect()
    opt = torch.optim.SGD(trainer.parameters(), lr=0.1)
    for version in (1, 2):
        if version > 1:
            trainer(torch.randn(4, 8)).sum().backward()
            opt.step()
            trainer.step += 1
        pub.publish(version).wait_for_reads(WAIT)
        sub.wait_for_version(version, WAIT)
        for (name, a), b in zip(trainer.state_dict().items(), engine.state_dict().values()):
            assert torch.equal(a, b), name


def test_the_snapshot_setting_reaches_the_config_and_a_bad_value_is_refused(make_group, endpoints):
    # publisher.snapshot only changes where CUDA tensors' copy lives; host tensors round-trip
    # the same with either value.
    g = make_group(snapshot="device")
    with open(g.config) as f:
        assert "publisher: {snapshot: device}" in f.read()
    src = torch.arange(64, dtype=torch.float32)
    dst = torch.zeros_like(src)
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    pub.register("x", src)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    sub.register("x", dst)
    sub.connect()
    for version in (1, 2):
        src[version] += 1
        pub.publish(version).wait_published(WAIT)
        sub.wait_for_version(version, WAIT)
        assert torch.equal(src, dst)
    bad = make_group(snapshot="gpu")
    with pytest.raises(weightcast.Error, match="snapshot"):
        weightcast.Publisher(bad.config, bad.publisher_rank, threads=1)
