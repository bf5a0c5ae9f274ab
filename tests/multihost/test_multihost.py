"""A rank group on four hosts (network namespaces on one bridge, tests/multihost/netbed.py):
versions over UCX-TCP between hosts, then faults of the network: loss and delay on an
engine's link, an engine cut off mid-version, the coordinator's host cut off, the trainer's
host cut during a publication. After each, every version is committed with every live
engine's verified ack, or not committed (nacked, dropped, caught up from the journal); no
engine ends on a wrong version; every wait has a deadline."""

import json
import subprocess
import time

import pytest

ENGINES = (2, 3)  # subscriber ranks: engine1, engine2


def link_bytes(bed, host):
    """Bytes received and sent on the host's eth0 (kernel counters)."""
    r = subprocess.run(["ip", "-n", bed.netns(host), "-s", "-j", "link", "show", "eth0"],
                       capture_output=True, text=True, check=True, timeout=10)
    stats = json.loads(r.stdout)[0]["stats64"]
    return stats["rx"]["bytes"], stats["tx"]["bytes"]


def finish(g, last, timeout_s):
    """Waits until `last` is committed and every engine is live holding it; then checks the
    invariant and that every version 0..last was committed."""
    g.wait_for(lambda s: s.get("committed_version") == last and g.subscribers_hold(s, last),
               timeout_s, "v%d committed and held by every engine" % last)
    committed = g.check_no_unverified_ack()
    assert committed == list(range(last + 1)), "committed versions: %s" % committed
    return committed


def test_every_version_crosses_hosts_over_ucx_tcp_and_ranks_name_their_hosts(make_group):
    g = make_group(parameters=4_000_000, versions=8, step_interval_ms=300)
    before = {e: link_bytes(g.bed, g.host_of_rank[e])[0] for e in ENGINES}
    g.start_all()
    finish(g, 8, 120)
    s = g.last_status
    for rank, host in g.host_of_rank.items():
        pid = g.procs[rank].pid  # `ip netns exec` and `unshare` exec in place: weightcastd's pid
        if rank != 0:  # the coordinator is not a member of its own status
            m = g.member(s, rank)
            assert m is not None and (m["host"], m["pid"]) == (host, pid), "rank %d: %s" % (rank, m)
        role = "coordinator" if rank == 0 else "publisher" if rank == 1 else "subscriber"
        assert "[%s %d %s/%d]" % (role, rank, host, pid) in open(g.log_path(rank)).read()
    for e in ENGINES:
        acks = g.acks(e)
        over_ucx = [v for v, t in acks.items() if t == "ucx"]
        assert len(over_ucx) >= 4, "rank %d acked over ucx only %s (all: %s)" % (e, over_ucx, acks)
        read = sum(sub["bytes_read"] for v in g.seen.values() for sub in v["subscribers"]
                   if sub["rank"] == e and sub["result"] == "ok" and sub["transport"] == "ucx")
        received = link_bytes(g.bed, g.host_of_rank[e])[0] - before[e]
        # What the engine read over UCX came in through its own link, not a local shortcut.
        assert received >= read > 0, "rank %d: read %d bytes over ucx, its link received %d" % (
            e, read, received)


