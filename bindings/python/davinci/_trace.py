"""``davinci.trace``: a timeline of a Python program's device work.

``with davinci.trace("run.json"):`` records, until the block ends, what the device did with
every task of this process's devices (the ones open when the block starts and the ones
opened inside it; or only the ones named: ``davinci.trace("run.json", dev)``) beside what the runtime did
on the host (submits, synchronizes, event waits, pool allocations), on one clock, and writes
it as one Chrome trace-event JSON file for ui.perfetto.dev or chrome://tracing (each device
a process of its own). The file is written also when the block raises. ``summary`` says what
it holds::

    with davinci.trace("run.json") as t:
        ...
    print(t.summary["tasks"], t.summary["lost"], t.summary["clock_bound_ns"])

One trace at a time per process (``DeviceBusyError`` otherwise), and one per tenant on a
device (the device keeps a trace buffer per tenant). docs/runtimes.md, "Profiling a run".
"""

import json
import os

from . import _davinci

__all__ = ["trace"]


class trace:
    """Context manager: ``with davinci.trace(path, *devices) as t: ...``."""

    def __init__(self, path, *devices):
        if path is not None and not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"davinci.trace: path must be a str or os.PathLike, not {type(path).__name__}")
        self.path = None if path is None else os.fspath(path)
        self.devices = list(devices)
        self.summary = None

    def __enter__(self):
        _davinci._trace_begin(self.devices or None)
        return self

    def __exit__(self, exc_type, exc, tb):
        traces, missed = _davinci._trace_end()
        docs = [json.loads(text) for text, _ in traces]
        # Each file counts its times from its own base (otherData.time_base_ns, a
        # CLOCK_MONOTONIC value): one file counts from the earliest.
        bases = [d.get("otherData", {}).get("time_base_ns", 0) for d in docs]
        base = min(bases, default=0)
        events = []
        for doc, b in zip(docs, bases):
            shift = (b - base) / 1000.0
            for e in doc.get("traceEvents", []):
                if shift and "ts" in e:
                    e["ts"] = round(e["ts"] + shift, 3)
                events.append(e)
        other = [d.get("otherData", {}) for d in docs]
        summary = {
            "path": self.path,
            "devices": [f["device"] for _, f in traces],
            "tasks": sum(f["tasks"] for _, f in traces),
            "records": sum(f["records"] for _, f in traces),
            "host_spans": sum(f["host_spans"] for _, f in traces),
            "lost": sum(f["lost"] for _, f in traces),
            "dropped": sum(f["dropped"] for _, f in traces),
            "clock_bound_ns": max((f["clock_bound_ns"] for _, f in traces), default=0),
            "not_traced": list(missed),
        }
        if self.path is not None:
            if len(docs) == 1:
                merged = docs[0]
            else:
                merged = {
                    "traceEvents": events,
                    "otherData": {"time_base_ns": base, "devices": other},
                }
            with open(self.path, "w", encoding="utf-8") as f:
                json.dump(merged, f)
        self.summary = summary
        return False
