"""A multi-host test bed on one machine: network namespaces joined by veth pairs and a bridge.

Each "host" is a network namespace with one interface, ``eth0``, whose peer end sits in a
switch namespace on the bridge ``br0``; every host has its own address in 10.213.0.0/24, a
range used only inside these namespaces (the namespaces are isolated from the machine's own
network and from every other bed, so two beds may use the same addresses at once). Processes
started with :meth:`NetBed.spawn` run inside a host's namespace and, with a UTS namespace of
their own, under that host's name, so ``weightcast group status`` and the rank logs tell hosts
apart. The filesystem is shared, as a cluster's shared filesystem would be.

Faults act on the host's port of the switch (``tc netem`` delay/loss, link down/up), so a
host's process sees what a real cable or switch port fault does: packets delayed, dropped or
lost without a reset.

Teardown: :meth:`NetBed.close` kills every process the bed started (SIGTERM, then SIGKILL
after a grace period) and deletes the namespaces, which removes their veth pairs. It runs on
``with`` exit, at interpreter exit and on SIGTERM/SIGINT. Namespaces left by a bed whose
process was SIGKILLed (its name carries its pid) are deleted by the next bed that starts.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ``ip`` and ``tc`` (iproute2) and ``unshare``
(util-linux); :func:`why_unavailable` says which is missing so a test can skip with the reason.
"""

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SUBNET = "10.213.0"
_NAME = re.compile(r"^wcb(\d+)x\d+-")  # wcb<pid>x<bed number in that process>-<host>
_beds_made = [0]


def _run(argv, check=True, timeout=20):
    """Runs a short iproute2 command; raises with its stderr when it fails and check is set."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("'%s' failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    return p


def why_unavailable():
    """None when a bed can be built here, else the reason (for pytest.skip)."""
    if os.geteuid() != 0:
        return "the multi-host test bed needs root (network namespaces, veth, tc)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return "'%s' is not on PATH (apt-get install iproute2 util-linux)" % tool
    probe = "wcb%d-probe" % os.getpid()
    p = _run(["ip", "netns", "add", probe], check=False)
    if p.returncode != 0:
        return "cannot create a network namespace here: " + p.stderr.strip()
    _run(["ip", "netns", "del", probe], check=False)
    return None


def netem_unavailable(bed):
    """None when `tc netem` works on the bed's links, else why (kernels built without
    CONFIG_NET_SCH_NETEM, such as some VMs', have no delay qdisc)."""
    host = bed.hosts[0]
    p = _run(["tc", "-n", bed.netns(host), "qdisc", "replace", "dev", "eth0", "root", "netem",
              "delay", "1ms"], check=False)
    if p.returncode != 0:
        return "tc netem is unavailable in this kernel (%s): no link delay can be emulated" % (
            p.stderr.strip())
    bed.clear_netem(host)
    return None


