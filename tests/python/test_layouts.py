"""Engine ranks that hold slices (docs/CONFIG.md ``layouts``) through the Python package: the
two ranks of a tensor-parallel replica register their shards (one weight split by rows, one by
columns, a norm whole) with register_slice and slice_of, and after every version each shard
equals the trainer's tensor at that block, bit for bit; a shard of the wrong size and a slice
on a rank without a layout are refused by name. A replica is committed on its own: while one
of its ranks refuses a version another replica is committed at it, and its own ranks are not
told so until the refusing rank holds a version again (a new anchor)."""

import glob
import json
import os
import time

import pytest
import torch

import weightcast
from conftest import WAIT
from tp2_model import LAYOUTS, PLACED, slice_engine, tp2_model

def test_a_tensor_parallel_replica_holds_its_shards_bit_exact(make_group, endpoints):
    g = make_group(subscribers=2, layouts=LAYOUTS, subscriber_layouts=PLACED)
    gen = torch.Generator().manual_seed(3)
    src = tp2_model(gen)
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for k, v in src.items():
        pub.register(k, v)
    shards = [slice_engine(g.config, g.subscriber_rank(i), src, endpoints) for i in range(2)]
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


def test_a_replica_with_a_rank_that_refuses_is_not_committed_while_another_is(make_group,
                                                                                endpoints):
    replicas = [("tp2", 0, "e0"), ("tp2", 1, "e0"), ("tp2", 0, "e1"), ("tp2", 1, "e1")]
    g = make_group(subscribers=4, layouts=LAYOUTS, subscriber_layouts=replicas)
    gen = torch.Generator().manual_seed(4)
    src = tp2_model(gen)
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for k, v in src.items():
        pub.register(k, v)
    ranks = [slice_engine(g.config, g.subscriber_rank(i), src, endpoints) for i in range(4)]
    pub.publish(1).wait_committed(WAIT)
    for sub, _ in ranks:
        sub.wait_committed(1, WAIT)
        assert sub.committed_version == 1
    # Rank 1 of replica e0 holds other bytes than version 1 in its o_proj columns (4:7), and
    # the anchor it would reload version 1 from is damaged there too: the delta of version 2,
    # which changes three of those elements, does not verify on it and it refuses the version.
    sick, sick_held = ranks[1]
    sick_held["l.0.o_proj.weight"][1].add_(1)
    _damage_anchor(g.journal, "l.0.o_proj.weight")
    for row, col in [(0, 4), (1, 5), (2, 6)]:
        src["l.0.o_proj.weight"][row, col] += 1
    pub.publish(2).wait_committed(WAIT)
    for sub, _ in ranks[2:]:  # replica e1 is committed at 2
        sub.wait_committed(2, WAIT)
    partner = ranks[0][0]
    partner.wait_for_version(2, WAIT)  # it applied version 2 ...
    deadline = time.monotonic() + WAIT
    while sick.stats()["nacks"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sick.stats()["nacks"] >= 1
    committed, held = partner.committed_version, sick.current_version
    assert committed == 1 and held in (None, 1), (committed, held)  # ... but e0 is not at 2
    # A new anchor: the refusing rank loads it, and replica e0 is committed again.
    pub.publish(3, force_anchor=True).wait_committed(WAIT)
    for sub, _ in ranks:
        sub.wait_committed(3, WAIT)
    for sub, held in ranks:
        for k, (block, shard) in held.items():
            assert torch.equal(shard.view(torch.int16), src[k][block].view(torch.int16)), k


def _damage_anchor(journal, name):
    """Flips the bytes of tensor ``name`` in every shard file of the journal's anchors."""
    for path in glob.glob(os.path.join(journal, "*", "*.safetensors")):
        with open(path, "r+b") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
            if name not in header:
                continue
            begin, end = header[name]["data_offsets"]
            f.seek(8 + size + begin)
            data = bytearray(f.read(end - begin))
            f.seek(8 + size + begin)
            f.write(bytes(b ^ 0x40 for b in data))
