#!/usr/bin/env python3
"""Whole-process wall and CPU time of any commands, alternated.

    python3 benches/alternate.py [--gap SECONDS] ROUNDS "CMD 1" "CMD 2" ...

Every round runs every command once, in turn, so that the host's noise
hits all of them alike; the figures are medians over the rounds (and the
fastest wall time). A command may start with VAR=value settings for its
environment. `side_by_side.py` is the fixed set of the throughput
issue's commands; this is for any others (BENCHMARKS.md says which).

With two or more commands it also prints each command's CPU and wall time
against the first's as paired ratios: the median over the rounds of
(this command's time in round r) / (the first command's in round r), with
a 95 % bootstrap interval of that median. The host's load drifts by tens
of percent between minutes, and a drift moves both commands of a round
alike, so the paired ratio resolves differences of a few percent that
the two medians apart do not; an interval that holds 1.000 is no
difference.

`--gap SECONDS` waits that long, untimed, before every command, so that
each one starts the way a user's single run does, on a machine that has
been quiet. Back to back, a process gets the memory the previous one has
just freed; on a virtual machine whose memory balloon reports free pages
to its host (about two seconds after they are freed), a process that
starts later has the host back each fresh 2 MiB page again, and what
uses huge pages then times very differently (BENCHMARKS.md, forty-first
round). Three seconds is past that delay.
"""
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    gap = 0.0
    if args[:1] == ["--gap"] and len(args) > 1:
        gap = float(args[1])
        args = args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    rounds = int(args[0])
    cmds = args[1:]
    wall = {c: [] for c in cmds}
    cpu = {c: [] for c in cmds}
    for _ in range(rounds):
        for c in cmds:
            parts = shlex.split(c)
            env = dict(os.environ)
            while parts and "=" in parts[0] and not parts[0].startswith("-"):
                k, v = parts.pop(0).split("=", 1)
                env[k] = v
            time.sleep(gap)
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
    if len(cmds) > 1:
        print(f"paired against the first command, medians of {rounds} rounds' ratios [95 % interval]:")
        for c in cmds[1:]:
            cells = []
            for name, times in (("CPU", cpu), ("wall", wall)):
                ratios = [a / b for a, b in zip(times[c], times[cmds[0]]) if b > 0]
                lo, hi = median_interval(ratios)
                cells.append(f"{name} {statistics.median(ratios):.3f} [{lo:.3f}, {hi:.3f}]")
            print(f"  {'  '.join(cells)}  {c}")


def median_interval(values, resamples=4000, seed=1):
    """A 95 % percentile-bootstrap interval of the median of `values`
    (seeded, so a rerun on the same times prints the same interval)."""
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(
        statistics.median(rng.choices(values, k=n)) for _ in range(resamples)
    )
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


if __name__ == "__main__":
    main()
