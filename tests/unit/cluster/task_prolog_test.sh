#!/usr/bin/env bash
# slurm/task_prolog.sh as slurmstepd runs it: the task's environment in, "export" lines out.
# Usage: task_prolog_test.sh SOURCE_DIR
set -euo pipefail
PROLOG="$1/slurm/task_prolog.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

printf 'shard_bytes=%d\nmax_gpu_shards=35\n' $((4 << 30)) > "$TMP/plain.conf"
printf 'shard_bytes=%d\nmax_gpu_shards=35\ngpu_total_bytes=%d\nmps_limit=1\n' $((4 << 30)) $((140 << 30)) > "$TMP/full.conf"

# No shards: nothing at all.
out=$(env -i VRAMKIT_SLURM_CONF="$TMP/plain.conf" sh "$PROLOG")
[ -z "$out" ] || fail "a job without shards got: $out"
out=$(env -i SLURM_SHARDS_ON_NODE=abc VRAMKIT_SLURM_CONF="$TMP/plain.conf" sh "$PROLOG")
[ -z "$out" ] || fail "a malformed shard count got: $out"

# 3 shards x 4 GiB: the pool cap only.
out=$(env -i SLURM_SHARDS_ON_NODE=3 VRAMKIT_SLURM_CONF="$TMP/plain.conf" sh "$PROLOG")
[ "$out" = "export VRAMKIT_POOL_MAXIMUM=$((12 << 30))" ] || fail "plain settings: $out"

# With the GPU's size and MPS: fraction 12/140 merged into the user's PYTORCH_CUDA_ALLOC_CONF.
out=$(env -i SLURM_SHARDS_ON_NODE=3 VRAMKIT_SLURM_CONF="$TMP/full.conf" \
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,per_process_memory_fraction:0.9 sh "$PROLOG")
expected="export VRAMKIT_POOL_MAXIMUM=$((12 << 30))
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,per_process_memory_fraction:0.0857
export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=12288M"
[ "$out" = "$expected" ] || fail "full settings: got
$out"

# No settings file: a printed note (job stdout), no cap, and the task still starts (exit 0).
out=$(env -i SLURM_SHARDS_ON_NODE=3 VRAMKIT_SLURM_CONF="$TMP/missing.conf" sh "$PROLOG" 2>&1) || fail "exit status"
case "$out" in "print vramkit task prolog: no vramkit-slurm.conf found"*) ;; *) fail "missing settings: $out" ;; esac
echo "PASSED: task prolog caps"
