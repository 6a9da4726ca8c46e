"""``with davinci.trace("run.json"):`` (issue 46): a Python program's timeline, on the embedded
device and on davinci-mockd: every task the device ran (a FILL, an event recorded on one
stream and waited for on another, NOPs) once on its stream's track, the wait ending after the
record, host spans beside them, nothing lost, the clock bound stated; a device opened inside
the block is traced too; and the misuses (a trace inside a trace, a bad path)."""

from __future__ import annotations

import json

import pytest

import davinci
from davinci import task

from conftest import Mockd


def _work(dev: davinci.Device) -> None:
    ctx = dev.create_context()
    a, b = ctx.create_stream(), ctx.create_stream()
    buf = dev.alloc(1 << 16)
    done = ctx.create_event()
    a.submit(task.fill(buf, 7, user_data=1))
    b.wait_recorded(done.record(a))
    for i in range(5):
        b.submit(task.nop(100 + i))
    a.synchronize(timeout=10)
    b.synchronize(timeout=10)


def test_a_block_is_traced_into_one_file(spec: str, tmp_path) -> None:
    dev = davinci.Device(spec)
    path = tmp_path / "run.json"
    with davinci.trace(path, dev) as t:
        _work(dev)
    s = t.summary
    # FILL, EVENT_RECORD, EVENT_WAIT, five NOPs.
    assert s["tasks"] == 8, s
    assert (s["lost"], s["dropped"], s["not_traced"]) == (0, 0, []), s
    assert 0 < s["clock_bound_ns"] < 1_000_000, s
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    tasks = [e for e in events if e.get("ph") == "X" and e.get("cat") == "task"]
    assert sum(e["args"].get("tasks", 1) for e in tasks) == 8
    names = {e["name"] for e in tasks}
    assert {"FILL", "EVENT_RECORD", "EVENT_WAIT", "NOP"} <= names, names
    for e in tasks:
        assert e["dur"] >= 0
    record = next(e for e in tasks if e["name"] == "EVENT_RECORD")
    wait = next(e for e in tasks if e["name"] == "EVENT_WAIT")
    assert wait["ts"] + wait["dur"] >= record["ts"] + record["dur"]
    assert record["tid"] != wait["tid"], "each stream its own track"
    flows = [e for e in events if e.get("ph") in ("s", "f")]
    assert {e["ph"] for e in flows} == {"s", "f"}, "an arrow from the record to its wait"
    spans = [e for e in events if e.get("ph") == "X" and e.get("cat") != "task"
             and e.get("cat") != "chunk"]
    assert any("submit" in e["name"] for e in spans), {e["name"] for e in spans}
    assert any("synchronize" in e["name"] for e in spans)
    dev.close()


def test_devices_opened_inside_the_block_are_traced(tmp_path) -> None:
    d = Mockd("--devices", "2")
    path = tmp_path / "two.json"
    try:
        with davinci.trace(path) as t:
            first = davinci.Device(d.path(0))
            second = davinci.Device(d.path(1))
            _work(first)
            _work(second)
        # Every open device of the process is traced: others the suite left open add theirs.
        assert t.summary["tasks"] >= 16, t.summary
        for n in (0, 1):
            sock = f"{d.dir}/davinci{n}.sock"
            assert any(sock in name for name in t.summary["devices"]), t.summary
        doc = json.loads(path.read_text())
        processes = {e["args"]["name"] for e in doc["traceEvents"]
                     if e.get("ph") == "M" and e.get("name") == "process_name"}
        assert {"davinci0 device", "davinci1 device"} <= processes, processes
        first.close()
        second.close()
    finally:
        d.stop()


def test_misuse_says_why(tmp_path) -> None:
    dev = davinci.Device("embedded")
    with davinci.trace(None, dev):
        with pytest.raises(davinci.DeviceBusyError):
            with davinci.trace(None, dev):
                pass
    with pytest.raises(TypeError):
        davinci.trace(42)
    # The file cannot be written: the trace is stopped all the same, and the next one works.
    with pytest.raises(OSError):
        with davinci.trace(tmp_path / "missing" / "t.json", dev):
            _work(dev)
    with davinci.trace(None, dev) as t:
        _work(dev)
    assert t.summary["tasks"] == 8
    dev.close()
