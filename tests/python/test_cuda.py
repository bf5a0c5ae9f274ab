"""CUDA tensors through the Python package: a trainer's CUDA tensors published in snapshot mode
(the snapshot on the host or on the device) and through the hooked step, applied in place into
an engine's CUDA tensors, strided views of a packed parameter included; the guard refuses a
CUDA tensor changed outside the step; an in-place delta apply moves about the record's bytes
host to device, as CUPTI (torch.profiler) counts them. Skipped, saying so, where torch sees no GPU (CI); run on
a lent GPU by tests/gpu/run.sh (python_cuda.log)."""

import json
import os
import tempfile

import pytest

torch = pytest.importorskip("torch", reason="no torch in this Python")

import weightcast  # noqa: E402 (after the skip: the package itself needs no torch)
from conftest import WAIT  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: torch.cuda.is_available() is False", allow_module_level=True)

CUDA = torch.device("cuda", 0)


def _model(gen):
    """A bf16 matrix, an fp32 vector and a packed gate_up parameter whose halves are
    registered as strided views (as vLLM's packed projections are)."""
    return {
        "w": torch.randn(256, 96, generator=gen).to(torch.bfloat16).to(CUDA),
        "bias": torch.randn(300, generator=gen).to(CUDA),
        "gate_up": torch.randn(64, 2 * 48, generator=gen).to(torch.bfloat16).to(CUDA),
    }


def _views(model, packed=True):
    """The registered tensors: gate_up as its two strided halves, or (packed=False) whole."""
    if not packed:
        return dict(model)
    gu = model["gate_up"]
    return {"w": model["w"], "bias": model["bias"], "gate": gu[:, :48], "up": gu[:, 48:]}


def _trainer(make_group, endpoints, seed, **group_options):
    """A started group, a model on the GPU and a publisher (nothing registered yet)."""
    g = make_group(**group_options)
    model = _model(torch.Generator().manual_seed(seed))
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    return g, model, pub


def _engine(make_group, endpoints, g, like, packed=True):
    engine = {k: torch.zeros_like(v) for k, v in like.items()}
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    for name, view in _views(engine, packed).items():
        sub.register(name, view)
    sub.connect()
    return sub, engine


def _step(model, gen, count=40):
    """Changes `count` random elements of every tensor in place, on the GPU."""
    for t in model.values():
        flat = t.view(-1)
        idx = torch.randint(0, flat.numel(), (count,), generator=gen).to(CUDA)
        flat[idx] += 0.5


def _same(a, b):
    torch.cuda.synchronize()
    return all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


@pytest.mark.parametrize("snapshot", ["host", "device"])
def test_snapshot_mode_carries_cuda_tensors_into_cuda_tensors(make_group, endpoints, snapshot):
    g, model, pub = _trainer(make_group, endpoints, 3, snapshot=snapshot)
    gen = torch.Generator().manual_seed(4)
    for name, view in _views(model).items():
        pub.register(name, view)
    sub, engine = _engine(make_group, endpoints, g, model)
    for version in (1, 2, 3):
        if version > 1:
            _step(model, gen)
        torch.cuda.synchronize()  # the publisher reads what the stream wrote
        h = pub.publish(version)
        h.wait_for_reads(WAIT)
        report = h.wait_published(WAIT)
        assert report["anchor"] == (version == 1)
        sub.wait_for_version(version, WAIT)
        assert _same(model, engine), f"engine differs from the trainer at v{version} ({snapshot})"
        if version > 1:
            assert 0 < report["changed_elements"] <= 3 * 40


