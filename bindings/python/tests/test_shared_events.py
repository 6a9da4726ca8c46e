"""Events shared between clients (ABI 1.5): a consumer's stream waits on the device for the
value a producer's stream records, through Event.export / Context.import_event /
Stream.wait_imported, and the exporter's end cancels the waits. Two clients of one shared
davinci-mockd device (two processes use the same calls: the token is a string to send)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import davinci
from davinci import task


def test_a_consumer_waits_on_the_device_for_the_producers_record(mockd) -> None:
    prod, cons = davinci.Device(mockd.path(0)), davinci.Device(mockd.path(0))
    pctx, cctx = prod.create_context(), cons.create_context()
    ready = pctx.create_event()
    token = ready.export()
    assert isinstance(token, str) and ready.export() == token
    imp = cctx.import_event(token)
    assert imp.value() == 0 and not imp.query(1)

    src = prod.alloc(4096)
    theirs = cons.import_buffer(src.export())
    out = cons.alloc(4096)
    cs = cctx.create_stream()
    cs.wait_imported(imp, 1)
    cs.submit(task.copy(out, theirs))
    time.sleep(0.05)
    assert not imp.query(1), "nothing recorded yet"

    ps = pctx.create_stream()
    ps.submit(task.fill(src, 0x01020304))
    ready.record(ps)
    cs.synchronize(timeout=10)
    assert (np.asarray(out).view(np.uint32) == 0x01020304).all()
    imp.synchronize(1, timeout=10)
    with pytest.raises(davinci.DeviceTimeoutError):
        imp.synchronize(2, timeout=0.02)

    # The exporter's end: the import's waits are cancelled.
    ps.synchronize(timeout=10)
    ready.close()
    del ready
    with pytest.raises(davinci.DavinciError) as e:
        imp.synchronize(2, timeout=10)
    assert davinci.errno_name(e.value.errno) == "ECANCELED"


def test_tokens_are_checked(mockd) -> None:
    dev = davinci.Device(mockd.path(0))
    ctx = dev.create_context()
    ev = ctx.create_event()
    with pytest.raises(davinci.DavinciError) as e:
        ctx.import_event(ev.export())
    assert davinci.errno_name(e.value.errno) == "EINVAL"
    with pytest.raises(davinci.DavinciError) as e:
        ctx.import_event(12345)
    assert davinci.errno_name(e.value.errno) == "ENOENT"
    with pytest.raises(TypeError):
        ctx.import_event(1.5)  # type: ignore[arg-type]
