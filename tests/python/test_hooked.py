"""Hooked publication from Python (include/weightcast/step.h): `with pub.step(v) as s:
s.write(view, new)` instead of `view.copy_(new)`; the guard refuses a tensor changed outside a
step, naming it; a step left by an exception is dropped."""

import pytest
import torch

import weightcast
from conftest import WAIT


def _group(make_group, endpoints, shapes):
    g = make_group()
    gen = torch.Generator().manual_seed(11)
    live = {n: torch.randn(*s, generator=gen).to(torch.bfloat16) for n, s in shapes.items()}
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for n, t in live.items():
        pub.register(n, t, hooked=True)
    engine = {n: torch.zeros_like(t) for n, t in live.items()}
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    for n, t in engine.items():
        sub.register(n, t)
    sub.connect()
    return pub, sub, live, engine, gen


def test_steps_write_whole_tensors_and_row_runs(make_group, endpoints):
    pub, sub, live, engine, gen = _group(make_group, endpoints, {"w": (32, 16), "b": (40,)})
    for version in (1, 2, 3):
        new_w = live["w"].clone()
        new_w[version, :4] += 1
        new_b = live["b"].clone()
        new_b[version] -= 1
        with pub.step(version) as s:
            s.write(live["w"][:20], new_w[:20])  # a run of rows, then the rest
            s.write(live["w"][20:], new_w[20:])
            s.write(live["b"], new_b)
            assert s.progress()["elements_written"] == 32 * 16 + 40
        assert torch.equal(live["w"], new_w) and torch.equal(live["b"], new_b)
        report = s.handle.wait_published(WAIT)
        assert report["anchor"] == (version == 1)
        if version > 1:
            assert report["changed_elements"] == 5
        sub.wait_for_version(version, WAIT)
        assert torch.equal(engine["w"], live["w"]) and torch.equal(engine["b"], live["b"])


def test_guard_refuses_a_tensor_changed_outside_the_step(make_group, endpoints):
    pub, sub, live, engine, _ = _group(make_group, endpoints, {"w": (8, 8)})
    with pub.step(1) as s:
        s.write(live["w"], live["w"].clone())
    s.handle.wait_published(WAIT)
    live["w"][0, 0] += 3  # behind the publisher's back
    with pub.step(2) as s:
        s.write(live["w"][1:], live["w"][1:].clone())
    with pytest.raises(weightcast.Error, match="'w'"):
        s.handle.wait_published(WAIT)
    # The next step is published (as an anchor) and reaches the engine.
    with pub.step(3) as s:
        s.write(live["w"], live["w"].clone())
    assert s.handle.wait_published(WAIT)["anchor"]
    sub.wait_for_version(3, WAIT)
    assert torch.equal(engine["w"], live["w"])


def test_a_step_left_by_an_exception_is_dropped(make_group, endpoints):
    pub, sub, live, engine, _ = _group(make_group, endpoints, {"w": (4, 4)})
    with pytest.raises(ZeroDivisionError):
        with pub.step(1) as s:
            s.write(live["w"][:2], live["w"][:2] * 2)
            1 / 0
    assert s.handle is None
    assert pub.head is None
    with pub.step(2) as s:
        s.write(live["w"], live["w"] + 1)
    s.handle.wait_published(WAIT)
    sub.wait_for_version(2, WAIT)
    assert torch.equal(engine["w"], live["w"])


def test_bad_writes_are_refused_naming_the_tensor(make_group, endpoints):
    pub, _, live, _, _ = _group(make_group, endpoints, {"w": (6, 6)})
    with pytest.raises(weightcast.InvalidArgumentError, match="not contiguous"):
        with pub.step(1) as s:
            strided = torch.zeros(6, 12, dtype=torch.bfloat16)[:, ::2]
            s.write(live["w"], strided)  # new values not contiguous
    with pytest.raises(weightcast.InvalidArgumentError, match="'w'"):
        with pub.step(2) as s:
            s.write(live["w"], torch.zeros(6, 6, dtype=torch.float32))  # another dtype
    with pytest.raises(weightcast.InvalidArgumentError, match="'w'"):
        with pub.step(3) as s:
            s.write(live["w"][:, 1:3], torch.zeros(6, 2, dtype=torch.bfloat16))  # not a run
    with pub.step(4) as s:
        s.write(live["w"], live["w"].clone())
    s.handle.wait_published(WAIT)
    with pytest.raises(weightcast.FailedPreconditionError, match="not newer"):
        with pub.step(4) as s:
            pass
