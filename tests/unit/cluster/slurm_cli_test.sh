#!/usr/bin/env bash
# `vramkit slurm gres` and `vramkit slurm shards` from the command line: outputs, exit codes, and
# the one-line errors for a missing driver and bad input. Usage: slurm_cli_test.sh VRAMKIT_BINARY
set -uo pipefail
VRAMKIT=${1:?usage: slurm_cli_test.sh VRAMKIT_BINARY}
TMP=$(mktemp -d /tmp/vramkit-slurm-cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAILED: $*" >&2; failures=$((failures + 1)); }
# expect RC PATTERN CMD...: runs CMD, checks its exit code and that stdout+stderr match PATTERN.
expect() {
  local rc=$1 pattern=$2; shift 2
  local out got
  out=$("$@" 2>&1); got=$?
  [ "$got" -eq "$rc" ] || fail "$* exited $got, expected $rc: $out"
  echo "$out" | grep -qE -- "$pattern" || fail "$* printed '$out', expected /$pattern/"
}

cat > "$TMP/gpus.json" <<JSON
{"gpus": [{"name": "NVIDIA H200", "uuid": "GPU-0", "memory_total_bytes": 150754820096, "memory_used_bytes": 536870912, "memory_reserved_bytes": 536870912},
          {"name": "NVIDIA H200", "uuid": "GPU-1", "memory_total_bytes": 150754820096, "memory_used_bytes": 536870912, "memory_reserved_bytes": 536870912}]}
JSON
# 140.4 GiB total - 0.5 GiB reserved -> 139 shards of 1 GiB per GPU.
expect 0 "NodeName=n1 Name=shard Count=139 File=/dev/nvidia1" "$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --node n1
expect 0 "NodeName=n1 Gres=gpu:h200:2,shard:278" "$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --node n1
expect 0 "max_gpu_shards=139" "$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --node n1
expect 0 '"max_gpu_shards": 69' "$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --node n1 --shard-size 2GiB --json
expect 0 "wrote gres.conf" "$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --node n1 --output-dir "$TMP/out"
[ -s "$TMP/out/gres.conf" ] && [ -s "$TMP/out/slurm-node.conf" ] && [ -s "$TMP/out/vramkit-slurm.conf" ] \
  || fail "--output-dir did not write the three files"
# No driver and no fixture: a clear error, exit 1.
VRAMKIT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 expect 1 "^vramkit: cannot read the GPUs: .*--fake-gpus FILE" \
  "$VRAMKIT" slurm gres --node n1
expect 2 "invalid size" "$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --shard-size lots
expect 2 "cannot read fixture" "$VRAMKIT" slurm gres --fake-gpus "$TMP/missing.json"
expect 2 "headroom" "$VRAMKIT" slurm gres --fake-gpus "$TMP/gpus.json" --headroom 200%

expect 0 "^24 shards of 1.00 GiB for 24.00 GiB: sbatch --gres=shard:24$" "$VRAMKIT" slurm shards --request 24GiB
expect 0 "^6 shards of 4.00 GiB" "$VRAMKIT" slurm shards --request 24GiB --shard-size 4GiB --config /dev/null
echo '{"device_peak_bytes": 25769803777}' > "$TMP/plan.json"
expect 0 '"shards": 25' "$VRAMKIT" slurm shards --plan "$TMP/plan.json" --json
expect 1 "no GPU can hold it" "$VRAMKIT" slurm shards --request 200GiB --config "$TMP/out/vramkit-slurm.conf"
expect 2 "exactly one of" "$VRAMKIT" slurm shards
expect 2 "must be above zero" "$VRAMKIT" slurm shards --request 0
echo '{}' > "$TMP/bad-plan.json"
expect 2 "has no device_peak_bytes" "$VRAMKIT" slurm shards --plan "$TMP/bad-plan.json"

# slurm report: sacct's --parsable2 output from a file, from stdin, or from sacct itself (a stand-in
# on PATH that records its arguments and prints the fixture).
SACCT_FIXTURE="$(dirname "$0")/../../data/cluster/sacct/report.psv"
expect 0 "^4 asked for at least 2x what they used" "$VRAMKIT" slurm report --sacct "$SACCT_FIXTURE" --shard-size 4GiB
expect 0 "^4251 .*carol .*32.00 GiB .*2.00 GiB .*shards$" "$VRAMKIT" slurm report --sacct "$SACCT_FIXTURE" --shard-size 4GiB
expect 0 "^3 asked for at least 2x" "$VRAMKIT" slurm report --sacct "$SACCT_FIXTURE"
expect 0 '"job_id": "4280"' "$VRAMKIT" slurm report --sacct - --json < "$SACCT_FIXTURE"
expect 0 "^1 asked for at least 10x" "$VRAMKIT" slurm report --sacct "$SACCT_FIXTURE" --min-ratio 10 --min-unused 10GiB
mkdir -p "$TMP/bin"
cat > "$TMP/bin/sacct" <<SH
#!/bin/sh
echo "\$@" > "$TMP/sacct.args"
cat "$SACCT_FIXTURE"
SH
chmod +x "$TMP/bin/sacct"
PATH="$TMP/bin:$PATH" expect 0 "^8 jobs read" "$VRAMKIT" slurm report --since 2026-11-01
grep -q -- "--parsable2 --allusers --starttime=2026-11-01 --format=JobID,JobName,User,State,Comment,AllocTRES,TRESUsageInMax" "$TMP/sacct.args" \
  || fail "sacct ran with: $(cat "$TMP/sacct.args")"
printf '#!/bin/sh\nexit 1\n' > "$TMP/bin/sacct"
PATH="$TMP/bin:$PATH" expect 1 "sacct failed" "$VRAMKIT" slurm report
expect 2 "min-ratio must be at least 1" "$VRAMKIT" slurm report --sacct "$SACCT_FIXTURE" --min-ratio 0.5
expect 2 "cannot read sacct output" "$VRAMKIT" slurm report --sacct "$TMP/missing.psv"
printf 'JobID|Comment\n1|a|b\n' > "$TMP/bad.psv"
expect 2 "sacct line 2: 3 fields, expected 2" "$VRAMKIT" slurm report --sacct "$TMP/bad.psv"
expect 2 "excludes" "$VRAMKIT" slurm report --sacct "$SACCT_FIXTURE" --since now-1day

[ $failures -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "PASSED: vramkit slurm gres / shards / report"
