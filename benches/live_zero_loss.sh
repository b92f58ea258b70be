#!/usr/bin/env bash
# Zero-loss rate of `flowsieve live` on a veth pair, beside tcpdump's, in one
# run. Needs root, iproute2 and tcpdump. Usage:
#   bash benches/live_zero_loss.sh [TRACE] [RATES...]
# For each rate (frames per second; `top` = --topspeed) the trace is
# injected from one namespace into a capture in the other, and the frames
# lost (kernel ring drops + shed for flowsieve; "dropped by kernel" for
# tcpdump) are printed. The zero-loss rate is the highest rate with 0 lost.
# flowsieve rows also give the process CPU per frame (user + system,
# including polling an idle ring before and after the burst), and a last
# row gives `flowsieve replay` of the same frames for comparison. The last
# column is the delay from a packet's arrival (kernel timestamp) to its
# heavy-flow event reaching the event sink, p50/p99.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${FLOWSIEVE:-target/release/flowsieve}
TRACE=${1:-traces/default.pcap}
shift || true
RATES=${*:-100000 200000 300000 400000 top}
LOOPS=${LOOPS:-5}
source benches/veth_pair.sh fszl
pace() { if [ "$1" = top ]; then echo --topspeed; else echo "--pps $1"; fi; }
inject() { ip netns exec "$ns_i" "$B" inject -i "$di" --loop "$LOOPS" $(pace "$1") --json "$TRACE"; }
printf '%-28s %-8s %10s %10s %8s %12s %12s %18s\n' capture rate sent lost loss% achieved_pps cpu_us/frame heavy_p50/p99_ms
run_flowsieve() { # label rate args...
    local label=$1 rate=$2; shift 2
    local out; out=$(mktemp)
    ip netns exec "$ns_c" "$B" live -i "$dc" -q --no-truth --report-every 0 --json "$out" "$@" 2>/dev/null &
    local pid=$!; sleep 1
    local sent; sent=$(inject "$rate")
    sleep 0.5; kill -INT "$pid"; wait "$pid" || true
    python3 - "$out" "$label" "$rate" "$sent" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = json.loads(sys.argv[4]); t = r["capture"]["totals"]
lost = t["kernel_drops"] + t["shed"] + (s["sent"] - t["socket_packets"])
cpu = 1e6 * r["throughput"]["cpu_seconds"] / max(t["received"], 1)
lat = r["capture"].get("heavy_event_latency") or {}
lat = f'{lat["p50_ms"]:.1f}/{lat["p99_ms"]:.1f}' if lat else "-"
print(f'{sys.argv[2]:<28} {sys.argv[3]:<8} {s["sent"]:>10} {lost:>10} {100*lost/max(s["sent"],1):>8.3f} {s["packets_per_sec"]:>12.0f} {cpu:>12.2f} {lat:>18}')
PY
    rm -f "$out"
}
run_tcpdump() { # rate
    local err; err=$(mktemp)
    ip netns exec "$ns_c" tcpdump -i "$dc" -w /dev/null 2>"$err" &
    local pid=$!; sleep 1
    local sent; sent=$(inject "$1")
    sleep 0.5; kill -INT "$pid"; wait "$pid" || true
    python3 - "$err" "$1" "$sent" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read(); s = json.loads(sys.argv[3])
got = int(re.search(r"(\d+) packets received by filter", text).group(1))
dropped = int(re.search(r"(\d+) packets dropped by kernel", text).group(1))
lost = dropped + max(s["sent"] - got, 0)
print(f'{"tcpdump -w /dev/null":<28} {sys.argv[2]:<8} {s["sent"]:>10} {lost:>10} {100*lost/max(s["sent"],1):>8.3f} {s["packets_per_sec"]:>12.0f}')
PY
    rm -f "$err"
}
for rate in $RATES; do
    run_tcpdump "$rate"
    run_flowsieve "stages none, fanout 1" "$rate" --stages none
    run_flowsieve "all stages, fanout 1" "$rate"
    run_flowsieve "all stages, fanout 2" "$rate" --fanout 2
done
# The same frames replayed from the file, all stages, truth off.
files=(); for _ in $(seq "$LOOPS"); do files+=("$TRACE"); done
out=$(mktemp)
"$B" replay -q --no-truth --json "$out" "${files[@]}" || true
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); n = r["trace"]["packets"]
print(f'{"replay (all stages, file)":<28} {"-":<8} {n:>10} {0:>10} {0:>8.3f} {"-":>12} {1e6*r["throughput"]["cpu_seconds"]/n:>12.2f}')
PY
rm -f "$out"
