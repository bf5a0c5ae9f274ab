"""weightcast.torch.hook_optimizer (snapshot and hooked modes) and weightcast.vllm.WorkerExtension
against a stand-in worker (vLLM needs a GPU and is not installed here: the stand-in has vLLM's
shape, a model_runner.model with fused qkv and a load_weights that maps the trainer's names; and
the two engine ranks of a tensor-parallel replica, each holding only its shards)."""

import time
import types

import pytest
import torch

import weightcast
import weightcast.torch
import weightcast.vllm
from conftest import WAIT
from tp2_model import LAYOUTS, PLACED, tp2_model


class Tiny(torch.nn.Module):
    """The trainer's model, with Hugging Face-style separate q/k/v projections."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16, dtype=dtype)
        self.q_proj = torch.nn.Linear(16, 16, bias=False, dtype=dtype)
        self.k_proj = torch.nn.Linear(16, 16, bias=False, dtype=dtype)
        self.v_proj = torch.nn.Linear(16, 16, bias=False, dtype=dtype)
        self.norm = torch.nn.LayerNorm(16, dtype=dtype)


def _pair(make_group, endpoints, trainer, hooked=False):
    g = make_group()
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    pub.register_module(trainer, hooked=hooked)
    return g, pub


def test_hook_optimizer_publishes_after_every_adamw_step(make_group, endpoints):
    torch.manual_seed(0)
    trainer = Tiny()
    g, pub = _pair(make_group, endpoints, trainer)
    engine = Tiny()
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    sub.register_module(engine)
    sub.connect()
    opt = torch.optim.AdamW(trainer.parameters(), lr=1e-2)
    hook = weightcast.torch.hook_optimizer(opt, pub)
    assert hook.version == 1 and hook.overlap  # no buffers: reads may overlap the next forward
    for i in range(3):
        opt.zero_grad()
        x = trainer.embed(torch.randint(0, 32, (4,)))
        (trainer.q_proj(x) * trainer.v_proj(x)).sum().backward()
        opt.step()
        assert hook.version == 2 + i
        sub.wait_for_version(hook.version, WAIT)
        hook.wait_committed(WAIT)
        for (name, a), b in zip(trainer.state_dict().items(), engine.state_dict().values()):
            assert torch.equal(a, b), (hook.version, name)
    hook.remove()
    opt.step()
    assert hook.version == 4 and pub.head == 4


class Normed(torch.nn.Module):
    """A model whose forward changes registered tensors: batch norm's running statistics."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.bn = torch.nn.BatchNorm1d(16)

    def forward(self, x):
        return self.bn(self.proj(x))


def test_a_forward_that_changes_buffers_waits_for_the_reads_of_each_version(make_group,
                                                                            endpoints):
    torch.manual_seed(3)
    trainer = Normed()
    g, pub = _pair(make_group, endpoints, trainer)
    assert "bn.running_mean" in pub.buffer_names and "proj.weight" not in pub.buffer_names
    engine = Normed()
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    sub.register_module(engine)
    sub.connect()
    opt = torch.optim.SGD(trainer.parameters(), lr=0.1)
    hook = weightcast.torch.hook_optimizer(opt, pub)
    assert not hook.overlap
    for _ in range(3):
        hook.handle.wait_for_reads(0)  # step() (and the initial publish) returned after the reads
        opt.zero_grad()
        trainer(torch.randn(8, 16)).sum().backward()  # running stats change here
        opt.step()
    # each version built on the one before: a read racing a forward would have failed a checksum
    sub.wait_for_version(hook.version, WAIT)
    for (name, a), b in zip(trainer.state_dict().items(), engine.state_dict().values()):
        assert torch.equal(a, b), name
    assert weightcast.torch.hook_optimizer(torch.optim.SGD(trainer.parameters(), lr=0.1), pub,
                                           publish_initial=False, overlap=True).overlap


