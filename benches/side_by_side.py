#!/usr/bin/env python3
"""Whole-process wall time of two flowsieve builds and tcpdump, side by side.

Every round runs every command once, in turn, so that machine noise hits
all of them alike; the figures are medians over the rounds of the wall
time and of the CPU time (user + system, all threads), and each wall time
is also given as tcpdump's over its own (above 1: faster than tcpdump).

    python3 benches/side_by_side.py OLD_BINARY NEW_BINARY TRACE [ROUNDS]

The commands are the throughput issue's: `--stages none`, all stages with
truth off, all stages with `--layout blocked` (NEW only), and the default
job. BENCHMARKS.md ("Throughput, first round") lists one run.
"""
import resource
import statistics
import subprocess
import sys
import time


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    old, new, trace = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) == 5 else 10
    none = ["-q", "--no-truth", "--stages", "none", "--recycle", "sigma:0.5", trace]
    every = ["-q", "--no-truth", "--recycle", "sigma:0.5", trace]
    cmds = [
        ("tcpdump -r FILE -w /dev/null", ["tcpdump", "-r", trace, "-w", "/dev/null"]),
        ("OLD --stages none", [old] + none),
        ("NEW --stages none", [new] + none),
        ("OLD all stages", [old] + every),
        ("NEW all stages", [new] + every),
        ("NEW all stages --layout blocked", [new, "--layout", "blocked"] + every),
        ("OLD default job", [old, "-q", trace]),
        ("NEW default job", [new, "-q", trace]),
    ]
    times = {name: [] for name, _ in cmds}
    cpu = {name: [] for name, _ in cmds}
    for _ in range(rounds):
        for name, cmd in cmds:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(
                after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            )
    base = statistics.median(times[cmds[0][0]])
    for name, _ in cmds:
        m = statistics.median(times[name])
        c = statistics.median(cpu[name])
        print(
            f"{name:34s} {m * 1000:8.1f} ms wall {c * 1000:8.1f} ms CPU"
            f"   tcpdump/this {base / m:5.2f}"
        )


if __name__ == "__main__":
    main()
