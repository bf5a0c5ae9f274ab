"""Bad input from Python: it fails loudly and names what is wrong, never hangs past its bound."""

import gc
import os
import signal
import threading
import time
import weakref

import pytest
import torch

import weightcast
from conftest import WAIT


def _pair(make_group, endpoints, engine_tensor, **sub_options):
    g = make_group()
    src = torch.randn(8, 4)
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    pub.register("w", src)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1, **sub_options)
    endpoints.append(sub)
    sub.register("w", engine_tensor)
    sub.connect()
    return g, pub, sub, src


@pytest.mark.parametrize("engine", [torch.zeros(4, 8), torch.zeros(8, 4, dtype=torch.float16)],
                         ids=["shape", "dtype"])
def test_an_engine_tensor_unlike_the_trainers_is_nacked_and_never_written(make_group, endpoints,
                                                                          engine):
    _, pub, sub, _ = _pair(make_group, endpoints, engine)
    pub.publish(1).wait_published(WAIT)
    with pytest.raises(weightcast.DeadlineExceededError, match="version 1 not reached"):
        sub.wait_for_version(1, timeout=2.0)
    assert sub.stats()["nacks"] >= 1
    assert sub.current_version is None
    assert torch.count_nonzero(engine) == 0


def test_a_rank_of_another_role_is_refused_naming_the_file(make_group):
    g = make_group()
    with pytest.raises(weightcast.InvalidArgumentError, match="group.yaml: rank 1 is a publisher"):
        weightcast.Subscriber(g.config, g.publisher_rank)
    with pytest.raises(weightcast.InvalidArgumentError, match="rank 2 is a subscriber"):
        weightcast.Publisher(g.config, g.subscriber_rank(0))


def test_registered_tensors_are_kept_alive(make_group, endpoints):
    g = make_group()
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    src, dst = torch.full((1000,), 2.5), torch.zeros(1000)
    src_ref, dst_ref = weakref.ref(src), weakref.ref(dst)
    pub.register("w", src)
    sub.register("w", dst)
    del src, dst  # the caller drops its references; the endpoints keep theirs
    gc.collect()
    assert src_ref() is not None and dst_ref() is not None
    torch.zeros(1000).fill_(-1)  # an allocation that would reuse freed memory
    sub.connect()
    pub.publish(1).wait_for_reads(WAIT)
    sub.wait_for_version(1, WAIT)
    assert torch.equal(dst_ref(), torch.full((1000,), 2.5))


def test_publishing_an_older_version_is_refused(make_group, endpoints):
    _, pub, sub, _ = _pair(make_group, endpoints, torch.zeros(8, 4))
    pub.publish(3).wait_published(WAIT)
    with pytest.raises(weightcast.FailedPreconditionError, match="version 2 is not newer than 3"):
        pub.publish(2)
    with pytest.raises(weightcast.FailedPreconditionError, match="registered after"):
        pub.register("late", torch.zeros(2))


def test_a_callback_that_raises_is_raised_by_the_next_wait(make_group, endpoints):
    calls = []

    def before(v):
        calls.append(v)
        if v == 2:
            raise RuntimeError("engine refused to pause")

    engine = torch.zeros(8, 4)
    _, pub, sub, src = _pair(make_group, endpoints, engine, before_apply=before)
    seen = []
    sub.on_version(seen.append)
    pub.publish(1).wait_for_reads(WAIT)
    sub.wait_for_version(1, WAIT)
    src[0, 0] += 1
    pub.publish(2).wait_for_reads(WAIT)
    with pytest.raises(weightcast.CallbackError, match="before_apply.*version 2") as info:
        sub.wait_for_version(2, WAIT)
    assert isinstance(info.value.__cause__, RuntimeError)
    # The C++ endpoint cannot refuse a version from its callback: v2 was applied and verified.
    assert sub.current_version == 2 and torch.equal(engine, src)
    assert calls == [1, 2] and seen == [1, 2]
    assert sub.stats()["callback_errors"] == 1
    sub.wait_for_version(2, WAIT)  # reported once


def test_ctrl_c_interrupts_a_wait(make_group, endpoints):
    _, _, sub, _ = _pair(make_group, endpoints, torch.zeros(8, 4))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sub.wait_for_version(99, timeout=20)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 5


def test_a_wait_ends_at_its_timeout(make_group, endpoints):
    _, pub, _, _ = _pair(make_group, endpoints, torch.zeros(8, 4))
    h = pub.publish(1)
    h.wait_for_reads(WAIT)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        pub.wait_committed(5, timeout=0.5)
    assert 0.4 < time.monotonic() - start < 3


def test_a_closed_endpoint_refuses_calls(make_group):
    g = make_group()
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    pub.close()
    pub.close()  # idempotent
    with pytest.raises(weightcast.FailedPreconditionError, match="closed"):
        pub.publish(1)
