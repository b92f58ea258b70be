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
import argparse
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import time


def seconds(text):
    """A `--gap` value: a finite number of seconds, zero or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds, zero or more")
    return value


def positive(text):
    """A count of rounds: a whole number, one or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not one or more")
    return value


def main():
    parser = argparse.ArgumentParser(
        prog="alternate.py",
        description="Whole-process wall and CPU time of commands, alternated (see the module's doc).",
    )
    parser.add_argument("--gap", type=seconds, default=0.0, metavar="SECONDS",
                        help="wait this long, untimed, before every command")
    parser.add_argument("rounds", type=positive, metavar="ROUNDS")
    parser.add_argument("cmds", nargs="+", metavar="CMD")
    opts = parser.parse_args()
    gap, rounds, cmds = opts.gap, opts.rounds, opts.cmds
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
            try:
                status = subprocess.run(parts, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env).returncode
            except OSError as e:
                sys.exit(f"alternate.py: cannot run {c!r}: {e.strerror}")
            if status != 0:
                # A failed run's time is not the command's: stop rather than
                # print a ratio of it.
                sys.exit(f"alternate.py: {c!r} exited with status {status} in round {len(wall[c]) + 1}")
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
