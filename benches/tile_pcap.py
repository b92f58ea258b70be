#!/usr/bin/env python3
"""A longer trace from a short capture: COPIES copies of it back to back,
each shifted in time by the capture's span plus a second, so that trace
time keeps going forward and each copy's windows are its own.

    python3 benches/tile_pcap.py IN.pcap OUT.pcap COPIES

Classic little-endian pcap only (microsecond or nanosecond stamps); the
records are copied byte for byte but for their time stamps.
"""
import struct
import sys

src, dst, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, 'rb').read()
magic = struct.unpack('<I', data[:4])[0]
if magic not in (0xa1b2c3d4, 0xa1b23c4d):
    raise SystemExit(f"{src}: not a little-endian classic pcap")
unit = 10**9 if magic == 0xa1b23c4d else 10**6
records, off = [], 24
while off + 16 <= len(data):
    secs, frac, captured = struct.unpack('<III', data[off:off + 12])
    records.append((secs * unit + frac, data[off + 8:off + 16 + captured]))
    off += 16 + captured
if not records:
    raise SystemExit(f"{src}: no records")
span = records[-1][0] - records[0][0] + unit
with open(dst, 'wb') as out:
    out.write(data[:24])
    for c in range(copies):
        for t, rest in records:
            t += c * span
            out.write(struct.pack('<II', t // unit, t % unit))
            out.write(rest)
print(f"wrote {dst}: {len(records) * copies} records")
