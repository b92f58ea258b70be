#!/usr/bin/env python3
"""What a pipe's size does to a trace read from standard input: `cat TRACE`
into `FLOWSIEVE ARGS... -` through a pipe set to each size before either
process starts, the sizes taking turns round by round.

    python3 benches/pipe_size.py [--rounds N] [--sizes 0,262144,1048576] \
        FLOWSIEVE TRACE [-- ARGS...]

A size of 0 leaves the kernel's default (64 KiB). Sizes above
/proc/sys/fs/pipe-max-size are refused by the kernel. Prints, for each
size, the median wall time and the median CPU time of both processes.
flowsieve widens its own pipe to 1 MiB since the seventy-second round
(`ingest::widen_pipe`), so the sizes below that only differ for a build
from before it; a later build shows what the widening leaves to gain.
"""
import argparse
import fcntl
import os
import resource
import subprocess
import time

F_SETPIPE_SZ = 1031


def run(binary, trace, args, size):
    r, w = os.pipe()
    if size:
        fcntl.fcntl(w, F_SETPIPE_SZ, size)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    cat = subprocess.Popen(["cat", trace], stdout=w)
    fs = subprocess.Popen([binary, *args, "-"], stdin=r)
    os.close(w)
    os.close(r)
    cat.wait()
    fs.wait()
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if fs.returncode != 0:
        raise SystemExit(f"{binary} exited {fs.returncode}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--sizes", default="0,262144,1048576")
    p.add_argument("binary")
    p.add_argument("trace")
    p.add_argument("args", nargs="*", default=["-q", "--no-truth"])
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    got = {s: [] for s in sizes}
    for _ in range(a.rounds):
        for s in sizes:
            got[s].append(run(a.binary, a.trace, a.args, s))
    median = lambda v: sorted(v)[len(v) // 2]
    for s, runs in got.items():
        name = f"{s >> 10} KiB" if s else "default"
        print(
            f"pipe {name:>9}: wall {median([w for w, _ in runs]):.3f} s, "
            f"CPU of both processes {median([c for _, c in runs]):.3f} s"
        )


if __name__ == "__main__":
    main()
