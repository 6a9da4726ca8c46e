"""The davinci package against the embedded device and a real davinci-mockd: the quick start
in Python, zero-copy views and their lifetime, errors as exceptions, pools, events, the GIL
released while waiting, export/import between clients, and the type stubs."""

from __future__ import annotations

import ast
import errno
import gc
import pathlib
import pickle
import threading

import numpy as np
import pytest

import davinci
from davinci import task


def test_quickstart_two_streams_ordered_by_an_event(spec: str) -> None:
    with davinci.Device(spec) as dev:
        pool = davinci.MemPool(dev)
        a, b, out = pool.alloc(4096), pool.alloc(4096), pool.alloc(4096)
        x = np.arange(1024, dtype=np.float32)
        a.write(x)
        ctx = dev.create_context()
        producer, consumer = ctx.create_stream(), ctx.create_stream()
        filled = ctx.create_event()
        producer.submit(task.fill(b, 0.5))
        ready = filled.record(producer)
        assert ready.value == 1
        consumer.wait_recorded(ready)
        consumer.submit(task.add(out, a, b))
        del b  # safe: the queued add holds it
        consumer.synchronize(timeout=10)
        np.testing.assert_array_equal(np.frombuffer(out.read(), np.float32), x + 0.5)
        assert out.read_values("f32", 2) == [0.5, 1.5]


def test_views_are_zero_copy_and_keep_the_buffer_alive(spec: str) -> None:
    dev = davinci.Device(spec)
    gc.collect()
    buf = dev.alloc(1 << 16)
    view = buf.view()
    assert (view.format, view.nbytes, view.readonly) == ("B", 1 << 16, False)
    arr = np.frombuffer(buf.view(), dtype=np.float32)
    assert buf.pending_uses == 2, "each view holds the buffer"
    # The same memory: a write through the shim shows in the array, and the reverse.
    buf.write_values([1.5, 2.5], "f32")
    assert arr[:2].tolist() == [1.5, 2.5]
    arr[2] = 7.0
    assert buf.read_values("f32", 1, offset=8) == [7.0]
    assert view.cast("f")[2] == 7.0
    typed = buf.view("i32")
    assert typed.format == "i" and len(typed) == (1 << 14)
    # A device write lands in the view.
    s = dev.create_context().create_stream()
    s.submit(task.fill(buf.region(16, 32), 9, dtype="u32"))
    s.synchronize(10)
    assert np.frombuffer(view, np.uint32)[4:8].tolist() == [9, 9, 9, 9]
    del typed
    # The buffer lives while a view does, though its object is gone.
    used = dev.memory_used()
    del buf
    gc.collect()
    assert dev.memory_used() == used
    part = view[8:12]  # a slice keeps it too
    del view, arr
    gc.collect()
    assert dev.memory_used() == used
    assert bytes(part) == np.float32(7.0).tobytes()
    del part
    gc.collect()
    assert dev.memory_used() < used


def test_host_errors_are_exceptions_with_errno_op_and_message(spec: str) -> None:
    dev = davinci.Device(spec)
    a, small = dev.alloc(64), dev.alloc(32)
    with pytest.raises(davinci.InvalidArgumentError) as e:
        task.add(a, a, small)
    err = e.value
    assert isinstance(err, OSError) and isinstance(err, ValueError)
    assert isinstance(err, davinci.DavinciError)
    assert (err.errno, err.op, err.operand) == (errno.EINVAL, "task.add", "task.add")
    assert "a (src0)" in err.message or "b (src1)" in err.message
    assert str(err).startswith("task.add failed: EINVAL: ")
    with pytest.raises(davinci.InvalidArgumentError) as e:
        a.read(16, offset=60)
    assert e.value.errno == errno.ERANGE
    assert e.value.op == "Buffer.read" and "::" not in str(e.value)
    with pytest.raises(davinci.InvalidArgumentError):
        task.fill(a.region(0, 6), 1)
    with pytest.raises(davinci.InvalidArgumentError):
        a.region(0, 65)
    with pytest.raises(davinci.InvalidArgumentError):
        task.add(a, a, a, dtype="f64")
    with pytest.raises(davinci.InvalidArgumentError):
        dev.create_context().create_stream().synchronize(timeout=-1)
    # Pickled (multiprocessing sends it back): all of it survives.
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.errno, back.op, back.message, str(back)) == (
        type(err), err.errno, err.op, err.message, str(err),
    )


