#!/usr/bin/env python3
"""Whole-process wall and CPU time of any commands, alternated.

    python3 benches/alternate.py ROUNDS "CMD 1" "CMD 2" ...

Every round runs every command once, in turn, so that the host's noise
hits all of them alike; the figures are medians over the rounds (and the
fastest wall time). A command may start with VAR=value settings for its
environment. `side_by_side.py` is the fixed set of the throughput
issue's commands; this is for any others (BENCHMARKS.md says which).
"""
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rounds = int(sys.argv[1])
    cmds = sys.argv[2:]
    wall = {c: [] for c in cmds}
    cpu = {c: [] for c in cmds}
    for _ in range(rounds):
        for c in cmds:
            parts = shlex.split(c)
            env = dict(os.environ)
            while parts and "=" in parts[0] and not parts[0].startswith("-"):
                k, v = parts.pop(0).split("=", 1)
                env[k] = v
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run(parts, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
            wall[c].append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[c].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    for c in cmds:
        print(
            f"{statistics.median(wall[c]) * 1000:8.1f} ms wall (min {min(wall[c]) * 1000:7.1f})"
            f"  {statistics.median(cpu[c]) * 1000:8.1f} ms CPU  {c}"
        )


if __name__ == "__main__":
    main()
