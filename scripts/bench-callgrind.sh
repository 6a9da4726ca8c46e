#!/usr/bin/env bash
# Instructions per NOP task at batch 64, counted by callgrind, on each side:
# * host: only the work the runtime's thread does per task (build the descriptor, push,
#   publish, doorbell when asked, take and check the completion), not the wait in between
#   (`host_submit` and `host_reap` in apps/benches/examples/host_instructions.rs);
# * device: everything in driver-core's `run_stream` (the stream's lock, the busy-time clock,
#   taking, validating and executing each descriptor, its record, publishing, waking). Two
#   figures: over every pass of the poller, and over the busy passes only (those that took
#   descriptors). Under valgrind the threads take turns, so the poller makes many passes
#   that find nothing (how many depends on the schedule: from a few thousand to hundreds of
#   thousands), each costing the same few hundred instructions: the busy figure subtracts
#   them. Busy passes are counted by the calls of driver-core's `busy_pass_clock` (called
#   once per pass that takes descriptors, by no other); the cost of an idle pass is measured
#   in a second run in which the stream is left idle (`host_instructions idle`: every pass
#   finds nothing). The poller loop around `run_stream` (the device lock, the pass
#   bookkeeping) is not counted.
#   scripts/bench-callgrind.sh [BATCHES]      (default 2000; needs valgrind)
#   VERBOSE=1 scripts/bench-callgrind.sh      (and the profiles, per function)
set -euo pipefail
cd "$(dirname "$0")/.."
batches=${1:-2000}
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
cargo build --quiet --release -p davinci-benches --example host_instructions
exe=${CARGO_TARGET_DIR:-target}/release/examples/host_instructions
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# count NAME TOGGLE [ARG]: runs the example once (with ARG, default the batches), collecting
# only inside the toggled function(s) (TOGGLE: one pattern, or several separated by spaces).
count() {
    local name=$1 toggles=() pats t
    read -ra pats <<<"$2" # split on spaces, no pathname expansion of the patterns
    for t in "${pats[@]}"; do toggles+=("--toggle-collect=$t"); done
    valgrind --tool=callgrind --callgrind-out-file="$out/$name.out" --collect-atstart=no \
        "${toggles[@]}" "$exe" "${3:-$batches}" >"$out/$name.txt" 2>"$out/$name.vg" ||
        { cat "$out/$name.vg" "$out/$name.txt" >&2; exit 1; }
    tasks=$(awk '{print $1; exit}' "$out/$name.txt")
    ir=$(sed -n 's/^summary: *//p' "$out/$name.out")
    [ -n "$ir" ] && [ "$ir" != 0 ] && [ -n "$tasks" ] ||
        { echo "callgrind.sh: no count for the $name in the callgrind output" >&2; exit 1; }
}
count host '*host_submit* *host_reap*'
awk -v ir="$ir" -v t="$tasks" 'BEGIN { printf "host instructions per NOP task (batch 64): %.1f  (%d instructions, %d tasks)\n", ir / t, ir, t }'
# calls NAME: how often the run in $out/device.out (or ${2}) called the function whose name
# contains NAME (callgrind names a function once, with its id, then only "(id)").
calls() {
    awk -v name="$1" '
        /^c?fn=\([0-9]+\) / && index($0, name) { split($0, a, /[()]/); id[a[2]] = 1 }
        /^cfn=/ { split($0, a, /[()]/); next_is_call = (a[2] in id); next }
        /^calls=/ { if (next_is_call) { split(substr($0, 7), a, " "); n += a[1] } next_is_call = 0; next }
        { next_is_call = 0 }
        END { print n + 0 }' "${2:-$out/device.out}"
}
count idle '*run_stream*' idle
idle_ir=$ir
idle_passes=$(calls ::run_stream "$out/idle.out")
idle_busy=$(calls ::busy_pass_clock "$out/idle.out")
[ "$idle_passes" -gt 0 ] && [ "$idle_busy" = 0 ] ||
    { echo "callgrind.sh: the idle run made $idle_passes passes, $idle_busy busy: no idle pass cost" >&2; exit 1; }
count device '*run_stream*'
passes=$(calls ::run_stream)
busy=$(calls ::busy_pass_clock)
awk -v ir="$ir" -v t="$tasks" -v p="$passes" -v b="$busy" -v ii="$idle_ir" -v ip="$idle_passes" 'BEGIN {
    idle = ii / ip
    printf "device instructions per NOP task (batch 64), all passes: %.1f  (%d instructions, %d tasks, %d passes: %d busy, %d idle)\n", ir / t, ir, t, p, b, p - b
    printf "device instructions per NOP task (batch 64), busy passes only: %.1f  (%d idle passes at %.1f instructions each subtracted: measured over %d passes of a stream left idle)\n", (ir - (p - b) * idle) / t, p - b, idle, ip
}'
if [ "${VERBOSE:-0}" = 1 ]; then
    # sed, not head: head exits early and the annotator dies of SIGPIPE (pipefail).
    callgrind_annotate "$out/host.out" | sed -n 1,40p
    callgrind_annotate --inclusive=yes "$out/device.out" | sed -n 1,60p
fi
