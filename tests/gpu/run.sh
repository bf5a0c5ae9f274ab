#!/usr/bin/env bash
# Runs the GPU checks from a bundle made by tests/gpu/build_bundle.sh, on the lent GPU machine
# (or here, as a rehearsal: the CUDA tests then skip with the reason). See tests/gpu/README.md.
#
#   tests/gpu/run.sh OUT_DIR
#
# The bundle is $WEIGHTCAST_GPU_BUNDLE, else the folder holding this script when it is a
# bundle's copy, else build-gpu/bundle.tar.gz under the repository root unpacked (what travels
# to the device machine), else build-gpu/bundle. Steps, each logged to OUT_DIR
# (at most 8 files, flat, as the device tool returns them):
#   preflight.log       host, glibc against the bundle's MANIFEST, unresolved libraries, and
#                       the GPU summary from nvidia-smi (absent GPU: noted, not an error)
#   service_tests.log   the CUDA executor, staging and packed-expert gtests and the journal
#                       reader writing CUDA tensors in place (CudaInPlaceReader*: anchors and
#                       deltas into device tensors and strided halves, a failing tensor reverting
#                       the device tensors before it), under a timeout, then group_tests'
#                       CudaStaging* (endpoints publishing CUDA tensors and applying into them in
#                       place), Fp8Publisher.ACuda* and Fp8Hooked.ACuda* (an FP8 group's CUDA
#                       source quantised on its GPU, snapshot and hooked) and NcclGroupOnOneGpu* (the rank group over NCCL, where two ranks
#                       fit a GPU), and endpoint_tests' live-path conformance suite on real NCCL
#                       (*nccl_cuda*)
#   codec_tests.log     the CUDA codec gtests (Cuda*, ChunkCodecHd*; CudaDeltaRevert: revert of an
#                       applied record in device memory; CudaFp8Quantiser: the CUDA FP8
#                       quantiser against the CPU one) and, appended, compute-sanitizer
#                       memcheck over the small ones
#   nccl_tests.log      the NCCL backend's one-GPU tests, the broadcast group's included (NCCL
#                       from the Python wheel there), then nccl_bucket_bench's JSON (schedule vs
#                       bare broadcasts)
#   python_cuda.log     tests/python/test_cuda.py in the machine's python3 and torch, through the
#                       bundle's extension module (skipped when the bundle has none)
#   bench_coalesce.json weightcast bench coalesce (host staging; WEIGHTCAST_GPU_BENCH=0 skips)
#                       (codec_tests.log also gets fp8_quantize_bench: the CPU quantiser on one
#                       core of that machine, against a memcpy)
#   bench_gpu_codec.json gpu_codec_bench at 1, 5 and 20 %: checksum/encode/apply and the FP8
#                       quantiser vs a device copy, one JSON object per density (same switch)
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
ROOT="$(cd "$HERE/../.." && pwd)"
if [[ -n "${WEIGHTCAST_GPU_BUNDLE:-}" ]]; then
  BUNDLE="$WEIGHTCAST_GPU_BUNDLE"
elif [[ -d "$HERE/bin" && -f "$HERE/MANIFEST" ]]; then
  BUNDLE="$HERE"
elif [[ -f "$ROOT/build-gpu/bundle.tar.gz" && ! -d "$ROOT/build-gpu/bundle/bin" ]]; then
  # The packed bundle that travelled (build_bundle.sh): unpacked into a temporary folder.
  UNPACKED="$(mktemp -d)"
  tar -C "$UNPACKED" -xzf "$ROOT/build-gpu/bundle.tar.gz" || {
    echo "run.sh: cannot unpack $ROOT/build-gpu/bundle.tar.gz" >&2
    exit 1
  }
  BUNDLE="$UNPACKED/bundle"
else
  BUNDLE="$ROOT/build-gpu/bundle"
