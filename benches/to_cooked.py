#!/usr/bin/env python3
"""Rewrites a little-endian classic pcap of Ethernet frames as Linux cooked
frames, the way `tcpdump -i any` writes them.

    python3 benches/to_cooked.py IN.pcap OUT.pcap [--v2]

Each Ethernet header becomes a cooked v1 header (link type 113, 16 bytes)
or, with --v2, a cooked v2 header (link type 276, 20 bytes): ARPHRD 1
(Ethernet), the source address, and the frame's ether type as the protocol.
VLAN tags and everything after them stay as they were. Wire lengths grow
by the header's extra bytes. Frames shorter than an Ethernet header are
copied unchanged. For the benchmarks of cooked captures (BENCHMARKS.md,
thirty-third round).
"""
import struct
import sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    v2 = "--v2" in sys.argv[1:]
    with open(args[0], "rb") as f:
        data = f.read()
    magic, vmaj, vmin, tz, sig, snap, link = struct.unpack_from("<IHHiIII", data, 0)
    if magic not in (0xA1B2C3D4, 0xA1B23C4D) or link != 1:
        sys.exit(f"{args[0]}: not a little-endian classic pcap of Ethernet frames")
    out = bytearray(struct.pack("<IHHiIII", magic, vmaj, vmin, tz, sig, snap, 276 if v2 else 113))
    off = 24
    while off + 16 <= len(data):
        ts, frac, cap, wire = struct.unpack_from("<IIII", data, off)
        frame = data[off + 16 : off + 16 + cap]
        off += 16 + cap
        if cap < 14:
            out += struct.pack("<IIII", ts, frac, cap, wire) + frame
            continue
        src, ether = frame[6:12], frame[12:14]
        if v2:
            # protocol, reserved, interface index, ARPHRD, packet type,
            # address length, address (8).
            head = ether + b"\0\0" + struct.pack(">IHBB", 3, 1, 4, 6) + src + b"\0\0"
        else:
            # packet type, ARPHRD, address length, address (8), protocol.
            head = struct.pack(">HHH", 0, 1, 6) + src + b"\0\0" + ether
        body = head + frame[14:]
        grow = len(head) - 14
        out += struct.pack("<IIII", ts, frac, len(body), wire + grow) + body
    with open(args[1], "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