def test_opening_errors() -> None:
    with pytest.raises(davinci.InvalidArgumentError) as e:
        davinci.Device("davinci0")
    assert "is not a device path" in e.value.message
    with pytest.raises(davinci.DeviceNotFoundError) as e:
        davinci.Device("mock:/nonexistent/davinci0.sock")
    assert e.value.errno == errno.ENODEV


def test_device_from_the_environment(monkeypatch: pytest.MonkeyPatch, mockd) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("DAVINCI_DEVICE", mockd.path(0))
    assert davinci.Device().spec == mockd.path(0)
    monkeypatch.delenv("DAVINCI_DEVICE")
    assert davinci.Device().spec == "embedded"


def test_closed_objects_raise_closed_error(spec: str) -> None:
    with davinci.Device(spec) as dev:
        with dev.create_context() as ctx:
            with ctx.create_stream() as s, dev.alloc(64) as buf:
                s.submit(task.fill(buf, 1))
            assert s.closed and buf.closed
        assert ctx.closed
    assert dev.closed
    for call in (lambda: dev.alloc(64), lambda: s.submit(task.nop()), lambda: buf.read(),
                 lambda: ctx.create_event(), lambda: s.synchronize(1)):
        with pytest.raises(davinci.ClosedError) as e:
            call()
        assert e.value.errno == errno.EBADF and isinstance(e.value, ValueError)


def test_batches_poll_and_user_data(spec: str) -> None:
    dev = davinci.Device(spec)
    buf = dev.alloc(256)
    s = dev.create_context().create_stream(cmd_entries=64, event_entries=128, submit_timeout=5)
    first = s.submit_batch([
        task.fill(buf, 0xABCD, user_data=1),
        task.copy(buf.region(128, 192), buf.region(0, 64), user_data=2),
        task.nop(3),
    ])
    s.synchronize(10)
    done = s.poll()
    assert [c.user_data for c in done] == [1, 2, 3]
    assert [c.task for c in done] == [first, first + 1, first + 2]
    assert [c.opcode for c in done] == ["FILL", "COPY", "NOP"]
    assert all(c.ok and c.errno is None for c in done)
    assert buf.read_values("u32", 2, offset=128) == [0xABCD, 0xABCD]
    t = task.add(buf.region(0, 64), buf.region(64, 128), buf.region(128, 192), dtype="i32")
    assert (t.opcode, t.with_user_data(5).user_data) == ("ADD", 5)


def test_events_elapsed_and_queries(spec: str) -> None:
    dev = davinci.Device(spec)
    ctx = dev.create_context()
    s = ctx.create_stream()
    ev = ctx.create_event()
    big = dev.alloc(1 << 20)
    start = ev.record(s)
    s.submit(task.fill(big, 3))
    end = s.record(ev)
    assert (start.value, end.value, ev.recorded) == (1, 2, 2)
    end.synchronize(10)
    ev.synchronize(10)
    assert end.query() and ev.query() and ev.value() == 2
    s.synchronize(10)  # reaps the records: their times are known
    assert start.elapsed(end) >= 0.0
    assert start.timestamp_ns is not None


