#!/usr/bin/env python3
"""Decodes the top level of a DDS file with Pillow (an independent BCn decoder) and writes its
texels as raw 8-bit RGBA, row-major: pil_decode.py IN.dds OUT.raw. Used by the block codec test."""
import sys

from PIL import Image

with Image.open(sys.argv[1]) as im:
    im.load()
    rgba = im.convert("RGBA") if im.mode != "L" else Image.merge("RGBA", (im, im, im, im.point(lambda _: 255)))
    with open(sys.argv[2], "wb") as f:
        f.write(rgba.tobytes())
