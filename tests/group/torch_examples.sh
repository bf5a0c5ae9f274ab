#!/usr/bin/env bash
# examples.torch_trainer_and_engine: the libtorch example pair as a rank group on loopback.
#   torch_examples.sh WEIGHTCASTD TRAINER ENGINE
#   torch_examples.sh --skip REASON      (built without libtorch: exits 77, ctest "skipped")
# A coordinator (weightcastd --rank 0), weightcast_torch_engine (rank 2) and
# weightcast_torch_trainer (rank 1) run against a fresh group config; passes when trainer and
# engine exit 0 within the bound, the engine applied versions through its callbacks and ends
# on the trainer's last version with the trainer's digest. Prints every log otherwise.
set -uo pipefail
if [[ ${1:-} == --skip ]]; then
  echo "SKIPPED: ${2:-libtorch not available}"
  exit 77
fi
if [[ $# -ne 3 ]]; then
  echo "usage: $0 WEIGHTCASTD TRAINER ENGINE | --skip REASON" >&2
  exit 2
fi
daemon=$1 trainer=$2 engine=$3
for b in "$daemon" "$trainer" "$engine"; do
  if [[ ! -x $b ]]; then
    echo "FAIL: $b is not built (ninja weightcastd weightcast_torch_trainer weightcast_torch_engine)"
    exit 1
  fi
done

steps=6
bound_s=150
work=$(mktemp -d "${TMPDIR:-/tmp}/wc_torch.XXXXXX")
coordinator_pid=""
cleanup() {
  if [[ -n $coordinator_pid ]] && kill -0 "$coordinator_pid" 2>/dev/null; then
    kill -KILL "$coordinator_pid" 2>/dev/null
  fi
  [[ -n ${WEIGHTCAST_KEEP_TEST_DIRS:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

# The coordinator listens on a unix socket in the work directory: no port to choose, none
# another test can take.
cat >"$work/group.yaml" <<YAML
group_id: torch-example
coordinator: {endpoint: "ipc://$work/coordinator.sock"}
journal: {root: journal, anchor_every: 4}
timeouts: {heartbeat_ms: 200, dead_after_ms: 3000, ack_timeout_ms: 30000}
ranks:
  - {rank: 0, role: coordinator}
  - {rank: 1, role: publisher}
  - {rank: 2, role: subscriber}
YAML

show_logs() {
  for f in coordinator engine trainer; do
    echo "----- $f.log -----"
    cat "$work/$f.log" 2>/dev/null
  done
}
fail() {
  echo "FAIL: $*"
  show_logs
  exit 1
}

"$daemon" --config "$work/group.yaml" --rank 0 --threads 1 >"$work/coordinator.log" 2>&1 &
coordinator_pid=$!
# `timeout` bounds each rank; it exits 124 when the bound is hit.
timeout -k 5 "$bound_s" "$engine" --config "$work/group.yaml" --rank 2 \
  --until-version "$steps" --timeout-s 120 >"$work/engine.log" 2>&1 &
engine_pid=$!
timeout -k 5 "$bound_s" "$trainer" --config "$work/group.yaml" --rank 1 --steps "$steps" \
  --timeout-s 120 >"$work/trainer.log" 2>&1 &
trainer_pid=$!
wait "$trainer_pid"
trainer_rc=$?
wait "$engine_pid"
engine_rc=$?

kill -TERM "$coordinator_pid" 2>/dev/null
for _ in $(seq 100); do
  kill -0 "$coordinator_pid" 2>/dev/null || break
  sleep 0.1
done

[[ $trainer_rc -eq 0 ]] || fail "trainer exited $trainer_rc (124: over ${bound_s}s)"
[[ $engine_rc -eq 0 ]] || fail "engine exited $engine_rc (124: over ${bound_s}s)"
grep -q "^pausing engine" "$work/engine.log" || fail "engine never paused for an apply"
grep -q "^resuming on v$steps\$" "$work/engine.log" || fail "engine never resumed on v$steps"
want=$(grep -o "^v$steps: committed by the group; digest [0-9a-f]*" "$work/trainer.log" |
  awk '{print $NF}')
got=$(grep -o "^v$steps: digest [0-9a-f]*" "$work/engine.log" | awk '{print $NF}')
[[ -n $want ]] || fail "trainer printed no digest for v$steps"
[[ $want == "$got" ]] || fail "engine digest '$got' differs from the trainer's '$want'"
cat "$work/trainer.log" "$work/engine.log"
echo "examples.torch_trainer_and_engine: passed (v$steps digest $want)"