fi
TEST_TIMEOUT="${WEIGHTCAST_GPU_TEST_TIMEOUT:-240}"
BENCH_TIMEOUT="${WEIGHTCAST_GPU_BENCH_TIMEOUT:-150}"
FILTER="${WEIGHTCAST_GPU_FILTER:-Cuda*:CopyExecutor*:PackedExpert*:StagingPool*}"
CODEC_FILTER="${WEIGHTCAST_GPU_CODEC_FILTER:-Cuda*:ChunkCodecHd*}"
MEMCHECK_FILTER="CudaCodec.ChecksumsEqualThePublishedVectors:CudaCodec.DoubleApplied*:CudaCodec.ARecord*:CudaCodec.ApplyIntoAStrided*"
XML_DIR="$(mktemp -d)"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
failed=0
step() {  # step NAME STATUS DETAIL
  printf '%-14s %-5s %s\n' "$1" "$2" "$3" >>"$SUMMARY"
  [[ "$2" == FAIL ]] && failed=1
  return 0
}
finish() {
  rm -rf "$XML_DIR" ${UNPACKED:+"$UNPACKED"}
  echo "==== summary ($OUT)"
  cat "$SUMMARY"
  exit "$failed"
}

# What gtest XML files report (tests/gpu/gtest_counts.py): sets ran, skipped, known (skips for
# a limit of the machine: NCCL refusing two ranks on one GPU), failed and unexpected (the
# names of every other skip, comma-separated).
counts() {
  local line
  line="$(python3 "$HERE/gtest_counts.py" "$@" 2>/dev/null || echo "ran=0 skipped=0 known=0 failed=0 unexpected=")"
  ran="$(sed -n 's/.*ran=\([0-9]*\).*/\1/p' <<<"$line")"
  skipped="$(sed -n 's/.*skipped=\([0-9]*\).*/\1/p' <<<"$line")"
  known="$(sed -n 's/.*known=\([0-9]*\).*/\1/p' <<<"$line")"
  unexpected="$(sed -n 's/.*unexpected=//p' <<<"$line")"
}
# The verdict of a gtest step from its exit status and counts: on a machine with a GPU every
# test must run (a skip other than a known limit of the machine fails the step, naming it).
gtest_step() {  # gtest_step NAME RC
  local name="$1" rc="$2"
  local detail="ran ${ran:-0}, skipped ${skipped:-0}"
  ((${known:-0} > 0)) && detail+=" ($known known: NCCL refused two ranks on one GPU)"
  if ((rc == 124 || rc == 137)); then
    step "$name" FAIL "timed out after ${TEST_TIMEOUT}s"
  elif ((rc != 0)); then
    step "$name" FAIL "exit $rc: $failed_names"
  elif ((expect_gpu == 1 && ${ran:-0} == 0)); then
    step "$name" FAIL "no test ran on a machine with a GPU"
  elif ((expect_gpu == 1)) && [[ -n "$unexpected" ]]; then
    step "$name" FAIL "$detail; skipped on a machine with a GPU: $(cut -d, -f1-5 <<<"$unexpected")"
  else
    step "$name" ok "$detail"
  fi
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
SMI="$XML_DIR/nvidia-smi.txt"
if command -v nvidia-smi >/dev/null 2>&1; then
  {
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,temperature.gpu,clocks.sm,clocks.mem,pstate --format=csv
  } >"$SMI" 2>&1
  grep -q '^GPU [0-9]' "$SMI" && gpu_listed=1
else
  echo "nvidia-smi: not found (no NVIDIA driver on this machine)" >"$SMI"
fi
cat "$SMI" | tee -a "$OUT/preflight.log"
expect_gpu="${WEIGHTCAST_EXPECT_GPU:-$gpu_listed}"
step nvidia-smi ok "$(head -1 "$SMI") (expect GPU: $expect_gpu)"

# ---- the gtests.
echo "==== service_tests --gtest_filter=$FILTER (timeout ${TEST_TIMEOUT}s)"
timeout --kill-after=10 "$TEST_TIMEOUT" "$BUNDLE/bin/service_tests" --gtest_filter="$FILTER" \
  --gtest_output="xml:$XML_DIR/service_tests.xml" 2>&1 | tee "$OUT/service_tests.log"
rc=${PIPESTATUS[0]}
if [[ -x "$BUNDLE/bin/group_tests" ]] && ((rc == 0)); then  # endpoints staging CUDA tensors
  # NcclGroupOnOneGpu: the rank group's NCCL path end to end; it skips (saying why) where NCCL
  # refuses two ranks on one GPU, so it is not counted among the Cuda* tests that must run.
  echo "==== group_tests --gtest_filter=CudaStaging*:CudaDeviceSnapshot*:Fp8Publisher.ACuda*:Fp8Hooked.ACuda*:NcclGroupOnOneGpu* (timeout ${TEST_TIMEOUT}s)" | tee -a "$OUT/service_tests.log"
  timeout --kill-after=10 "$TEST_TIMEOUT" "$BUNDLE/bin/group_tests" --gtest_filter='CudaStaging*:CudaDeviceSnapshot*:Fp8Publisher.ACuda*:Fp8Hooked.ACuda*:NcclGroupOnOneGpu*' \
    --gtest_output="xml:$XML_DIR/group_tests.xml" 2>&1 | tee -a "$OUT/service_tests.log"
  rc=${PIPESTATUS[0]}
fi
if [[ -x "$BUNDLE/bin/endpoint_tests" ]] && ((rc == 0)); then  # the live-path suite on real NCCL
  echo "==== endpoint_tests --gtest_filter=*nccl_cuda* (timeout ${TEST_TIMEOUT}s)" | tee -a "$OUT/service_tests.log"
  timeout --kill-after=10 "$TEST_TIMEOUT" "$BUNDLE/bin/endpoint_tests" --gtest_filter='*nccl_cuda*' \
    --gtest_output="xml:$XML_DIR/endpoint_tests.xml" 2>&1 | tee -a "$OUT/service_tests.log"
  rc=${PIPESTATUS[0]}
fi
counts "$XML_DIR/service_tests.xml" "$XML_DIR/group_tests.xml" "$XML_DIR/endpoint_tests.xml"
failed_names="$(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/service_tests.log" | sort -u | tr '\n' ' ')"
gtest_step gtests "$rc"