class OffloadAdam:
    """An offload optimizer's shape: fp32 masters elsewhere, new values copied into the bf16
    parameters with param.data.copy_ (what hook_optimizer's hooked mode routes)."""

    def __init__(self, params, lr):
        self.params = list(params)
        self.masters = [p.detach().float().clone() for p in self.params]
        self.lr = lr

    def step(self):
        for p, m in zip(self.params, self.masters):
            if p.grad is not None:
                m -= self.lr * torch.sign(p.grad.float()) * (torch.rand_like(m) < 0.3)
            p.data.copy_(m)


def test_hooked_mode_routes_an_offload_optimizers_copies(make_group, endpoints):
    torch.manual_seed(1)
    trainer = Tiny(dtype=torch.bfloat16)
    trainer.register_buffer("scale", torch.ones(4, dtype=torch.bfloat16))
    g, pub = _pair(make_group, endpoints, trainer, hooked=True)
    assert pub.hooked_names == [n for n, _ in trainer.named_parameters()]  # buffers: snapshot
    engine = Tiny(dtype=torch.bfloat16)
    engine.register_buffer("scale", torch.zeros(4, dtype=torch.bfloat16))
    sub = weightcast.Subscriber(g.config, g.subscriber_rank(0), threads=1)
    endpoints.append(sub)
    sub.register_module(engine)
    sub.connect()
    # norm.* are frozen: the optimizer never copies into them, hook_optimizer writes them as
    # they are so that each step still covers every hooked element.
    opt = OffloadAdam([p for n, p in trainer.named_parameters() if not n.startswith("norm")],
                      lr=0.05)
    hook = weightcast.torch.hook_optimizer(opt, pub)
    assert not hook.overlap  # a buffer: each version is read before step() returns
    for _ in range(3):
        hook.handle.wait_for_reads(0)  # already done: the buffer may change now
        trainer.scale += 1  # a buffer, published by snapshot alongside the hooked tensors
        trainer.zero_grad()
        trainer.q_proj(trainer.embed(torch.randint(0, 32, (4,)))).sum().backward()
        opt.step()
        report = hook.handle.wait_published(WAIT)
        assert not report["anchor"] and report["changed_elements"] > 0
        sub.wait_for_version(hook.version, WAIT)
        for (name, a), b in zip(trainer.state_dict().items(), engine.state_dict().values()):
            assert torch.equal(a, b), (hook.version, name)
    assert torch.Tensor.copy_ is weightcast.torch._original_copy  # restored after each step


def test_hooked_mode_refuses_an_in_place_optimizer_naming_the_tensor(make_group, endpoints):
    torch.manual_seed(2)
    trainer = Tiny(dtype=torch.bfloat16)
    _, pub = _pair(make_group, endpoints, trainer, hooked=True)
    opt = torch.optim.SGD(trainer.parameters(), lr=0.5)
    hook = weightcast.torch.hook_optimizer(opt, pub)
    hook.handle.wait_published(WAIT)
    trainer.q_proj(trainer.embed(torch.randint(0, 32, (4,)))).sum().backward()
    opt.step()  # SGD updates in place: no write goes through the step
    with pytest.raises(weightcast.Error, match="q_proj.weight|embed.weight"):
        hook.handle.wait_published(WAIT)


