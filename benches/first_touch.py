#!/usr/bin/env python3
"""What the first touch of fresh anonymous memory costs on this machine.

    python3 benches/first_touch.py [MIB] [ROUNDS]

Maps MIB (default 64) MiB of fresh private anonymous memory, advised as
transparent huge pages or as small pages, writes one byte a 4 KiB page,
and prints the time per 2 MiB; ROUNDS (default 3) times each way,
alternated. On a virtual machine whose host takes back free guest memory
(virtio-balloon free page reporting), the first round of huge pages pays
for the host backing them again and later rounds, reusing memory the
guest just freed, do not: that is the cost the exact tables' region
(`pages::TableArena`) weighs, and why a table that grows moves its pages
rather than copying them into fresh ones (BENCHMARKS.md, fortieth round).
The small-page figure includes Python's loop over 512 pages a 2 MiB.
"""
import mmap
import sys
import time


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    n = mib << 20
    for r in range(rounds):
        for mode in ("huge", "small"):
            m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            m.madvise(mmap.MADV_HUGEPAGE if mode == "huge" else mmap.MADV_NOHUGEPAGE)
            t = time.perf_counter()
            for off in range(0, n, 4096):
                m[off] = 1
            dt = time.perf_counter() - t
            m.close()
            print(f"round {r + 1} {mode:5} {dt * 1000:7.1f} ms for {mib} MiB, {dt * 1e6 / (n >> 21):7.0f} us per 2 MiB")


if __name__ == "__main__":
    main()
