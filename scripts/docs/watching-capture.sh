#!/bin/bash
# Regenerates the pictures of docs/runtimes.md ("Profiling a run") and docs/operators.md
# ("Watching a device") from real runs:
#   docs/images/top-once.txt       davinci-smi top --once over two tenants at work
#   docs/images/trace-workload.svg a window of davinci-workload --trace's timeline
#   docs/images/trace-device.svg   a window of davinci-smi trace over the same two tenants
# Needs root (the second tenant runs as uid 65534 through setpriv) and the builds:
#   cargo build --release -p davinci-mockd -p davinci-smi -p davinci-workload
#   cargo build -p davinci-tests --bins
# Usage: scripts/docs/watching-capture.sh   (from the repository root)
set -eu
ROOT=$(pwd)
T=$(realpath "${CARGO_TARGET_DIR:-target}")
R=$T/release
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
chmod 0755 "$WORK"
"$R/davinci-mockd" --socket-dir "$WORK" --devices 1 --socket-mode 0666 --exit-with-parent >"$WORK/mockd.out" 2>&1 &
for _ in $(seq 50); do [ -S "$WORK/davinci0.sock" ] && break; sleep 0.1; done
DEV=mock:$WORK/davinci0.sock
"$R/davinci-smi" --socket-dir "$WORK" set -t device-share -i 0 -d 1 >/dev/null
# Two tenants at work: root's worker and nobody's.
mkfifo "$WORK/a" "$WORK/b"
"$T/debug/davinci-testclient" work --until-eof --elems 262144 --device "$DEV" <"$WORK/a" >/dev/null &
setpriv --reuid 65534 --regid 65534 --clear-groups \
    "$T/debug/davinci-testclient" work --until-eof --elems 65536 --device "$DEV" <"$WORK/b" >/dev/null &
exec 3>"$WORK/a" 4>"$WORK/b"
sleep 2
"$R/davinci-smi" --socket-dir "$WORK" top --once --interval 1s --width 100 >"$ROOT/docs/images/top-once.txt"
"$R/davinci-smi" --socket-dir "$WORK" trace -i 0 --duration 300ms -o "$WORK/device.json"
python3 "$ROOT/scripts/docs/trace_svg.py" "$WORK/device.json" "$ROOT/docs/images/trace-device.svg" \
    --from-ms 100 --window-ms 20
exec 3>&- 4>&-
"$R/davinci-workload" --device embedded --tasks 600 --streams 2 --slots 8 --elements 65536 \
    --latency-samples 20 --trace "$WORK/workload.json" >/dev/null
python3 "$ROOT/scripts/docs/trace_svg.py" "$WORK/workload.json" "$ROOT/docs/images/trace-workload.svg" \
    --from-ms 120 --window-ms 15
echo "written: docs/images/top-once.txt trace-workload.svg trace-device.svg"
