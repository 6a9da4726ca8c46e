#!/usr/bin/env bash
# Checks, with the podman installed here, that the CDI spec `davinci-smi cdi generate` writes
# by default is accepted and that a container user who is not root reaches the device
# through the sockets' group (issue 24; docs/operators.md, "davinci-smi cdi generate").
# Needs root, podman, and the image davinci-rs/davinci-workload (scripts/images.sh):
#
#   scripts/images.sh davinci-workload && scripts/podman-cdi-check.sh
#
# Steps: a davinci-mockd with one shared device whose socket is 0660 for group 2000; the
# default spec in /etc/cdi; then podman runs the workload as uid 1000
#   1. with --group-add 2000: the run completes, 0 mismatches;
#   2. without it: the workload is refused (EPERM on the socket);
#   3. with a 0.6.0 spec instead: podman 4.3 (CDI library 0.5.x) refuses the device, as the
#      generator's warning says (a newer podman accepts it; the step reports what it saw).
# PODMAN_ARGS adds global podman options (here: --runtime runc, where crun cannot run).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ "$(id -u)" = 0 ] || { echo "podman-cdi-check: run as root" >&2; exit 2; }
command -v podman >/dev/null || { echo "podman-cdi-check: podman is not installed" >&2; exit 2; }
B=${CARGO_TARGET_DIR:-target}/release
[ -x "$B/davinci-mockd" ] && [ -x "$B/davinci-smi" ] || {
    echo "podman-cdi-check: build first: cargo build --release -p davinci-mockd -p davinci-smi" >&2; exit 2; }
version=$(awk -F'"' '/^\[workspace.package\]/ { p = 1 } p && /^version/ { print $2; exit }' Cargo.toml)
image=davinci-rs/davinci-workload:$version
podman image exists "$image" || { echo "podman-cdi-check: no image $image (scripts/images.sh davinci-workload)" >&2; exit 2; }
read -r -a pargs <<<"${PODMAN_ARGS:-}"

dir=$(mktemp -d /tmp/davinci-cdi-check.XXXXXX)
chmod 0755 "$dir"
spec=/etc/cdi/davinci-cdi-check.yaml
mkdir -p /etc/cdi
"$B/davinci-mockd" --socket-dir "$dir" --socket-group 2000 --socket-mode 0660 --share-mode shared \
    --exit-with-parent >"$dir/mockd.out" 2>"$dir/mockd.err" &
mpid=$!
cleanup() { kill "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null; rm -f "$spec"; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 50); do grep -q ready "$dir/mockd.out" 2>/dev/null && break; sleep 0.1; done
ls -l "$dir"/davinci0.sock
failed=0
run() { # expect(0|1) what podman-args...
    local expect=$1 what=$2; shift 2
    local out status
    out=$(timeout 300 podman "${pargs[@]}" run --rm --network none "$@" 2>&1); status=$?
    echo "--- $what (exit $status)"; echo "$out" | tail -n 6
    if { [ "$expect" = 0 ] && [ $status != 0 ]; } || { [ "$expect" = 1 ] && [ $status = 0 ]; }; then
        echo "FAILED: $what"; failed=1
    fi
}
"$B/davinci-smi" --socket-dir "$dir" cdi generate -o "$spec"
head -n 3 "$spec"
run 0 "uid 1000 in the sockets' group" --device davinci.ai/npu=davinci0 --user 1000:1000 \
    --group-add 2000 "$image" --tasks 2000
run 1 "uid 1000 without the group" --device davinci.ai/npu=davinci0 --user 1000:1000 \
    "$image" --tasks 2000
"$B/davinci-smi" --socket-dir "$dir" cdi generate --cdi-version 0.6.0 -o "$spec" 2>&1 | tail -n 2
echo "--- a 0.6.0 spec (podman $(podman --version | awk '{print $3}')):"
timeout 300 podman "${pargs[@]}" run --rm --network none --device davinci.ai/npu=davinci0 \
    --user 1000:1000 --group-add 2000 "$image" --tasks 100 2>&1 | tail -n 3
[ $failed = 0 ] && echo "podman-cdi-check: ok" || { echo "podman-cdi-check: FAILED"; exit 1; }
