#!/usr/bin/env python3
"""Where a test binary's time goes, test by test.

    python3 benches/test_times.py [--top N] TEST_BINARY [LIBTEST ARGS...]

Runs a built test binary (`cargo test --profile test-release --no-run`
names it) one test at a time (`--test-threads 1` is added) and times each
test from the moment the previous one's result line came to the moment its
own came. Prints the sum and the N slowest (default 25), with their
results. This is how BENCHMARKS.md finds what to shorten when CI's test
phase grows: libtest on stable reports no per-test times.
"""
import re
import subprocess
import sys
import time


def main() -> int:
    args = sys.argv[1:]
    top = 25
    if len(args) >= 2 and args[0] == "--top":
        top = int(args[1])
        args = args[2:]
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cmd = [args[0], "--test-threads", "1", *args[1:]]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, bufsize=1)
    last = time.monotonic()
    rows = []
    tail = []
    assert p.stdout is not None
    for line in p.stdout:
        now = time.monotonic()
        m = re.match(r"test (\S+) \.\.\. (\w+)", line)
        if m:
            rows.append((now - last, m.group(1), m.group(2)))
            last = now
        elif line.startswith("test result") or "FAILED" in line or "panicked" in line:
            tail.append(line.rstrip())
    code = p.wait()
    total = sum(r[0] for r in rows)
    print(f"{len(rows)} tests, {total:.1f} s one at a time")
    for secs, name, result in sorted(rows, reverse=True)[:top]:
        print(f"{secs:8.2f} s  {result:6}  {name}")
    for line in tail:
        print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
