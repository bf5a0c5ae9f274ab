#!/usr/bin/env bash
# deploy/slurm against a real Slurm started here: munged, slurmctld and two slurmd with their
# own config, key, ports, state and logs in a temporary directory (SLURM_CONF; nothing in /etc
# is read or written). Submits deploy/slurm/weightcast-group.sbatch twice, each a demo group
# of 1 coordinator, 1 or 2 publishers and 2 subscribers:
#   plain  one step of 4 tasks on one node;
#   het    a heterogeneous job: component 0 (coordinator + 2 publisher ranks: a sharded
#          trainer whose ranks each publish their shard, src/daemon/shard_demo.h) on one node,
#          component 1 (2 engines) on the other, one step per component.
# Each must end COMPLETED with exit code 0. A third job, one task more than its config has
# ranks, must fail at once. Then a group runs beside an existing job:
#   beside `srun --overlap --jobid J` steps in a running job, stopped by
#          `scancel --signal=TERM J.S` while the job goes on.
# For each, every demo version must be committed, both subscribers "ok" and live at the last
# one with no failed result before it (the status saved at completion), and each rank must
# have run once, on its node.
#
# Why two slurmd: Slurm's backfill scheduler, the only one that starts heterogeneous jobs,
# reserves whole nodes, so two components never share a node. The second slurmd is a second
# Slurm node on this same machine (`slurmd -N`, its own port).
#
# Skips (exit 77) when not root or when Slurm or MUNGE is not installed. Always stops every
# daemon it started, and what they started, by pid, within bounded time.
# Usage: slurm_group_test.sh [BIN_DIR]   (default: $WEIGHTCAST_BIN, else build/src)
set -uo pipefail

skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root: slurmd runs the jobs and this test's Slurm runs as root"
for tool in slurmctld slurmd munged mungekey sbatch srun sinfo squeue scontrol scancel python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (apt-get install slurm-wlm munge)"
done

# Its own network namespace (only loopback, up): the daemons' and the groups' ports are
# private to this test, so none can be taken by another process between choosing and binding.
# Where namespaces are not allowed the ports are probed on the host's loopback instead.
if [[ -z ${WEIGHTCAST_SLURM_TEST_NETNS:-} ]] && command -v unshare >/dev/null &&
  unshare --net true 2>/dev/null; then
  export WEIGHTCAST_SLURM_TEST_NETNS=1
  # A veth pair with an address beside loopback: getaddrinfo(AI_ADDRCONFIG), which slurmd
  # uses for its listening socket, finds nothing where loopback is the only interface.
  exec unshare --net bash -c 'ip link set lo up && ip link add wcs0 type veth peer name wcs1 &&
    ip addr add 10.254.0.1/30 dev wcs0 && ip link set wcs0 up && ip link set wcs1 up &&
    exec "$0" "$@"' "$0" "$@"
fi
[[ -n ${WEIGHTCAST_SLURM_TEST_NETNS:-} ]] && echo "in a network namespace of its own" ||
  echo "on the host's network (no namespace allowed): ports probed"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
bin="${1:-${WEIGHTCAST_BIN:-$repo/build/src}}"
[[ -x "$bin/weightcastd" && -x "$bin/weightcast" ]] || { echo "FAIL: no weightcastd/weightcast in '$bin'"; exit 1; }
bin="$(cd "$bin" && pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/wc-slurm.XXXXXX")"
chmod 755 "$work"
export SLURM_CONF="$work/slurm.conf"
daemons=()  # "name pid"
job_ids=()
failed=0

