#!/usr/bin/env python3
"""Where a packet's time goes in flowsieve runs, alternated.

    python3 benches/cpu_split.py ROUNDS TRACE "CMD" ...

Each CMD is a flowsieve command line without the trace and without
`--json` (it may start with VAR=value settings for its environment), such
as "/tmp/fs-new -q --no-truth --threads 1". Every round runs every command
once, in turn, on TRACE with `--json`, so that the host's noise hits all of
them alike, and reads from each report, per keyed packet:

- `source`: the source thread's CPU (`throughput.source_cpu_seconds`:
  reading, dissecting, hashing, the stages' coordinators, filling batches),
  and `kernel`, the part of it in the kernel
  (`source_system_cpu_seconds`: mostly mapping the trace's pages; `nan`
  from a build before the fifty-seventh round);
- `workers`: the shard workers' CPU, summed (`worker_cpu_seconds`);
- `process`: the whole process's CPU (`cpu_seconds`);
- each work row of `stages[]` (the stages, and `truth` when the workers
  keep the exact table): `total_ns / records`, the workers' time in it.

Prints the medians over the rounds, one line per command. It needs builds
whose reports carry these fields (BENCHMARKS.md, fifty-sixth round);
`alternate.py` times whole processes of any build, `stage_p50.py` gives the
older per-batch medians.
"""
import os
import statistics
import sys
import tempfile

from stage_p50 import report_of

OVERLAPPING = {"source", "queue"}


def run(cmd, trace, out):
    """One run's figures a packet: (source, workers, process, {row: ns}, the source's kernel part)."""
    report = report_of(cmd, trace, out)
    packets = report["trace"]["packets"]
    if packets == 0:
        sys.exit(f"{cmd}: no packets in {trace}")
    t = report["throughput"]
    if t.get("source_cpu_seconds") is None or t.get("worker_cpu_seconds") is None:
        sys.exit(f"{cmd}: the report has no per-thread CPU (a build before the fifty-sixth round?)")
    per = lambda seconds: seconds * 1e9 / packets
    rows = {s["name"]: s["total_ns"] / s["records"]
            for s in report["stages"]
            if s["name"] not in OVERLAPPING and s.get("records")}
    kernel = t.get("source_system_cpu_seconds")
    return (per(t["source_cpu_seconds"]), per(t["worker_cpu_seconds"]), per(t["cpu_seconds"]), rows,
            float("nan") if kernel is None else per(kernel))


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    try:
        rounds = int(sys.argv[1])
    except ValueError:
        sys.exit(f"ROUNDS must be a whole number, not {sys.argv[1]!r}")
    trace, cmds = sys.argv[2], sys.argv[3:]
    runs = {c: [] for c in cmds}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "report.json")
        for _ in range(max(rounds, 1)):
            for c in cmds:
                runs[c].append(run(c, trace, out))
    for c in cmds:
        r = runs[c]
        med = lambda i: statistics.median(x[i] for x in r)
        names = list(r[0][3])
        rows = "  ".join(f"{n} {statistics.median(x[3].get(n, float('nan')) for x in r):.1f}"
                         for n in names)
        print(f"source {med(0):6.1f} (kernel {med(4):5.1f})  workers {med(1):6.1f}  process {med(2):6.1f} ns a packet"
              f" | {rows} | {c}")


if __name__ == "__main__":
    main()
