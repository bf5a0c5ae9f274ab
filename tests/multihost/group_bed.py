"""A weightcast rank group spread over the hosts of a NetBed (tests/multihost/netbed.py).

Layout: the coordinator (rank 0) on host "coord", the publisher (rank 1, the config's demo
model) on "trainer", one subscriber per engine host ("engine1", "engine2", ...). Every rank is
`weightcastd --config group.yaml --rank R` inside its host's namespace; the config, keys and
journal live in one directory all hosts see (the shared filesystem). Transports: UCX over TCP
(UCX_TLS=tcp) with the journal as the fallback.

The status poller runs `weightcast group status --json` on the coordinator's host and keeps
every version it has seen, so a test can check the invariant the bed exists for: each version
is committed with every acking subscriber's result "ok" and no "mismatch", or it is not
committed at all (a nack or a recovery); nothing unverified is acked.
"""

import json
import os
import re
import subprocess
import time

import netbed

COORDINATOR_PORT = 5555


def binaries():
    """weightcastd and weightcast from $WEIGHTCAST_BIN (set by CTest), else build/src."""
    here = os.path.dirname(os.path.abspath(__file__))
    bin_dir = os.environ.get("WEIGHTCAST_BIN") or os.path.join(here, "..", "..", "build", "src")
    return os.path.join(bin_dir, "weightcastd"), os.path.join(bin_dir, "weightcast")


