#!/usr/bin/env bash
# Host-side instructions per NOP task at batch 64, counted by callgrind: only the work the
# runtime's thread does per task (build the descriptor, push, publish, doorbell when asked,
# take and check the completion), not the device and not the wait in between.
#   scripts/bench-callgrind.sh [BATCHES]      (default 2000; needs valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
batches=${1:-2000}
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
cargo build --quiet --release -p davinci-benches --example host_instructions
exe=${CARGO_TARGET_DIR:-target}/release/examples/host_instructions
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --collect-atstart=no \
    --toggle-collect='*host_submit*' --toggle-collect='*host_reap*' \
    "$exe" "$batches" >"$out/run.txt" 2>"$out/vg.txt" || { cat "$out/vg.txt" "$out/run.txt" >&2; exit 1; }
tasks=$(awk '{print $1; exit}' "$out/run.txt")
ir=$(sed -n 's/^summary: *//p' "$out/cg.out")
[ -n "$ir" ] && [ -n "$tasks" ] || { echo "callgrind.sh: no count in the callgrind output" >&2; exit 1; }
awk -v ir="$ir" -v t="$tasks" 'BEGIN { printf "host instructions per NOP task (batch 64): %.1f  (%d instructions, %d tasks)\n", ir / t, ir, t }'
if [ "${VERBOSE:-0}" = 1 ]; then callgrind_annotate "$out/cg.out" | head -40; fi
