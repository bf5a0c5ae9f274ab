#!/usr/bin/env bash
# Publish -> all-acked latency of a rank group (docs/PERFORMANCE.md "Rank group"): the demo's model at 1 % density with
# 1, 2 and 4 subscribers (no faults), each next to the time to write and read the same model
# as a full safetensors file on the same disk, measured in the same run (what a filesystem
# broadcast without deltas costs: one write, one read per subscriber). Each count runs twice:
# subscribers reading deltas from the journal (fs) and live over UCX (ucx, UCX choosing its
# transports: shared memory on one machine), the publisher serving in place (ucx) and from a
# shared-memory copy (ucx-copy; ucx.publisher_memory).
#   bench/run_group_bench.sh [build dir] [parameters]
set -euo pipefail
build=${1:-build}
parameters=${2:-${GROUP_PARAMETERS:-268435456}}
demo="$build/examples/weightcast_group_demo"
work="${WEIGHTCAST_BENCH_DIR:-/tmp}/weightcast-group-bench"
mkdir -p "$work"
echo "== rank group: publish -> all-acked, ${parameters} bf16 parameters, 1 % density, 10 versions"
printf '%9s %11s %14s %14s %12s %12s %16s %8s\n' transport subscribers delta_median \
  anchor_median write_full read_full "full_broadcast" ratio
for n in 1 2 4; do
  for transport in fs ucx ucx-copy; do
    run="$work/$transport-n$n"
    case $transport in
      fs) extra=(--transports fs) ;;
      ucx) extra=(--transports ucx,fs --ucx-publisher-memory in_place) ;;
      ucx-copy) extra=(--transports ucx,fs --ucx-publisher-memory copy) ;;
    esac
    "$demo" --work-dir "$run" --parameters "$parameters" --versions 10 --subscribers "$n" \
      "${extra[@]}" --no-faults --json-out "$run.json" >"$run.log" 2>&1 ||
      { echo "run $transport with $n subscribers failed; see $run.log" >&2; tail -20 "$run.log" >&2; exit 1; }
    python3 - "$run.json" "$transport" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
n = j["subscribers"]
full = j["baseline_write_ms"] + n * j["baseline_read_ms"]
acks = j.get("acks_by_transport", {})
print("%9s %11d %11.0f ms %11.0f ms %9.0f ms %9.0f ms %13.0f ms %7.2fx   acks %s" % (
    sys.argv[2], n, j["median_delta_ms"], j["median_anchor_ms"], j["baseline_write_ms"],
    j["baseline_read_ms"], full, j["median_delta_ms"] / full,
    ", ".join("%d %s" % (v, k) for k, v in sorted(acks.items()))))
PY
  done
done
echo "(ratio: delta publish -> all-acked over the full-safetensors write + one read per subscriber)"
