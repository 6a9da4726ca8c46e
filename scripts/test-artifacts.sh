#!/usr/bin/env bash
# scripts/test-artifacts.sh: lists the executables of the workspace's test build, one per
# line as `KIND NAME PATH` (KIND: test, bin or example), from cargo's own report of
# `cargo test --workspace --no-run` (the test command's selection: after `cargo test
# --workspace` nothing is rebuilt). A test target is its harness; a binary or an example is
# the program itself, not the harness of its unit tests that `cargo test` builds beside it.
# Used by scripts/test.sh (the conformance suite again, against davinci-mockd) and
# scripts/kmod-test.sh, pci-smoke.sh and pcidev-smoke.sh (the guest and device programs).
#
# DAVINCI_TEST_ARTIFACTS=FILE: a list this script wrote before, printed as it is. The test
# command writes one after its test build and passes it on: cargo would otherwise wait for
# the build directory's lock while a step beside it (clippy) holds it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "${1:-}" in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    "") ;;
    *) echo "scripts/test-artifacts.sh: takes no arguments (got '$1')" >&2; exit 2 ;;
esac
if [ -n "${DAVINCI_TEST_ARTIFACTS:-}" ] && [ -s "$DAVINCI_TEST_ARTIFACTS" ]; then
    cat "$DAVINCI_TEST_ARTIFACTS"
    exit 0
fi
cd "$ROOT"
cargo test --workspace --locked --no-run --quiet --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    kind = m["target"]["kind"][0]
    if m["profile"]["test"] == (kind == "test"):
        print(kind, m["target"]["name"], m["executable"])
'
