#!/usr/bin/env bash
# Builds the GPU test binaries HERE and packs them, with the shared libraries they need, into a
# bundle that travels to a lent GPU machine (see tests/gpu/README.md).
#
#   tests/gpu/build_bundle.sh BUILD_DIR BUNDLE_DIR
#
# BUILD_DIR is configured (Ninja, RelWithDebInfo, WEIGHTCAST_WITH_CUDA=ON) if it has no
# CMakeCache.txt yet; an existing one must have been configured with the CUDA toolkit, else the
# CUDA tests would only skip. The .cu files link the static CUDA runtime, so no libcudart
# travels; the GPU machine's driver provides libcuda. BUNDLE_DIR is replaced by:
#   bin/   service_tests, codec_tests, nccl_tests, group_tests, endpoint_tests, weightcast,
#          gpu_codec_bench
#          nccl_bucket_bench and fp8_quantize_bench (the CPU quantiser, timed on that machine's
#          CPU), debug info stripped (symbols kept for backtraces)
#   lib/   every shared library ldd lists except glibc's own (the GPU machine has its own
#          glibc, which must match its loader) and the C++ runtime: libprotobuf, libzstd, ...
#   lib/cxx/  libstdc++ and libgcc_s, used there only when the machine's own are too old
#          (this libstdc++ needs a newer glibc than the binaries do)
#   run.sh a copy of tests/gpu/run.sh, MANIFEST what was packed and the glibc/GLIBCXX it needs.
# Fails loudly if a library is missing, the CUDA runtime is linked dynamically, or the bundle
# plus the working tree that travels with it exceeds the device tool's 64 MiB.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR BUNDLE_DIR" >&2
  exit 2
fi
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$(realpath -m "$1")"
BUNDLE="$(realpath -m "$2")"
JOBS="${JOBS:-2}"
LIMIT_BYTES=$((64 * 1024 * 1024))  # the device tool's cap on what travels, tree included
TARGETS=(service_tests codec_tests nccl_tests group_tests endpoint_tests weightcast gpu_codec_bench
  nccl_bucket_bench fp8_quantize_bench)
BINARIES=("$BUILD/tests/service_tests" "$BUILD/tests/codec_tests" "$BUILD/tests/nccl_tests"
  "$BUILD/tests/group_tests" "$BUILD/tests/endpoint_tests"
  "$BUILD/src/weightcast"
  "$BUILD/bench/gpu_codec_bench" "$BUILD/bench/nccl_bucket_bench" "$BUILD/bench/fp8_quantize_bench")
# glibc's libraries and the kernel's vDSO: provided by the GPU machine, never carried.
SYSTEM_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libcuda\.so)'

die() {
  echo "build_bundle: $*" >&2
  exit 1
}

command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  die "no nvcc here: the bundle needs the CUDA executor compiled (install the CUDA toolkit)"

# The extension module is built for the device's python3 (its minor version, DEVICE_PYTHON;
# tests/gpu/README.md), in a venv of that version here holding nanobind (and pytest, so that
# this venv can rehearse run.sh's Python step). Without such an interpreter here the bundle
# has no Python part and run.sh says so.
DEVICE_PYTHON="${DEVICE_PYTHON:-3.12}"
PY_VENV="$BUILD/py$DEVICE_PYTHON"
python_args=()
if [[ ! -x "$PY_VENV/bin/python" ]]; then
  interp=""  # the first candidate that runs (a pyenv shim may exist for a version not active)
  for c in "$(command -v "python$DEVICE_PYTHON" || true)" \
    $(ls -d "$HOME/.pyenv/versions/$DEVICE_PYTHON".*/bin/python3 2>/dev/null); do
    if [[ -n "$c" ]] && "$c" -c 'import venv' >/dev/null 2>&1; then
      interp="$c"
      break
    fi
  done
  if [[ -n "$interp" ]]; then
    mkdir -p "$BUILD"
    "$interp" -m venv "$PY_VENV" && "$PY_VENV/bin/pip" install -q "nanobind>=2.4,<4" "pytest>=7" ||
      die "could not make $PY_VENV with nanobind and pytest from $interp"
  else
    echo "build_bundle: no python$DEVICE_PYTHON here: the bundle will have no Python part" >&2
  fi
fi
[[ -x "$PY_VENV/bin/python" ]] && python_args=(-DPython_EXECUTABLE="$PY_VENV/bin/python"
  -DWEIGHTCAST_WITH_PYTHON=ON)
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEIGHTCAST_WITH_CUDA=ON \
    "${python_args[@]}"
