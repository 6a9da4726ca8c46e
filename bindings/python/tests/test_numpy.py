"""davinci as numpy expects it: Buffer's buffer protocol, __array_interface__ and DLPack
(zero-copy, keeping the memory alive), dtypes and values in numpy's terms, TypeError and
ValueError naming the argument, texts in Python's words, the default device, host
callbacks."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import davinci
from davinci import task


def ctypes_addr(arr: np.ndarray) -> int:
    return int(arr.__array_interface__["data"][0])


def test_memoryview_and_asarray_are_zero_copy(spec: str) -> None:
    dev = davinci.Device(spec)
    buf = dev.alloc(4096)
    mv = memoryview(buf)
    assert (mv.format, mv.nbytes, mv.readonly, mv.ndim) == ("B", 4096, False, 1)
    assert mv.obj is buf
    arr = np.asarray(buf)
    assert arr.dtype == np.uint8 and arr.shape == (4096,)
    addr = buf.host_hold().address
    assert ctypes_addr(arr) == addr
    assert buf.__array_interface__["data"] == (addr, False)
    # Write through numpy, read through the buffer; and the other way round.
    arr.view(np.float32)[:4] = [1.5, 2.5, 3.5, 4.5]
    assert buf.read_values("f32", count=4) == [1.5, 2.5, 3.5, 4.5]
    buf.write(b"\x07\x00\x00\x00", offset=16)
    assert mv[16] == 7 and arr[16] == 7
    mv[20] = 9
    assert buf.read(1, offset=20) == b"\x09"
    # A device write is seen through all of them.
    s = dev.create_context().create_stream()
    s.submit(task.fill(buf, np.float32(0.5)))
    s.synchronize(10)
    assert (arr.view(np.float32) == 0.5).all()
    assert memoryview(buf).cast("f")[1023] == 0.5
    assert np.frombuffer(buf.view("f32"), np.float32)[0] == 0.5


def test_dlpack_is_zero_copy_on_the_cpu(spec: str) -> None:
    dev = davinci.Device(spec)
    buf = dev.alloc(4096)
    assert buf.__dlpack_device__() == (1, 0)
    t = np.from_dlpack(buf)
    assert t.dtype == np.uint8 and t.shape == (4096,)
    assert ctypes_addr(t) == buf.host_hold().address
    t[:4] = [1, 2, 3, 4]
    assert buf.read(4) == b"\x01\x02\x03\x04"


@pytest.mark.parametrize("how", ["memoryview", "asarray", "from_dlpack", "view"])
def test_views_keep_the_memory_alive(spec: str, how: str) -> None:
    dev = davinci.Device(spec)
    used = dev.memory_used()
    buf = dev.alloc(1 << 16)
    buf.write_values([3, 1, 4, 1, 5], dtype=np.uint32)
    made = {
        "memoryview": lambda: memoryview(buf),
        "asarray": lambda: np.asarray(buf),
        "from_dlpack": lambda: np.from_dlpack(buf),
        "view": lambda: np.frombuffer(buf.view(), np.uint8),
    }[how]()
    ref = weakref.ref(buf)
    buf.close()  # closing the Buffer does not unmap what a view holds
    del buf
    gc.collect()
    data = np.frombuffer(made, np.uint32) if how == "memoryview" else made.view(np.uint32)
    assert data[:5].tolist() == [3, 1, 4, 1, 5]
    assert dev.memory_used() > used
    del data, made
    gc.collect()
    assert ref() is None
    assert dev.memory_used() == used


def test_buffer_is_weakrefable_and_views_name_it(spec: str) -> None:
    dev = davinci.Device(spec)
    buf = dev.alloc(4096)
    r = weakref.ref(buf)
    assert r() is buf
    reg = buf.region(64, 128)
    assert reg.buffer is buf and (reg.start, reg.stop, reg.nbytes) == (64, 128, 64)
    assert buf.view().obj is buf and buf.view("f32").obj is buf
    del buf, reg
    gc.collect()
    assert r() is None
    closed = dev.alloc(64)
    closed.close()
    with pytest.raises(davinci.ClosedError):
        memoryview(closed)


DTYPES = [
    ("f32", np.float32),
    ("float32", np.float32),
    (np.float32, np.float32),
    (np.dtype("float32"), np.float32),
    (np.dtype("<f4"), np.float32),
    ("<f4", np.float32),
    ("i32", np.int32),
    (np.int32, np.int32),
    (np.dtype(np.int32), np.int32),
    ("uint32", np.uint32),
    (np.uint32, np.uint32),
]


@pytest.mark.parametrize("dtype,np_type", DTYPES)
def test_dtypes_in_numpy_terms(dtype: object, np_type: type) -> None:
    dev = davinci.Device("embedded")
    a, b, out = dev.alloc(64), dev.alloc(64), dev.alloc(64)
    x = np.arange(16, dtype=np_type)
    np.asarray(a).view(np_type)[:] = x
    np.asarray(b).view(np_type)[:] = x * 2
    s = dev.create_context().create_stream()
    s.submit(task.fill(out, np_type(0), dtype=dtype))
    s.submit(task.add(out, a, b, dtype=dtype))
    s.submit(task.add(out, out, a, dtype=x.dtype))
    s.synchronize(10)
    assert np.array_equal(np.asarray(out).view(np_type), x * 4)
    assert out.read_values(dtype, count=3) == [0, 4, 8]


@pytest.mark.parametrize(
    "value,pattern",
    [
        (np.float32(0.5), np.float32(0.5).view(np.uint32)),
        (np.float64(0.25), np.float32(0.25).view(np.uint32)),
        (0.75, np.float32(0.75).view(np.uint32)),
        (np.int32(-3), np.int32(-3).view(np.uint32)),
        (np.uint32(4000000000), np.uint32(4000000000)),
        (np.int64(7), np.uint32(7)),
        (-1, np.uint32(0xFFFFFFFF)),
        (5, np.uint32(5)),
    ],
)
def test_fill_values_imply_their_dtype(value: object, pattern: np.uint32) -> None:
    dev = davinci.Device("embedded")
    buf = dev.alloc(64)
    s = dev.create_context().create_stream()
    s.submit(task.fill(buf, value))
    s.synchronize(10)
    assert (np.asarray(buf).view(np.uint32) == pattern).all()


def test_wrong_types_and_values_name_the_argument() -> None:
    dev = davinci.Device("embedded")
    buf = dev.alloc(64)
    with pytest.raises(TypeError, match=r"task\.fill: value: .*str 'x'"):
        task.fill(buf, "x")
    with pytest.raises(TypeError, match=r"task\.fill: value: .*dtype i32 takes an int"):
        task.fill(buf, 1.5, dtype="i32")
    with pytest.raises(ValueError, match=r"value 4294967296 is out of u32's range"):
        task.fill(buf, 2**32, dtype=np.uint32)
    with pytest.raises(ValueError, match="out of float32's range"):
        task.fill(buf, 1e300, dtype="f32")
    with pytest.raises(TypeError, match=r"task\.add: dtype: .* not int"):
        task.add(buf, buf, buf, dtype=5)
    with pytest.raises(ValueError, match="dtype float64 is not supported"):
        task.add(buf, buf, buf, dtype=np.float64)
    with pytest.raises(ValueError, match='dtype "f64" is not a dtype'):
        task.add(buf, buf, buf, dtype="f64")
    with pytest.raises(TypeError, match=r"task\.copy: src: must be a davinci\.Buffer"):
        task.copy(buf, b"abc")
    with pytest.raises(davinci.InvalidArgumentError, match="start is -4: it must be 0 or more"):
        buf.region(-4)
    with pytest.raises(ValueError, match=r"the range \[8, 4\) is inverted"):
        buf.region(8, 4)
    with pytest.raises(ValueError, match=r"the range \[0, 65\) runs past the end"):
        buf.region(0, 65)
    with pytest.raises(TypeError, match="start: must be an int, not str"):
        buf.region("0")
    with pytest.raises(ValueError, match="nbytes is -1"):
        dev.alloc(-1)
    with pytest.raises(ValueError, match="offset is -2"):
        buf.read(4, offset=-2)
    with pytest.raises(TypeError, match=r"values\[1\]"):
        buf.write_values([1.0, "2"])
    with pytest.raises(TypeError, match="spec: must be a str"):
        davinci.Device(b"embedded")  # type: ignore[arg-type]


def test_texts_are_in_pythons_words(spec: str) -> None:
    dev = davinci.Device(spec)
    buf = dev.alloc(64)
    errors = []
    for bad in (
        lambda: buf.read(16, offset=60),
        lambda: buf.write(b"x" * 8, offset=60),
        lambda: task.add(buf, buf, dev.alloc(32)),
        lambda: task.fill(buf.region(0, 6), 1),
        lambda: dev.create_context().create_stream(cmd_entries=3),
        lambda: davinci.MemPool(dev).alloc(64).write(b"x" * 80),
    ):
        with pytest.raises(davinci.DavinciError) as e:
            bad()
        errors.append(e.value)
    for err in errors:
        text = f"{err} {err.op} {err.message}"
        assert "::" not in text and "Included(" not in text and "os error" not in text, text
    assert errors[0].op == "Buffer.read" and errors[5].op == "Buffer.write"
    assert errors[2].op == "task.add"


def test_timeout_text_states_the_callers_timeout() -> None:
    dev = davinci.Device("embedded")
    s = dev.create_context().create_stream()
    s.inject_fault("hang-at=1")
    s.submit(task.nop())
    with pytest.raises(davinci.DeviceTimeoutError) as e:
        s.synchronize(timeout=0.3)
    text = str(e.value)
    assert "within the 0.3 s timeout" in text, text
    assert "ms timeout" not in text and "after" not in text, text


def run_python(code: str, env_device: object) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DAVINCI_DEVICE"}
    if env_device is not None:
        env["DAVINCI_DEVICE"] = str(env_device)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_default_device_follows_the_shared_rule(mockd) -> None:  # type: ignore[no-untyped-def]
    code = "import davinci; d = davinci.Device(); print(d.path, d.source, repr(d), sep='|')"
    path, source, rep = run_python(code, mockd.path(0)).split("|")
    assert (path, source) == (mockd.path(0), "DAVINCI_DEVICE")
    assert "DAVINCI_DEVICE" in rep
    if not os.path.exists("/dev/davinci0") and not os.path.exists("/run/davinci/davinci0.sock"):
        path, source, rep = run_python(code, None).split("|")
        assert (path, source) == ("embedded", "embedded") and "embedded mock" in rep
    named = davinci.Device("embedded")
    assert (named.path, named.source) == ("embedded", "argument")


def test_host_callbacks(spec: str) -> None:
    dev = davinci.Device(spec)
    buf = dev.alloc(4096)
    ctx = dev.create_context()
    s = ctx.create_stream(cmd_entries=16, event_entries=16)
    seen = []

    def after_fill(error: object) -> None:
        # Runs once the fill completed: its result is there, and the stream may be used.
        seen.append((error, buf.read_values("u32", count=1)[0]))
        s.submit(task.fill(buf, 9))

    s.submit(task.fill(buf, 3))
    nop = s.launch_host_func(after_fill)
    assert isinstance(nop, int)
    s.synchronize(10)
    s.synchronize(10)
    assert seen == [(None, 3)] and buf.read_values("u32", count=1) == [9]
    # Exceptions go to sys.unraisablehook; the next callback still runs.
    raised = []
    old, sys.unraisablehook = sys.unraisablehook, raised.append
    try:
        s.launch_host_func(lambda e: 1 / 0)
        s.launch_host_func(lambda e: seen.append("next"))
        s.synchronize(10)
    finally:
        sys.unraisablehook = old
    assert len(raised) == 1 and raised[0].exc_type is ZeroDivisionError
    assert seen[-1] == "next"
    with pytest.raises(TypeError, match="fn: must be callable"):
        ctx.create_stream().launch_host_func(5)  # type: ignore[arg-type]


def test_host_callbacks_of_a_closed_stream_get_the_error() -> None:
    dev = davinci.Device("embedded")
    ctx = dev.create_context()
    seen = []
    for close in (lambda s: s.close(), lambda s: None):
        s = ctx.create_stream()
        s.inject_fault("hang-at=1")  # the next task never completes
        s.submit(task.nop())
        s.launch_host_func(seen.append)
        close(s)
        del s  # closed, or dropped: either way the callback runs, with ECANCELED
        gc.collect()
    assert len(seen) == 2
    for err in seen:
        assert isinstance(err, davinci.TaskError) and err.errno == errno.ECANCELED
        assert "::" not in str(err)
