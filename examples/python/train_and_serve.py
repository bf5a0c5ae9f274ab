#!/usr/bin/env python3
"""Train a small transformer with AdamW and serve it from another process through weightcast.

    make demo-python
    build/pyenv/bin/python examples/python/train_and_serve.py --steps 10   (PYTHONPATH=build/python)

One process trains (fp32 masters, torch.optim.AdamW) and publishes the bf16 model it serves
after every optimizer step; an engine process holds the same nn.Module in bf16 and receives
every version in place through a weightcast Subscriber. Both run in a rank group started from
Python (weightcast.group.LocalGroup: a coordinator on loopback, the journal in a temp dir).

After every version the engine reports, from inside after_apply (the weights cannot change
while it runs), a digest of its parameters' bytes and of its logits on a fixed batch; the
trainer checks both against its own bf16 model at that version, bit for bit, and prints the
bytes each version took next to a full bf16 state-dict send and a sparse patch (int32 flat
indices + bf16 values). Exit status 0 only when every version matched.

--mode hooked publishes through `with pub.step(v) as s: s.write(bf16_param, new_values)`
instead of a snapshot (the publisher then keeps no copy of the model).
"""

import argparse
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

import torch

import weightcast
import weightcast.group

VOCAB, SEQ = 128, 32


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class TinyLM(torch.nn.Module):
    def __init__(self, d=64, layers=2, heads=4):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, d)
        self.pos = torch.nn.Parameter(torch.zeros(SEQ, d))
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def fixed_batch():
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, VOCAB, (4, SEQ), generator=g)


def digests(model):
    """(parameters' bytes, logits' bytes on the fixed batch) as SHA-256 hex digests."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    with torch.no_grad():
        logits = model(fixed_batch())
    return h.hexdigest(), hashlib.sha256(logits.view(torch.uint8).numpy().tobytes()).hexdigest()


def model_size(args):
    return dict(d=args.width, layers=args.layers, heads=4)


def run_engine(args):
    """The engine process: a bf16 TinyLM receiving every version in place."""
    torch.set_num_threads(1)
    model = TinyLM(**model_size(args)).to(torch.bfloat16).eval()

    def after_apply(held):
        params, logits = digests(model)  # on weightcast's worker: no apply can run meanwhile
        print(json.dumps({"version": held, "params": params, "logits": logits}), flush=True)

    sub = weightcast.Subscriber(args.config, args.rank, threads=1, after_apply=after_apply)
    sub.register_module(model)
    sub.connect()
    try:
        sub.wait_for_version(args.steps + 1, timeout=args.timeout)
    finally:
        sub.close("engine done")
    return 0


def train_batch(gen, batch=8):
    """Sequences that repeat a random 4-token motif: the next token is learnable."""
    motif = torch.randint(0, VOCAB, (batch, 4), generator=gen)
    seq = motif.repeat(1, SEQ // 4 + 1)[:, : SEQ + 1]
    return seq[:, :-1], seq[:, 1:]


def run_trainer(args):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    master = TinyLM(**model_size(args))
    served = TinyLM(**model_size(args)).to(torch.bfloat16).eval()
    served.load_state_dict({k: v.to(torch.bfloat16) for k, v in master.state_dict().items()})
    opt = torch.optim.AdamW(master.parameters(), lr=args.lr)
    hooked = args.mode == "hooked"
    work = args.work_dir or tempfile.mkdtemp(prefix="wc_train_serve.")
    full_bytes = sum(t.numel() * t.element_size() for t in served.state_dict().values())
    print(f"model: {sum(p.numel() for p in master.parameters()):,} parameters, "
          f"{full_bytes:,} bytes in bf16; group in {work}; mode {args.mode}")
    with weightcast.group.LocalGroup(work, subscribers=1) as group:
        pub = weightcast.Publisher(group.config, group.publisher_rank, threads=1)
        pub.register_module(served, hooked=hooked)
        engine = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--role", "engine", "--config",
             group.config, "--rank", str(group.subscriber_rank(0)), "--steps", str(args.steps),
             "--width", str(args.width), "--layers", str(args.layers),
             "--timeout", str(args.timeout)], stdout=subprocess.PIPE, text=True)
        expected, rows, seen = {}, [], {}
        gen = torch.Generator().manual_seed(5)
        try:
            for version in range(1, args.steps + 2):
                if version > 1:
                    x, y = train_batch(gen)
                    loss = torch.nn.functional.cross_entropy(
                        master(x).reshape(-1, VOCAB), y.reshape(-1))
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                new = {k: v.to(torch.bfloat16) for k, v in master.state_dict().items()}
                if hooked:
                    with pub.step(version) as s:
                        for name, t in served.state_dict().items():
                            s.write(t, new[name])
                    handle = s.handle
                else:
                    served.load_state_dict(new)
                    handle = pub.publish(version)
                report = handle.wait_published(args.timeout)
                handle.wait_committed(args.timeout)  # every live engine acked its checksums
                expected[version] = digests(served)
                # The engine's line for this version: it is then live (its acks gate the next
                # commits), and its digests are those of exactly this version.
                seen.update(read_engine_lines(engine, version, args.timeout))
                rows.append((version, report, loss.item() if version > 1 else float("nan")))
        finally:
            pub.close()
            try:
                engine.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                engine.kill()
                engine.wait()
    rc = report_results(engine.returncode, seen, expected, rows, full_bytes)
    if rc == 0 and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)  # kept on failure, for its logs
    return rc


def read_engine_lines(engine, version, timeout):
    """The engine's digest lines up to the one of `version` (or a newer one), within timeout."""
    seen = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([engine.stdout], [], [], 0.1)
        if not ready:
            if engine.poll() is not None:
                break
            continue
        line = engine.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            r = json.loads(line)
            seen[r["version"]] = (r["params"], r["logits"])
            if r["version"] >= version:
                return seen
    raise TimeoutError(f"the engine reported no version {version} within {timeout} s")


def report_results(engine_rc, seen, expected, rows, full_bytes):
    print(f"{'ver':>4} {'loss':>7} {'kind':>6} {'changed':>9} {'weightcast B':>13} "
          f"{'full send B':>12} {'sparse patch B':>15}  engine")
    ok = engine_rc == 0
    for version, report, loss in rows:
        changed = report["changed_elements"]
        patch = changed * (4 + 2) if not report["anchor"] else full_bytes
        got = seen.get(version)
        match = got is not None and got == expected[version]
        ok = ok and match
        verdict = "params+logits equal" if match else ("MISMATCH" if got else "not seen")
        print(f"{version:>4} {loss:>7.3f} {'anchor' if report['anchor'] else 'delta':>6} "
              f"{changed:>9,} {report['stored_bytes']:>13,} {full_bytes:>12,} {patch:>15,}  "
              f"{verdict}")
    if ok:
        print(f"all {len(rows)} versions: the engine's bf16 parameters and logits equal the "
              f"trainer's bit for bit")
        return 0
    print(f"FAILED (engine exit status {engine_rc})")
    return 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=10, help="optimizer steps (versions after v1)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-5,
                   help="AdamW learning rate (RL post-training scale: sparse bf16 changes)")
    p.add_argument("--mode", choices=["snapshot", "hooked"], default="snapshot")
    p.add_argument("--timeout", type=float, default=60.0, help="bound of every wait (s)")
    p.add_argument("--work-dir", help="group directory (default: a new temp dir)")
    p.add_argument("--role", choices=["trainer", "engine"], default="trainer",
                   help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    return run_engine(args) if args.role == "engine" else run_trainer(args)


if __name__ == "__main__":
    sys.exit(main())