# ---- the CUDA codec gtests, then compute-sanitizer over the small ones.
if [[ -x "$BUNDLE/bin/codec_tests" ]]; then
  echo "==== codec_tests --gtest_filter=$CODEC_FILTER (timeout ${TEST_TIMEOUT}s)"
  timeout --kill-after=10 "$TEST_TIMEOUT" "$BUNDLE/bin/codec_tests" --gtest_filter="$CODEC_FILTER" \
    --gtest_output="xml:$XML_DIR/codec_tests.xml" >"$OUT/codec_tests.log" 2>&1
  rc=$?
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|no usable' "$OUT/codec_tests.log" | tail -30
  counts "$XML_DIR/codec_tests.xml"
  failed_names="$(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/codec_tests.log" | sort -u | tr '\n' ' ')"
  gtest_step codec-gtests "$rc"
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if ((expect_gpu == 1)) && [[ -x "$sanitizer" ]]; then
    echo "==== compute-sanitizer memcheck codec_tests --gtest_filter=$MEMCHECK_FILTER"
    timeout --kill-after=10 "$BENCH_TIMEOUT" "$sanitizer" --tool memcheck --error-exitcode 3 \
      "$BUNDLE/bin/codec_tests" --gtest_filter="$MEMCHECK_FILTER" >"$XML_DIR/memcheck.log" 2>&1
    rc=$?
    tail -5 "$XML_DIR/memcheck.log"
    { echo "==== compute-sanitizer memcheck"; cat "$XML_DIR/memcheck.log"; } >>"$OUT/codec_tests.log"
    if ((rc == 0)); then
      step memcheck ok "$(grep -m1 -E 'ERROR SUMMARY' "$XML_DIR/memcheck.log")"
    else
      step memcheck FAIL "exit $rc: $(grep -m1 -E 'ERROR SUMMARY|Invalid|error' "$XML_DIR/memcheck.log")"
    fi
  else
    step memcheck skip "no GPU or no compute-sanitizer here"
  fi
