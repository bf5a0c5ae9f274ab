#!/usr/bin/env bash
# Runs the GPU checks from a bundle made by tests/gpu/build_bundle.sh, on the lent GPU machine
# (or here, as a rehearsal: the CUDA tests then skip with the reason). See tests/gpu/README.md.
#
#   tests/gpu/run.sh OUT_DIR
#
# The bundle is $WEIGHTCAST_GPU_BUNDLE, else the folder holding this script when it is a
# bundle's copy, else build-gpu/bundle under the repository root. Steps, each logged to OUT_DIR
# (at most 8 files, flat, as the device tool returns them):
#   preflight.log       host, glibc against the bundle's MANIFEST, unresolved libraries
#   nvidia-smi.txt      the GPU summary (absent GPU: noted, not an error)
#   service_tests.log/.xml  the CUDA, staging and packed-expert gtests, under a timeout
#   bench_coalesce.json weightcast bench coalesce (host staging; WEIGHTCAST_GPU_BENCH=0 skips)
#   summary.txt         one line per step; printed last
# Exit status: 0 when every step passed; 1 when one failed, including CUDA tests skipping on
# a machine whose nvidia-smi lists a GPU (WEIGHTCAST_EXPECT_GPU=0/1 overrides that guess).
set -uo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
OUT="$1"
mkdir -p "$OUT"
HERE="$(cd "$(dirname "$0")" && pwd)"
if [[ -n "${WEIGHTCAST_GPU_BUNDLE:-}" ]]; then
  BUNDLE="$WEIGHTCAST_GPU_BUNDLE"
elif [[ -d "$HERE/bin" && -f "$HERE/MANIFEST" ]]; then
  BUNDLE="$HERE"
else
  BUNDLE="$(cd "$HERE/../.." && pwd)/build-gpu/bundle"
fi
TEST_TIMEOUT="${WEIGHTCAST_GPU_TEST_TIMEOUT:-240}"
BENCH_TIMEOUT="${WEIGHTCAST_GPU_BENCH_TIMEOUT:-150}"
FILTER="${WEIGHTCAST_GPU_FILTER:-Cuda*:CopyExecutor*:PackedExpert*:StagingPool*}"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
failed=0
step() {  # step NAME STATUS DETAIL
  printf '%-14s %-5s %s\n' "$1" "$2" "$3" >>"$SUMMARY"
  [[ "$2" == FAIL ]] && failed=1
  return 0
}
finish() {
  echo "==== summary ($OUT)"
  cat "$SUMMARY"
  exit "$failed"
}

# ---- preflight: the bundle, the loader path, the glibc it needs.
{
  echo "bundle: $BUNDLE"
  uname -a
  [[ -f "$BUNDLE/MANIFEST" ]] && sed -n '1,4p' "$BUNDLE/MANIFEST"
} >"$OUT/preflight.log" 2>&1
if [[ ! -x "$BUNDLE/bin/service_tests" ]]; then
  step preflight FAIL "no bundle at $BUNDLE (run tests/gpu/build_bundle.sh; carry it)"
  cat "$OUT/preflight.log"
  finish
fi
export LD_LIBRARY_PATH="$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The static CUDA runtime dlopens the driver's libcuda.so.1: make sure the loader finds it.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    [[ -e "$d/libcuda.so.1" ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
  done
fi
# The C++ runtime: the machine's own libstdc++ when it has every GLIBCXX version the bundle
# needs (it then matches that machine's glibc), else the bundle's lib/cxx.
manifest() { sed -n "s/^$1=//p" "$BUNDLE/MANIFEST" 2>/dev/null; }
glibc_here="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
glibc_needed="$(manifest glibc_needed)"
glibcxx_needed="$(manifest glibcxx_needed)"
system_cxx="$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')"
if [[ -n "$system_cxx" && -n "$glibcxx_needed" ]] && grep -qa "GLIBCXX_$glibcxx_needed" "$system_cxx"; then
  cxx_runtime="system $system_cxx"
else
  cxx_runtime="bundle lib/cxx (system: ${system_cxx:-none} lacks GLIBCXX_${glibcxx_needed:-?})"
  LD_LIBRARY_PATH="$BUNDLE/lib/cxx:$LD_LIBRARY_PATH"
  glibc_needed="$(manifest glibc_needed_with_lib_cxx)"
