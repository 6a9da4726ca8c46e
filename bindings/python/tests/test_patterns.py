"""CUDA/ACL usage patterns a port writes without thinking twice (issue 39), on the embedded
device and on davinci-mockd, each on 16-entry rings and on the default ones: side streams
nobody synchronizes feeding a synchronized one, fire-and-forget FILLs then a synchronize of
each stream, a 100,000-task burst and return, event ping-pong across four streams, a thread
per stream with one shared event, and a stream dropped with waiters pending on its record.
Each asserts the results it computed (the Rust suite, tests/tests/conformance/patterns.rs,
runs the same patterns longer).

None of them may hang: every wait has a timeout, and a watchdog ends the run with every
thread's traceback if a test takes longer than WATCHDOG_SECONDS (pytest-timeout's marker too,
when it is installed)."""

from __future__ import annotations

import faulthandler
import importlib.util
import threading
from typing import Dict, Iterator, List

import numpy as np
import pytest

import davinci
from davinci import task
from conftest import Mockd

WATCHDOG_SECONDS = 120
T = 30  # seconds any one wait may take

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(WATCHDOG_SECONDS)


@pytest.fixture(autouse=True)
def watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


RINGS: Dict[str, Dict[str, int]] = {
    "16-entry": {"cmd_entries": 16, "event_entries": 16},
    "default": {},
}


@pytest.fixture(params=list(RINGS))
def rings(request: pytest.FixtureRequest) -> Dict[str, object]:
    return {**RINGS[request.param], "submit_timeout": T}


def words(buf: davinci.Buffer, dtype: type = np.uint32) -> np.ndarray:
    return np.asarray(buf).view(dtype)


def test_unsynchronized_side_stream_feeds_a_synchronized_one(spec: str, rings: Dict) -> None:
    dev = davinci.Device(spec)
    ctx = dev.create_context()
    s0, s1 = ctx.create_stream(**rings), ctx.create_stream(**rings)
    ev = ctx.create_event()
    buf = dev.alloc(4096)
    for i in range(3000):
        s1.submit(task.fill(buf, i))  # s1: never polled nor synchronized
        s0.wait_recorded(ev.record(s1))
        s0.submit(task.nop())
        s0.synchronize(T)
        if i % 97 == 0 or i == 2999:
            assert words(buf)[[0, 1023]].tolist() == [i, i], f"iteration {i}"
    assert words(buf)[0] == 2999


def test_fire_and_forget_fills_then_a_synchronize_of_each(spec: str, rings: Dict) -> None:
    dev = davinci.Device(spec)
    ctx = dev.create_context()
    streams = [ctx.create_stream(**rings) for _ in range(4)]
    bufs = [dev.alloc(4096) for _ in streams]
    for i in range(200):
        for k, (s, b) in enumerate(zip(streams, bufs)):
            s.submit(task.fill(b, k * 1000 + i))
    for s in streams:
        s.synchronize(T)
    for k, b in enumerate(bufs):
        assert (words(b) == k * 1000 + 199).all(), f"stream {k}"