fi

# ---- the NCCL backend's one-GPU tests; NCCL is loaded at run time from the Python wheel.
if [[ -x "$BUNDLE/bin/nccl_tests" ]]; then
  if [[ -z "${WEIGHTCAST_NCCL_LIBRARY:-}" && -z "${WEIGHTCAST_NCCL_SEARCH:-}" ]] && command -v python3 >/dev/null; then
    WEIGHTCAST_NCCL_SEARCH="$(python3 -c 'import site, sys; print(":".join(site.getsitepackages() + sys.path))' 2>/dev/null)"
    export WEIGHTCAST_NCCL_SEARCH
  fi
  echo "==== nccl_tests (timeout ${TEST_TIMEOUT}s)"
  timeout --kill-after=10 "$TEST_TIMEOUT" "$BUNDLE/bin/nccl_tests" \
    --gtest_output="xml:$XML_DIR/nccl_tests.xml" >"$OUT/nccl_tests.log" 2>&1
  rc=$?
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|NCCL [0-9]|refused|no usable' "$OUT/nccl_tests.log" | tail -20
  # An NCCL that fails to start on a machine with a GPU makes its tests skip as "not viable":
  # an unexpected skip there, so the step fails. NCCL refusing two ranks on one GPU is known.
  counts "$XML_DIR/nccl_tests.xml"
  failed_names="$(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/nccl_tests.log" | sort -u | tr '\n' ' ')"
  gtest_step nccl-gtests "$rc"
fi

# ---- the Python package on CUDA tensors, in the machine's own python3 and torch.
if [[ -f "$BUNDLE/bin/weightcastd" && -d "$BUNDLE/python/weightcast" ]]; then
  PY="${WEIGHTCAST_GPU_PYTHON:-python3}"
  PY_TESTS="${WEIGHTCAST_PYTHON_TESTS:-$(pwd)/tests/python}"
  echo "==== $PY -m pytest $PY_TESTS/test_cuda.py (timeout ${TEST_TIMEOUT}s)"
fi
if [[ -f "$BUNDLE/bin/weightcastd" && -d "$BUNDLE/python/weightcast" ]] &&
  ! "$PY" -c "import pytest" >/dev/null 2>&1; then
  # No pytest in that Python: a failure where the GPU is, a skip in a rehearsal without one.
  if ((expect_gpu == 1)); then
    step python-cuda FAIL "no pytest in $PY (set WEIGHTCAST_GPU_PYTHON to a Python with torch and pytest)"
  else
    step python-cuda skip "no pytest in $PY"
  fi
elif [[ -f "$BUNDLE/bin/weightcastd" && -d "$BUNDLE/python/weightcast" ]]; then
  PYTHONPATH="$BUNDLE/python" WEIGHTCASTD="$BUNDLE/bin/weightcastd" PYTHONDONTWRITEBYTECODE=1 \
    timeout --kill-after=10 "$TEST_TIMEOUT" "$PY" -m pytest -q -rsxP -p no:cacheprovider \
    "$PY_TESTS/test_cuda.py" >"$OUT/python_cuda.log" 2>&1
  rc=$?
  tail -15 "$OUT/python_cuda.log"
  outcome="$(grep -E '^[0-9]+ (passed|failed|skipped)|^=+ .*(passed|failed|skipped|error)' "$OUT/python_cuda.log" | tail -1)"
  if ((rc == 124 || rc == 137)); then
    step python-cuda FAIL "timed out after ${TEST_TIMEOUT}s"
  elif ((rc == 5 && expect_gpu == 0)); then  # pytest: no test ran (the file skipped whole)
    step python-cuda skip "$(grep -m1 'SKIPPED' "$OUT/python_cuda.log")"
  elif ((rc != 0)); then
    step python-cuda FAIL "exit $rc: $outcome"
  elif ((expect_gpu == 1)) && grep -qE '[0-9]+ skipped' <<<"$outcome"; then
    step python-cuda FAIL "skipped on a machine with a GPU: $(grep -m1 'SKIPPED' "$OUT/python_cuda.log")"
  else
    step python-cuda ok "$outcome"
  fi