def test_hooked_cuda_writes_reach_cuda_engines(make_group, endpoints):
    g, model, pub = _trainer(make_group, endpoints, 5)
    gen = torch.Generator().manual_seed(6)
    for name, view in _views(model, packed=False).items():
        pub.register(name, view, hooked=True)
    sub, engine = _engine(make_group, endpoints, g, model, packed=False)
    for version in (1, 2, 3):
        new = {k: v.clone() for k, v in model.items()}
        if version > 1:
            _step(new, gen)
        torch.cuda.synchronize()
        with pub.step(version) as s:
            s.write(model["w"], new["w"])
            s.write(model["bias"], new["bias"])
            s.write(model["gate_up"][:40], new["gate_up"][:40])  # runs of rows
            s.write(model["gate_up"][40:], new["gate_up"][40:])
        assert _same(model, new), "the step did not write the new values into the live tensors"
        report = s.handle.wait_published(WAIT)
        assert report["anchor"] == (version == 1)
        sub.wait_for_version(version, WAIT)
        assert _same(model, engine), f"engine differs from the trainer at v{version}"


def test_a_strided_cuda_view_written_through_the_step_is_refused_by_name(make_group, endpoints):
    # Hooked CUDA writes take contiguous views (docs/DECISIONS.md "Hooked mode"); a strided one
    # is refused, and nothing of the step is published.
    _, model, pub = _trainer(make_group, endpoints, 7)
    for name, view in _views(model).items():
        pub.register(name, view, hooked=True)  # gate and up: strided halves of gate_up
    half = model["gate_up"][:, :48]
    with pytest.raises(weightcast.Error, match="strided"):
        with pub.step(1) as s:
            s.write(half, half.clone())
    assert pub.head is None


def test_guard_refuses_a_cuda_tensor_changed_outside_the_step(make_group, endpoints):
    _, model, pub = _trainer(make_group, endpoints, 9)
    pub.register("w", model["w"], hooked=True)
    with pub.step(1) as s:
        s.write(model["w"], model["w"].clone())
    s.handle.wait_published(WAIT)
    model["w"][0, 0] += 3  # behind the publisher's back, on the GPU
    torch.cuda.synchronize()
    with pub.step(2) as s:
        s.write(model["w"][1:], model["w"][1:].clone())
    with pytest.raises(weightcast.Error, match="'w'"):
        s.handle.wait_published(WAIT)


def _host_to_device_copies(run):
    """(bytes, copies) that every thread of this process copied host to device while run() ran,
    as CUPTI records them (the "gpu_memcpy" events of torch.profiler's trace)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    h2d = [e for e in events if e.get("cat") == "gpu_memcpy" and "HtoD" in e.get("name", "")]
    return sum(int(e.get("args", {}).get("bytes", 0)) for e in h2d), len(h2d)


def test_in_place_delta_apply_moves_about_the_record_bytes_host_to_device(make_group, endpoints):
    # 32 Mi bf16 elements with about 1 % changed per version. The trainer's snapshot is on the
    # host (its copies go device to host only), so every host-to-device byte is the engine's.
    g = make_group(snapshot="host")
    gen = torch.Generator().manual_seed(11)
    model = {"w": torch.randn(4096, 8192, generator=gen).to(torch.bfloat16).to(CUDA)}
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=2)
    endpoints.append(pub)
    pub.register("w", model["w"])
    sub, engine = _engine(make_group, endpoints, g, model, packed=False)
    for version in (1, 2, 3):
        if version > 1:
            _step(model, gen, count=330_000)
        torch.cuda.synchronize()
        out = {}

        def publish_and_apply(version=version, out=out):
            h = pub.publish(version)
            h.wait_for_reads(WAIT)
            out["report"] = h.wait_published(WAIT)
            sub.wait_for_version(version, WAIT)

        if version == 1:
            publish_and_apply()
            continue
        moved, copies = _host_to_device_copies(publish_and_apply)
        assert _same(model, engine), f"engine differs from the trainer at v{version}"
        record = out["report"]["stored_bytes"]
        print(
            f"v{version}: {moved} bytes host to device in {copies} copies for a {record}-byte "
            f"delta of {out['report']['changed_elements']} elements: {moved / record:.3f} x"
        )
        assert copies > 0, "the profiler saw no host-to-device copy, yet the record must cross"
        assert moved <= 1.1 * record, f"{moved} bytes crossed for a {record}-byte record"