def drop_one_percent(bed, host):
    """1 % of the host's packets dropped both ways (nftables' random numbers: this works
    where the kernel has no netem)."""
    rules = ("add table inet wcloss\n"
             "add chain inet wcloss in { type filter hook input priority 0; }\n"
             "add chain inet wcloss out { type filter hook output priority 0; }\n"
             "add rule inet wcloss in numgen random mod 100 < 1 drop\n"
             "add rule inet wcloss out numgen random mod 100 < 1 drop\n")
    r = subprocess.run(["ip", "netns", "exec", bed.netns(host), "nft", "-f", "-"], input=rules,
                       capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        pytest.skip("nft cannot drop packets here: " + r.stderr.strip())


def check_deadlines(g, ack_timeout_ms):
    for version, v in g.seen.items():
        if v["committed"]:
            assert v["publish_to_commit_us"] < ack_timeout_ms * 1000, (
                "v%d took %d us to commit" % (version, v["publish_to_commit_us"]))


def test_versions_commit_with_one_percent_loss_on_an_engine_link(make_group):
    if subprocess.run(["which", "nft"], capture_output=True).returncode != 0:
        pytest.skip("nft is not installed (apt-get install nftables)")
    g = make_group(parameters=4_000_000, versions=8, step_interval_ms=200,
                   timeouts={"ack_timeout_ms": 20000})
    drop_one_percent(g.bed, "engine1")
    g.start_all()
    finish(g, 8, 150)
    check_deadlines(g, 20000)
    assert len(g.acks(2)) >= 4, "engine1 acked %s" % g.acks(2)


def test_versions_commit_with_fifty_ms_delay_and_one_percent_loss(make_group):
    if subprocess.run(["which", "nft"], capture_output=True).returncode != 0:
        pytest.skip("nft is not installed (apt-get install nftables)")
    g = make_group(parameters=4_000_000, versions=12, step_interval_ms=300,
                   timeouts={"ack_timeout_ms": 20000})
    how = g.bed.delay("engine1", 50)  # tc netem, or the delay line where the kernel has none
    drop_one_percent(g.bed, "engine1")
    g.start_all()
    finish(g, 12, 150)
    check_deadlines(g, 20000)
    # The delay is real. Each of engine1's fetches over UCX takes at least a round trip
    # (100 ms). A commit that waited for its ack also took the offer's way in and the ack's way
    # out; a loss, or a late join on a loaded machine, can have engine1 catching up, and what
    # it acks then comes after commits that did not wait for it (after_commit).
    over_ucx = [(version, sub) for version, v in g.seen.items() for sub in v["subscribers"]
                if sub["rank"] == 2 and sub["result"] == "ok" and sub["transport"] == "ucx"]
    assert over_ucx, "engine1 acked nothing over ucx: %s" % g.acks(2)
    fetches = {version: sub["apply_us"] for version, sub in over_ucx}
    assert min(fetches.values()) >= 100_000, "fetches faster than the link's round trip " \
        "(%s): %s" % (how, fetches)
    waited = {version: g.seen[version]["publish_to_commit_us"] for version, sub in over_ucx
              if g.seen[version]["committed"] and not sub["after_commit"]}
    assert all(us >= 100_000 for us in waited.values()), "commits faster than the link's " \
        "delay (%s): %s" % (how, waited)


def test_a_publisher_that_ends_while_a_distant_engine_connects_exits_cleanly(make_group):
    # The publisher's last version goes out while engine1, 100 ms of round trip away, is
    # still setting up its UCX endpoint to it; the publisher then stops. Three short groups,
    # since the race does not happen every time (without the flush before the worker is
    # destroyed, ucx_context.h, about one run in three aborted inside UCX).
    for attempt in range(3):
        g = make_group(parameters=4_000_000, versions=6, step_interval_ms=200,
                       timeouts={"ack_timeout_ms": 20000})
        g.bed.delay("engine1", 50)
        g.start_all()
        finish(g, 6, 120)
        rc = g.wait_exit(1, 30)
        assert rc == 0, "attempt %d: the publisher exited with %s\n%s" % (
            attempt, rc, g.logs_tail(40))
        g.close()


def wait_in_flight_to(g, rank, timeout_s):
    """Waits until a version newer than what `rank` holds is in flight to it."""
    def in_flight(s):
        m = g.member(s, rank)
        head = s.get("head_version")
        return (m is not None and m["state"] == "live" and head is not None and
                m["version"] is not None and head > m["version"] and m["version"] >= 2)
    return g.wait_for(in_flight, timeout_s, "a version in flight to rank %d" % rank,
                      interval_s=0.02)


def test_an_engine_cut_off_mid_version_catches_up_from_the_journal(make_group):
    g = make_group(parameters=8_000_000, versions=16, step_interval_ms=300,
                   timeouts={"dead_after_ms": 1500, "heartbeat_ms": 200})
    # A delta of ~150 KB takes ~150 ms to reach engine1 at 8 Mbit/s: a window to cut it in.
    g.bed.rate_limit("engine1", "8mbit")
    g.start_all()
    s = wait_in_flight_to(g, 2, 60)
    cut_at = s["head_version"]
    g.bed.cut("engine1")
    # The others go on without it: it is declared dead, versions commit.
    s = g.wait_for(lambda s: g.member(s, 2)["state"] == "dead" and
                   (s.get("committed_version") or 0) >= cut_at + 2, 60,
                   "engine1 dead and two versions committed without it")
    held = g.member(s, 2)["version"]
    assert held is not None and held < s["committed_version"]
    g.bed.restore("engine1")
    finish(g, 16, 120)
    log = open(g.log_path(0)).read()
    assert "subscriber rank 2 joined to catch up" in log, g.logs_tail()
    # Live again: it acks the versions after its return (over UCX or, if the publisher's copy
    # was gone, the journal), verified.
    assert max(g.acks(2)) == 16, "engine1 acked %s" % sorted(g.acks(2))


def test_the_coordinator_cut_off_and_restored(make_group):
    g = make_group(parameters=4_000_000, versions=14, step_interval_ms=300,
                   timeouts={"dead_after_ms": 1500, "heartbeat_ms": 200,
                             "ack_timeout_ms": 20000})
    g.start_all()
    g.wait_for(lambda s: g.subscribers_hold(s, 3), 60, "engines at v3")
    g.bed.cut("coord")
    time.sleep(3.0)  # longer than dead_after: every rank loses the coordinator
    g.bed.restore("coord")
    finish(g, 14, 150)


def test_the_trainer_cut_during_a_publication(make_group):
    g = make_group(parameters=8_000_000, versions=14, step_interval_ms=300,
                   timeouts={"dead_after_ms": 1500, "heartbeat_ms": 200,
                             "ack_timeout_ms": 20000})
    for e in ENGINES:  # deltas take ~150 ms to arrive: a publication stays in flight that long
        g.bed.rate_limit(g.host_of_rank[e], "8mbit")
    g.start_all()
    g.wait_for(lambda s: (s.get("head_version") or 0) > (s.get("committed_version") or 0)
               >= 3, 60, "a publication in flight", interval_s=0.02)
    g.bed.cut("trainer")
    time.sleep(3.0)
    g.bed.restore("trainer")
    finish(g, 14, 150)
