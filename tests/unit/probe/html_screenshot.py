#!/usr/bin/env python3
"""Renders a real `vramkit probe` HTML page in headless Chromium, takes a screenshot and checks it:
the page is drawn (not blank), the hierarchy picture is at the top with its verdict-coloured bars,
and it comes before the results and the folded machine keys.

usage: html_screenshot.py VRAMKIT WORKDIR
Exits 77 (skipped) when no Chromium is installed.
"""
import shutil
import struct
import subprocess
import sys
import zlib

BAR_COLOURS = {(0x4C, 0xAF, 0x50), (0xE5, 0x39, 0x35), (0xF0, 0xAD, 0x00), (0x9E, 0x9E, 0x9E)}


def fail(what):
    print(f"FAILED: {what}")
    sys.exit(1)


def read_png(path):
    """Decodes an 8-bit RGB or RGBA PNG into (width, height, rows of (r, g, b) tuples)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the screenshot is not a PNG")
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                fail(f"unexpected PNG format depth {depth} colour type {ctype}")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def main():
    binary, workdir = sys.argv[1], sys.argv[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("skipped: no chromium (scripts/setup installs it)")
        sys.exit(77)
    html, png = f"{workdir}/probe_screenshot.html", f"{workdir}/probe_screenshot.png"
    p = subprocess.run([binary, "probe", "--quick", "--only", "host,latency", "--size", "64MiB",
                        "--latency-size", "8MiB", "--html", html],
                       capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        fail(f"vramkit probe exit {p.returncode}: {p.stderr[-2000:]}")
    text = open(html, encoding="utf-8").read()
    order = [text.find(s) for s in ("The hierarchy at a glance", "<h2>Curves</h2>",
                                    "<h2>Results</h2>", "Machine keys")]
    if -1 in order or order != sorted(order):
        fail(f"page sections out of order or missing: {order}")
    width, height = 1200, 1600
    s = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--hide-scrollbars",
                        f"--window-size={width},{height}", f"--screenshot={png}",
                        f"file://{html}"], capture_output=True, text=True, timeout=120)
    if s.returncode != 0:
        fail(f"chromium exit {s.returncode}: {s.stderr[-2000:]}")
    w, h, rows = read_png(png)
    if (w, h) != (width, height):
        fail(f"screenshot is {w}x{h}, asked for {width}x{height}")
    top = rows[: h // 3]
    ink = sum(1 for r in top for px in r if px != (0xFA, 0xFA, 0xFA) and px != (255, 255, 255))
    if ink < 2000:
        fail(f"the top of the page is blank ({ink} drawn pixels)")
    bars = sum(1 for r in top for px in r if px in BAR_COLOURS)
    if bars < 200:
        fail(f"no hierarchy bars in the top third of the page ({bars} bar pixels)")
    print(f"ok: screenshot {w}x{h}, {ink} drawn pixels and {bars} bar pixels in the top third")


if __name__ == "__main__":
    main()
