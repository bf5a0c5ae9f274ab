"""A rank group on this machine, started from Python: a config on loopback and a coordinator.

    with weightcast.group.LocalGroup(work_dir, subscribers=1) as g:
        pub = weightcast.Publisher(g.config, g.publisher_rank)
        sub = weightcast.Subscriber(g.config, g.subscriber_rank(0))

Rank 0 is the coordinator (a ``weightcastd`` process), ranks 1..``publishers`` the publishers
(several: each a ``weightcast.ShardPublisher`` of its shard), then the subscribers; the journal is
``<work_dir>/journal``. For tests, examples and single-host
experiments; a real group writes its config by hand (docs/CONFIG.md).
"""

import json
import os
import shutil
import socket
import subprocess
import time


def weightcastd_path():
    """$WEIGHTCASTD, the copy installed in the package (pip install), or weightcastd on PATH."""
    if os.environ.get("WEIGHTCASTD"):
        return os.environ["WEIGHTCASTD"]
    packaged = os.path.join(os.path.dirname(__file__), "bin", "weightcastd")
    if os.access(packaged, os.X_OK):
        return packaged
    found = shutil.which("weightcastd")
    if found:
        return found
    raise FileNotFoundError("weightcastd not found: set WEIGHTCASTD or put it on PATH")


def listen_on_loopback():
    """A TCP socket listening on 127.0.0.1 at a port the kernel chose.

    The coordinator is handed this very socket (``weightcastd --listen-fd``): the port is bound
    once, so no other process can take it between choosing it and serving it.
    """
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


class LocalGroup:
    """Writes ``<work_dir>/group.yaml`` and runs its coordinator until ``close()``.

    ``transports``: the config's list in preference order (default ``["fs"]``: the journal).
    ``timeouts``: overrides of the config's ``timeouts`` map (milliseconds).
    ``snapshot``: where snapshot mode keeps CUDA tensors' copy, ``"host"`` or ``"device"``
    (the config's ``publisher.snapshot``; absent: the default, host).
    ``fp8``: an FP8 group (the config's ``fp8`` section): ``True`` for the default selection
    (the linear projections), or a list of regexes over whole tensor names (``fp8.quantize``).
    ``layouts``: engine layouts (the config's ``layouts``), ``{name: {"parts": n, "rules":
    [{"match": regex, "dim": d} or {"match": regex, "whole": True}, ...]}}``; and
    ``subscriber_layouts``: for subscriber i, ``(layout, part, replica)`` or None.
    ``publishers``: publisher ranks (above 1: a sharded trainer, one ``ShardPublisher`` each).
    """

    def __init__(self, work_dir, subscribers=1, *, transports=("fs",), anchor_every=5,
                 max_in_flight=2, timeouts=None, group_id="python-local", weightcastd=None,
                 snapshot=None, fp8=None, layouts=None, subscriber_layouts=None, publishers=1):
        os.makedirs(work_dir, exist_ok=True)
        self.work_dir = os.fspath(work_dir)
        self.subscribers = subscribers
        self.publishers = publishers
        self.config = os.path.join(self.work_dir, "group.yaml")
        self.journal = os.path.join(self.work_dir, "journal")
        self._listener = listen_on_loopback()
        port = self._listener.getsockname()[1]
        t = {"heartbeat_ms": 100, "dead_after_ms": 3000, "ack_timeout_ms": 20000}
        t.update(timeouts or {})
        lines = [
            f"group_id: {group_id}",
            f'coordinator: {{endpoint: "tcp://127.0.0.1:{port}"}}',
            f"journal: {{root: journal, anchor_every: {anchor_every}, retain_anchors: 2}}",
            f"transports: [{', '.join(transports)}]",
            f"max_in_flight: {max_in_flight}",
        ]
        if snapshot is not None:
            lines.append(f"publisher: {{snapshot: {snapshot}}}")
        if fp8 is True:
            lines.append("fp8: {}")
        elif fp8:
            quoted = ", ".join("'" + p.replace("'", "''") + "'" for p in fp8)
            lines.append(f"fp8: {{quantize: [{quoted}]}}")
        if layouts:
            lines.append("layouts:")
            for name, spec in layouts.items():
                lines.append("  - " + json.dumps({"name": name, **spec}))
        lines += [
            "timeouts: {" + ", ".join(f"{k}: {v}" for k, v in t.items()) + "}",
            "ranks:",
            "  - {rank: 0, role: coordinator}",
        ]
        lines += [f"  - {{rank: {1 + k}, role: publisher}}" for k in range(publishers)]
        placed = list(subscriber_layouts or [])
        for i in range(subscribers):
            where = placed[i] if i < len(placed) else None
            extra = ""
            if where is not None:
                extra = (f", layout: {json.dumps(where[0])}, part: {int(where[1])}, "
                         f"replica: {json.dumps(where[2])}")
            lines.append(f"  - {{rank: {self.subscriber_rank(i)}, role: subscriber{extra}}}")
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")
        self._log = open(os.path.join(self.work_dir, "coordinator.log"), "wb")
        fd = self._listener.fileno()
        self._coordinator = subprocess.Popen(
            [weightcastd or weightcastd_path(), "--config", self.config, "--rank", "0",
             "--threads", "1", "--listen-fd", str(fd)],
            stdout=self._log, stderr=subprocess.STDOUT, pass_fds=(fd,))

    publisher_rank = 1

    @property
    def publisher_ranks(self):
        return [1 + k for k in range(self.publishers)]

    def subscriber_rank(self, i):
        return 1 + self.publishers + i

    def coordinator_log(self):
        with open(os.path.join(self.work_dir, "coordinator.log"), errors="replace") as f:
            return f.read()

    def close(self, timeout=10.0):
        """SIGTERM to the coordinator, SIGKILL if it has not exited within ``timeout`` s."""
        p = self._coordinator
        if p.poll() is None:
            p.terminate()
            deadline = time.monotonic() + timeout
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if p.poll() is None:
                p.kill()
                p.wait()
        self._log.close()
        self._listener.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
