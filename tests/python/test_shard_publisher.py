"""A model published by two publisher ranks through the Python package (weightcast.ShardPublisher),
each from its flat share of the model, ranges starting and ending mid-tensor (an FSDP trainer),
or from its column blocks of every matrix (a tensor-parallel trainer), to a tensor-parallel
replica of two engine ranks and an engine holding every tensor whole: after every version each
engine holds the trainer's tensors (or its blocks of them) bit for bit, though no rank held the
whole model; over ucx each engine rank reads every delta straight from the ranks' memory. A
publisher rank that is not a publisher, a range outside its tensor and an unknown
dtype are refused by name."""

import threading

import pytest
import torch

import weightcast
from conftest import WAIT
from tp2_model import LAYOUTS, PLACED, slice_engine, tp2_model

def _flat_shards(model, shards):
    """[(name, first, count)] per shard: even shares of the model's elements in flat order."""
    total = sum(t.numel() for t in model.values())
    out = []
    for k in range(shards):
        lo, hi = total * k // shards, total * (k + 1) // shards
        mine, start = [], 0
        for name, t in model.items():
            a, b = max(lo, start), min(hi, start + t.numel())
            if a < b:
                mine.append((name, a - start, b - a))
            start += t.numel()
        out.append(mine)
    return out


def _fsdp_held(src):
    """Per rank [(name, first element, its own copy, where it lies in the model)]."""
    shards = _flat_shards(src, 2)
    assert any(len(s) > 1 for s in shards), "a shard should cross a tensor boundary"
    return [[(name, first, src[name].view(-1)[first:first + n].clone(),
              lambda m, name=name, a=first, n=n: m[name].view(-1)[a:a + n])
             for name, first, n in s] for s in shards]


def _tp_held(src):
    """Per rank [(name, block offsets, its own copy, where it lies)]: matrices split by columns
    (blocks whose rows are not consecutive in the tensor), vectors by halves."""
    held = [[], []]
    for name, v in src.items():
        dim = v.dim() - 1
        for k, part in enumerate(torch.tensor_split(torch.arange(v.shape[dim]), 2)):
            lo, n = int(part[0]), len(part)
            offsets = tuple(lo if d == dim else 0 for d in range(v.dim()))

            def where(m, name=name, dim=dim, lo=lo, n=n):
                return m[name].narrow(dim, lo, n)

            held[k].append((name, offsets, where(src).contiguous(), where))
    return held


@pytest.mark.parametrize("transport", ["fs", "ucx"])
@pytest.mark.parametrize("trainer", ["fsdp", "tp"])
def test_two_publisher_ranks_publish_one_model_to_two_layouts(make_group, endpoints, trainer,
                                                             transport):
    if transport == "ucx" and not weightcast.ucx_built():
        pytest.skip("this build has no UCX (libucx-dev was not found when it was built)")
    transports = ("ucx", "fs") if transport == "ucx" else ("fs",)
    g = make_group(subscribers=3, publishers=2, layouts=LAYOUTS, subscriber_layouts=PLACED,
                   transports=transports)
    gen = torch.Generator().manual_seed(5)
    src = tp2_model(gen)
    spec = {k: (v.dtype, v.shape) for k, v in src.items()}
    # Each rank holds only its own elements, as a flat FSDP shard or as tensor-parallel blocks.
    held = _fsdp_held(src) if trainer == "fsdp" else _tp_held(src)
    pubs = []
    for k in range(2):
        mine = [(name, at, t) for name, at, t, _ in held[k]]
        p = weightcast.ShardPublisher(g.config, g.publisher_ranks[k], spec, mine, threads=1,
                                      parts_wait=20)
        endpoints.append(p)
        pubs.append(p)
    assert [p.shard for p in pubs] == [0, 1] and pubs[0].lead and not pubs[1].lead
    engines = [slice_engine(g.config, g.subscriber_rank(i), src, endpoints) for i in range(2)]
    whole = weightcast.Subscriber(g.config, g.subscriber_rank(2), threads=1)
    endpoints.append(whole)
    mirror = {k: torch.zeros_like(v) for k, v in src.items()}
    for k, v in mirror.items():
        whole.register(k, v)
    whole.connect()
    engines.append((whole, {k: ((slice(None),) * v.dim(), v) for k, v in mirror.items()}))

    for version in range(0, 5):
        if version > 0:
            for v in src.values():
                flat = v.view(-1)
                flat[torch.randint(0, flat.numel(), (4,), generator=gen)] += 1
        for k in range(2):  # the trainer ranks' shards follow their own optimizer step
            for _, _, t, where in held[k]:
                t.copy_(where(src))
        reports = [None, None]
        errors = []

        def run(k):
            try:
                reports[k] = pubs[k].publish(version)
            except weightcast.Error as e:  # noqa: PERF203: reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not errors, errors
        assert reports[0]["committed_here"] and not reports[1]["committed_here"]
        assert reports[0]["anchor"] == (version % 5 == 0)
        pubs[1].wait_committed(version, WAIT)
        for sub, blocks in engines:
            sub.wait_for_version(version, WAIT)
            for name, (block, t) in blocks.items():
                assert torch.equal(t.view(torch.int16), src[name][block].view(torch.int16)), \
                    f"rank {sub} tensor {name} at v{version}"
    # Over ucx every engine rank read deltas 1..4 from the two publisher ranks' memory.
    for sub, _ in engines:
        assert sub.stats()["versions_by_path"].get(transport) == 4, sub.stats()


def test_bad_shard_registrations_are_refused_by_name(make_group, endpoints):
    g = make_group(subscribers=1, publishers=2)
    t = torch.zeros(8, dtype=torch.bfloat16)
    spec = {"w": (torch.bfloat16, (4, 4))}
    with pytest.raises(weightcast.InvalidArgumentError, match="not a publisher rank"):
        weightcast.ShardPublisher(g.config, g.subscriber_rank(0), spec, [("w", 0, t)])
    with pytest.raises(weightcast.InvalidArgumentError, match=r"'w' elements \[12, 20\)"):
        weightcast.ShardPublisher(g.config, 2, spec, [("w", 12, t)])
    block = torch.zeros(4, 3, dtype=torch.bfloat16)
    with pytest.raises(weightcast.InvalidArgumentError, match=r"slice \[0:4, 2:5\] leaves the tensor"):
        weightcast.ShardPublisher(g.config, 2, spec, [("w", (0, 2), block)])
    with pytest.raises(weightcast.InvalidArgumentError, match="1 offsets for data of 2 dimensions"):
        weightcast.ShardPublisher(g.config, 2, spec, [("w", (0,), block)])
    with pytest.raises(weightcast.InvalidArgumentError, match="must be contiguous host memory"):
        weightcast.ShardPublisher(g.config, 2, spec, [("w", (0, 0), torch.zeros(4, 6,
                                  dtype=torch.bfloat16)[:, :3])])
    with pytest.raises(weightcast.InvalidArgumentError, match="'bfloat17' is not a dtype"):
        weightcast.ShardPublisher(g.config, 2, {"w": ("bfloat17", (4, 4))}, [("w", 0, t)])
