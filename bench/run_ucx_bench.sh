#!/usr/bin/env bash
# UCX part fetch (docs/PERFORMANCE.md "UCX part fetch"): UcxSubscriberTransport::fetch of a part published
# by a forked UcxPublisherTransport (serving its buffers in place, then copies) against ucx_perftest -t ucp_get, same UCX_TLS and size,
# measured in the same run on loopback, as GB/s (1e9 bytes/s) and their ratio.
#   bench/run_ucx_bench.sh [path/to/weightcast] [extra `bench ucx` options...]
set -euo pipefail
cli=${1:-build/src/weightcast}
shift || true

if ! "$cli" bench ucx --help >/dev/null 2>&1; then
  echo "== UCX part fetch: skipped ($cli was built without UCX: apt-get install libucx-dev)"
  exit 0
fi
if ! command -v ucx_perftest >/dev/null 2>&1; then
  echo "== UCX part fetch: skipped (ucx_perftest not on PATH: apt-get install ucx-utils)"
  exit 0
fi

echo "== UCX part fetch vs ucx_perftest -t ucp_get (loopback; GB/s = 1e9 bytes/s)"
"$cli" bench ucx --json "$@" |
  python3 -c '
import json, sys
j = json.load(sys.stdin)
print("chunk_bytes %d, max_in_flight %d, best of %d runs, UCX %s" % (
    j["chunk_bytes"], j["max_in_flight"], j["repetitions"], j["ucx_version"]))
print("%-5s %-9s %-6s %10s %16s %14s %7s" % ("tls", "publisher", "reads", "part",
      "weightcast GB/s", "perftest GB/s", "ratio"))
for c in j["cases"]:
    print("%-5s %-9s %-6s %9.0fM %16.3f %14.3f %7.2f" % (c["tls"], c["publisher_memory"],
          c["subscriber_reads"], c["part_bytes"] / 2**20, c["weightcast_gbps"],
          c["perftest_gbps"], c["ratio"]))'

# The verification a read by loads pays, in isolation: one pass (copy + XXH3) against memcpy.
copy_hash=$(dirname "$cli")/../bench/copy_hash_bench
if [ -x "$copy_hash" ]; then
  echo "== Copy + XXH3 in one pass vs memcpy of the same bytes (GB/s = 1e9 bytes/s, best of 5)"
  "$copy_hash"
else
  echo "== Copy + XXH3 in one pass: skipped ($copy_hash not built)"
fi
