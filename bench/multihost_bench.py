#!/usr/bin/env python3
"""Benchmarks of the multi-host test bed (tests/multihost/netbed.py), docs/PERFORMANCE.md
"Across hosts":

1. publish -> all-acked of delta versions: the group on four hosts (network namespaces on a
   bridge, UCX over TCP between them) against the same group with every rank on one host's
   loopback, same model, same run; median of the delta versions, and their ratio.
2. UCX part fetch across the veth link (`weightcast bench ucx --publisher-netns`: the
   publisher on the trainer host, this subscriber on an engine host) against ucx_perftest
   -t ucp_get across the same link, same sizes, same run; the ratio (target >= 0.9).

    bench/multihost_bench.py [--bin build/src] [--parameters N] [--versions N] [--json]

Needs root (network namespaces); says why and exits 0 where it cannot run, as make bench's
other steps do for a missing optional part.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "multihost"))

import group_bed  # noqa: E402
import netbed  # noqa: E402


def group_latencies(bin_dir, loopback, parameters, versions):
    """publish -> all-acked (us) of each committed delta version acked by every engine."""
    os.environ["WEIGHTCAST_BIN"] = bin_dir
    with tempfile.TemporaryDirectory(prefix="weightcast-multihost-bench-") as work:
        g = group_bed.GroupBed(work, parameters=parameters, versions=versions,
                               step_interval_ms=300, loopback=loopback)
        try:
            g.start_all()
            g.wait_for(lambda s: s.get("committed_version") == versions and
                       g.subscribers_hold(s, versions), 300, "the last version everywhere")
            g.check_no_unverified_ack()
            out = []
            for v in g.seen.values():
                subs = v["subscribers"]
                if (v["committed"] and not v["anchor"] and len(subs) == len(g.engines) and
                        all(s["result"] == "ok" and s["transport"] == "ucx" for s in subs)):
                    out.append(v["publish_to_commit_us"])
            return out
        finally:
            g.close()


def part_fetch(bin_dir, sizes):
    """`weightcast bench ucx` from engine1's host against a publisher on the trainer's."""
    bed = netbed.NetBed(["trainer", "engine1"])
    try:
        r = bed.run("engine1", [os.path.join(bin_dir, "weightcast"), "bench", "ucx", "--json",
                                "--tls", "tcp", "--publisher-memory", "in_place",
                                "--sizes", ",".join(str(s) for s in sizes),
                                "--publisher-netns", bed.netns("trainer"),
                                "--publisher-address", bed.address("trainer")], timeout=600)
        if r.returncode != 0:
            raise RuntimeError("bench ucx across the link failed: " + r.stderr[-2000:])
        return json.loads(r.stdout)
    finally:
        bed.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "src"),
                    help="directory of weightcastd and weightcast")
    ap.add_argument("--parameters", type=int, default=16_000_000, help="bf16 parameters")
    ap.add_argument("--versions", type=int, default=16, help="versions after the first")
    ap.add_argument("--sizes", default="1048576,16777216,67108864", help="part sizes, bytes")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    reason = netbed.why_unavailable()
    if reason is not None:
        print("== across hosts: skipped (%s)" % reason)
        return 0
    bin_dir = os.path.abspath(a.bin)
    hosts = group_latencies(bin_dir, False, a.parameters, a.versions)
    loop = group_latencies(bin_dir, True, a.parameters, a.versions)
    fetch = part_fetch(bin_dir, [int(s) for s in a.sizes.split(",")])
    result = {
        "parameters": a.parameters,
        "delta_versions_measured": {"hosts": len(hosts), "loopback": len(loop)},
        "publish_to_all_acked_ms": {
            "hosts_median": statistics.median(hosts) / 1e3 if hosts else None,
            "loopback_median": statistics.median(loop) / 1e3 if loop else None},
        "part_fetch": [{"part_bytes": c["part_bytes"], "weightcast_gbps": c["weightcast_gbps"],
                        "perftest_gbps": c["perftest_gbps"], "ratio": c["ratio"]}
                       for c in fetch["cases"]],
    }
    if hosts and loop:
        result["hosts_over_loopback"] = statistics.median(hosts) / statistics.median(loop)
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print("== across hosts: a group on four network namespaces (UCX over TCP on veth + bridge)")
    p = result["publish_to_all_acked_ms"]
    print("publish -> all-acked, delta versions (median): hosts %s ms (%d), loopback %s ms "
          "(%d), ratio %s" % (
              "%.1f" % p["hosts_median"] if hosts else "-", len(hosts),
              "%.1f" % p["loopback_median"] if loop else "-", len(loop),
              "%.2f" % result["hosts_over_loopback"] if "hosts_over_loopback" in result else "-"))
    print("UCX part fetch across the link vs ucx_perftest across it (tcp, in place):")
    for c in result["part_fetch"]:
        print("  %9.0fM  weightcast %7.3f GB/s  perftest %7.3f GB/s  ratio %.2f (target >= 0.9)"
              % (c["part_bytes"] / 2**20, c["weightcast_gbps"], c["perftest_gbps"], c["ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
