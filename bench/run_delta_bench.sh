#!/usr/bin/env bash
# The headline figures (docs/PERFORMANCE.md): codec size per density, and encode/apply speed
# with 1 and 2 threads, each as a ratio to a memcmp of the same bytes measured in the same run;
# then the filesystem journal against a raw sequential write of the same bytes.
#   bench/run_delta_bench.sh [path/to/weightcast] [elements]
set -euo pipefail
cli=${1:-build/src/weightcast}
elements=${2:-67108864}

echo "== size and speed by density (bf16, ${elements} elements, 1 thread, best of 5)"
printf '%-8s %10s %12s %10s %10s %10s %12s %12s\n' density changed bytes bits/chg encode/mc apply/mc enc_cold/mc apply_cold/mc
for d in 0.001 0.01 0.05 0.2; do
  "$cli" bench delta --density "$d" --elements "$elements" --threads 1 --json |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print("%-8s %10d %12d %10.2f %10.2f %10.2f %12.2f %12.2f" % (j["density"], j["changed"], j["encoded_bytes"], j["bits_per_change"], j["encode_vs_memcmp"], j["apply_vs_memcmp"], j["encode_cold_vs_memcmp"], j["apply_cold_vs_memcmp"]))'
done

echo "== thread scaling at 1 % density"
one=$("$cli" bench delta --density 0.01 --elements "$elements" --threads 1 --json)
two=$("$cli" bench delta --density 0.01 --elements "$elements" --threads 2 --json)
python3 - "$one" "$two" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for k in ("encode_s", "apply_s", "encode_cold_s", "apply_cold_s"):
    print("%-14s 1 thread %.4f s, 2 threads %.4f s, speedup %.2fx" % (k, a[k], b[k], a[k] / b[k]))
PY

if [ -x "$(dirname "$cli")/../bench/codec_microbench" ]; then
  echo "== micro-benchmarks"
  "$(dirname "$cli")/../bench/codec_microbench" --benchmark_min_time=0.2
fi

echo "== filesystem journal (anchor write vs raw sequential write + fsync; delta publication; catch-up)"
"$cli" bench journal --dir "${WEIGHTCAST_BENCH_DIR:-/tmp}" --parameters "${JOURNAL_PARAMETERS:-200000000}" \
  --anchor-bench-bytes $((512 << 20)) --repetitions 2 |
  python3 -c '
import json, sys
j = json.load(sys.stdin)
a = j["anchor_write"]
print("anchor write, %d bytes: raw sequential write + fsync %.2f s" % (a["bytes"], a["raw_sequential_write_s"]))
for r in a["anchor"]:
    print("  %d threads %.2f s, %.2fx the raw write" % (r["threads"], r["seconds"], r["ratio_vs_raw"]))
print("delta publication (%d params, 1 %%): median %.3f s = %.2fx the anchor publication (%.2f s), %.1f bits/change" % (
    j["parameters"], j["delta_publish_s_median"], j["delta_publish_vs_anchor"], j["anchor_publish_s"], j["bits_per_change"]))
print("catch-up from the anchor over %d deltas: %.2f s" % (j["catch_up_deltas"], j["catch_up_s"]))'