# Stops the jobs, then the daemons, then anything left that runs with this test's SLURM_CONF
# (slurmstepd and the ranks it started outlive a killed slurmd); each step bounded.
cleanup() {
  local entry pid name deadline
  if [[ ${#job_ids[@]} -gt 0 ]]; then
    timeout 10 scancel "${job_ids[@]}" 2>/dev/null
    deadline=$((SECONDS + 20))
    while [[ -n "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]] && ((SECONDS < deadline)); do sleep 0.5; done
  fi
  for entry in "${daemons[@]}"; do kill -TERM "${entry#* }" 2>/dev/null; done
  for entry in "${daemons[@]}"; do
    name="${entry% *}" pid="${entry#* }" deadline=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { echo "cleanup: $name ignored SIGTERM; killing it"; kill -KILL "$pid"; }
    wait "$pid" 2>/dev/null
  done
  # The list is complete before any kill (the grep that made it has exited); this shell, which
  # has the same SLURM_CONF, is left out.
  local left=()
  mapfile -t left < <(grep -lsxzF "SLURM_CONF=$SLURM_CONF" /proc/[0-9]*/environ | cut -d/ -f3)
  for pid in "${left[@]}"; do
    [[ "$pid" != "$$" ]] && kill -KILL "$pid" 2>/dev/null && echo "cleanup: killed leftover pid $pid"
  done
  if [[ $failed -ne 0 ]]; then
    # The daemons' log files; their consoles hold the same lines, or why they did not start.
    for log in "$work"/log/*; do echo "---- $log (tail)"; tail -n 25 "$log"; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "FAIL: interrupted"; failed=1; exit 1' INT TERM
fail() { echo "FAIL: $*"; failed=1; exit 1; }
t0=$SECONDS
elapsed() { echo "$((SECONDS - t0))s"; }

# free_port VAR: a port nobody listens on (a refused connection), distinct from the others.
taken=" "
free_port() {
  local p _
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    [[ "$taken" == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    taken+="$p "; printf -v "$1" '%s' "$p"; return 0
  done
  fail "no free port found"
}
ctld_port="" node0_port="" node1_port="" plain_port="" het_port="" beside_port="" short_port=""
for port in ctld_port node0_port node1_port plain_port het_port beside_port short_port; do
  free_port "$port"
done

host="$(hostname -s)"
node0="$host" node1="wcnode1"
mkdir -p "$work/munge" "$work/state" "$work/spool/$node0" "$work/spool/$node1" "$work/log"
mungekey --create --keyfile="$work/munge/munge.key" >/dev/null || fail "mungekey failed"
cat >"$SLURM_CONF" <<EOF
ClusterName=wctest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
ReturnToService=2
KillWait=5
MinJobAge=600
NodeName=$node0 NodeHostname=$host NodeAddr=127.0.0.1 Port=$node0_port CPUs=$(nproc) RealMemory=500
NodeName=$node1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$node1_port CPUs=$(nproc) RealMemory=500
PartitionName=wctest Nodes=$node0,$node1 Default=YES MaxTime=10 State=UP
EOF

munged -F --force --socket="$work/munge/munge.socket" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/seed" \
  --log-file="$work/log/munged.log" >"$work/log/munged.console" 2>&1 &
daemons+=("munged $!")
for _ in $(seq 1 50); do [[ -S "$work/munge/munge.socket" ]] && break; sleep 0.1; done
[[ -S "$work/munge/munge.socket" ]] || fail "munged did not create its socket in 5s"
slurmctld -D -i >"$work/log/slurmctld.console" 2>&1 &
daemons+=("slurmctld $!")
for node in "$node0" "$node1"; do
  slurmd -D -N "$node" >"$work/log/slurmd-$node.console" 2>&1 &
  daemons+=("slurmd-$node $!")
done
deadline=$((SECONDS + 30))
until [[ "$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | sort | tr '\n' ' ')" == "$node0 idle $node1 idle " ]]; do
  ((SECONDS < deadline)) || fail "the nodes were not idle after 30s: $(sinfo -N 2>&1)"
  sleep 0.5
done
echo "slurm up: nodes $node0 and $node1 idle ($(elapsed))"

# Environment the batch script reads (sbatch passes the submitter's environment on).
export WEIGHTCAST_SLURM="$repo/deploy/slurm/weightcast-slurm" WEIGHTCAST_BIN="$bin"
export WEIGHTCAST_INIT_ARGS="--demo-parameters 2000000 --demo-versions 4"
export WEIGHTCAST_WAIT_S=90 WEIGHTCAST_STOP_S=15
versions=4

# submit NAME PORT "STATE EXIT" SBATCH_ARGS...: submits the group script, waits for the job to
# leave the queue (bounded) and checks every component's end state and exit code.
submit() {
  local name="$1" expect="$3" id state
  export WEIGHTCAST_GROUP_DIR="$work/$name" WEIGHTCAST_PORT="$2"
  shift 3
  id="$(sbatch --parsable -o "$work/$name.out" "$@" "$repo/deploy/slurm/weightcast-group.sbatch")" ||
    fail "$name: sbatch refused the job"
  id="${id%%;*}"
  job_ids+=("$id")
  local deadline=$((SECONDS + 150))
  while [[ -n "$(timeout 5 squeue -h -j "$id" -o %i 2>/dev/null)" ]]; do
    ((SECONDS < deadline)) || { cat "$work/$name.out"; fail "$name: job $id still queued or running after 150s"; }
    sleep 1
  done
  echo "---- $name: job $id output"
  cat "$work/$name.out"
  state="$(scontrol show job -o "$id" | grep -o 'JobState=[A-Z_]* .*ExitCode=[0-9:]*' |
    sed 's/JobState=\([A-Z_]*\) .*ExitCode=\([0-9:]*\)/\1 \2/' | sort -u)"
  [[ "$state" == "$expect" ]] || fail "$name: job $id ended '$state', not $expect"
  echo "$name: job $id ended $expect ($(elapsed))"
  last_job="$id"
}

# check_group NAME JOB_ID "RANK:NODE ..." ["SUBSCRIBER RANKS" RANK_COUNT]: the saved status shows
# every version committed and both subscribers (default 2 3 of 4 ranks) "ok" and live at the
# last; each rank ran exactly once, on its node.
check_group() {
  local name="$1" id="$2" placement="$3" status="$work/$1/status-$2.json" entry
  [[ -f "$status" ]] || fail "$name: no status saved at $status"
  local subs="${4:-2 3}" ranks="${5:-4}"
  python3 - "$status" "$versions" "$subs" <<'EOF' || fail "$name: the group did not complete (status above)"
import json, sys
s = json.load(open(sys.argv[1])); last = int(sys.argv[2]); want = [int(r) for r in sys.argv[3].split()]
committed = sorted(v["version"] for v in s["versions"] if v["committed"])
subs = {m["rank"]: m for m in s["members"] if m["role"] == "subscriber"}
final = [v for v in s["versions"] if v["version"] == last]
problems = []
if committed != list(range(last + 1)): problems.append("committed versions %s" % committed)
if sorted(subs) != want: problems.append("subscribers %s" % sorted(subs))
for r, m in subs.items():
    if m["state"] != "live" or m["version"] != last: problems.append("rank %d %s" % (r, m))
if not final or final[0]["results"] != {str(r): "ok" for r in want}:
    problems.append("results at v%d: %s" % (last, final and final[0]["results"]))
# Before the last version a subscriber that joined late has "catch_up" (offered while it caught
# up) or "passed" (went through it to a later ack); a lost, refused or mismatched one fails.
fine = {"ok", "catch_up", "passed"}
bad = [(v["version"], v["results"]) for v in s["versions"] if set(v["results"].values()) - fine]
if bad: problems.append("results other than %s: %s" % (sorted(fine), bad))
print("\n".join(problems) or "v0..v%d committed; ranks %s live at v%d, ok" % (last, want, last))
sys.exit(1 if problems else 0)
EOF
  for entry in $placement; do
    local n
    n="$(grep -c "weightcast-slurm run: rank ${entry%%:*} ([a-z]*) on ${entry#*:} " "$work/$name.out")"
    [[ "$n" == 1 ]] || fail "$name: rank ${entry%%:*} ran $n times on ${entry#*:} (expected once)"
  done
  [[ "$(grep -c 'weightcast-slurm run: rank ' "$work/$name.out")" == "$ranks" ]] ||
    fail "$name: expected $ranks ranks started"
  echo "$name: ranks placed as $placement"
}

submit plain "$plain_port" "COMPLETED 0:0" -t 5 --overcommit -n 4 -w "$node0"
check_group plain "$last_job" "0:$node0 1:$node0 2:$node0 3:$node0"

submit het "$het_port" "COMPLETED 0:0" -t 5 --overcommit -n 3 -w "$node0" : -t 5 --overcommit -n 2 -w "$node1"
check_group het "$last_job" "0:$node0 1:$node0 2:$node0 3:$node1 4:$node1" "3 4" 5
grep -q "(shard 1 of 2): v$versions " "$work/het.out" ||
  fail "het: the second publisher rank did not publish its shard of v$versions"

# A rank that fails ends the job at once: a config one subscriber short for 4 tasks, so task 3
# is refused by the wrapper; the job must fail well before WEIGHTCAST_WAIT_S.
"$bin/weightcast" group init --dir "$work/short" --subscribers 1 --demo-parameters 4096 \
  --endpoint "tcp://127.0.0.1:$short_port" >/dev/null || fail "short: group init failed"
sed -i "s/host: 127.0.0.1,/host: $node0,/" "$work/short/group.yaml"
export WEIGHTCAST_CONFIG="$work/short/group.yaml"
started=$SECONDS
submit short "$short_port" "FAILED 1:0" -t 5 --overcommit -n 4 -w "$node0"
unset WEIGHTCAST_CONFIG
grep -q "rank 3 (task 3) is not in" "$work/short.out" || fail "short: the wrapper did not refuse task 3"
grep -q "ended (status [0-9]*) before the group completed" "$work/short.out" ||
  fail "short: the batch script did not see the step end early"
((SECONDS - started < WEIGHTCAST_WAIT_S)) || fail "short: the failure took the whole deadline"
echo "short: job failed in $((SECONDS - started))s, naming the refused task"

# Beside an existing job (a stand-in trainer that only sleeps): the group as two steps of that
# job, `init` then `run`, with srun --overlap from outside it, and the test as the waiter.
wrapper="$WEIGHTCAST_SLURM" dir="$work/beside"
id="$(sbatch --parsable -t 5 --overcommit -n 4 -w "$node1" -o "$work/trainer.out" --wrap "sleep 300")" ||
  fail "beside: sbatch refused the stand-in job"
job_ids+=("$id")
deadline=$((SECONDS + 30))
until [[ "$(timeout 5 squeue -h -j "$id" -o %T)" == RUNNING ]]; do
  ((SECONDS < deadline)) || fail "beside: job $id not running after 30s"
  sleep 0.5
done
# shellcheck disable=SC2086  # a list of arguments
timeout 60 srun --overlap --overcommit --jobid "$id" -n 4 "$wrapper" init --dir "$dir" --port "$beside_port" \
  -- $WEIGHTCAST_INIT_ARGS || fail "beside: init as a step failed"
srun --overlap --overcommit --jobid "$id" -n 4 --label --job-name weightcast-beside "$wrapper" run \
  --config "$dir/group.yaml" >"$work/beside.out" 2>&1 &
group_srun=$!
"$wrapper" wait --config "$dir/group.yaml" --timeout 90 --status-out "$dir/status-$id.json" ||
  { cat "$work/beside.out"; fail "beside: the group did not complete"; }
step="$(timeout 5 squeue -h -s -j "$id" -o '%i %j' | awk '$2 == "weightcast-beside" {print $1}')"
[[ -n "$step" ]] || fail "beside: the group's step is not in squeue"
scancel --signal=TERM "$step" || fail "beside: scancel --signal=TERM $step failed"
deadline=$((SECONDS + 20))
while kill -0 "$group_srun" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
kill -0 "$group_srun" 2>/dev/null && fail "beside: step $step still running 20s after SIGTERM"
wait "$group_srun" || fail "beside: step $step exited with status $? after SIGTERM"
[[ "$(timeout 5 squeue -h -j "$id" -o %T)" == RUNNING ]] || fail "beside: the stand-in job did not outlive the group"
echo "---- beside: step $step output"
cat "$work/beside.out"
check_group beside "$id" "0:$node1 1:$node1 2:$node1 3:$node1"

echo "PASSED ($(elapsed))"
