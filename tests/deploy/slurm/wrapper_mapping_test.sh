#!/usr/bin/env bash
# The weightcast-slurm wrapper's mapping from Slurm's task identity to group ranks and hosts,
# without Slurm: fake SLURM_* variables, a fake scontrol (node lists and NodeAddr), a fake
# weightcastd that prints its arguments, and the real `weightcast` for `group init` and
# `group ranks`. Covers a plain job, a heterogeneous job (a step per component and a step
# over both), the errors that name a missing variable or file, and `wait`'s verdict on
# status replies (a fake `weightcast group status`).
#
# Usage: wrapper_mapping_test.sh [BIN_DIR]   (default: $WEIGHTCAST_BIN, else build/src)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
wrapper="$repo/deploy/slurm/weightcast-slurm"
real_bin="${1:-${WEIGHTCAST_BIN:-$repo/build/src}}"
[[ -x "$real_bin/weightcast" ]] || { echo "FAIL: no weightcast binary in '$real_bin'"; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/wc-slurm-map.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check NAME COMMAND...: the command must succeed
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

# Fakes. scontrol expands "n[0-2],x" style lists and gives node nK the address 10.1.0.K.
mkdir -p "$work/bin" "$work/path"
cat >"$work/bin/weightcastd" <<'EOF'
#!/usr/bin/env bash
echo "weightcastd $*"
EOF
cat >"$work/bin/weightcast" <<EOF
#!/usr/bin/env bash
if [[ "\$1 \$2" == "group status" ]]; then
  [[ -f "\${FAKE_STATUS:-}" ]] || exit 1
  cat "\$FAKE_STATUS"; exit 0
fi
exec "$real_bin/weightcast" "\$@"
EOF
cat >"$work/path/scontrol" <<'EOF'
#!/usr/bin/env bash
if [[ "$1 $2" == "show hostnames" ]]; then
  IFS=',' read -ra items <<<"$(sed 's/\(\[[^]]*\),/\1;/g' <<<"$3")"
  for item in "${items[@]}"; do
    if [[ "$item" =~ ^([a-z]+)\[(.*)\]$ ]]; then
      IFS=';,' read -ra ranges <<<"${BASH_REMATCH[2]}"
      for range in "${ranges[@]}"; do
        for i in $(seq "${range%-*}" "${range#*-}"); do echo "${BASH_REMATCH[1]}$i"; done
      done
    else echo "$item"; fi
  done
elif [[ "$1 $2 $3" == "show node -o" ]]; then
  echo "NodeName=$4 Arch=x86_64 NodeAddr=10.1.0.${4#n} NodeHostName=$4 Port=0"
else exit 1; fi
EOF
chmod +x "$work/bin/"* "$work/path/scontrol"
export PATH="$work/path:$PATH" WEIGHTCAST_BIN="$work/bin"
unset "${!SLURM_@}" SLURMD_NODENAME WEIGHTCAST_SLURM_HET_COMPONENT

# Runs the wrapper in a clean Slurm environment given as NAME=VALUE words; stdout+stderr to
# $work/out, the status returned.
slurm() {
  local vars=()
  while [[ $# -gt 0 && "$1" == *=* ]]; do vars+=("$1"); shift; done
  env "${vars[@]}" "$wrapper" "$@" >"$work/out" 2>&1
}
out_has() { grep -qF -- "$1" "$work/out" || { echo "  expected '$1' in:"; sed 's/^/    /' "$work/out"; false; }; }
hosts_are() { [[ "$("$real_bin/weightcast" group ranks --config "$1" | awk '{print $3}' | tr '\n' ' ')" == "$2" ]]; }
rank_is() { out_has "weightcastd --config $1 --rank $2"; }

# A plain job: 5 tasks on n0 (3) and n1 (2).
plain=(SLURM_JOB_ID=42 SLURM_NTASKS=5 SLURM_JOB_NODELIST="n[0-1]" SLURM_TASKS_PER_NODE="3,2")
p="$work/plain/group.yaml"
check "plain: init" slurm "${plain[@]}" init --dir "$work/plain" -- --demo-parameters 4096 --demo-versions 2
check "plain: endpoint on the first node's NodeAddr, port from the job id" \
  grep -q 'endpoint: "tcp://10.1.0.0:20042"' "$p"
check "plain: binds every interface" grep -q 'bind: "tcp://\*:20042"' "$p"
check "plain: 1 coordinator, 1 publisher, 3 subscribers" \
  test "$("$real_bin/weightcast" group ranks --config "$p" | awk '{print $2}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')" \
  = " 1 coordinator; 1 publisher; 3 subscriber;"
check "plain: hosts by block distribution" hosts_are "$p" "n0 n0 n0 n1 n1 "
for t in 0 1 2 3 4; do
  node=n0; ((t >= 3)) && node=n1
  check "plain: task $t on $node is rank $t" slurm "${plain[@]}" SLURM_PROCID=$t SLURMD_NODENAME=$node \
    run --config "$p"
  rank_is "$p" "$t" || failures=$((failures + 1))
done
check "plain: arguments after -- reach weightcastd" \
  slurm SLURM_PROCID=1 SLURMD_NODENAME=n0 run --config "$p" -- --threads 1
out_has "--rank 1 --threads 1" || failures=$((failures + 1))

# A heterogeneous job: component 0 = 2 tasks on n0, component 1 = 3 tasks on n1 (2), n2 (1).
het=(SLURM_JOB_ID=7 SLURM_HET_SIZE=2
  SLURM_NTASKS_HET_GROUP_0=2 SLURM_JOB_NODELIST_HET_GROUP_0=n0 SLURM_TASKS_PER_NODE_HET_GROUP_0=2
  SLURM_NTASKS_HET_GROUP_1=3 SLURM_JOB_NODELIST_HET_GROUP_1="n[1-2]" SLURM_TASKS_PER_NODE_HET_GROUP_1="2,1")
h="$work/het/group.yaml"
check "het: init" slurm "${het[@]}" init --dir "$work/het" --port 31000 -- --demo-parameters 4096
check "het: component 0 holds coordinator and publisher" \
  test "$("$real_bin/weightcast" group ranks --config "$h" | awk '{print $2}' | tr '\n' ' ')" \
  = "coordinator publisher subscriber subscriber subscriber "
check "het: hosts per component" hosts_are "$h" "n0 n0 n1 n1 n2 "
check "het: endpoint from --port" grep -q 'endpoint: "tcp://10.1.0.0:31000"' "$h"
check "het: component 1 task 2 is rank 4" slurm "${het[@]}" SLURM_STEP_NUM_TASKS=3 SLURM_PROCID=2 \
  SLURMD_NODENAME=n2 run --config "$h" --het-component 1
rank_is "$h" 4 || failures=$((failures + 1))
check "het: component from the environment" slurm "${het[@]}" SLURM_STEP_NUM_TASKS=3 SLURM_PROCID=0 \
  SLURMD_NODENAME=n1 WEIGHTCAST_SLURM_HET_COMPONENT=1 run --config "$h"
rank_is "$h" 2 || failures=$((failures + 1))
check "het: component 0 task 1 is rank 1" slurm "${het[@]}" SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 \
  SLURMD_NODENAME=n0 run --config "$h" --het-component 0
rank_is "$h" 1 || failures=$((failures + 1))
check "het: a step over both components keeps SLURM_PROCID" slurm "${het[@]}" SLURM_STEP_NUM_TASKS=5 \
  SLURM_PROCID=3 SLURMD_NODENAME=n1 run --config "$h"
rank_is "$h" 3 || failures=$((failures + 1))

# init as a step (srun --overlap -n 4 beside a job): the step's layout, not the job's; only
# task 0 writes.
step=(SLURM_JOB_ID=9 SLURM_NTASKS=8 SLURM_JOB_NODELIST="n[0-3]" SLURM_TASKS_PER_NODE="2(x4)"
  SLURM_STEP_ID=3 SLURM_STEP_NUM_TASKS=4 SLURM_STEP_NODELIST="n[1-2]" SLURM_STEP_TASKS_PER_NODE="2(x2)")
check "step: task 1 writes nothing" slurm "${step[@]}" SLURM_PROCID=1 init --dir "$work/step"
check "step: ... and no config" test ! -e "$work/step/group.yaml"
check "step: task 0 writes the config" slurm "${step[@]}" SLURM_PROCID=0 init --dir "$work/step"
check "step: hosts from the step's layout" hosts_are "$work/step/group.yaml" "n1 n1 n2 n2 "
check "step: endpoint on the step's first node" \
  grep -q 'endpoint: "tcp://10.1.0.1:20009"' "$work/step/group.yaml"

# Errors: each names what is missing or wrong, and nothing is started.
refused() {  # refused NAME EXPECTED_TEXT ARGS...: the wrapper must exit 2 and say EXPECTED_TEXT
  local name="$1" text="$2"; shift 2
  slurm "$@"
  local rc=$?
  if [[ $rc -eq 2 ]] && out_has "$text" && ! grep -q '^weightcastd' "$work/out"; then
    echo "ok   $name"
  else echo "FAIL $name (status $rc)"; failures=$((failures + 1)); fi
}
refused "run without SLURM_PROCID" "SLURM_PROCID is not set" SLURMD_NODENAME=n0 run --config "$p"
refused "run without SLURMD_NODENAME" "SLURMD_NODENAME is not set" SLURM_PROCID=0 run --config "$p"
refused "run with a missing config" "$work/nope.yaml' does not exist" \
  SLURM_PROCID=0 SLURMD_NODENAME=n0 run --config "$work/nope.yaml"
refused "init without SLURM_TASKS_PER_NODE" "SLURM_TASKS_PER_NODE is not set" \
  SLURM_JOB_ID=1 SLURM_NTASKS=2 SLURM_JOB_NODELIST=n0 init --dir "$work/x"
refused "init without a het component's task count" "SLURM_NTASKS_HET_GROUP_1 is not set" \
  SLURM_HET_SIZE=2 SLURM_NTASKS_HET_GROUP_0=2 SLURM_JOB_NODELIST_HET_GROUP_0=n0 \
  SLURM_TASKS_PER_NODE_HET_GROUP_0=2 init --dir "$work/x"
refused "init with a layout that does not match the node list" "2 nodes (n[0-1]) but task layout '4'" \
  SLURM_JOB_ID=1 SLURM_NTASKS=4 SLURM_JOB_NODELIST="n[0-1]" SLURM_TASKS_PER_NODE=4 init --dir "$work/x"
refused "het: publishers outside component 0" "it must hold the coordinator and the 1 publisher(s)" \
  "${het[@]}" SLURM_NTASKS_HET_GROUP_0=3 SLURM_TASKS_PER_NODE_HET_GROUP_0=3 init --dir "$work/x" --publishers 1
refused "het: a one-component step needs --het-component" "pass --het-component K" \
  "${het[@]}" SLURM_STEP_NUM_TASKS=3 SLURM_PROCID=0 SLURMD_NODENAME=n1 run --config "$h"
refused "het: component out of range" "--het-component must be 0..1" \
  "${het[@]}" SLURM_PROCID=0 SLURMD_NODENAME=n1 run --config "$h" --het-component 2
refused "het: --het-component outside a het job" "SLURM_HET_SIZE is not set" \
  SLURM_PROCID=0 SLURMD_NODENAME=n0 run --config "$p" --het-component 1
refused "a task beyond the config's ranks" "rank 5 (task 5) is not in" \
  SLURM_PROCID=5 SLURMD_NODENAME=n1 run --config "$p"
refused "the coordinator away from its endpoint's node" "rank 0 is the coordinator, placed on 'n0'" \
  SLURM_PROCID=0 SLURMD_NODENAME=n1 run --config "$p"
check "a subscriber on another node than the config says runs, with a warning" \
  slurm SLURM_PROCID=4 SLURMD_NODENAME=n0 run --config "$p"
out_has "warning: rank 4 runs on n0, '$p' says 'n1'" || failures=$((failures + 1))

# wait: the plain config's subscribers are ranks 2..4 and demo.versions is 2.
status() {  # status COMMITTED RESULT_OF_RANK_4 STATE_OF_RANK_4
  local r4="" m
  [[ -n "$2" ]] && r4=", \"4\": \"$2\""
  m='{"rank": 2, "role": "subscriber", "state": "live", "version": 2},
     {"rank": 3, "role": "subscriber", "state": "live", "version": 2},
     {"rank": 4, "role": "subscriber", "state": "'"$3"'", "version": 2}'
  cat >"$work/status.json" <<EOF
{"committed_version": $1, "members": [$m],
 "versions": [{"version": 2, "committed": $([[ $1 -ge 2 ]] && echo true || echo false),
               "results": {"2": "ok", "3": "ok"$r4}}]}
EOF
}
export FAKE_STATUS="$work/status.json"
status 2 ok live
check "wait: done when every subscriber holds the last version and acked ok" \
  "$wrapper" wait --config "$p" --timeout 5 --status-out "$work/last.json"
check "wait: keeps the last status" cmp -s "$work/status.json" "$work/last.json"
for bad in mismatch nack; do
  status 2 "$bad" live
  check "wait: fails at once on '$bad'" bash -c "! '$wrapper' wait --config '$p' --timeout 10 2>'$work/out'"
  out_has "(2, '4', '$bad')" || failures=$((failures + 1))
done
status 2 catch_up live
check "wait: 'catch_up' at the last version is not done" \
  bash -c "! '$wrapper' wait --config '$p' --timeout 1 2>/dev/null"
status 2 "" live
check "wait: a subscriber without an ack is not done (deadline)" \
  bash -c "! '$wrapper' wait --config '$p' --timeout 2 2>'$work/out'"
out_has "did not reach version 2 in 2s" || failures=$((failures + 1))
status 2 ok dead
check "wait: a dead subscriber is not done" bash -c "! '$wrapper' wait --config '$p' --timeout 1 2>/dev/null"
status 1 ok live
check "wait: an uncommitted last version is not done" \
  bash -c "! '$wrapper' wait --config '$p' --timeout 1 2>/dev/null"

check "--help prints the usage" bash -c "'$wrapper' --help | grep -q 'weightcast-slurm run --config C'"
if [[ $failures -ne 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "all checks passed"
