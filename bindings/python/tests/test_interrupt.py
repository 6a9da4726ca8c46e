"""Ctrl-C interrupts a wait: a Python process stuck in a long synchronize or event wait (a
task that never completes) gets SIGINT and ends with KeyboardInterrupt, on the embedded
device (an injected hang) and on davinci-mockd (a daemon started with --inject hang-at=1)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from conftest import Mockd

CHILD = r"""
import signal, sys, davinci
from davinci import task
# A shell that starts jobs in the background without job control (CI runners) leaves SIGINT
# ignored, and Python then installs no handler: restore Ctrl-C's, as an interactive run has.
signal.signal(signal.SIGINT, signal.default_int_handler)
spec, wait = sys.argv[1], sys.argv[2]
dev = davinci.Device(spec)
ctx = dev.create_context()
s, ev = ctx.create_stream(), ctx.create_event()
if spec == "embedded":
    s.inject_fault("hang-at=1")
s.submit(task.fill(dev.alloc(64), 1))
rec = ev.record(s)
try:
    print("waiting", flush=True)
    {"stream": s.synchronize, "event": ev.synchronize, "recorded": rec.synchronize}[wait]()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
print("the wait returned", flush=True)
"""


@pytest.fixture(scope="module")
def hanging_mockd():  # type: ignore[no-untyped-def]
    d = Mockd("--inject", "hang-at=1")
    yield d
    d.stop()


@pytest.mark.parametrize("wait", ["stream", "event", "recorded"])
@pytest.mark.parametrize("backend", ["embedded", "mockd"])
def test_sigint_interrupts_a_wait(backend: str, wait: str, request: pytest.FixtureRequest) -> None:
    spec = "embedded" if backend == "embedded" else request.getfixturevalue("hanging_mockd").path(0)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, spec, wait],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        time.sleep(0.3)  # into the wait (not a measurement: any moment in it will do)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "interrupted" in out, (out, err)
    assert "KeyboardInterrupt" in err
    assert child.returncode != 0
