#!/usr/bin/env bash
# What `--shed-at` trades: frames lost against how late events come, when
# the engine stalls in the middle of a steady stream. Needs root, iproute2
# and python3. Usage:
#   bash benches/live_stall.sh [TRACE] [RATE] [STALL_S]
#
# For each ring size (env RINGS, MiB, default "128 32") and each setting
# (env SETTINGS, flag sets separated by commas, default "--shed-at 0,
# --shed-at 0.5, --shed-at 0.75, --shed-at 1, --max-delay 250ms"), one
# capture runs while TRACE is
# injected at RATE frames a second (default 300000) for about STREAM_S
# seconds (env, default 6). Two seconds into the stream the capture is
# stopped (SIGSTOP) for STALL_S seconds (default 1), as a pause of the
# engine would be (a slow sink, the host taking the CPU), and continued. The frames that arrive meanwhile wait in
# the ring; what happens to them after the pause is what --shed-at decides.
#
# With CPU_PCT set (env, a percentage of one CPU), the capture's engine
# (its shard workers) runs under that CPU quota throughout (a cgroup), so
# that the stream outruns the engine for the whole run while the ring
# readers keep up: the sustained overload where --shed-at chooses between
# delay and loss. STALL_S 0 then leaves the stall out.
#
# Each row gives the frames lost (kernel drops, where the ring overflowed,
# and frames shed, which the report counts by class) and the heavy-flow
# events' delay from the packet's kernel timestamp to the event reaching
# the sink: median, 99th percentile and largest. Each row runs ROUNDS
# times (default 3) and prints the medians; the rows alternate within a
# round, so that the host's noise hits them alike.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${FLOWSIEVE:-target/release/flowsieve}
TRACE=${1:-traces/default.pcap}
RATE=${2:-300000}
STALL=${3:-1}
STREAM_S=${STREAM_S:-6}
ROUNDS=${ROUNDS:-3}
RINGS=${RINGS:-128 32}
SETTINGS=${SETTINGS:---shed-at 0,--shed-at 0.5,--shed-at 0.75,--shed-at 1,--max-delay 250ms}
IFS=, read -r -a SETS <<<"$SETTINGS"
CPU_PCT=${CPU_PCT:-}
python3 -c 'import sys; float(sys.argv[1]) >= 0 or sys.exit(1)' "$STALL" 2>/dev/null \
    || { echo "live_stall.sh: STALL_S must be a number of seconds, not '$STALL'" >&2; exit 2; }
[[ -z $CPU_PCT || $CPU_PCT =~ ^[1-9][0-9]?$ ]] \
    || { echo "live_stall.sh: CPU_PCT must be a percentage from 1 to 99, not '$CPU_PCT'" >&2; exit 2; }