def test_temporary_events_live_while_queued_tasks_or_tokens_name_them(spec: str) -> None:
    dev = davinci.Device(spec)
    a, b, out = dev.alloc(1 << 20), dev.alloc(1 << 20), dev.alloc(1 << 20)
    ctx = dev.create_context()
    producer, consumer = ctx.create_stream(), ctx.create_stream()
    producer.submit(task.fill(b, 0.5))
    # The Event object is gone at once; its queued record and the wait still run.
    consumer.wait_recorded(ctx.create_event().record(producer))
    gc.collect()
    consumer.submit(task.add(out, a, b))
    consumer.synchronize(10)
    producer.synchronize(10)
    assert out.read_values("f32", 2, offset=4096) == [0.5, 0.5]
    token = ctx.create_event().record(producer)
    gc.collect()
    token.synchronize(10)
    consumer.wait_event(ev := ctx.create_event())
    del ev
    gc.collect()
    consumer.synchronize(10)


def test_a_failed_task_raises_task_error() -> None:
    dev = davinci.Device("embedded")
    buf = dev.alloc(64)
    s = dev.create_context().create_stream()
    s.inject_fault("error-at=2:EIO")
    s.submit(task.fill(buf, 1))
    s.submit(task.fill(buf, 2, user_data=42))
    with pytest.raises(davinci.TaskError) as e:
        s.synchronize(10)
    assert e.value.errno == errno.EIO and "user_data=0x2a" in e.value.message
    done = s.poll()
    assert [c.ok for c in done] == [True, False]
    with pytest.raises(davinci.TaskError):
        done[1].check()
    state = s.error_state()
    assert state is not None and state[0] == errno.EIO
    with pytest.raises(davinci.InvalidArgumentError):
        s.inject_fault("explode-at=1")


def test_waits_time_out_as_timeout_error() -> None:
    dev = davinci.Device("embedded")
    buf = dev.alloc(64)
    ctx = dev.create_context()
    s, ev = ctx.create_stream(), ctx.create_event()
    s.inject_fault("hang-at=1")
    s.submit(task.fill(buf, 1))
    rec = ev.record(s)
    for wait in (lambda: s.synchronize(0.2), lambda: ev.synchronize(0.1),
                 lambda: rec.synchronize(0), lambda: s.synchronize(0)):
        with pytest.raises(davinci.DeviceTimeoutError) as e:
            wait()
        assert isinstance(e.value, TimeoutError) and e.value.errno == errno.ETIMEDOUT
    assert not rec.query()


def test_blocking_waits_release_the_gil() -> None:
    dev = davinci.Device("embedded")
    s = dev.create_context().create_stream()
    s.inject_fault("hang-at=1")
    s.submit(task.fill(dev.alloc(64), 1))
    started = threading.Event()
    outcome: list = []

    def waiter() -> None:
        started.set()
        try:
            s.synchronize(timeout=60)
        except davinci.ClosedError as e:
            outcome.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    # This thread runs Python while the other waits in synchronize: it holds no GIL.
    total = sum(i * i for i in range(200_000))
    assert total > 0 and t.is_alive()
    s.close()  # ends the wait: the stream is gone
    t.join(60)
    assert not t.is_alive() and len(outcome) == 1
    assert "closed" in outcome[0].message


def test_pools_regions_and_views(spec: str) -> None:
    dev = davinci.Device(spec)
    pool = davinci.MemPool(dev, chunk_size=1 << 16, max_bytes=1 << 20)
    blocks = [pool.alloc(1000) for _ in range(8)]
    st = pool.stats()
    assert (st["blocks"], st["chunks"]) == (8, 1)
    s = dev.create_context().create_stream()
    for i, b in enumerate(blocks):
        s.submit(task.fill(b.region(0, 996), i, dtype="i32"))
    s.synchronize(10)
    for i, b in enumerate(blocks):
        assert np.frombuffer(b.view(), np.int32)[:249].tolist() == [i] * 249
    with pytest.raises(davinci.DeviceMemoryError) as e:
        pool.alloc(2 << 20)
    assert e.value.errno == errno.ENOMEM
    with pytest.raises(davinci.InvalidArgumentError):
        blocks[0].export()
    del blocks, b
    gc.collect()
    assert pool.stats()["blocks"] == 0 and pool.trim() == 1