def submit_burst(ctx: davinci.Context, rings: Dict, acc: davinci.Buffer,
                 one: davinci.Buffer, n: int) -> "tuple[davinci.Stream, davinci.Recorded]":
    """Submits `n` ADDs of 1 to `acc` on a new stream and returns at once, with the stream
    and a record after the burst: no wait, no poll."""
    s = ctx.create_stream(**rings)
    add = task.add(acc, acc, one, dtype=np.int32)
    batch = [add] * 1000
    for _ in range(n // 1000):
        s.submit_batch(batch)
    return s, ctx.create_event().record(s)


def test_a_burst_of_100000_tasks_and_return(spec: str, rings: Dict) -> None:
    dev = davinci.Device(spec)
    ctx = dev.create_context()
    acc, one = dev.alloc(64), dev.alloc(64)
    words(acc, np.int32)[:] = 0
    words(one, np.int32)[:] = 1
    s, done = submit_burst(ctx, rings, acc, one, 100_000)
    done.synchronize(T)  # the host waits for the record, never on the stream
    del s  # dropped without a synchronize
    assert done.query()
    assert (words(acc, np.int32) == 100_000).all()
    # A burst dropped before it ran is discarded, and what it held let go: no hang either.
    s, _ = submit_burst(ctx, rings, acc, one, 10_000)
    s.close()
    s2 = ctx.create_stream(**rings)
    s2.submit(task.fill(acc, 5))
    s2.synchronize(T)
    assert (words(acc) == 5).all()


def test_event_ping_pong_across_four_streams(spec: str, rings: Dict) -> None:
    dev = davinci.Device(spec)
    ctx = dev.create_context()
    streams = [ctx.create_stream(**rings) for _ in range(4)]
    events = [ctx.create_event() for _ in streams]
    acc, one = dev.alloc(64), dev.alloc(64)
    words(acc, np.int32)[:] = 0
    words(one, np.int32)[:] = 1
    add = task.add(acc, acc, one, dtype="i32")
    rounds = 10_000
    last = events[3].record(streams[3])
    for r in range(rounds):
        k = r % 4
        streams[k].wait_recorded(last)
        streams[k].submit(add)
        last = events[k].record(streams[k])
    last.synchronize(T)
    for s in streams:
        s.synchronize(T)
    assert (words(acc, np.int32) == rounds).all()


def test_a_thread_per_stream_with_one_shared_event(spec: str, rings: Dict) -> None:
    dev = davinci.Device(spec)
    ctx = dev.create_context()
    shared = ctx.create_event()
    rounds = 4 * 16 + 5
    src = dev.alloc(4 * rounds)
    outs = [dev.alloc(4 * rounds) for _ in range(3)]
    tokens: List[List[davinci.Recorded]] = [[] for _ in outs]
    cond = threading.Condition()
    failures: List[BaseException] = []

    def consumer(k: int) -> None:
        try:
            s = ctx.create_stream(**rings)
            for i in range(rounds):
                with cond:
                    ok = cond.wait_for(lambda: len(tokens[k]) > i, timeout=T)
                    assert ok, f"consumer {k}: round {i} never came"
                    token = tokens[k][i]
                s.wait_recorded(token)
                s.submit(task.copy(outs[k].region(4 * i, 4 * i + 4), src.region(4 * i, 4 * i + 4)))
            s.synchronize(T)
        except BaseException as e:  # reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=consumer, args=(k,)) for k in range(len(outs))]
    for t in threads:
        t.start()
    producer = ctx.create_stream(**rings)  # never synchronized until the end
    for i in range(rounds):
        producer.submit(task.fill(src.region(4 * i, 4 * i + 4), 0x5EED0000 | i))
        r = shared.record(producer)
        with cond:
            for q in tokens:
                q.append(r)
            cond.notify_all()
    for t in threads:
        t.join(T)
    producer.synchronize(T)
    assert not failures, failures
    want = [0x5EED0000 | i for i in range(rounds)]
    for k, out in enumerate(outs):
        assert words(out).tolist() == want, f"consumer {k}"


@pytest.fixture(params=["embedded", "mockd"])
def hang_first_stream(request: pytest.FixtureRequest) -> Iterator[str]:
    """A device whose next new stream hangs on its first task (its record never runs):
    the embedded device (armed by the test), or a daemon that arms the first stream."""
    if request.param == "embedded":
        yield "embedded"
        return
    d = Mockd("--inject", "hang-at=1@streams=1")
    yield d.path(0)
    d.stop()


def test_a_stream_dropped_with_waiters_pending_stops_them_with_a_reason(
    hang_first_stream: str, rings: Dict
) -> None:
    spec = hang_first_stream
    dev = davinci.Device(spec)
    ctx = dev.create_context()
    producer = ctx.create_stream(**rings)
    if spec == "embedded":
        producer.inject_fault("hang-at=1")
    producer.submit(task.nop())  # hangs: the record behind it provably has not run
    ready = ctx.create_event().record(producer)
    out = dev.alloc(4)
    out.write_values([7], dtype="u32")
    consumers = [ctx.create_stream(**rings) for _ in range(2)]
    for c in consumers:
        c.wait_recorded(ready)
        c.submit(task.fill(out, 0xDEAD))
    producer.close()
    # The record will never run: each waiter's stream stops (EIO) rather than hang, and the
    # host's wait for the record fails at once too.
    for c in consumers:
        with pytest.raises(davinci.TaskError) as e:
            c.synchronize(T)
        assert e.value.errno == 5, e.value  # EIO
    with pytest.raises(davinci.DavinciError) as e:
        ready.synchronize(T)
    assert e.value.errno == 5, e.value
    assert out.read_values("u32") == [7], "nothing ran after the wait"
    fresh = ctx.create_stream(**rings)
    fresh.submit(task.fill(out, 1))
    fresh.synchronize(T)
    assert out.read_values("u32") == [1]
