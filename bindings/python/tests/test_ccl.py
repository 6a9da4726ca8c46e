"""davinci.ccl across processes: 2, 4 and 8 ranks, each a Python process with its own device
of one davinci-mockd, run all-reduce, all-gather, reduce-scatter and broadcast on every dtype
(f32, f16, bf16, i32) from 4 bytes to 64 MiB, then sends and receives (alone and in groups),
and each rank checks its results against numpy (exact for i32; within the type's rounding
for floats, every rank the same bits)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import davinci.ccl as ccl
from conftest import Mockd

RANK = textwrap.dedent(
    """
    import sys
    import numpy as np
    import davinci, davinci.ccl as ccl

    uid, n, r, sock_dir, sizes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    comm = ccl.Comm(uid, n, r, timeout=300)
    dev = davinci.Device(f"mock:{sock_dir}/davinci{r}.sock")
    s = dev.create_context().create_stream()

    def data(rank, count, shift=0, start=0):
        # Small integers: exact in every type, sums of 8 too (f16 and bf16 round them); f32
        # holds them exactly, so the references are f32 (half the memory of f64 at 64 MiB).
        return ((np.arange(start, start + count, dtype=np.int64) * 17 + rank * 131 + shift) % 29 - 14).astype(np.float32)

    def put(dev, values, dt):
        raw = values if dt == "bf16" else values.astype(np.dtype(dt))
        if dt == "bf16":  # bf16: the high half of f32 (these values are exact in it)
            raw = (raw.view(np.uint32) >> 16).astype(np.uint16)
        b = dev.alloc(max(raw.nbytes, 1))
        np.asarray(b)[: raw.nbytes] = raw.view(np.uint8)
        return b

    def get(buf, count, dt, first=0):
        item = 2 if dt == "bf16" else np.dtype(dt).itemsize
        raw = np.asarray(buf)[first * item : (first + count) * item]
        if dt == "bf16":
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return raw.view(np.dtype(dt)).astype(np.float32)

    NP = {"f32": "float32", "f16": "float16", "i32": "int32", "bf16": "bf16"}
    TOL = {"f32": 0, "i32": 0, "f16": 4 / 1024, "bf16": 4 / 128}
    def check(got, want, what):
        tol = TOL[dt]
        bad = np.abs(got - want) > tol * np.maximum(np.abs(want), 1)
        assert not bad.any(), f"rank {r}: {what}: {int(bad.sum())} of {len(want)} wrong, first {np.argmax(bad)}: got {got[np.argmax(bad)]}, want {want[np.argmax(bad)]}"

    small, large = sizes.split(";")
    cases = [(int(z), dt) for z in (small + "," + large).split(",") if z for dt in ("f32", "f16", "bf16", "i32")]
    for size, dt in cases:
        # nccl-tests' sizes: all-reduce and broadcast move `size` bytes per rank; all-gather
        # gathers `size` bytes in all, reduce-scatter scatters `size` bytes.
        item = 2 if dt in ("f16", "bf16") else 4
        count = max(size // item, 1)
        part = max(count // n, 1)
        npdt = NP[dt]
        what = f"{n} ranks, {count} {dt}"
        send, recv = put(dev, data(r, count), npdt), dev.alloc(count * item)
        total, most = data(0, count), data(0, count)
        for k in range(1, n):
            v = data(k, count)
            total += v
            np.maximum(most, v, out=most)
        comm.all_reduce(send, recv, s, dtype=dt, op="sum")
        check(get(recv, count, npdt), total, "all_reduce " + what)
        comm.all_reduce(send, recv, s, dtype=dt, op="max")
        check(get(recv, count, npdt), most, "all_reduce max " + what)
        del total, most
        big = dev.alloc(n * part * item)
        comm.all_gather(send, big, s, dtype=dt, count=part)
        for k in range(n):
            check(get(big, part, npdt, first=k * part), data(k, part), f"all_gather block {k} " + what)
        big.close()
        blocks = put(dev, data(r, n * part, shift=5), npdt)
        comm.reduce_scatter(blocks, recv, s, dtype=dt, op="sum", count=part)
        want = data(0, part, shift=5, start=r * part)
        for k in range(1, n):
            want += data(k, part, shift=5, start=r * part)
        check(get(recv, part, npdt), want, "reduce_scatter " + what)
        blocks.close()
        comm.broadcast(send, recv, s, dtype=dt, root=n - 1)
        check(get(recv, count, npdt), data(n - 1, count), "broadcast " + what)
        for b in (send, recv):
            b.close()
    # Point-to-point: a ring shift in a group, then rank 0 sends to each rank alone.
    for count in (1, 1000, 1_300_000):
        mine = (np.arange(count, dtype=np.int32) + r * 1_000_000)
        a, b = dev.alloc(max(4 * count, 4)), dev.alloc(max(4 * count, 4))
        np.asarray(a)[: 4 * count] = mine.view(np.uint8)
        with comm.group(s) as g:
            g.send(a, (r + 1) % n, dtype="i32", count=count)
            g.recv(b, (r - 1) % n, dtype="i32", count=count)
        prev = np.arange(count, dtype=np.int32) + ((r - 1) % n) * 1_000_000
        assert (np.asarray(b)[: 4 * count].view(np.int32) == prev).all(), f"rank {r}: ring shift of {count}"
        if r == 0:
            for k in range(1, n):
                comm.send(a, k, s, dtype="i32", count=count)
        else:
            comm.recv(b, 0, s, dtype="i32", count=count)
            assert (np.asarray(b)[: 4 * count].view(np.int32) == np.arange(count, dtype=np.int32)).all()
    print("ok", flush=True)
    """
)


def run_ranks(d: Mockd, n: int, sizes: str) -> None:
    uid = ccl.unique_id()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, uid, str(n), str(r), d.dir, sizes],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(n)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and out.strip().endswith("ok"), f"rank {r} of {n}:\n{out}"


@pytest.fixture(scope="module")
def eight() -> Mockd:
    d = Mockd("--devices", "8", "--memory", "512M")
    yield d
    d.stop()


@pytest.mark.parametrize("n", [2, 4, 8])
def test_collectives_match_numpy_across_processes(eight: Mockd, n: int) -> None:
    # Every dtype at 4 bytes, an odd size, past the one-shot path, across several staging
    # chunks (5 MB) and at 64 MiB.
    sizes = "4,4100,70000;5000000,67108864"
    run_ranks(eight, n, sizes)


ORDERED = textwrap.dedent(
    """
    import sys
    import numpy as np
    import davinci, davinci.ccl as ccl

    uid, n, r, sock_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    comm = ccl.Comm(uid, n, r, timeout=120)
    dev = davinci.Device(f"mock:{sock_dir}/davinci{r}.sock")
    ctx = dev.create_context()
    s = ctx.create_stream()
    comm.stream_ordered(ctx)
    assert comm.is_stream_ordered
    count = 300_000
    send, recv, out = dev.alloc(4 * count), dev.alloc(4 * count), dev.alloc(4 * count)
    for round in range(3):
        # Queued, none of it run yet: the fill, the all-reduce after it, the copy after that.
        s.submit(davinci.task.fill(send, (r + 1) * 10 + round))
        comm.all_reduce(send, recv, s, dtype="i32", op="sum")
        s.submit(davinci.task.copy(out, recv))
        s.synchronize(timeout=60)
        want = sum((k + 1) * 10 + round for k in range(n))
        got = np.asarray(out).view(np.int32)
        assert (got == want).all(), f"rank {r} round {round}: {int((got != want).sum())} wrong"
    # A ring shift as one group: every rank sends first.
    s.submit(davinci.task.fill(send, 1000 + r))
    with comm.group(s) as g:
        g.send(send, (r + 1) % n, dtype="i32")
        g.recv(recv, (r - 1) % n, dtype="i32")
    s.submit(davinci.task.copy(out, recv))
    s.synchronize(timeout=60)
    assert (np.asarray(out).view(np.int32) == 1000 + (r - 1) % n).all()
    comm.synchronize()
    try:
        comm.barrier()
        raise AssertionError("a barrier on a stream-ordered communicator")
    except davinci.DavinciError as e:
        assert "stream-ordered" in str(e), e
    comm.close()
    print("ok", flush=True)
    """
)


def test_stream_ordered_calls_run_in_stream_order_across_processes(eight: Mockd) -> None:
    uid = ccl.unique_id()
    n = 3
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ORDERED, uid, str(n), str(r), eight.dir],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(n)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and out.strip().endswith("ok"), f"rank {r} of {n}:\n{out}"


def test_bad_arguments_say_what_is_wrong() -> None:
    with pytest.raises(Exception) as e:
        ccl.Comm("not-an-id", 2, 0)
    assert "32 hex digits" in str(e.value)
    with pytest.raises(Exception) as e:
        ccl.Comm(ccl.unique_id(), 2, 5)
    assert "ranks are 0..nranks" in str(e.value)
    with pytest.raises(Exception) as e:
        ccl.Comm(ccl.unique_id(), 2, 0, timeout=0.2)
    assert "1 of 2 joined" in str(e.value)
