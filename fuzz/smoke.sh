#!/usr/bin/env bash
# The fuzz smoke pass CI runs (.ci/run): every target for a few seconds
# under AddressSanitizer, seeded from ../shared/traces, with the
# dictionaries. It fails loudly, never skips: without a nightly toolchain
# or cargo-fuzz it says so and exits 1.
# Usage: fuzz/smoke.sh [SECONDS_PER_TARGET]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
secs="${1:-8}"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz/smoke.sh: no nightly toolchain (cargo-fuzz needs one: rustup toolchain install nightly); the fuzz smoke pass cannot run" >&2
  exit 1
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
./seed.sh
# A debug build (with ASan) compiles in about half the time of -O, and a
# smoke pass needs coverage of every target, not speed.
cargo +nightly fuzz build --dev
failed=()
for t in $(cargo +nightly fuzz list); do
  dict=dict/capture.dict
  [ "$t" = cli_specs ] && dict=dict/cli.dict
  if cargo +nightly fuzz run --dev "$t" "corpus/$t" -- \
      -max_total_time="$secs" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
      -dict="$dict" -print_final_stats=1 > "/tmp/fuzz-smoke-$t.log" 2>&1; then
    echo "fuzz smoke: $t ok ($(grep -o 'number_of_executed_units: [0-9]*' "/tmp/fuzz-smoke-$t.log" | awk '{print $2}') executions)"
  else
    echo "fuzz smoke: $t FAILED; log: /tmp/fuzz-smoke-$t.log" >&2
    tail -40 "/tmp/fuzz-smoke-$t.log" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz smoke: failed targets: ${failed[*]}" >&2
  exit 1
fi
