#!/bin/sh
# vramkit TaskProlog for Slurm: turns the GPU shards a task holds into memory caps in its
# environment (TaskProlog=/etc/slurm/vramkit-task-prolog.sh in slurm.conf). slurmstepd runs it
# before each task and reads its output: every "export NAME=value" line sets a variable.
#
#   cap = SLURM_SHARDS_ON_NODE x shard_bytes          (shard_bytes from vramkit-slurm.conf)
#   VRAMKIT_POOL_MAXIMUM=<cap>                         the vramkit pool refuses to grow past it
#   PYTORCH_CUDA_ALLOC_CONF+=per_process_memory_fraction:<cap / gpu_total_bytes>
#                                                      when the settings give gpu_total_bytes
#   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<cap in MiB>M   when the settings say mps_limit=1
#
# Jobs without shards get nothing. The caps are cooperative: a task can unset them. The settings
# file is looked up as $VRAMKIT_SLURM_CONF, next to this script, then /etc/slurm/vramkit-slurm.conf.
shards="${SLURM_SHARDS_ON_NODE:-}"
case "$shards" in
  ''|*[!0-9]*) exit 0 ;;
esac
[ "$shards" -gt 0 ] || exit 0

conf=""
for candidate in "${VRAMKIT_SLURM_CONF:-}" "$(dirname "$0")/vramkit-slurm.conf" /etc/slurm/vramkit-slurm.conf; do
  if [ -n "$candidate" ] && [ -r "$candidate" ]; then
    conf="$candidate"
    break
  fi
done
if [ -z "$conf" ]; then
  echo "print vramkit task prolog: no vramkit-slurm.conf found; no memory cap set"
  exit 0
fi

setting() {
  sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\([0-9][0-9]*\).*/\1/p" "$conf" | tail -n 1
}
shard_bytes="$(setting shard_bytes)"
if [ -z "$shard_bytes" ]; then
  echo "print vramkit task prolog: $conf has no shard_bytes; no memory cap set"
  exit 0
fi
cap=$((shards * shard_bytes))
echo "export VRAMKIT_POOL_MAXIMUM=$cap"

total="$(setting gpu_total_bytes)"
if [ -n "$total" ] && [ "$total" -gt 0 ]; then
  fraction="$(awk -v c="$cap" -v t="$total" 'BEGIN { f = c / t; if (f > 1) f = 1; printf "%.4f", f }')"
  if [ -n "${PYTORCH_CUDA_ALLOC_CONF:-}" ]; then
    # Keep the user's other keys; replace an older fraction.
    rest="$(printf '%s' "$PYTORCH_CUDA_ALLOC_CONF" | tr ',' '\n' | grep -v '^per_process_memory_fraction:' | paste -sd, -)"
    echo "export PYTORCH_CUDA_ALLOC_CONF=${rest:+$rest,}per_process_memory_fraction:$fraction"
  else
    echo "export PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:$fraction"
  fi
fi

if [ "$(setting mps_limit)" = "1" ]; then
  echo "export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=$((cap / 1048576))M"
fi
exit 0
