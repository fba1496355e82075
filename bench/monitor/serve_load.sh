#!/usr/bin/env bash
# serve_load.sh: `vramkit serve` under load on loopback, fed by the fake-GPU fixture
# (tests/data/monitor/fake_gpus.json), against the exporter's targets. About 3 minutes in all.
#   1. SCRAPERS scrapers paced as Prometheus scrapes (each waits 100 ms between scrapes, so 100
#      make 1,000 scrapes/s) on /metrics for SECONDS: errors (target 0), latency percentiles
#      (target p99 < 10 ms), server CPU per request, and the server's RSS every second (target:
#      flat within +-10% after a 5 s warm-up).
#   2. SCRAPERS closed-loop scrapers (wrk, each sends its next request as soon as the last is
#      answered) for CLOSED_SECONDS: errors (target 0), requests/s and latency at saturation; this
#      is what the machine's CPU allows, not what a scraper sees, so it has no latency target.
#   3. SLOW connections held open from 127.0.0.2.. (half idle, half sending one byte a second)
#      while fresh GET /metrics and /healthz are timed (target: every one answered within 50 ms).
# Usage: bench/monitor/serve_load.sh [VRAMKIT_BINARY] [SUMMARY_FILE]
#   VRAMKIT_BINARY defaults to build/vramkit; SUMMARY_FILE (markdown) to
#   serve-load-<UTC date and time>.md in the current folder. Environment: SCRAPERS (100),
#   SECONDS_PACED (60), CLOSED_SECONDS (30), SLOW (1000), HOLD_SECONDS (8, below serve's 10 s
#   idle timeout).
# Needs wrk, curl and python3. Exit 0 when every step ran (the figures and verdicts are the output,
# in the summary file and on stdout), 1 when a step could not run, 77 without wrk.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$here/build/vramkit}
summary=${2:-serve-load-$(date -u +%Y%m%dT%H%M%SZ).md}
scrapers=${SCRAPERS:-100}
paced_seconds=${SECONDS_PACED:-60}
closed_seconds=${CLOSED_SECONDS:-30}
slow=${SLOW:-1000}
hold_seconds=${HOLD_SECONDS:-8}
data=$here/tests/data/monitor
command -v wrk >/dev/null || { echo "serve_load: wrk not found (scripts/setup installs it)" >&2; exit 77; }
[ -x "$bin" ] || { echo "serve_load: no vramkit binary at $bin" >&2; exit 1; }
ulimit -n 8192

work=$(mktemp -d)
cleanup() {
  [ -n "${rss_pid:-}" ] && kill "$rss_pid" 2>/dev/null || true
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
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

exec > >(tee "$summary")
echo "# vramkit serve under load on loopback"
echo
echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); host: $(nproc) CPUs, $(uname -srm)"
echo "- binary: $("$bin" --version | head -1)"
echo "- /metrics body: $(curl -s "$url/metrics" | wc -c) bytes (fake-GPU fixture, 1 s interval)"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

# The server's RSS (KiB) every second into FILE, until stopped.
rss_start() {
  (while kill -0 "$server" 2>/dev/null; do
     awk '/VmRSS/ {print $2}' "/proc/$server/status"
     sleep 1
   done) >"$1" &
  rss_pid=$!
}
rss_stop() { kill "$rss_pid" 2>/dev/null || true; wait "$rss_pid" 2>/dev/null || true; rss_pid=; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }

# Figures of one wrk run (its output file, the server's CPU ticks before it, the RSS file or "")
# as key=value lines: requests, errors, p50/p90/p99/max in ms, server CPU per request, RSS spread.
wrk_figures() {
  python3 - "$1" "$(( $(cpu_ticks) - $2 ))" "$(getconf CLK_TCK)" "${3:-}" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
ticks, hz, rss_file = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def ms(v):
    n, unit = float(re.match(r"[\d.]+", v).group()), re.sub(r"[\d.]+", "", v)
    return n * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]
pct = {p: ms(v) for p, v in re.findall(r"^\s+(\d+)%\s+(\S+)", text, re.M)}
mx = re.search(r"^\s+Latency\s+\S+\s+\S+\s+(\S+)", text, re.M)
reqs = int(re.search(r"(\d+) requests in", text).group(1))
sock = re.search(r"connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
errors = (sum(map(int, sock.groups())) if sock else 0) + (int(non2xx.group(1)) if non2xx else 0)
print(f"requests={reqs}")
rate = re.search(r"Requests/sec:\s+([\d.]+)", text)
print(f"rate_per_s={float(rate.group(1)) if rate else 0:.0f}")
print(f"errors={errors}")
for p in ("50", "90", "99"):
    print(f"p{p}_ms={pct.get(p, float('nan')):.2f}")
print(f"max_ms={ms(mx.group(1)) if mx else float('nan'):.2f}")
print(f"server_cpu_per_request_us={1e6 * ticks / hz / reqs if reqs else float('nan'):.1f}")
if rss_file:
    kb = [int(x) for x in open(rss_file) if x.strip()]
    steady = kb[5:] if len(kb) > 10 else kb
    lo, hi = min(steady), max(steady)
    print(f"rss_min_kib={lo}")
    print(f"rss_max_kib={hi}")
    print(f"rss_samples={len(steady)}")
    print(f"rss_spread_pct={100.0 * (hi - lo) / lo:.1f}")
EOF
}
val() { sed -n "s/^$1=//p" "$2"; }
verdict() { if awk "BEGIN {exit !($1)}"; then echo met; else echo MISSED; fi; }