class GroupBed:
    def __init__(self, work_dir, engines=2, parameters=2_000_000, versions=8, density=0.01,
                 step_interval_ms=0, anchor_every=5, timeouts=None, loopback=False):
        """A group config for the bed's hosts (or, with loopback, for 127.0.0.1 on one host)."""
        self.work_dir = work_dir
        self.weightcastd, self.weightcast = binaries()
        self.engines = ["engine%d" % (i + 1) for i in range(engines)]
        self.host_of_rank = {0: "coord", 1: "trainer"}
        for i, e in enumerate(self.engines):
            self.host_of_rank[2 + i] = e
        hosts = ["coord", "trainer"] + self.engines
        self.bed = netbed.NetBed(["coord"] if loopback else hosts)
        self.loopback = loopback
        if loopback:  # every rank on one host, over its loopback: the reference layout
            self.host_of_rank = {r: "coord" for r in self.host_of_rank}
        self.procs = {}
        self.seen = {}  # version -> its latest status entry
        self.last_status = None
        coord_ip = "127.0.0.1" if loopback else self.bed.address("coord")
        init = [self.weightcast, "group", "init", "--dir", work_dir, "--subscribers", str(engines),
                "--endpoint", "tcp://%s:%d" % (coord_ip, COORDINATOR_PORT),
                "--demo-parameters", str(parameters), "--demo-versions", str(versions),
                "--anchor-every", str(anchor_every), "--transports", "ucx,fs", "--ucx-tls", "tcp",
                "--demo-step-interval-ms", str(step_interval_ms)]
        subprocess.run(init, check=True, capture_output=True, timeout=60)
        self.config = os.path.join(work_dir, "group.yaml")
        self._edit_config(density, timeouts or {})

    def _edit_config(self, density, timeouts):
        """Hosts named per rank, the demo's density, and the given timeouts."""
        text = open(self.config).read()
        for rank, host in self.host_of_rank.items():
            text = re.sub(r"(\{rank: %d, role: \w+, host: )[^,]+," % rank,
                          r"\g<1>%s," % host, text)
        text = re.sub(r"density: [0-9.e-]+", "density: %g" % density, text)
        for key, value in timeouts.items():
            text = re.sub(r"%s: \d+" % key, "%s: %d" % (key, value), text)
        open(self.config, "w").write(text)

    def log_path(self, rank):
        return os.path.join(self.work_dir, "rank-%d.log" % rank)

    def start(self, rank, extra=()):
        host = self.host_of_rank[rank]
        argv = [self.weightcastd, "--config", self.config, "--rank", str(rank)] + list(extra)
        self.procs[rank] = self.bed.spawn(host, argv, self.log_path(rank))
        return self.procs[rank]

    def start_all(self):
        """Coordinator and subscribers first, the publisher last (as the demo starts them)."""
        for rank in [0] + [2 + i for i in range(len(self.engines))] + [1]:
            self.start(rank)

    def status(self, timeout_ms=2000):
        """The coordinator's status as JSON, asked from the coordinator's host; None if it
        cannot be reached. Every version seen is remembered in self.seen."""
        r = self.bed.run("coord", [self.weightcast, "group", "status", "--config", self.config,
                                   "--json", "--timeout-ms", str(timeout_ms)],
                         timeout=timeout_ms / 1000 + 10)
        if r.returncode != 0:
            return None
        s = json.loads(r.stdout)
        for v in s.get("versions", []):
            self.seen[v["version"]] = v
        self.last_status = s
        return s

    def wait_for(self, predicate, timeout_s, what, interval_s=0.2):
        """Polls status until predicate(status) holds; raises naming `what` and the last
        status (and the rank logs' tails) when timeout_s passes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.status()
            if s is not None and predicate(s):
                return s
            self._check_ranks_alive()
            time.sleep(interval_s)
        raise AssertionError("%s: not reached in %d s; last status %s\n%s" % (
            what, timeout_s, json.dumps(self.last_status)[:3000], self.logs_tail()))

    def _check_ranks_alive(self):
        for rank, p in self.procs.items():
            if p.poll() not in (None, 0) and not getattr(p, "expected_exit", False):
                raise AssertionError("rank %d on %s exited with %s\n%s" % (
                    rank, self.host_of_rank[rank], p.returncode, self.logs_tail()))

    def wait_exit(self, rank, timeout_s):
        """Waits for a rank that ends on its own (the demo publisher after its last version)
        and returns its exit status; raises with the logs when it does not end in time."""
        p = self.procs[rank]
        p.expected_exit = True
        try:
            return p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError("rank %d did not exit in %d s\n%s" % (
                rank, timeout_s, self.logs_tail()))

    def logs_tail(self, lines=15):
        out = []
        for rank in sorted(self.procs):
            try:
                text = open(self.log_path(rank), errors="replace").read().splitlines()
            except OSError:
                continue
            out.append("--- rank %d (%s):\n%s" % (rank, self.host_of_rank[rank],
                                                   "\n".join(text[-lines:])))
        return "\n".join(out)

    def member(self, s, rank):
        return next((m for m in s["members"] if m["rank"] == rank), None)

    def subscribers_hold(self, s, version, ranks=None):
        """Whether every subscriber (or those listed) is live and holds `version`."""
        ranks = ranks if ranks is not None else [2 + i for i in range(len(self.engines))]
        for r in ranks:
            m = self.member(s, r)
            if m is None or m["state"] != "live" or m["version"] != version:
                return False
        return True

    # A subscriber's result on a committed version other than an ack: it was not live then,
    # "dropped" (declared dead) or "catch_up" (it rejoins through the journal); "passed" (it
    # acked a later version, verified, having applied this one on the way); or "nack" (it
    # could not get the version and recovers through the journal).
    NOT_ACKED = ("dropped", "catch_up", "passed", "nack")

    def check_no_unverified_ack(self):
        """The bed's invariant over every version seen: a committed version carries "ok" from
        each subscriber live at the time or says why not (NOT_ACKED: never an
        unverified ack), and no version carries a "mismatch". Returns the committed versions."""
        committed = []
        for version, v in sorted(self.seen.items()):
            for rank, result in v["results"].items():
                assert result != "mismatch", "rank %s: checksum mismatch on v%d" % (rank, version)
                if v["committed"]:
                    assert result == "ok" or result in self.NOT_ACKED, (
                        "committed v%d carries rank %s's '%s'" % (version, rank, result))
            if v["committed"]:
                committed.append(version)
        return committed

    def acks(self, rank):
        """{version: transport} of the committed versions `rank` acked "ok"."""
        out = {}
        for version, v in self.seen.items():
            for sub in v["subscribers"]:
                if v["committed"] and sub["rank"] == rank and sub["result"] == "ok":
                    out[version] = sub["transport"]
        return out

    def close(self):
        self.bed.close()