# throttle PID: puts PID's shard workers (the engine; its ring readers
# and merger stay free, as on a machine with cores to spare for them) under
# CPU_PCT % of one CPU, with cgroup v1's cpu controller, which can hold
# single threads; under cgroup v2 the whole capture is held. The group is
# removed when the script exits.
group=""
throttle() {
    local pid=$1 t
    if [ -d /sys/fs/cgroup/cpu ] && [ -e /sys/fs/cgroup/cpu/tasks ]; then
        group=/sys/fs/cgroup/cpu/fsstall$$
        mkdir -p "$group"; echo 100000 >"$group/cpu.cfs_period_us"
        echo $((CPU_PCT * 1000)) >"$group/cpu.cfs_quota_us"
        for t in /proc/"$pid"/task/*; do
            [ "$(cat "$t/comm")" = flowsieve-shard ] && echo "${t##*/}" >"$group/tasks"
        done
        return 0
    fi
    group=/sys/fs/cgroup/fsstall$$
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    mkdir -p "$group"; echo "$((CPU_PCT * 1000)) 100000" >"$group/cpu.max"
    echo "$pid" >"$group/cgroup.procs"
}
[[ $RATE =~ ^[1-9][0-9]*$ ]] || { echo "live_stall.sh: RATE must be frames a second, not '$RATE'" >&2; exit 2; }
source benches/veth_pair.sh fsst
trap 'cleanup; [ -n "$group" ] && rmdir "$group" 2>/dev/null; true' EXIT
per_loop=$("$B" replay -q --no-truth --stages none --json /dev/stdout "$TRACE" 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["trace"]["packets"])')
loops=$(( (RATE * STREAM_S + per_loop - 1) / per_loop ))
results=$(mktemp)
run() { # RING_MB FLAGS
    local ring=$1 flags=$2 json; json=$(mktemp)
    # shellcheck disable=SC2086 # the flag set is split on purpose
    ip netns exec "$ns_c" "$B" live -i "$dc" -q --no-truth --report-every 0 \
        --ring-mb "$ring" $flags --json "$json" 2>/dev/null >/dev/null &
    local pid=$!
    # Until the ring is set up and the capture sits polling it.
    quiet "$pid"
    [ -n "$CPU_PCT" ] && throttle "$pid"
    local sent; sent=$(mktemp)
    ip netns exec "$ns_i" "$B" inject -i "$di" --loop "$loops" --pps "$RATE" --json "$TRACE" >"$sent" &
    local inj=$!
    sleep 2
    if [ "$STALL" != 0 ]; then kill -STOP "$pid"; sleep "$STALL"; kill -CONT "$pid"; fi
    wait "$inj"
    # Until the capture has worked off its backlog: a capture stopping
    # sheds what it still holds, which is not what this measures.
    sleep 0.5; quiet "$pid"
    kill -INT "$pid"; wait "$pid" || true
    python3 - "$json" "$sent" "$ring" "$flags" >>"$results" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))
c = r["capture"]; t = c["totals"]; lat = c.get("heavy_event_latency") or {}
print(json.dumps({"ring": int(sys.argv[3]), "setting": sys.argv[4], "sent": s["sent"],
                  "dropped": t["kernel_drops"], "shed": t["shed"],
                  "unseen": max(s["sent"] - t["socket_packets"], 0),
                  "events": lat.get("events", 0), "p50": lat.get("p50_ms"),
                  "p99": lat.get("p99_ms"), "max": lat.get("max_ms")}))
PY
    rm -f "$json" "$sent"
}
for _ in $(seq "$ROUNDS"); do
    for ring in $RINGS; do
        for flags in "${SETS[@]}"; do
            run "$ring" "$flags"
        done
    done
done
python3 - "$results" "$RATE" "$STALL" "$CPU_PCT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
quota = f", the engine held to {sys.argv[4]} % of a CPU" if sys.argv[4] else ""
print(f"stream {sys.argv[2]} frames/s, the capture stopped for {sys.argv[3]} s{quota}; medians of {len(rows) // len({(r['ring'], r['setting']) for r in rows})} rounds")
print(f'{"ring MiB":>8} {"setting":>20} {"sent":>9} {"kernel drops":>12} {"shed":>9} {"events":>7} {"p50 ms":>8} {"p99 ms":>8} {"max ms":>8}')
med = lambda xs: statistics.median(xs) if xs else float("nan")
for key in dict.fromkeys((r["ring"], r["setting"]) for r in rows):
    mine = [r for r in rows if (r["ring"], r["setting"]) == key]
    f = lambda k: med([r[k] for r in mine if r[k] is not None])
    print(f'{key[0]:>8} {key[1].strip():>20} {f("sent"):>9.0f} {f("dropped"):>12.0f} {f("shed"):>9.0f} {f("events"):>7.0f} {f("p50"):>8.1f} {f("p99"):>8.1f} {f("max"):>8.1f}'
          + ("  (some frames never reached the socket)" if any(r["unseen"] for r in mine) else ""))
PY
rm -f "$results"