else
  step python-cuda skip "the bundle has no Python part (no python$(manifest device_python) where it was built)"
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
# ---- the CUDA codec against a device copy (256 Mi bf16 at 1, 5 and 20 %; the FP8 quantiser in the
# first run): one JSON object per density, one after another.
if [[ "${WEIGHTCAST_GPU_BENCH:-1}" == 1 && -x "$BUNDLE/bin/gpu_codec_bench" ]] && ((expect_gpu == 1)); then
  : >"$OUT/bench_gpu_codec.json"
  for density in ${WEIGHTCAST_GPU_CODEC_DENSITIES:-0.01 0.05 0.20}; do
    echo "==== gpu_codec_bench --density $density (timeout ${BENCH_TIMEOUT}s)"
    timeout --kill-after=10 "$BENCH_TIMEOUT" "$BUNDLE/bin/gpu_codec_bench" --density "$density" \
      ${WEIGHTCAST_GPU_CODEC_BENCH_ARGS:-} >"$XML_DIR/codec_bench.json" 2>&1
    rc=$?
    tee -a "$OUT/bench_gpu_codec.json" <"$XML_DIR/codec_bench.json"
    if ((rc == 0)); then
      step codec-bench ok "density $density: $(grep -E '"(checksum|encode|apply|fp8_quantize)_vs_copy"' "$XML_DIR/codec_bench.json" | tr -d ' \n')"
    else
      step codec-bench FAIL "density $density: exit $rc"
    fi
  done
fi
# ---- the CPU FP8 quantiser on one core of this machine's CPU (its AVX-512 kernel where the CPU
# has it), appended to codec_tests.log.
if [[ "${WEIGHTCAST_GPU_BENCH:-1}" == 1 && -x "$BUNDLE/bin/fp8_quantize_bench" ]]; then
  echo "==== fp8_quantize_bench (one core; timeout ${BENCH_TIMEOUT}s)" | tee -a "$OUT/codec_tests.log"
  grep -m1 'model name' /proc/cpuinfo | tee -a "$OUT/codec_tests.log"
  echo "avx512: $(grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ')" | tee -a "$OUT/codec_tests.log"
  pin=()
  command -v taskset >/dev/null && pin=(taskset -c 0)
  timeout --kill-after=10 "$BENCH_TIMEOUT" "${pin[@]}" "$BUNDLE/bin/fp8_quantize_bench" \
    >"$XML_DIR/fp8_bench.txt" 2>&1
  rc=$?
  tee -a "$OUT/codec_tests.log" <"$XML_DIR/fp8_bench.txt"
  if ((rc == 0)); then
    step fp8-cpu-bench ok "$(grep -m1 -o 'ratio [0-9.]*.*' "$XML_DIR/fp8_bench.txt")"
  else
    step fp8-cpu-bench FAIL "exit $rc"
  fi
fi
# ---- the NCCL schedule against bare broadcasts (JSON appended to nccl_tests.log).
if [[ "${WEIGHTCAST_GPU_BENCH:-1}" == 1 && -x "$BUNDLE/bin/nccl_bucket_bench" ]] && ((expect_gpu == 1)); then
  echo "==== nccl_bucket_bench (timeout ${BENCH_TIMEOUT}s)" | tee -a "$OUT/nccl_tests.log"
  timeout --kill-after=10 "$BENCH_TIMEOUT" "$BUNDLE/bin/nccl_bucket_bench" ${WEIGHTCAST_NCCL_BENCH_ARGS:-} \
    >"$XML_DIR/nccl_bench.json" 2>&1
  rc=$?
  tee -a "$OUT/nccl_tests.log" <"$XML_DIR/nccl_bench.json"
  if ((rc == 0)); then
    step nccl-bench ok "$(grep -E '"(ranks|bare_over_schedule)"' "$XML_DIR/nccl_bench.json" | tr -d ' \n')"
  else
    step nccl-bench FAIL "exit $rc"
  fi
fi
finish