class FusedEngineModel(torch.nn.Module):
    """vLLM's layout: q/k/v fused into one parameter, loaded by load_weights."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.qkv_proj = torch.nn.Linear(16, 48, bias=False)
        self.norm = torch.nn.LayerNorm(16)
        self.loads = 0

    def load_weights(self, weights):
        rows = {"q_proj.weight": 0, "k_proj.weight": 16, "v_proj.weight": 32}
        loaded = set()
        with torch.no_grad():
            for name, w in weights:
                self.qkv_proj.weight[rows[name]:rows[name] + 16].copy_(w)
                loaded.add(name)
        self.loads += 1
        return loaded


class StandInWorker(weightcast.vllm.WorkerExtension):
    def __init__(self, model):
        self.model_runner = types.SimpleNamespace(model=model)


def test_worker_extension_applies_only_inside_updates(make_group, endpoints):
    torch.manual_seed(3)
    trainer = Tiny()
    g, pub = _pair(make_group, endpoints, trainer)
    pub.publish(1).wait_published(WAIT)
    worker = StandInWorker(FusedEngineModel())
    model = worker.model_runner.model
    status = worker.weightcast_init(g.config, g.subscriber_rank(0), timeout=WAIT, threads=1)
    endpoints.append(types.SimpleNamespace(close=worker.weightcast_close))
    assert sorted(status["direct"]) == ["embed.weight", "norm.bias", "norm.weight"]
    assert sorted(status["staged"]) == ["k_proj.weight", "q_proj.weight", "v_proj.weight"]

    def check(version):
        assert worker.weightcast_status()["version"] == version
        assert torch.equal(model.embed.weight, trainer.embed.weight)
        assert torch.equal(model.norm.weight, trainer.norm.weight)
        fused = torch.cat([trainer.q_proj.weight, trainer.k_proj.weight, trainer.v_proj.weight])
        assert torch.equal(model.qkv_proj.weight, fused)

    worker.weightcast_update(1, WAIT)
    check(1)
    with torch.no_grad():
        trainer.embed.weight[3] += 1
        trainer.k_proj.weight[2, 2] -= 1
    pub.publish(2).wait_published(WAIT)
    time.sleep(0.5)  # v2 reached the subscriber; it waits in before_apply for an update
    assert worker.weightcast_status()["version"] == 1
    assert not torch.equal(model.embed.weight, trainer.embed.weight)
    status = worker.weightcast_update(2, WAIT)
    check(2)
    assert status["stats"]["versions_applied"] == 2 and model.loads == 2
    with pytest.raises(TimeoutError):
        worker.weightcast_update(3, timeout=0.3)


class ShardModel:
    """An engine rank's model holding its tensor-parallel shards under the trainer's names."""

    def __init__(self, tensors):
        self.tensors = tensors

    def state_dict(self, keep_vars=False):
        return dict(self.tensors)


def test_worker_extension_of_a_tensor_parallel_rank_registers_its_shards(make_group, endpoints):
    g = make_group(subscribers=2, layouts=LAYOUTS, subscriber_layouts=PLACED)
    src = tp2_model(torch.Generator().manual_seed(7))
    pub = weightcast.Publisher(g.config, g.publisher_rank, threads=1)
    endpoints.append(pub)
    for name, t in src.items():
        pub.register(name, t)
    pub.publish(1).wait_published(WAIT)
    workers = []
    for part in range(2):
        rank = g.subscriber_rank(part)
        rows, cols = slice(3 * part, 3 * part + 3), slice(4 * part, 4 * part + 4 - part)
        shards = {"l.0.q_proj.weight": torch.zeros(3, 10, dtype=torch.bfloat16),
                  "l.0.o_proj.weight": torch.zeros(10, 4 - part, dtype=torch.bfloat16),
                  "l.0.norm.weight": torch.zeros(10, dtype=torch.bfloat16)}
        worker = StandInWorker(ShardModel(shards))
        status = worker.weightcast_init(g.config, rank, timeout=WAIT, threads=1)
        endpoints.append(types.SimpleNamespace(close=worker.weightcast_close))
        assert sorted(status["sliced"]) == ["l.0.o_proj.weight", "l.0.q_proj.weight"], status
        assert status["direct"] == ["l.0.norm.weight"] and status["staged"] == []
        workers.append((worker, shards, rows, cols))
    for version in (1, 2):
        if version == 2:
            src["l.0.q_proj.weight"][4, 1] += 1  # part 1's rows
            src["l.0.o_proj.weight"][2, 0] += 1  # part 0's columns
            pub.publish(2).wait_published(WAIT)
        for worker, shards, rows, cols in workers:
            worker.weightcast_update(version, WAIT)
            assert torch.equal(shards["l.0.q_proj.weight"], src["l.0.q_proj.weight"][rows])
            assert torch.equal(shards["l.0.o_proj.weight"], src["l.0.o_proj.weight"][:, cols])
            assert torch.equal(shards["l.0.norm.weight"], src["l.0.norm.weight"])