def remove_stale_beds():
    """Deletes namespaces of beds whose process is gone (SIGKILLed before its teardown)."""
    listing = _run(["ip", "netns", "list"], check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME.match(name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            _run(["ip", "netns", "del", name], check=False)


class NetBed:
    """Hosts (network namespaces) on one bridge. ``hosts`` are short names, e.g. "coord"."""

    def __init__(self, hosts, grace_s=10.0):
        remove_stale_beds()
        _beds_made[0] += 1
        self.tag = "wcb%dx%d" % (os.getpid(), _beds_made[0])
        self.switch = self.tag + "-sw"
        self.hosts = list(hosts)
        self.grace_s = grace_s
        self.procs = []
        self._closed = False
        self._previous_handlers = {}
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous_handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._build()
        except Exception:
            self.close()
            raise

    # Names and addresses.
    def netns(self, host):
        return "%s-%s" % (self.tag, host)

    def address(self, host):
        return "%s.%d" % (SUBNET, self.hosts.index(host) + 1)

    def port(self, host):
        """The host's port on the switch (a veth end in the switch namespace)."""
        return "%sp%d" % (self.tag, self.hosts.index(host))

    def _build(self):
        _run(["ip", "netns", "add", self.switch])
        _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
        for i, host in enumerate(self.hosts):
            ns, port, inner = self.netns(host), self.port(host), "%sh%d" % (self.tag, i)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", port, "type", "veth", "peer", "name", inner])
            _run(["ip", "link", "set", port, "netns", self.switch])
            _run(["ip", "link", "set", inner, "netns", ns])
            _run(["ip", "-n", ns, "link", "set", inner, "name", "eth0"])
            _run(["ip", "-n", self.switch, "link", "set", port, "master", "br0"])
            _run(["ip", "-n", self.switch, "link", "set", port, "up"])
            _run(["ip", "-n", ns, "addr", "add", self.address(host) + "/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    # Processes.
    def command(self, host, argv):
        """argv wrapped to run inside `host`'s namespace under the host's name."""
        return ["ip", "netns", "exec", self.netns(host), "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host] + list(argv)

    def spawn(self, host, argv, log_path, env=None):
        """Starts argv on `host`, output appended to log_path; the bed stops it at close()."""
        log = open(log_path, "ab")
        p = subprocess.Popen(self.command(host, argv), stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        log.close()
        p.host, p.log_path = host, log_path
        self.procs.append(p)
        return p

    def run(self, host, argv, timeout=30, env=None):
        """Runs argv on `host` to completion (bounded); returns the CompletedProcess."""
        return subprocess.run(self.command(host, argv), capture_output=True, text=True,
                              timeout=timeout, env=env)

    def stop(self, proc, sig=signal.SIGTERM):
        """Signals a process the bed started and waits for it (SIGKILL after the grace)."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=self.grace_s)
        return proc.returncode

    # Faults, on the host's switch port (both directions where it matters).
    def netem(self, host, *args):
        """tc netem on the host's link both ways, e.g. netem("engine1", "delay", "50ms")."""
        for ns, dev in ((self.switch, self.port(host)), (self.netns(host), "eth0")):
            _run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "netem"] + list(args))

    def delay(self, host, ms):
        """Every frame to and from the host held `ms` milliseconds: `tc netem` where the kernel
        has it, else a user-space delay line (tests/multihost/delay_line.py) spliced between
        the host's port and the bridge. Returns which of the two it used."""
        if netem_unavailable(self) is None:
            self.netem(host, "delay", "%dms" % ms)
            return "netem"
        i = self.hosts.index(host)
        near, far = "%sd%d" % (self.tag, i), "%se%d" % (self.tag, i)
        _run(["ip", "-n", self.switch, "link", "set", self.port(host), "nomaster"])
        _run(["ip", "-n", self.switch, "link", "add", near, "type", "veth", "peer", "name", far])
        _run(["ip", "-n", self.switch, "link", "set", far, "master", "br0"])
        for dev in (near, far, self.port(host)):
            _run(["ip", "-n", self.switch, "link", "set", dev, "up", "promisc", "on"])
        line = os.path.join(os.path.dirname(os.path.abspath(__file__)), "delay_line.py")
        p = subprocess.Popen(["ip", "netns", "exec", self.switch, sys.executable, line,
                              self.port(host), near, str(ms)], stdin=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        time.sleep(0.2)
        if p.poll() is not None:
            raise RuntimeError("the delay line of %s exited with %s" % (host, p.returncode))
        return "delay line"

    def rate_limit(self, host, rate):
        """Traffic towards the host held to `rate` (e.g. "8mbit") by a token bucket (tbf), so
        what it receives takes measurable time: a version stays in flight to it long enough
        to be caught there."""
        _run(["tc", "-n", self.switch, "qdisc", "replace", "dev", self.port(host), "root", "tbf",
              "rate", rate, "burst", "32kbit", "latency", "5s"])

    def clear_netem(self, host):
        for ns, dev in ((self.switch, self.port(host)), (self.netns(host), "eth0")):
            _run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)

    def cut(self, host):
        """The host's cable pulled: its switch port goes down, its eth0 loses carrier."""
        _run(["ip", "-n", self.switch, "link", "set", self.port(host), "down"])

    def restore(self, host):
        _run(["ip", "-n", self.switch, "link", "set", self.port(host), "up"])

    # Teardown.
    def _on_signal(self, sig, frame):
        self.close()
        previous = self._previous_handlers.get(sig)
        if callable(previous):
            previous(sig, frame)
        raise SystemExit(128 + sig)

    def close(self):
        if self._closed:
            return
        self._closed = True
        for p in self.procs:
            try:
                self.stop(p)
            except Exception:  # keep tearing down: the namespaces must go either way
                pass
        for ns in [self.netns(h) for h in self.hosts] + [self.switch]:
            _run(["ip", "netns", "del", ns], check=False)
        for sig, previous in self._previous_handlers.items():
            signal.signal(sig, previous)
        atexit.unregister(self.close)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
