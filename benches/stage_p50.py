#!/usr/bin/env python3
"""Per-stage cost per record of flowsieve builds, alternated.

    python3 benches/stage_p50.py ROUNDS TRACE "LABEL|CMD" ...

Each CMD is a flowsieve command line without the trace and without
`--json` (it may start with VAR=value settings for its environment), such
as "new|/tmp/fs-new -q --threads 1". Every round runs every command once,
in turn, on TRACE with `--json`, so that the host's noise hits all of them
alike, and reads each stage's median batch time from the report
(`stages[].p50_ns`) divided by the run's batch size
(`pipeline.batch`). Prints, per label, the medians over the rounds in ns
per record for the heavy, new-flow and selective stages. These are the
per-stage tables of BENCHMARKS.md; `alternate.py` times whole processes.
"""
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

STAGES = ["heavy", "new_flows", "selective"]


def report_of(cmd, trace, out):
    """Runs `cmd` (leading VAR=value words set its environment) on `trace`
    with `--json out`, and returns the parsed report. `cpu_split.py`
    shares it."""
    parts = shlex.split(cmd)
    env = dict(os.environ)
    while parts and "=" in parts[0] and not parts[0].startswith("-"):
        k, v = parts.pop(0).split("=", 1)
        env[k] = v
    subprocess.run(parts + ["--json", out, trace], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def run(cmd, trace, out):
    report = report_of(cmd, trace, out)
    batch = report["pipeline"]["batch"]
    p50 = {s["name"]: s["p50_ns"] for s in report["stages"]}
    return [p50[s] / batch if s in p50 else float("nan") for s in STAGES]


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, trace = int(sys.argv[1]), sys.argv[2]
    specs = [a.split("|", 1) for a in sys.argv[3:]]
    if any(len(s) != 2 for s in specs):
        sys.exit("each command is LABEL|CMD")
    seen = {label: [] for label, _ in specs}
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "report.json")
        for _ in range(rounds):
            for label, cmd in specs:
                seen[label].append(run(cmd, trace, out))
    print(f"{'label':<12}" + "".join(f"{s:>12}" for s in STAGES) + "   (ns a record, medians)")
    for label, _ in specs:
        cols = [statistics.median(c) for c in zip(*seen[label])]
        print(f"{label:<12}" + "".join(f"{c:>12.1f}" for c in cols))


if __name__ == "__main__":
    main()
