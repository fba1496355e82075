#!/usr/bin/env bash
# End-to-end test of the Slurm integration on one machine: starts munged, slurmctld and slurmd on
# loopback with a configuration written here (two fake GPUs of 80 GiB and 40 GiB exposed as 4 GiB
# shards by `vramkit slurm gres`, slurm/job_submit.lua as the submit plugin), submits jobs with
# sbatch --comment=vram=..., and checks placement, queueing and refusal with squeue/scontrol.
# Usage: slurm_e2e_test.sh VRAMKIT_BINARY SOURCE_DIR [POOL_CAP_PROBE]. Exits 77 (skipped) without
# root or Slurm. With the probe, a job also allocates through the vramkit pool within and past
# its cap.
set -euo pipefail

VRAMKIT=${1:?usage: slurm_e2e_test.sh VRAMKIT_BINARY SOURCE_DIR}
SRC=${2:?usage: slurm_e2e_test.sh VRAMKIT_BINARY SOURCE_DIR}
PROBE=${3:-}

skip() { echo "SKIPPED: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "slurmd and munged must run as root here"
for b in munged slurmctld slurmd sbatch squeue scontrol python3; do
  command -v "$b" >/dev/null || skip "$b is not installed (scripts/setup installs slurmctld slurmd slurm-client munge)"
done

TMP=$(mktemp -d /tmp/vramkit-slurm-e2e.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
  local rc=$?
  # Jobs run while $TMP/running exists: removing it ends them even if a daemon is already gone, so
  # no job step outlives the test.
  rm -f "$TMP/running"
  if [ -n "${SLURM_CONF:-}" ]; then
    scancel --quiet --full "--user=$(id -un)" 2>/dev/null || true
    for _ in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    echo "---- slurmctld log (tail)"; tail -n 30 "$TMP/log/slurmctld.log" 2>/dev/null || true
    echo "---- slurmd log (tail)"; tail -n 30 "$TMP/log/slurmd.log" 2>/dev/null || true
  fi
  rm -rf "$TMP"
  exit $rc
}
trap cleanup EXIT INT TERM

fail() { echo "FAILED: $*" >&2; exit 1; }
# Polls `cmd` until it prints `want` or `seconds` pass.
wait_for() {
  local seconds=$1 want=$2; shift 2
  local got=""
  for _ in $(seq $((seconds * 5))); do
    got=$("$@" 2>/dev/null || true)
    [ "$got" = "$want" ] && return 0
    sleep 0.2
  done
  fail "waited ${seconds}s for '$*' to print '$want', last got '$got'"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$TMP"/{etc,dev,log,state,spool,munge}
touch "$TMP/running"
# Device files for gres.conf File=: character devices where mknod is allowed, else plain files.
for i in 0 1; do mknod "$TMP/dev/nvidia$i" c 1 3 2>/dev/null || touch "$TMP/dev/nvidia$i"; done

# --- munge with its own key and socket ----------------------------------------------------------
dd if=/dev/urandom of="$TMP/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$TMP/munge/munge.key"
chmod 755 "$TMP/munge"
munged -F -f --socket="$TMP/munge/munge.sock" --key-file="$TMP/munge/munge.key" \
  --pid-file="$TMP/munge/munged.pid" --log-file="$TMP/log/munged.log" --seed-file="$TMP/munge/seed" >"$TMP/log/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [ -S "$TMP/munge/munge.sock" ] && break; sleep 0.1; done
[ -S "$TMP/munge/munge.sock" ] || fail "munged did not create its socket"

# --- Slurm configuration: GRES from vramkit slurm gres ------------------------------------------
cat > "$TMP/gpus.json" <<JSON
{"gpus": [
  {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-e2e-0", "memory_total_bytes": $((80 << 30)), "memory_used_bytes": 0},
  {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-e2e-1", "memory_total_bytes": $((40 << 30)), "memory_used_bytes": 0}
]}
JSON
"$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --node vk0 --shard-size 4GiB \
  --device-prefix "$TMP/dev/nvidia" --output-dir "$TMP/etc" >/dev/null
grep -q "^shard_bytes=$((4 << 30))$" "$TMP/etc/vramkit-slurm.conf" || fail "vramkit-slurm.conf: wrong shard_bytes"
grep -q "^max_gpu_shards=20$" "$TMP/etc/vramkit-slurm.conf" || fail "vramkit-slurm.conf: wrong max_gpu_shards"
GRES=$(grep '^NodeName=' "$TMP/etc/slurm-node.conf" | grep -o 'Gres=[^ ]*')
[ "$GRES" = "Gres=gpu:h100:1,gpu:a100:1,shard:30" ] || fail "unexpected node line: $GRES"
cp "$SRC/slurm/job_submit.lua" "$TMP/etc/job_submit.lua"
cp "$SRC/slurm/task_prolog.sh" "$TMP/etc/vramkit-task-prolog.sh"
chmod 755 "$TMP/etc/vramkit-task-prolog.sh"

CTLD_PORT=$(free_port); SLURMD_PORT=$(free_port)
cat > "$TMP/etc/slurm.conf" <<CONF
ClusterName=vramkit-e2e
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$TMP/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/log/slurmctld.log
SlurmdLogFile=$TMP/log/slurmd.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobSubmitPlugins=lua
TaskProlog=$TMP/etc/vramkit-task-prolog.sh
GresTypes=gpu,shard
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=vk0 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 $GRES State=UNKNOWN
PartitionName=gpu Nodes=vk0 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$TMP/etc/slurm.conf"

slurmctld -D -i -f "$SLURM_CONF" >"$TMP/log/slurmctld.out" 2>&1 &
PIDS+=($!)
wait_for 30 "UP" bash -c "scontrol ping | grep -o 'UP' | head -1"
slurmd -D -N vk0 -f "$SLURM_CONF" >"$TMP/log/slurmd.out" 2>&1 &
PIDS+=($!)
wait_for 30 "idle" sinfo -h -n vk0 -o %t

submit() {  # submit COMMENT -> job id, or fails with sbatch's output
  local out
  out=$(sbatch --parsable -o /dev/null -e /dev/null --comment="$1" --wrap="while [ -e '$TMP/running' ]; do sleep 0.2; done" 2>&1) \
    || fail "sbatch --comment=$1 was refused: $out"
  echo "$out" | tail -n 1
}
state() { squeue -h -j "$1" -o %T; }
reason() { squeue -h -j "$1" -o %r; }
gres_of() { scontrol -d show job "$1" | grep -o 'GRES=shard:[0-9]*(IDX:[0-9]*)' | head -n 1; }

# 60 GiB -> 15 shards of 4 GiB: only the 80 GiB GPU (index 0, 20 shards) can hold it.
A=$(submit "vram=60GiB")
wait_for 20 RUNNING state "$A"
[ "$(gres_of "$A")" = "GRES=shard:15(IDX:0)" ] || fail "job A: expected shard:15 on GPU 0, got '$(gres_of "$A")'"
scontrol show job "$A" | grep -q "TresPerNode=gres:shard:15" || fail "job A: TresPerNode is not gres:shard:15"

# 24 GiB -> 6 shards: GPU 0 has 5 left, so GPU 1.
B=$(submit "vram=24GiB")
wait_for 20 RUNNING state "$B"
[ "$(gres_of "$B")" = "GRES=shard:6(IDX:1)" ] || fail "job B: expected shard:6 on GPU 1, got '$(gres_of "$B")'"

# A plan file: device_peak_bytes = 3 GiB + 1 byte -> ceil(/4 GiB) = 1 shard.
echo "{\"schema_version\": 1, \"device_peak_bytes\": $(( (3 << 30) + 1 ))}" > "$TMP/plan.json"
P=$(submit "project=x,vram_plan=$TMP/plan.json")
wait_for 20 RUNNING state "$P"
scontrol show job "$P" | grep -q "TresPerNode=gres:shard:1" || fail "plan job: expected gres:shard:1"

# 30 GiB -> 8 shards: GPU 0 and GPU 1 have 4 or 5 left between them, not 8 on one: it waits.
C=$(submit "vram=30GiB")
wait_for 20 PENDING state "$C"
wait_for 20 Resources reason "$C"

# Larger than any GPU: refused at submission with vramkit's message.
if out=$(sbatch -o /dev/null --comment="vram=100GiB" --wrap="sleep 1" 2>&1); then
  fail "a 100 GiB job was accepted: $out"
fi
echo "$out" | grep -q "no GPU can hold it" || fail "refusal message missing: $out"
if out=$(sbatch -o /dev/null --comment="vram=lots" --wrap="sleep 1" 2>&1); then
  fail "a malformed request was accepted: $out"
fi
echo "$out" | grep -q "is not a size" || fail "malformed-request message missing: $out"

# When job A ends, its 15 shards return and the waiting job runs on GPU 0.
scancel "$A"
wait_for 30 RUNNING state "$C"
[ "$(gres_of "$C")" = "GRES=shard:8(IDX:0)" ] || fail "job C: expected shard:8 on GPU 0, got '$(gres_of "$C")'"

# --gpus with vram=: refused at submission with vramkit's message, not Slurm's generic gres error.
if out=$(sbatch -o /dev/null --gpus=1 --comment="vram=2GiB" --wrap="sleep 1" 2>&1); then
  fail "--gpus=1 with vram= was accepted: $out"
fi
echo "$out" | grep -q "not both" || fail "--gpus with vram= message missing: $out"

# Enforcement: the TaskProlog puts the cap (2 shards x 4 GiB) into the task's environment.
E=$(sbatch --parsable -o "$TMP/env.txt" -e /dev/null --comment="vram=8GiB" --wrap="env" 2>&1) \
  || fail "sbatch --comment=vram=8GiB was refused: $E"
E=$(echo "$E" | tail -n 1)
for _ in $(seq 100); do [ -z "$(state "$E")" ] && break; sleep 0.2; done
grep -q "^SLURM_SHARDS_ON_NODE=2$" "$TMP/env.txt" || fail "job E: no SLURM_SHARDS_ON_NODE=2 in $(cat "$TMP/env.txt" | grep -i shard)"
grep -q "^VRAMKIT_POOL_MAXIMUM=$((8 << 30))$" "$TMP/env.txt" \
  || fail "job E: VRAMKIT_POOL_MAXIMUM is not $((8 << 30)): $(grep VRAMKIT "$TMP/env.txt")"
# The plan for drift: job_submit.lua puts the request into a batch job's environment.
grep -q "^VRAMKIT_PLANNED_BYTES=$((8 << 30))$" "$TMP/env.txt" \
  || fail "job E: VRAMKIT_PLANNED_BYTES is not $((8 << 30)): $(grep VRAMKIT "$TMP/env.txt")"

# Enforcement inside a job: the vramkit pool, configured by the TaskProlog's cap (8 GiB), gives
# 5 GiB and then refuses 4 GiB more (out of memory); a job of 16 GiB gets both.
if [ -n "$PROBE" ]; then
  for spec in "8GiB:F" "16GiB:G"; do
    vram=${spec%%:*}
    J=$(sbatch --parsable -o "$TMP/probe-$vram.txt" -e "$TMP/probe-$vram.err" --comment="vram=$vram" \
      --wrap="'$PROBE' 5GiB 4GiB; echo exit=\$?" 2>&1) || fail "sbatch --comment=vram=$vram was refused: $J"
    J=$(echo "$J" | tail -n 1)
    for _ in $(seq 100); do [ -z "$(state "$J")" ] && break; sleep 0.2; done
  done
  grep -q "^allocated 5GiB$" "$TMP/probe-8GiB.txt" && grep -q "^out of memory at 4GiB$" "$TMP/probe-8GiB.txt" \
    && grep -q "^exit=3$" "$TMP/probe-8GiB.txt" \
    || fail "8 GiB job: 5 GiB then 4 GiB should be out of memory: $(cat "$TMP/probe-8GiB.txt" "$TMP/probe-8GiB.err")"
  grep -q "^allocated 4GiB$" "$TMP/probe-16GiB.txt" && grep -q "^exit=0$" "$TMP/probe-16GiB.txt" \
    || fail "16 GiB job: 5 + 4 GiB should fit: $(cat "$TMP/probe-16GiB.txt" "$TMP/probe-16GiB.err")"
fi

scancel "$B" "$P" "$C"
echo "PASSED: placement by memory, queueing, refusal, plan requests and the TaskProlog cap through slurmctld${PROBE:+, the pool refusing past the cap inside a job}"