elif ((${#python_args[@]})); then
  cmake "$BUILD" "${python_args[@]}" >/dev/null
fi
CONFIG_H="$BUILD/generated/weightcast/config.h"
grep -q '^#define WEIGHTCAST_HAVE_CUDA 1' "$CONFIG_H" 2>/dev/null ||
  die "$BUILD was configured without CUDA ($CONFIG_H): reconfigure with -DWEIGHTCAST_WITH_CUDA=ON"
PY_PKG="$BUILD/python/weightcast"
if ((${#python_args[@]})); then
  TARGETS+=(weightcast_python weightcastd)
  BINARIES+=("$BUILD/src/weightcastd")
fi
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib/cxx"
for b in "${BINARIES[@]}"; do
  [[ -x "$b" ]] || die "missing binary $b"
  if ldd "$b" | grep -q 'libcudart\.so'; then
    die "$b links libcudart dynamically; the bundle expects the static CUDA runtime"
  fi
  cp "$b" "$BUNDLE/bin/"
  strip --strip-debug "$BUNDLE/bin/$(basename "$b")"
done

# The Python package: its modules and the extension, whose libraries join lib/ below.
py_core=()
if ((${#python_args[@]})); then
  py_core=("$PY_PKG"/_core*.so)
  [[ -f "${py_core[0]}" ]] || die "the extension module was not built in $PY_PKG"
  mkdir -p "$BUNDLE/python/weightcast"
  cp "$REPO"/python/weightcast/*.py "$BUNDLE/python/weightcast/"
  cp "${py_core[0]}" "$BUNDLE/python/weightcast/"
  strip --strip-debug "$BUNDLE/python/weightcast/$(basename "${py_core[0]}")"
fi

# Shared libraries: the union of what every binary needs (ldd resolves them transitively).
declare -A copied=()
for b in "${BINARIES[@]}" "${py_core[@]}"; do
  while read -r line; do
    name="$(awk '{print $1}' <<<"$line")"
    [[ -z "$name" ]] && continue
    if grep -q 'not found' <<<"$line"; then
      die "$(basename "$b") needs $name, which ldd cannot find here"
    fi
    base="$(basename "$name")"
    [[ "$base" =~ $SYSTEM_RE ]] && continue
    path="$(awk '$2 == "=>" {print $3}' <<<"$line")"
    [[ -n "$path" && -f "$path" ]] || die "cannot resolve $name for $(basename "$b"): '$line'"
    if [[ -z "${copied[$base]:-}" ]]; then
      if [[ "$base" =~ ^(libstdc\+\+|libgcc_s)\.so ]]; then
        cp -L "$path" "$BUNDLE/lib/cxx/$base"
      else
        cp -L "$path" "$BUNDLE/lib/$base"
        # Our own libraries (libweightcast.so, for the extension) carry debug info.
        [[ "$path" == "$BUILD"/* ]] && strip --strip-debug "$BUNDLE/lib/$base"
      fi
      copied[$base]="$path"
    fi
  done < <(ldd "$b")
done

cp "$REPO/tests/gpu/run.sh" "$BUNDLE/run.sh"
chmod +x "$BUNDLE/run.sh"

# The newest symbol versions the bundle asks for: run.sh checks them on the GPU machine.
newest() {  # newest PREFIX FILE...: the highest PREFIX_x.y.z version the files reference
  local prefix="$1"
  shift
  for f in "$@"; do objdump -T "$f"; done 2>/dev/null | grep -o "${prefix}_[0-9][0-9.]*" |
    sed "s/${prefix}_//" | sort -uV | tail -1
}
shopt -s nullglob
revision="$(sed -n 's/^#define WEIGHTCAST_GIT_REVISION "\(.*\)"/\1/p' "$CONFIG_H")"
nvcc_bin="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
{
  echo "revision=$revision"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"')"
  echo "glibc_needed=$(newest GLIBC "$BUNDLE"/bin/* "$BUNDLE"/lib/*.so* "${py_core[@]}")"
  echo "glibcxx_needed=$(newest GLIBCXX "$BUNDLE"/bin/* "$BUNDLE"/lib/*.so* "${py_core[@]}")"
  echo "glibc_needed_with_lib_cxx=$(newest GLIBC "$BUNDLE"/bin/* "$BUNDLE"/lib/*.so* \
    "$BUNDLE"/lib/cxx/* "${py_core[@]}")"
  echo "device_python=$DEVICE_PYTHON${py_core:+ (extension $(basename "${py_core[0]}"))}"
  echo "nvcc=$("$nvcc_bin" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  for base in "${!copied[@]}"; do echo "lib $base <- ${copied[$base]}"; done | sort
  (cd "$BUNDLE" && find bin lib ${py_core:+python} -type f -printf 'file %p %s\n' | sort)
} >"$BUNDLE/MANIFEST"

# Everything that travels: the bundle (carried) plus the tree's tracked and untracked files
# (approximated by the checkout without .git and the ignored build folders).
# What travels is the bundle packed (the binaries compress about 3:1); run.sh unpacks it there.
ARCHIVE="$BUNDLE.tar.gz"
tar -C "$(dirname "$BUNDLE")" -czf "$ARCHIVE" "$(basename "$BUNDLE")"
bundle_bytes="$(du -sb "$BUNDLE" | cut -f1)"
archive_bytes="$(stat -c %s "$ARCHIVE")"
tree_bytes="$(cd "$REPO" && du -sb --exclude=./.git --exclude='./build*' --exclude=./.cache . |
  cut -f1)"
total=$((archive_bytes + tree_bytes))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
echo "bundle $BUNDLE: $(mib "$bundle_bytes") MiB (bin $(mib "$(du -sb "$BUNDLE/bin" | cut -f1)")," \
  "lib $(mib "$(du -sb "$BUNDLE/lib" | cut -f1)")), packed $(mib "$archive_bytes") MiB in $ARCHIVE;" \
  "with the tree $(mib "$total") MiB of the 64 MiB the device tool carries"
if ((total >= LIMIT_BYTES)); then
  die "packed bundle + tree = $total bytes, over the device tool's $LIMIT_BYTES: strip harder or carry less"
fi
