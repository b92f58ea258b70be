#!/usr/bin/env bash
# Seeds the fuzz corpora from ../shared/traces (the real captures beside the
# project; never committed) and from the project's own examples. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shared="${FLOWSIEVE_SHARED:-$here/../../shared}/traces"
if [ ! -d "$shared" ]; then
  echo "seed.sh: $shared is missing: the corpora start empty" >&2
  exit 1
fi
c="$here/corpus"
mkdir -p "$c"/{trace_bytes,trace_file,dissect_ahead,compressed_stream,dissect,class_toml,snapshot,cli_specs,ring_block}
# Every capture up to 256 KiB (libFuzzer's default -max_len is far below
# that anyway; it reads the beginning of larger seeds).
find "$shared" -type f \( -name '*.pcap' -o -name '*.pcapng' -o -name '*.cap' -o -name '*.gz' -o -name '*.zst' \) -size -256k |
  while read -r f; do
    n="$(basename "$f")"
    cp -n "$f" "$c/trace_bytes/$n" || true
    cp -n "$f" "$c/trace_file/$n" || true
  done
set +o pipefail  # head closes the pipe early on purpose
for f in "$c"/trace_bytes/*; do
  n="$(basename "$f")"
  # compressed_stream: a mode byte (2: gzip it, 3: zstd it) before a capture.
  { printf '\002'; head -c 65536 "$f"; } > "$c/compressed_stream/gz-$n"
  { printf '\003'; head -c 65536 "$f"; } > "$c/compressed_stream/zst-$n"
  # dissect: a link-type pick (0: Ethernet) before the bytes after the
  # classic pcap headers (the first frame and what follows).
  { printf '\000'; tail -c +41 "$f" | head -c 2048; } > "$c/dissect/eth-$n"
  { printf '\001'; tail -c +41 "$f" | head -c 2048; } > "$c/dissect/raw-$n"
  # dissect_ahead: two setting bytes (helpers, share) before a capture's
  # first 16 KiB: 2 helpers in 92-byte shares, and 3 in 284-byte shares
  # with the class rule that names interfaces.
  { printf '\001\010'; head -c 16384 "$f"; } > "$c/dissect_ahead/h2-$n"
  { printf '\202\040'; head -c 16384 "$f"; } > "$c/dissect_ahead/h3-$n"
done
find "$here/.." -maxdepth 3 -name '*.toml' -path '*class*' -exec cp -n {} "$c/class_toml/" \; 2>/dev/null || true
printf '[[class]]\nname = "web"\nports = [80, 443, "8000-8100"]\nproto = ["tcp"]\nsrc = ["10.0.0.0/8"]\nalpha = 2.5\n' > "$c/class_toml/example.toml"
printf 'default = "rest"\n[[class]]\nname = "dns"\ndport = [53]\niface = ["eth0"]\n' > "$c/class_toml/example2.toml"
for s in 1s 250ms 50000p sigma:0.5 n:1000 time:2s target:0.01 bpe=4,8,16 alpha=1,2 2G 64K heavy,new_flows none 4-200 realistic 0.8,0.17,0.03 pcapng blocked 8 000102030405060708090a0b0c0d0e0f; do
  printf '%s' "$s" > "$c/cli_specs/$(printf '%s' "$s" | tr -c 'a-zA-Z0-9' '_')"
done
# snapshot: the version 1 snapshots the tests keep (tests/fixtures), as
# bytes, so that mutation starts from valid headers and payloads.
for f in "$here"/../tests/fixtures/snapshot-v1-*.hex; do
  printf '%b' "$(tr -d '\n' < "$f" | sed 's/../\\x&/g')" > "$c/snapshot/$(basename "$f" .hex)"
done
echo "seeded: $(find "$c" -type f | wc -l) files in $c"
