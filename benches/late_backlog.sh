#!/usr/bin/env bash
# How long a collector takes over a backlog of late digests: a probe back
# after an outage longer than `--lateness`. Needs nats-server. Usage:
#   bash benches/late_backlog.sh TRACE
#
# Probe r0 (of two declared) replays TRACE; a first collector with
# `--lateness 10ms` writes every window partial, without r1, and is
# stopped once the server shows its consumers empty (every digest
# written and acknowledged). Probe r1 then replays TRACE too: each of its
# digests is late for a written window. The figure is the wall time of a
# second collector (`--exit-when-done 500ms`, so half a second of it is
# the quiet spell) from start to exit over that backlog. Beside it are
# the CPU-seconds (user + system) of that collector and of the server
# while it ran. Every round starts a fresh server.
#
# FLOWSIEVE names the builds to compare (space-separated, default
# target/release/flowsieve); they alternate within each round, so that the
# host's noise hits them alike, and each prints the medians of ROUNDS
# (default 3). The probes always run the first build, so that only the
# collector differs. Only loopback is used (PORT, default 4333).
set -euo pipefail
TRACE=${1:?usage: late_backlog.sh TRACE}
read -r -a BUILDS <<< "${FLOWSIEVE:-target/release/flowsieve}"
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-4333}
URL=nats://127.0.0.1:$PORT
PROBE=${BUILDS[0]}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

# Digests still undelivered or unacknowledged at the collectors'
# consumers, from the server's monitoring port; empty while none exists.
outstanding() {
  curl -s "http://127.0.0.1:$((PORT + 1))/jsz?consumers=true" | python3 -c '
import json, sys
d = json.load(sys.stdin)
cs = [c for a in d.get("account_details", []) for s in a.get("stream_detail", [])
      for c in s.get("consumer_detail", []) or [] if c["name"].startswith("collect-s")]
print(sum(c["num_pending"] + c["num_ack_pending"] for c in cs) if len(cs) == 8 else "")'
}

# CPU-seconds (user + system) process PID has used so far.
cpu_s() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}

# Seconds in bash's `times` format (1m2.345s).
seconds() {
  awk '{ split($0, t, /[ms]/); printf "%.2f", t[1] * 60 + t[2] }' <<< "$1"
}

one_round() { # BUILD -> "wall collector-CPU server-CPU", in seconds
  local build=$1
  rm -rf "$WORK/js"
  nats-server -js -p "$PORT" -m $((PORT + 1)) -sd "$WORK/js" > "$WORK/server.log" 2>&1 &
  local server=$!
  for _ in $(seq 50); do curl -s "http://127.0.0.1:$((PORT + 1))/healthz" > /dev/null && break; sleep 0.1; done
  "$PROBE" probe "$TRACE" --nats "$URL" --probe-id r0 --probes 2 --no-truth -q > /dev/null
  "$build" collect --nats "$URL" --shards 0-7 --lateness 10ms > "$WORK/first.log" 2>&1 &
  local first=$!
  local waited=0
  until [ "$(outstanding)" = 0 ]; do
    sleep 0.2
    waited=$((waited + 1))
    [ "$waited" -lt 600 ] || { echo "the first collector did not empty its consumers in 120 s: $(cat "$WORK/first.log")" >&2; exit 1; }
  done
  kill "$first"; wait "$first" 2> /dev/null || true
  "$PROBE" probe "$TRACE" --nats "$URL" --probe-id r1 --probes 2 --no-truth -q > /dev/null
  local start end server_before server_after
  server_before=$(cpu_s "$server")
  start=$(date +%s.%N)
  # `times` in the subshell: its second line is the collector's CPU.
  (
    "$build" collect --nats "$URL" --shards 0-7 --lateness 10ms --exit-when-done 500ms > "$WORK/second.log" 2>&1
    times > "$WORK/times"
  )
  end=$(date +%s.%N)
  server_after=$(cpu_s "$server")
  kill "$server"; wait "$server" 2> /dev/null || true
  grep -q ' 0 shard-windows written' "$WORK/second.log" || { echo "second collector wrote windows: $(cat "$WORK/second.log")" >&2; exit 1; }
  local user sys
  read -r user sys < <(sed -n 2p "$WORK/times")
  awk -v s="$start" -v e="$end" -v u="$(seconds "$user")" -v y="$(seconds "$sys")" \
    -v a="$server_before" -v b="$server_after" \
    'BEGIN { printf "%.2f %.2f %.2f\n", e - s, u + y, b - a }'
}

median() { # values... -> their median
  printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

declare -A WALL COLLECTOR SERVER
for r in $(seq "$ROUNDS"); do
  for b in "${BUILDS[@]}"; do
    out=$(one_round "$b")
    read -r wall collector server <<< "$out"
    WALL[$b]+="$wall "
    COLLECTOR[$b]+="$collector "
    SERVER[$b]+="$server "
    echo "round $r $(basename "$b"): $wall s wall, collector $collector CPU-s, server $server CPU-s ($(grep -o '[0-9]* late' "$WORK/second.log"))" >&2
  done
done
for b in "${BUILDS[@]}"; do
  # shellcheck disable=SC2086
  echo "$(basename "$b"): medians of ${ROUNDS}: $(median ${WALL[$b]}) s wall (${WALL[$b]% }), collector $(median ${COLLECTOR[$b]}) CPU-s, server $(median ${SERVER[$b]}) CPU-s"
done