fi
unresolved="$(for b in "$BUNDLE"/bin/*; do ldd "$b" 2>&1 | grep 'not found'; done | sort -u)"
{
  echo "glibc here: ${glibc_here:-unknown}; the bundle needs: ${glibc_needed:-unknown}"
  echo "C++ runtime: $cxx_runtime"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for b in "$BUNDLE"/bin/*; do echo "ldd $(basename "$b"):" && ldd "$b" 2>&1; done
} >>"$OUT/preflight.log"
if [[ -n "$glibc_here" && -n "$glibc_needed" ]] &&
  [[ "$(printf '%s\n%s\n' "$glibc_needed" "$glibc_here" | sort -V | head -1)" != "$glibc_needed" ]]; then
  step preflight FAIL "glibc $glibc_here here, the bundle needs $glibc_needed: build on an older distribution or build there"
elif [[ -n "$unresolved" ]]; then
  step preflight FAIL "unresolved libraries: $(echo "$unresolved" | awk '{print $1}' | tr '\n' ' ')"
else
  step preflight ok "glibc ${glibc_here:-?} >= ${glibc_needed:-?}; C++ runtime: ${cxx_runtime%% (*}"
fi
sed -n '1,9p' "$OUT/preflight.log"

# ---- the GPU, as nvidia-smi sees it.
gpu_listed=0
if command -v nvidia-smi >/dev/null 2>&1; then
  {
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,temperature.gpu,clocks.sm,clocks.mem,pstate --format=csv
  } >"$OUT/nvidia-smi.txt" 2>&1
  grep -q '^GPU [0-9]' "$OUT/nvidia-smi.txt" && gpu_listed=1
else
  echo "nvidia-smi: not found (no NVIDIA driver on this machine)" >"$OUT/nvidia-smi.txt"
fi
cat "$OUT/nvidia-smi.txt"
expect_gpu="${WEIGHTCAST_EXPECT_GPU:-$gpu_listed}"
step nvidia-smi ok "$(head -1 "$OUT/nvidia-smi.txt") (expect GPU: $expect_gpu)"

# ---- the gtests.
echo "==== service_tests --gtest_filter=$FILTER (timeout ${TEST_TIMEOUT}s)"
timeout --kill-after=10 "$TEST_TIMEOUT" "$BUNDLE/bin/service_tests" --gtest_filter="$FILTER" \
  --gtest_output="xml:$OUT/service_tests.xml" 2>&1 | tee "$OUT/service_tests.log"
rc=${PIPESTATUS[0]}
xml="$OUT/service_tests.xml"
skipped_cuda="$(grep -E 'classname="Cuda' "$xml" 2>/dev/null | grep -c 'result="skipped"')"
ran="$(grep -c '<testcase ' "$xml" 2>/dev/null)"
if ((rc == 124 || rc == 137)); then
  step gtests FAIL "timed out after ${TEST_TIMEOUT}s"
elif ((rc != 0)); then
  step gtests FAIL "exit $rc: $(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/service_tests.log" | sort -u | tr '\n' ' ')"
elif ((expect_gpu == 1 && skipped_cuda > 0)); then
  step gtests FAIL "$skipped_cuda CUDA tests skipped on a machine with a GPU: $(grep -m1 -o 'no usable CUDA device[^"]*' "$OUT/service_tests.log")"
else
  step gtests ok "${ran:-0} tests, ${skipped_cuda:-0} CUDA skipped"
fi

# ---- the host staging benchmark on this machine's CPUs and memory.
if [[ "${WEIGHTCAST_GPU_BENCH:-1}" == 1 ]]; then
  threads="$(nproc)"
  ((threads > 8)) && threads=8
  echo "==== weightcast bench coalesce --threads $threads (timeout ${BENCH_TIMEOUT}s)"
  timeout --kill-after=10 "$BENCH_TIMEOUT" "$BUNDLE/bin/weightcast" bench coalesce --json \
    --threads "$threads" --repetitions 2 >"$OUT/bench_coalesce.json" 2>&1
  rc=$?
  cat "$OUT/bench_coalesce.json"
  if ((rc == 0)); then
    step bench ok "threads $threads: $(grep -E '"(coalesced_s|coalesced_warm_s|memcpy_s)"' "$OUT/bench_coalesce.json" | tr -d ' \n')"
  else
    step bench FAIL "exit $rc"
  fi
fi
finish
