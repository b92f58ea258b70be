#!/usr/bin/env bash
# How fast a live capture empties a full ring: the capture side's own
# packet rate, with the injector out of the way. Needs root, iproute2 and
# tcpdump. Usage:
#   bash benches/live_drain.sh [TRACE] [LOOPS]
#
# Why: on a 2-core machine the injector (`flowsieve inject`, and the
# kernel's veth path it drives) tops out near 0.6 Mpps, and every capture
# keeps up with it (live_zero_loss.sh), so the zero-loss rate of the
# capture itself cannot be found by pacing. Here the capture is stopped
# (SIGSTOP) before the burst, the injector fills the capture's ring with
# TRACE sent LOOPS times at top speed, and the capture is continued
# (SIGCONT) with `-c N`, so that it exits once it has handled every frame.
# The time from SIGCONT to its exit is the drain; frames / drain is the
# rate the capture sustains while it has work queued, start of the drain
# and the report at its end included. The ring is sized to hold the burst
# (`--ring-mb`, tcpdump's `-B`), and each row says how many frames the
# kernel dropped: a row with drops did not measure a drain. A flowsieve
# row also gives the medians of its report's CPU per frame: the process's
# (`throughput.cpu_seconds`, the idle polling before the burst included),
# the merger's (the source thread's, `source_cpu_seconds`) and the ring
# readers' (the process's less the merger's and the workers'). On two
# cores the drain's wall time hides work taken off one thread while
# another is the limit, and the CPU does not.
#
# Each row runs ROUNDS times (default 3, env ROUNDS) and prints the median
# drain; the captures alternate within a round, so that the host's noise
# hits them alike. FLOWSIEVE may name several builds (space-separated):
# each flowsieve row then runs once per build in every round, labelled
# with the build's file name, for a side-by-side comparison; ROWS (a
# regular expression, default every row) picks the rows to run. With
# PERF_DIR set, `perf record -g` is attached to each capture while it is
# stopped, so that it samples the drain alone; one file a row and round,
# PERF_DIR/<row>.<round>.data (`perf report -i FILE --sort comm,sym`);
# its drain times then include perf's own cost and are no timing figure.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a BUILDS <<<"${FLOWSIEVE:-target/release/flowsieve}"
B=${BUILDS[0]}
ROWS=${ROWS:-.}
TRACE=${1:-traces/default.pcap}
LOOPS=${2:-25}
ROUNDS=${ROUNDS:-3}
RING_MB=${RING_MB:-512}
command -v tcpdump >/dev/null || { echo "live_drain.sh: needs tcpdump" >&2; exit 2; }
source benches/veth_pair.sh fsdr
frames=$(( $("$B" replay -q --no-truth --stages none --json /dev/stdout "$TRACE" 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["trace"]["packets"])') * LOOPS ))
inject() { ip netns exec "$ns_i" "$B" inject -i "$di" --loop "$LOOPS" --topspeed --json "$TRACE"; }
results=$(mktemp)
ifindex=$(ip netns exec "$ns_c" cat "/sys/class/net/$dc/ifindex")
# ready PID SOCKETS: waits until SOCKETS packet sockets are bound to the
# capture's interface (a ring that cannot hold the burst yet would lose
# it: a 512 MiB ring took over a second to set up on a guest whose host
# had taken its free memory back), then until PID has used no CPU for
# 0.3 s, i.e. it has set up and sits polling its ring.
ready() {
    local pid=$1 want=$2 i
    for i in $(seq 600); do
        [ "$(ip netns exec "$ns_c" awk -v ifx="$ifindex" 'NR > 1 && $5 == ifx && $4 != "0000"' /proc/net/packet | wc -l)" -ge "$want" ] && break
        sleep 0.1
    done
    quiet "$pid"
}
# drain LABEL SOCKETS CMD...: one stopped capture, one burst, one timed drain. An
# argument JSON in CMD becomes a file for flowsieve's report, which says
# what the kernel dropped. A capture that never reaches its count (frames
# lost) is stopped after two minutes with SIGINT, and its row says so.
drain() {
    local label=$1 sockets=$2; shift 2
    local err json; err=$(mktemp); json=$(mktemp)
    local cmd=()
    for a in "$@"; do if [ "$a" = JSON ]; then cmd+=("$json"); else cmd+=("$a"); fi; done
    # `ip netns exec` execs the capture, so $! is the capture itself.
    ip netns exec "$ns_c" "${cmd[@]}" 2>"$err" >/dev/null &
    local pid=$!
    ready "$pid" "$sockets"
    kill -STOP "$pid"
    local sent; sent=$(inject)
    local perf=""
    if [ -n "${PERF_DIR:-}" ]; then
        mkdir -p "$PERF_DIR"
        perf record -F 10000 -g -p "$pid" -o "$PERF_DIR/${label//[^A-Za-z0-9]/_}.$round.data" >/dev/null 2>&1 &
        perf=$!
        sleep 1 # perf is attached before the capture goes on
    fi
    sleep 0.2
    local t0; t0=$(date +%s.%N)
    kill -CONT "$pid"
    # A watchdog: SIGINT after two minutes, for a capture that lost frames
    # and so never reaches its count.
    (
        for _ in $(seq 1200); do sleep 0.1; kill -0 "$pid" 2>/dev/null || exit 0; done
        kill -INT "$pid" 2>/dev/null && echo timed_out >"$err.t"
    ) >/dev/null 2>&1 &
    local dog=$!
    wait "$pid" || true
    local t1; t1=$(date +%s.%N)
    wait "$dog" || true
    [ -n "$perf" ] && { wait "$perf" || true; }
    local rc=0; [ -e "$err.t" ] && rc=124
    rm -f "$err.t"
    python3 - "$label" "$t0" "$t1" "$sent" "$err" "$frames" "$json" "$rc" >>"$results" <<'PY'
import json, re, sys
label, t0, t1, sent, err, frames, path, rc = sys.argv[1:9]
sent = json.loads(sent)["sent"]
text = open(err).read()
m = re.search(r"(\d+) packets dropped by kernel", text)
dropped = int(m.group(1)) if m else 0
cpu = None
try:
    j = json.load(open(path))
    t = j["capture"]["totals"]
    dropped = t["kernel_drops"] + t["shed"]
    th = j["throughput"]
    cpu = [th["cpu_seconds"], th["source_cpu_seconds"], th["worker_cpu_seconds"]]
except (OSError, ValueError, KeyError, TypeError):
    pass
print(json.dumps({"label": label, "drain": float(t1) - float(t0), "sent": sent,
                  "frames": int(frames), "dropped": dropped, "timed_out": int(rc) == 124,
                  "cpu": cpu}))
PY
    rm -f "$err" "$json"
}
# row LABEL SOCKETS ARGS...: a flowsieve row, once per build.
row() {
    local label=$1 sockets=$2; shift 2
    [[ $label =~ $ROWS ]] || return 0
    local b name
    for b in "${BUILDS[@]}"; do
        name=$label; [ "${#BUILDS[@]}" -gt 1 ] && name="$label [$(basename "$b")]"
        drain "$name" "$sockets" "$b" live -i "$dc" -q --report-every 0 -c "$frames" --json JSON "$@"
    done
}
for round in $(seq "$ROUNDS"); do
    if [[ "tcpdump -w /dev/null" =~ $ROWS ]]; then
        drain "tcpdump -w /dev/null" 1 tcpdump -i "$dc" -w /dev/null -c "$frames" -B $((RING_MB * 1024))
    fi
    row "stages none, fanout 1" 1 --no-truth --ring-mb "$RING_MB" --stages none
    row "all stages, fanout 1" 1 --no-truth --ring-mb "$RING_MB"
    row "all stages, fanout 2" 2 --no-truth --ring-mb $((RING_MB / 2)) --fanout 2
    row "all stages, truth on" 1 --ring-mb "$RING_MB"
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f'{"capture":<44} {"frames":>9} {"drain ms: median":>17} {"(min-max)":>15} {"Mpps":>7} {"CPU ns/frame: all":>18} {"merger":>7} {"readers":>8}  note')
for label in dict.fromkeys(r["label"] for r in rows):
    mine = [r for r in rows if r["label"] == label]
    d = statistics.median(r["drain"] for r in mine)
    n = mine[0]["frames"]
    note = []
    if any(r["sent"] != n for r in mine):
        note.append("the injector sent fewer frames than the burst")
    drops = [r["dropped"] for r in mine if r["dropped"]]
    if drops:
        note.append(f"lost up to {max(drops)} frames: not a drain")
    if any(r["timed_out"] for r in mine):
        note.append("stopped after 120 s")
    lo, hi = min(r["drain"] for r in mine), max(r["drain"] for r in mine)
    span = f"({lo * 1e3:.0f}-{hi * 1e3:.0f})"
    cpus = [r["cpu"] for r in mine if r.get("cpu") and None not in r["cpu"]]
    def ns(f):
        return f"{statistics.median(f(c) for c in cpus) / n * 1e9:.0f}" if cpus else "-"
    # The merger is the source thread; the readers are what is left once
    # the workers are taken out (start-up and the report's own are in it).
    all_, merger, readers = ns(lambda c: c[0]), ns(lambda c: c[1]), ns(lambda c: c[0] - c[1] - c[2])
    print(f'{label:<44} {n:>9} {d * 1e3:>17.1f} {span:>15} {n / d / 1e6:>7.2f} {all_:>18} {merger:>7} {readers:>8}  {"; ".join(note)}')
PY
rm -f "$results"
