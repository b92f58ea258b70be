#!/bin/bash
# Whether two flowsieve builds give the same report, timing aside.
#
#   bash benches/same_report.sh OLD NEW "TRACE..." [FLAGS...]
#
# Runs `BUILD -q FLAGS --json F TRACE...` with each build and compares the
# JSON with `throughput`, `stages`, `capture`, `trace.read_seconds` and
# `trace.packets_per_sec` set aside (the only fields an optimisation may
# change; also each file's `dissected_ahead`, which counts the helpers'
# work), and the exit codes. Prints SAME or DIFF, the flows and the
# length of the top list. TRACE may be several files in one quoted word.
#
# `--events FILE` among the FLAGS is given each build's own file in the
# scratch directory instead (FILE itself is not written), and the two
# event files are compared as sets of lines: the workers forward events as
# they emit them, so their order in the file varies from run to run, while
# each event's fields do not.
set -u
old=$1 new=$2 traces=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The flags for one build, with an `--events` file moved into the scratch
# directory under the build's name.
flags_for() {
  local name=$1 events=0
  shift
  out=()
  for f in "$@"; do
    if [ "$events" = 1 ]; then
      out+=("$dir/$name.events")
      events=0
    else
      out+=("$f")
      [ "$f" = --events ] && events=1
    fi
  done
}
flags_for old "$@"
# shellcheck disable=SC2086 # the trace list is split on purpose
"$old" -q "${out[@]}" --json "$dir/old.json" $traces > /dev/null 2>&1
a=$?
flags_for new "$@"
# shellcheck disable=SC2086
"$new" -q "${out[@]}" --json "$dir/new.json" $traces > /dev/null 2>&1
b=$?
python3 - "$dir" "$a" "$b" "$*" <<'PY'
import json, os, sys
d, a, b, flags = sys.argv[1:5]
def strip(v):
    for k in ["throughput", "stages", "capture"]:
        v.pop(k, None)
    for k in ["read_seconds", "packets_per_sec"]:
        v.get("trace", {}).pop(k, None)
    # Packets that --dissect-threads helpers prepared: work, not a result.
    for f in v.get("trace", {}).get("files", []):
        f.pop("dissected_ahead", None)
    return v
def load(name):
    # A run that refused its flags (exit 2) writes no report: both builds
    # refusing alike is the same outcome.
    try:
        return strip(json.load(open(f"{d}/{name}.json")))
    except FileNotFoundError:
        return None
def events(name):
    path = f"{d}/{name}.events"
    return sorted(open(path).read().splitlines()) if os.path.exists(path) else None
x, y = load("old"), load("new")
same = x == y and a == b and events("old") == events("new")
shown = y or x or {}
print("SAME" if same else "DIFF", "exit", a, b, "flows", shown.get("trace", {}).get("flows"),
      "top", len(shown.get("flows_top", [])), "flags:", flags)
sys.exit(0 if same else 1)
PY
