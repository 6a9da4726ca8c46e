#!/usr/bin/env bash
# Instructions per NOP task at batch 64, counted by callgrind, on each side:
# * host: only the work the runtime's thread does per task (build the descriptor, push,
#   publish, doorbell when asked, take and check the completion), not the wait in between
#   (`host_submit` and `host_reap` in benches/examples/host_instructions.rs);
# * device: everything in driver-core's `run_stream` (the stream's lock, the busy-time clock,
#   taking, validating and executing each descriptor, its record, publishing, waking), over
#   every pass of the poller, idle ones included (their number is printed: under valgrind the
#   threads take turns, so the poller also makes a few passes that find nothing). The poller
#   loop around `run_stream` (the device lock, the pass bookkeeping) is not counted.
#   scripts/bench-callgrind.sh [BATCHES]      (default 2000; needs valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
batches=${1:-2000}
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
cargo build --quiet --release -p davinci-benches --example host_instructions
exe=${CARGO_TARGET_DIR:-target}/release/examples/host_instructions
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# count NAME TOGGLE...: runs the example once, collecting only inside the toggled functions.
count() {
    local name=$1
    shift
    local toggles=()
    for t in "$@"; do toggles+=("--toggle-collect=$t"); done
    valgrind --tool=callgrind --callgrind-out-file="$out/$name.out" --collect-atstart=no \
        "${toggles[@]}" "$exe" "$batches" >"$out/$name.txt" 2>"$out/$name.vg" ||
        { cat "$out/$name.vg" "$out/$name.txt" >&2; exit 1; }
    tasks=$(awk '{print $1; exit}' "$out/$name.txt")
    ir=$(sed -n 's/^summary: *//p' "$out/$name.out")
    [ -n "$ir" ] && [ "$ir" != 0 ] && [ -n "$tasks" ] ||
        { echo "callgrind.sh: no count for the $name in the callgrind output" >&2; exit 1; }
}
count host '*host_submit*' '*host_reap*'
awk -v ir="$ir" -v t="$tasks" 'BEGIN { printf "host instructions per NOP task (batch 64): %.1f  (%d instructions, %d tasks)\n", ir / t, ir, t }'
count device '*run_stream*'
# Calls of run_stream: its name is given once, with its id, then only "(id)".
passes=$(awk '
    /^c?fn=\([0-9]+\) / && index($0, "::run_stream") { split($0, a, /[()]/); id = a[2] }
    /^cfn=/ { split($0, a, /[()]/); next_is_call = (id != "" && a[2] == id); next }
    /^calls=/ { if (next_is_call) { split(substr($0, 7), a, " "); n += a[1] } next_is_call = 0; next }
    { next_is_call = 0 }
    END { print n + 0 }' "$out/device.out")
awk -v ir="$ir" -v t="$tasks" -v p="$passes" 'BEGIN { printf "device instructions per NOP task (batch 64): %.1f  (%d instructions, %d tasks, %d passes)\n", ir / t, ir, t, p }'
if [ "${VERBOSE:-0}" = 1 ]; then
    callgrind_annotate "$out/host.out" | head -40
    callgrind_annotate --inclusive=yes "$out/device.out" | head -60
fi
