#!/usr/bin/env python3
"""Paced scrapers against an HTTP endpoint, for hosts without wrk: N keep-alive connections, each
sending GET PATH every INTERVAL seconds for DURATION seconds (what Prometheus scrapers do), with
the latency of every request. Prints one line of figures: requests, errors, p50/p90/p99/max in ms,
and, with --pid, the server's CPU time per request (user + system from /proc/PID/stat).
Usage: scrape_load.py URL [--connections 100] [--interval 0.1] [--duration 20] [--pid PID]
"""
import argparse
import asyncio
import os
import statistics
import sys
import time
import urllib.parse


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def scraper(host, port, path, interval, deadline, latencies, errors):
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    reader = writer = None
    next_at = time.perf_counter()
    while time.perf_counter() < deadline:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            t0 = time.perf_counter()
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await asyncio.wait_for(reader.readexactly(length), 2.0)
            latencies.append((time.perf_counter() - t0) * 1e3)
            if not head.startswith(b"HTTP/1.1 200"):
                errors[0] += 1
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            errors[0] += 1
            if writer is not None:
                writer.close()
            reader = writer = None
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    if writer is not None:
        writer.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--connections", type=int, default=100)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--duration", type=float, default=20)
    p.add_argument("--pid", type=int)
    a = p.parse_args()
    u = urllib.parse.urlsplit(a.url)
    if u.scheme != "http" or not u.hostname or a.connections < 1 or a.interval <= 0 or a.duration <= 0:
        print("scrape_load: need an http:// URL and positive --connections/--interval/--duration",
              file=sys.stderr)
        return 2
    latencies, errors = [], [0]
    cpu0 = cpu_seconds(a.pid) if a.pid else None
    deadline = time.perf_counter() + a.duration
    start = time.perf_counter()
    # Connections start spread over one interval, as independent scrapers would.
    tasks = []
    for i in range(a.connections):
        await asyncio.sleep(a.interval / a.connections)
        tasks.append(asyncio.create_task(scraper(u.hostname, u.port or 80, u.path or "/",
                                                 a.interval, deadline, latencies, errors)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    if not latencies:
        print(f"requests=0 errors={errors[0]}")
        return 1
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    line = (f"requests={len(latencies)} errors={errors[0]} rate={len(latencies) / elapsed:.0f}/s "
            f"p50_ms={q[49]:.2f} p90_ms={q[89]:.2f} p99_ms={q[98]:.2f} max_ms={max(latencies):.2f}")
    if cpu0 is not None:
        line += f" server_cpu_per_request_us={1e6 * (cpu_seconds(a.pid) - cpu0) / len(latencies):.1f}"
    print(line)
    return 0


sys.exit(asyncio.run(main()))
