"""Engine ranks that hold slices (docs/CONFIG.md ``layouts``) through the Python package: the
two ranks of a tensor-parallel replica register their shards (one weight split by rows, one by
columns, a norm whole) with register_slice and slice_of, and after every version each shard
equals the trainer's tensor at that block, bit for bit; a shard of the wrong size and a slice
on a rank without a layout are refused by name."""

import pytest
import torch

import weightcast
from conftest import WAIT
from tp2_model import LAYOUTS, PLACED, tp2_model

def test_a_tensor_parallel_replica_holds_its_shards_bit_exact(make_group, endpoints):
    g = make_group(subscribers=2, layouts=LAYOUTS, subscriber_layouts=PLACED)
    gen = torch.Generator().manual_seed(3)
    src = tp2_model(gen)
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for k, v in src.items():
        pub.register(k, v)
    shards = []
    for i in range(2):
        sub = weightcast.Subscriber(g.config, g.subscriber_rank(i), threads=1)
        endpoints.append(sub)
        held = {}
        for k, v in src.items():
            block = sub.slice_of(k, v.shape)
            held[k] = (block, torch.zeros_like(v[block]).contiguous())
            sub.register_slice(k, held[k][1], v.shape)
        sub.connect()
        shards.append((sub, held))
    # Rows 0:3 / 3:6 of q_proj, columns 0:4 / 4:7 of o_proj, the norm whole on both.
    assert shards[1][1]["l.0.q_proj.weight"][0] == (slice(3, 6), slice(0, 10))
    assert shards[1][1]["l.0.o_proj.weight"][0] == (slice(0, 10), slice(4, 7))
    assert shards[0][1]["l.0.norm.weight"][0] == (slice(0, 10),)
    for version in range(1, 5):
        if version > 1:
            for v in src.values():
                flat = v.view(-1)
                flat[torch.randint(0, flat.numel(), (3,), generator=gen)] += 1
        pub.publish(version).wait_committed(WAIT)
        for sub, held in shards:
            sub.wait_for_version(version, WAIT)
            for k, (block, shard) in held.items():
                assert torch.equal(shard.view(torch.int16), src[k][block].view(torch.int16)), \
                    f"{k} at version {version}"


def test_registrations_that_do_not_fit_the_layout_are_refused(make_group, endpoints):
    g = make_group(subscribers=3, layouts=LAYOUTS, subscriber_layouts=PLACED)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    with pytest.raises(weightcast.InvalidArgumentError,
                       match=r"destination has 20 elements but slice \[0:3, 0:10\]"):
        sub.register_slice("l.0.q_proj.weight", torch.zeros(2, 10, dtype=torch.bfloat16), (6, 10))
    whole = weightcast.Subscriber(g.config, g.subscriber_rank(2), threads=1)
    endpoints.append(whole)
    assert whole.slice_of("l.0.q_proj.weight", (6, 10)) == (slice(0, 6), slice(0, 10))
    with pytest.raises(weightcast.FailedPreconditionError, match="names no layout"):
        whole.register_slice("l.0.q_proj.weight", torch.zeros(3, 10, dtype=torch.bfloat16),
                             (6, 10))
