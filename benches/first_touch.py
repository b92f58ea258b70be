#!/usr/bin/env python3
"""What the first touch of fresh anonymous memory costs on this machine.

    python3 benches/first_touch.py [--gap SECONDS] [MIB] [ROUNDS]

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

`--gap SECONDS` sleeps before each mapping. The balloon reports a free
block about two seconds after it is freed, so with `--gap 3` every round
pays what the first does: each fresh huge page is backed by the host
again, while small pages, which come from blocks too small to be
reported, cost the same with any gap (BENCHMARKS.md, forty-first round).
A huge page's line says how many of them took over 1 ms, the bound past
which `--huge-pages auto` turns huge pages off for the rest of a run, and
which one was the first: the first few of a process are often blocks not
reported yet.
"""
import argparse
import mmap
import time

# The same argument types as the paired timer beside this script.
import alternate


def main():
    parser = argparse.ArgumentParser(
        prog="first_touch.py",
        description="What the first touch of fresh anonymous memory costs (see the module's doc).",
    )
    parser.add_argument("--gap", type=alternate.seconds, default=0.0, metavar="SECONDS",
                        help="sleep this long before each mapping")
    parser.add_argument("mib", type=alternate.positive, nargs="?", default=64, metavar="MIB")
    parser.add_argument("rounds", type=alternate.positive, nargs="?", default=3, metavar="ROUNDS")
    opts = parser.parse_args()
    gap, mib, rounds = opts.gap, opts.mib, opts.rounds
    n = mib << 20
    for r in range(rounds):
        for mode in ("huge", "small"):
            time.sleep(gap)
            m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            m.madvise(mmap.MADV_HUGEPAGE if mode == "huge" else mmap.MADV_NOHUGEPAGE)
            per_page = []
            t = time.perf_counter()
            for page in range(0, n, 2 << 20):
                p0 = time.perf_counter()
                for off in range(page, min(page + (2 << 20), n), 4096):
                    m[off] = 1
                per_page.append(time.perf_counter() - p0)
            dt = time.perf_counter() - t
            m.close()
            slow = sum(1 for x in per_page if x > 1e-3)
            first_slow = next((i for i, x in enumerate(per_page) if x > 1e-3), None)
            line = f"round {r + 1} {mode:5} {dt * 1000:7.1f} ms for {mib} MiB, {dt * 1e6 / (n >> 21):7.0f} us per 2 MiB"
            if mode == "huge":
                # One huge page each: which of them the host had to back.
                line += (
                    f"; each {min(per_page) * 1e3:.2f}-{max(per_page) * 1e3:.2f} ms, {slow} of {len(per_page)} over 1 ms"
                    + (f", the first of them #{first_slow}" if first_slow is not None else "")
                )
            print(line)


if __name__ == "__main__":
    main()
