#!/usr/bin/env python3
"""How often a packet follows one of its own flow: in the whole trace, and
in its shard's stream, where the heavy stage holds such packets back and
adds a train's packets to the counters in one pass (`HeldRepeats` in
src/pipeline/heavy.rs).

    python3 benches/trains.py [--shards N] TRACE.pcap...

Classic pcap only (Ethernet with 802.1Q/802.1ad tags, or raw IP); the key
is the 5-tuple of IPv4 or IPv6 with TCP or UDP ports, other packets are
left out. Shards are drawn by the CRC-32 of the key, not by flowsieve's
hash: what the fraction depends on is how many shards split the flows,
not which hash splits them. Prints, per trace, the keyed packets, the
share that follow their own flow in their shard, in the whole trace, and
the mean length of a shard's trains of two or more.
"""
import argparse
import struct
import zlib

RAW_IP = (101, 12, 228, 229)


def keys(path):
    data = open(path, 'rb').read()
    magic = struct.unpack('<I', data[:4])[0]
    if magic not in (0xa1b2c3d4, 0xa1b23c4d):
        raise SystemExit(f"{path}: not a little-endian classic pcap")
    link = struct.unpack('<I', data[20:24])[0]
    if link != 1 and link not in RAW_IP:
        raise SystemExit(f"{path}: link type {link} is not Ethernet or raw IP")
    off = 24
    while off + 16 <= len(data):
        captured = struct.unpack('<I', data[off + 8:off + 12])[0]
        p = data[off + 16:off + 16 + captured]
        off += 16 + captured
        if link == 1:
            if len(p) < 14:
                continue
            ethertype, o = struct.unpack('>H', p[12:14])[0], 14
            while ethertype in (0x8100, 0x88a8) and len(p) >= o + 4:
                ethertype, o = struct.unpack('>H', p[o + 2:o + 4])[0], o + 4
        else:
            o = 0
            ethertype = 0x0800 if p and p[0] >> 4 == 4 else 0x86dd
        if ethertype == 0x0800 and len(p) >= o + 20:
            proto, key, l4 = p[o + 9], p[o + 12:o + 20], o + (p[o] & 15) * 4
        elif ethertype == 0x86dd and len(p) >= o + 40:
            proto, key, l4 = p[o + 6], p[o + 8:o + 40], o + 40
        else:
            continue
        key += bytes([proto])
        if proto in (6, 17) and len(p) >= l4 + 4:
            key += p[l4:l4 + 4]
        yield key


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--shards', type=int, default=8)
    ap.add_argument('traces', nargs='+')
    a = ap.parse_args()
    for path in a.traces:
        last = [None] * a.shards
        run = [0] * a.shards
        trains = []
        n = in_shard = in_trace = 0
        previous = None
        for k in keys(path):
            s = zlib.crc32(k) % a.shards
            n += 1
            if last[s] == k:
                in_shard += 1
                run[s] += 1
            else:
                if run[s] > 1:
                    trains.append(run[s])
                run[s] = 1
            in_trace += previous == k
            last[s], previous = k, k
        trains += [r for r in run if r > 1]
        mean = sum(trains) / len(trains) if trains else 0.0
        print(f"{path}: {n} keyed packets; following their own flow: "
              f"{in_shard / max(n, 1):.3f} in the shard, {in_trace / max(n, 1):.3f} in the trace; "
              f"trains of 2 or more in a shard average {mean:.2f}")


main()