# One wrk run of $scrapers connections on /metrics for SECONDS with the server's RSS sampled:
# its figures (wrk_figures) in $work/NAME.txt.
run_wrk() {  # NAME SECONDS [wrk options]
  local name=$1 secs=$2 ticks
  shift 2
  rss_start "$work/rss-$name.kb"
  ticks=$(cpu_ticks)
  wrk -t2 -c"$scrapers" -d"${secs}s" --timeout 2s --latency "$@" "$url/metrics" \
    >"$work/wrk-$name.out" 2>&1
  rss_stop
  wrk_figures "$work/wrk-$name.out" "$ticks" "$work/rss-$name.kb" >"$work/$name.txt"
}
table_head() {
  echo
  echo "| figure | value | target | verdict |"
  echo "| --- | ---: | --- | --- |"
}
errors_row() {
  echo "| errors (socket + non-2xx) | $(val errors "$1") of $(val requests "$1") | 0 | $(verdict "$(val errors "$1") == 0") |"
}
rss_row() {
  echo "| RSS after 5 s warm-up, min-max ($(val rss_samples "$1") samples) | $(val rss_min_kib "$1")-$(val rss_max_kib "$1") KiB, spread $(val rss_spread_pct "$1") % | within 10 % | $(verdict "$(val rss_spread_pct "$1") <= 10") |"
}

# 1. Paced scrapers: the targets.
echo 'function delay() return 100 end' >"$work/paced.lua"
run_wrk paced "$paced_seconds" -s "$work/paced.lua"
f=$work/paced.txt
echo "## 1. $scrapers scrapers paced at 10 scrapes/s each, ${paced_seconds} s (wrk -t2, keep-alive)"
table_head
errors_row "$f"
echo "| p50 / p90 ms | $(val p50_ms "$f") / $(val p90_ms "$f") | | |"
echo "| p99 ms | $(val p99_ms "$f") | < 10 | $(verdict "$(val p99_ms "$f") < 10") |"
echo "| max ms | $(val max_ms "$f") | | |"
echo "| requests/s | $(val rate_per_s "$f") | 1,000 asked | |"
echo "| server CPU per request | $(val server_cpu_per_request_us "$f") us | | |"
rss_row "$f"
echo

# 2. Closed loop: saturation.
run_wrk closed "$closed_seconds"
f=$work/closed.txt
echo "## 2. $scrapers closed-loop scrapers, ${closed_seconds} s (saturation: wrk and serve share the CPUs)"
table_head
errors_row "$f"
echo "| requests/s | $(val rate_per_s "$f") | | |"
echo "| p50 / p99 / max ms | $(val p50_ms "$f") / $(val p99_ms "$f") / $(val max_ms "$f") | (queueing: none) | |"
echo "| server CPU per request | $(val server_cpu_per_request_us "$f") us | | |"
rss_row "$f"
echo "| RSS after both runs | $(awk '/VmRSS/ {print $2}' "/proc/$server/status") KiB | | |"
echo

# 3. Held connections.
python3 - "$port" "$slow" "$hold_seconds" >"$work/held.txt" <<'EOF'
import socket, statistics, sys, time
port, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
per_source = 100  # below serve's per-client limit (128): total capacity is what is measured
held = []
for i in range(n):
    s = socket.socket()
    s.bind((f"127.0.0.{2 + i // per_source}", 0))
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
        while chunk := c.recv(65536):
            body += chunk
        c.close()
    except OSError:
        pass  # refused or timed out: counted as failed, its time kept
    return (time.perf_counter() - t) * 1e3, body.startswith(b"HTTP/1.1 200")

times = {"/metrics": [], "/healthz": []}
failed = 0
start = time.time()
while time.time() - start < hold:
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
            failed += not ok
    time.sleep(max(0.0, 1.0 - (time.time() - start) % 1.0))
alive = 0
for s in held:
    s.setblocking(False)
    try:
        alive += s.recv(1) != b""
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
for path, t in times.items():
    t.sort()
    key = path.strip("/")
    print(f"{key}_n={len(t)}")
    print(f"{key}_median_ms={statistics.median(t):.2f}")
    print(f"{key}_p99_ms={statistics.quantiles(t, n=100, method='inclusive')[98]:.2f}")
    print(f"{key}_max_ms={t[-1]:.2f}")
print(f"connected={len(held)}")
print(f"still_open={alive}")
print(f"failed={failed}")
EOF
f=$work/held.txt
echo "## 3. $slow held connections (half idle, half one byte a second) from 127.0.0.2+, ${hold_seconds} s"
table_head
for path in metrics healthz; do
  echo "| fresh /$path ($(val ${path}_n "$f") requests): median / p99 / max ms | $(val ${path}_median_ms "$f") / $(val ${path}_p99_ms "$f") / $(val ${path}_max_ms "$f") | max < 50 | $(verdict "$(val ${path}_max_ms "$f") < 50") |"
done
echo "| fresh requests failed | $(val failed "$f") | 0 | $(verdict "$(val failed "$f") == 0") |"
echo "| held connections: connected / still open at the end | $(val connected "$f") / $(val still_open "$f") of $slow | all | $(verdict "$(val still_open "$f") == $slow") |"
echo
echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- serve's stderr: $(head -c 300 "$work/serve.err" | tr '\n' ' ')"
echo >&2 "serve_load: summary written to $summary"
