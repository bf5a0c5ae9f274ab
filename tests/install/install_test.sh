#!/usr/bin/env bash
# install.find_package: installs the build tree's weightcast_dev component into a temporary
# prefix, configures and builds tests/install/outside against it with find_package(weightcast)
# (nothing from the source tree on its include path), then runs it in a rank group whose
# coordinator is the installed weightcastd.
#   install_test.sh BUILD_DIR SOURCE_DIR [GENERATOR [CXX [CXX_FLAGS]]]
# CXX and CXX_FLAGS: the build's compiler, and the sanitizer flags of a sanitizer build (an
# executable linking an ASan-instrumented library must load the ASan runtime itself).
set -uo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR [GENERATOR [CXX [CXX_FLAGS]]]" >&2
  exit 2
fi
build=$1 source=$2 generator=${3:-} cxx=${4:-} cxx_flags=${5:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/wc_install.XXXXXX")
coordinator_pid=""
cleanup() {
  if [[ -n $coordinator_pid ]] && kill -0 "$coordinator_pid" 2>/dev/null; then
    kill -KILL "$coordinator_pid" 2>/dev/null
  fi
  [[ -n ${WEIGHTCAST_KEEP_TEST_DIRS:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  [[ -f $work/coordinator.log ]] && { echo "----- coordinator.log -----"; cat "$work/coordinator.log"; }
  exit 1
}

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" --component weightcast_dev >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install"; }
for f in include/weightcast/weightcast.h lib/cmake/weightcast/weightcastConfig.cmake bin/weightcastd; do
  [[ -e $prefix/$f ]] || fail "$f not installed"
done
# The installed headers name nothing of the internal tree.
if grep -rEn '#include "(codec|src|transport|proto)/|\.pb\.h' "$prefix/include/weightcast"; then
  fail "an installed header includes an internal one"
fi

gen=()
[[ -n $generator ]] && gen+=(-G "$generator")
[[ -n $cxx ]] && gen+=(-DCMAKE_CXX_COMPILER="$cxx")
[[ -n $cxx_flags ]] && gen+=(-DCMAKE_CXX_FLAGS="$cxx_flags")
cmake -S "$source/tests/install/outside" -B "$work/outside" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configuring the outside project"; }
cmake --build "$work/outside" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "building the outside project"; }

# Each mode in a group of its own: a coordinator (the installed weightcastd), then the
# outside program as its publisher and subscriber.
run_group() {
  local mode=$1 dir=$work/$1
  mkdir -p "$dir"
  cat >"$dir/group.yaml" <<YAML
group_id: install-test-$mode
coordinator: {endpoint: "ipc://$dir/coordinator.sock"}  # a unix socket: no port to choose
journal: {root: journal}
transports: [fs]
timeouts: {heartbeat_ms: 200, dead_after_ms: 3000, ack_timeout_ms: 20000}
ranks:
  - {rank: 0, role: coordinator}
  - {rank: 1, role: publisher}
  - {rank: 2, role: subscriber}
YAML
  "$prefix/bin/weightcastd" --config "$dir/group.yaml" --rank 0 --threads 1 \
    >"$work/coordinator.log" 2>&1 &
  coordinator_pid=$!
  timeout -k 5 60 "$work/outside/weightcast_outside" "$dir/group.yaml" "$mode" >"$dir/outside.log" 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    cat "$dir/outside.log"
    fail "weightcast_outside $mode exited $rc"
  fi
  grep "all checks passed" "$dir/outside.log" || fail "no success line from weightcast_outside $mode"
  kill -TERM "$coordinator_pid" 2>/dev/null
  wait "$coordinator_pid" 2>/dev/null
  coordinator_pid=""
}
run_group snapshot
run_group hooked
run_group shard
echo "PASS"
