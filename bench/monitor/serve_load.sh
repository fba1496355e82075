#!/usr/bin/env bash
# serve_load.sh: `vramkit serve` under load on loopback, two scenarios.
#   1. N concurrent scrapers (wrk, keep-alive) on /metrics for D seconds: errors, latency
#      percentiles, requests/s, and the server's RSS sampled every second (min/max after warm-up).
#  1b. the same N scrapers paced at 10 scrapes/s each (what real scrapers do): latency percentiles.
#   2. M idle or one-byte-a-second connections held open from other loopback addresses
#      (127.0.0.2..): latency of fresh GET /metrics and /healthz while they are held.
# Usage: bench/monitor/serve_load.sh VRAMKIT_BINARY [SCRAPERS=100] [SECONDS=60] [SLOW=1000]
# Needs wrk and python3. Prints one summary block; exit 0 when it ran (the figures are the output).
set -euo pipefail

bin=${1:?usage: serve_load.sh VRAMKIT_BINARY [SCRAPERS] [SECONDS] [SLOW]}
scrapers=${2:-100}
seconds=${3:-60}
slow=${4:-1000}
here=$(cd "$(dirname "$0")/../.." && pwd)
data=$here/tests/data/monitor
command -v wrk >/dev/null || { echo "serve_load: wrk not found (scripts/setup installs it)" >&2; exit 77; }
ulimit -n 8192

work=$(mktemp -d)
cleanup() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
  [ -n "${rss_pid:-}" ] && kill "$rss_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" serve --port 0 --fake-gpus "$data/fake_gpus.json" --host-root "$data/host" \
  --interval 1s >"$work/serve.out" 2>"$work/serve.err" &
server=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/serve.out" 2>/dev/null && break
  sleep 0.05
done
port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\)\/.*/\1/p' "$work/serve.out")
[ -n "$port" ] || { echo "serve_load: serve did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }
url=http://127.0.0.1:$port

echo "# vramkit serve under load on loopback ($(nproc) CPUs, $(uname -srm))"
echo "# binary: $("$bin" --version | head -1)"
echo "# metrics body: $(curl -s "$url/metrics" | wc -c) bytes"

# RSS every second while wrk runs.
(while kill -0 "$server" 2>/dev/null; do
   awk '/VmRSS/ {print $2}' "/proc/$server/status"
   sleep 1
 done) >"$work/rss.kb" &
rss_pid=$!

# The server's CPU time (user + system, clock ticks of /proc/PID/stat) per request served: what a
# scrape costs it, whatever the machine's load does to the latency figures.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
cpu_per_request() {  # TICKS_BEFORE WRK_OUTPUT
  local ticks=$(( $(cpu_ticks) - $1 )) reqs
  reqs=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$2")
  awk -v t="$ticks" -v r="${reqs:-0}" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { if (r > 0) printf "server_cpu_per_request_us=%.1f (%d requests, %.2f s CPU)\n", 1e6 * t / hz / r, r, t / hz }'
}
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
ticks0=$(cpu_ticks)
wrk -t2 -c"$scrapers" -d"${seconds}s" --timeout 2s --latency "$url/metrics" >"$work/wrk.out" 2>&1
kill "$rss_pid" 2>/dev/null || true
rss_pid=

echo "## scenario 1: $scrapers concurrent scrapers, ${seconds} s, wrk -t2 --latency"
sed -n '/Thread Stats/,$p' "$work/wrk.out"
errors=$(sed -n 's/.*Socket errors: connect \([0-9]*\), read \([0-9]*\), write \([0-9]*\), timeout \([0-9]*\).*/\1+\2+\3+\4/p' "$work/wrk.out")
non2xx=$(sed -n 's/.*Non-2xx or 3xx responses: \([0-9]*\).*/\1/p' "$work/wrk.out")
echo "socket_errors=$((${errors:-0})) non_2xx=${non2xx:-0}"
cpu_per_request "$ticks0" "$work/wrk.out"
# Warm-up: skip the first 5 samples; flat means (max - min) / min.
python3 - "$work/rss.kb" <<'EOF'
import sys
kb = [int(x) for x in open(sys.argv[1]) if x.strip()]
steady = kb[5:] if len(kb) > 10 else kb
lo, hi = min(steady), max(steady)
print(f"rss_kib: first {kb[0]} min {lo} max {hi} last {kb[-1]} samples {len(kb)} "
      f"spread_after_warmup {100.0 * (hi - lo) / lo:.1f}%")
EOF

# 1b. The same scrapers paced as real ones are (each waits 100 ms between scrapes: 1,000
# scrapes/s in all), so the percentiles measure the server, not a saturated CPU.
echo 'function delay() return 100 end' >"$work/paced.lua"
ticks0=$(cpu_ticks)
wrk -t2 -c"$scrapers" -d"${seconds}s" --timeout 2s --latency -s "$work/paced.lua" "$url/metrics" \
  >"$work/wrk-paced.out" 2>&1
echo "## scenario 1b: $scrapers scrapers paced at 10 scrapes/s each, ${seconds} s"
sed -n '/Thread Stats/,$p' "$work/wrk-paced.out"
errors=$(sed -n 's/.*Socket errors: connect \([0-9]*\), read \([0-9]*\), write \([0-9]*\), timeout \([0-9]*\).*/\1+\2+\3+\4/p' "$work/wrk-paced.out")
non2xx=$(sed -n 's/.*Non-2xx or 3xx responses: \([0-9]*\).*/\1/p' "$work/wrk-paced.out")
echo "socket_errors=$((${errors:-0})) non_2xx=${non2xx:-0}"
cpu_per_request "$ticks0" "$work/wrk-paced.out"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rss_kib_after_both: $(awk '/VmRSS/ {print $2}' "/proc/$server/status")"

echo "## scenario 2: $slow held connections (half idle, half one byte a second) from 127.0.0.2+"
python3 - "$port" "$slow" <<'EOF'
import socket, sys, time, statistics
port, n = int(sys.argv[1]), int(sys.argv[2])
per_source = 100  # below the server's per-client limit: the limit is not what is measured here
held = []
for i in range(n):
    src = f"127.0.0.{2 + i // per_source}"
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        continue
    held.append(s)
dribble = held[1::2]
line = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 4000
pos = 0

def get(path):
    t = time.perf_counter()
    body = b""
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            body += chunk
        c.close()
    except OSError:
        pass  # refused or timed out: counted as failed, its time kept
    ok = body.startswith(b"HTTP/1.1 200")
    return (time.perf_counter() - t) * 1e3, ok

times = {"/metrics": [], "/healthz": []}
failures = 0
start = time.time()
while time.time() - start < 8:  # shorter than the 10 s idle timeout: the idle ones stay open
    for s in dribble:
        try:
            s.send(line[pos:pos + 1])
        except OSError:
            pass
    pos += 1
    for path in times:
        for _ in range(5):
            ms, ok = get(path)
            times[path].append(ms)
            failures += 0 if ok else 1
    time.sleep(max(0.0, 1.0 - (time.time() - start) % 1.0))
alive = 0
for s in held:
    s.setblocking(False)
    try:
        alive += 0 if s.recv(1) == b"" else 1
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
for path, t in times.items():
    t.sort()
    print(f"{path}: n {len(t)} median {statistics.median(t):.2f} ms max {t[-1]:.2f} ms")
print(f"held_connections_still_open {alive}/{n} (connected {len(held)}) failed_requests {failures}")
EOF
