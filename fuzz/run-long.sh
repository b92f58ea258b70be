#!/usr/bin/env bash
# The long campaign behind docs/fuzzing.md: 10^7 executions per target,
# one after the other, release build with debug assertions and overflow
# checks, no sanitizer (the targets are safe Rust apart from the mapped
# file and the ring walker, which the CI smoke pass runs under ASan).
# Usage: fuzz/run-long.sh [RUNS] [TARGET...]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
runs="${1:-10000000}"; shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(cli_specs ring_block snapshot dissect class_toml trace_bytes compressed_stream trace_file dissect_ahead)
mkdir -p logs
for t in "${targets[@]}"; do
  dict=dict/capture.dict
  [ "$t" = cli_specs ] && dict=dict/cli.dict
  start=$(date +%s)
  cargo +nightly fuzz run -O -a -s none "$t" "corpus/$t" -- \
    -runs="$runs" -max_len=16384 -timeout=10 -rss_limit_mb=2048 -dict="$dict" \
    -print_final_stats=1 > "logs/$t.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "logs/$t.log" | awk '{print $2}')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "logs/$t.log" | awk '{print $2}')
  echo "$t rc=$rc execs=${execs:-?} exec_per_sec=${rate:-?} seconds=$secs $(date -u +%FT%TZ)" | tee -a logs/summary.txt
done
