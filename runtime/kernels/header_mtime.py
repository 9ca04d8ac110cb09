#!/usr/bin/env python3
"""Print the modification time (Unix seconds) an nvcc fatbin records for the toolkit's
headers, or nothing when it records none.

nvcc's line info (-lineinfo) records, for every file a kernel includes, its name, its
directory index and its modification time (a ULEB128 number). The kernel source itself is
compiled from a copy stamped 2000-01-01 (build-kernels.sh); the toolkit's headers carry the
time pip installed them, which differs from one venv to the next. build-kernels.sh stamps the
private toolkit's headers with the time the image it rebuilds recorded (this script's
answer), so that a rebuild reproduces the committed image byte for byte.

usage: header_mtime.py FATBIN
"""
import collections, re, sys

SOURCE_STAMP = 946684800  # 2000-01-01 00:00:00 UTC, the stamp of the compiled source copy

data = open(sys.argv[1], "rb").read()
seen = collections.Counter()
# A header name, its NUL, a one-byte directory index, then the ULEB128 time.
for m in re.finditer(rb"[A-Za-z0-9_.+-]+\.(?:h|hpp)\x00[\x00-\x7f]", data):
    v, shift = 0, 0
    for b in data[m.end():m.end() + 6]:
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    if 315532800 <= v < 4102444800:  # 1980 .. 2100: a time, not a length
        seen[v] += 1
if seen:
    print(seen.most_common(1)[0][0])