def test_export_and_import_between_clients(mockd) -> None:  # type: ignore[no-untyped-def]
    a, b = davinci.Device(mockd.path(0)), davinci.Device(mockd.path(0))
    assert a.share_mode()[0] == "shared"
    mine = a.alloc(4096)
    token = mine.export()
    assert len(token) == 16
    theirs = b.import_buffer(token)
    assert theirs.is_imported and theirs.dev_addr == mine.dev_addr
    s = b.create_context().create_stream()
    s.submit(task.fill(theirs, 7))
    s.synchronize(10)
    assert np.frombuffer(mine.view(), np.uint32)[:2].tolist() == [7, 7]
    assert not theirs.is_revoked() and not mine.is_revoked()
    mine.close()  # the exporter's free revokes the import
    assert theirs.is_revoked()
    with pytest.raises(davinci.DeviceNotFoundError):
        b.import_buffer("00000000deadbeef")
    with pytest.raises(davinci.InvalidArgumentError):
        b.import_buffer("not a token")


def test_export_fds_are_the_kernels_and_refused_here_with_why(mockd) -> None:  # type: ignore[no-untyped-def]
    # davinci-mockd exports by token only: an fd export says so; a number that is not an
    # open descriptor is EBADF; a descriptor that is not an export fd is refused.
    a = davinci.Device(mockd.path(0))
    mine = a.alloc(4096)
    with pytest.raises(davinci.InvalidArgumentError) as e:
        mine.export_fd()
    assert e.value.errno == errno.EINVAL and "no export fds" in str(e.value)
    with pytest.raises(davinci.ClosedError) as bad:
        a.import_fd(1 << 20)
    assert bad.value.errno == errno.EBADF and "not an open descriptor" in str(bad.value)
    with open("/dev/null", "rb") as f, pytest.raises(davinci.InvalidArgumentError):
        a.import_fd(f.fileno())
    assert len(mine.export()) == 16  # the token path as before


def test_device_synchronize_waits_for_every_stream() -> None:
    dev = davinci.Device("embedded")
    ctx = dev.create_context()
    streams = [ctx.create_stream(cmd_entries=16, event_entries=16) for _ in range(3)]
    bufs = [dev.alloc(4096) for _ in streams]
    for i in range(200):
        for s, b in zip(streams, bufs):
            s.submit(task.fill(b, i))  # fire and forget: never polled
    dev.synchronize(timeout=20)
    for b in bufs:
        assert np.frombuffer(b.view(), np.uint32).tolist() == [199] * 1024
    with pytest.raises(davinci.InvalidArgumentError):
        dev.synchronize(timeout=-1)


def test_an_unpolled_stream_keeps_a_bounded_backlog() -> None:
    dev = davinci.Device("embedded")
    s = dev.create_context().create_stream(cmd_entries=16, event_entries=16, backlog_limit=10)
    buf = dev.alloc(4)
    for i in range(50):
        s.submit(task.fill(buf, i))
        assert s.pending_tasks <= 16
    s.synchronize(10)
    assert len(s.poll()) == 10 and s.discarded == 40
    assert np.frombuffer(buf.view(), np.uint32).tolist() == [49]


def test_the_stubs_name_every_public_name_of_the_native_module() -> None:
    stub = pathlib.Path(davinci.__file__).with_name("_davinci.pyi")
    tree = ast.parse(stub.read_text())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            stubbed.add(node.name)
            if isinstance(node, ast.ClassDef):
                members = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                cls = getattr(davinci._davinci, node.name)
                public = {m for m in dir(cls) if not m.startswith("_")}
                assert public <= members, f"{node.name}: {public - members} not in the stubs"
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
    native = {n for n in dir(davinci._davinci) if not n.startswith("__") or n == "__version__"}
    assert native - stubbed == set()
    assert (pathlib.Path(davinci.__file__).parent / "py.typed").exists()
