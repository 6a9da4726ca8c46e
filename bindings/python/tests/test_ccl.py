"""davinci.ccl across processes: 2, 4 and 8 ranks, each a Python process with its own device
of one davinci-mockd, run all-reduce, all-gather, reduce-scatter and broadcast on every dtype
(f32, f16, bf16, i32) from 4 bytes up (f32 to 64 MiB), and each rank checks its results against numpy (exact
for i32; within the type's rounding for floats, every rank the same bits)."""

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

    def data(rank, count, dt, shift=0):
        # Small integers: exact in every type, sums of 8 too (f16 and bf16 round them).
        v = ((np.arange(count) * 17 + rank * 131 + shift) % 29 - 14).astype(np.float64)
        return v

    def put(dev, values, dt):
        raw = values.astype(np.float32) if dt == "bf16" else values.astype(np.dtype(dt))
        if dt == "bf16":  # bf16: the high half of f32 (these values are exact in it)
            raw = (raw.view(np.uint32) >> 16).astype(np.uint16)
        b = dev.alloc(max(raw.nbytes, 1))
        np.asarray(b)[: raw.nbytes] = raw.view(np.uint8)
        return b

    def get(buf, count, dt):
        if dt == "bf16":
            h = np.asarray(buf)[: 2 * count].view(np.uint16).astype(np.uint32) << 16
            return h.view(np.float32).astype(np.float64)
        return np.asarray(buf)[: count * np.dtype(dt).itemsize].view(np.dtype(dt)).astype(np.float64)

    NP = {"f32": "float32", "f16": "float16", "i32": "int32", "bf16": "bf16"}
    TOL = {"f32": 0, "i32": 0, "f16": 4 / 1024, "bf16": 4 / 128}
    def check(got, want, what):
        tol = TOL[dt]
        bad = np.abs(got - want) > tol * np.maximum(np.abs(want), 1)
        assert not bad.any(), f"rank {r}: {what}: {int(bad.sum())} of {len(want)} wrong, first {np.argmax(bad)}: got {got[np.argmax(bad)]}, want {want[np.argmax(bad)]}"

    small, large = sizes.split(";")
    cases = [(int(z), dt) for z in small.split(",") for dt in ("f32", "f16", "bf16", "i32")]
    cases += [(int(z), "f32") for z in large.split(",") if z]
    for size, dt in cases:
        if True:
            item = 2 if dt in ("f16", "bf16") else 4
            count = max(size // item, 1)
            npdt = NP[dt] if dt != "bf16" else "bf16"
            what = f"{n} ranks, {count} {dt}"
            mine = data(r, count, dt)
            send, recv = put(dev, mine, npdt), dev.alloc(count * item)
            everyone = [data(k, count, dt) for k in range(n)]
            comm.all_reduce(send, recv, s, dtype=dt, op="sum")
            check(get(recv, count, npdt), np.sum(everyone, axis=0), "all_reduce " + what)
            comm.all_reduce(send, recv, s, dtype=dt, op="max")
            check(get(recv, count, npdt), np.max(everyone, axis=0), "all_reduce max " + what)
            big = dev.alloc(n * count * item)
            comm.all_gather(send, big, s, dtype=dt)
            check(get(big, n * count, npdt), np.concatenate(everyone), "all_gather " + what)
            blocks = put(dev, data(r, n * count, dt, shift=5), npdt)
            comm.reduce_scatter(blocks, recv, s, dtype=dt, op="sum", count=count)
            want = np.sum([data(k, n * count, dt, shift=5) for k in range(n)], axis=0)[r * count:(r + 1) * count]
            check(get(recv, count, npdt), want, "reduce_scatter " + what)
            comm.broadcast(send, recv, s, dtype=dt, root=n - 1)
            check(get(recv, count, npdt), everyone[n - 1], "broadcast " + what)
            for b in (send, recv, big, blocks):
                b.close()
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
    # Every dtype at 4 bytes, an odd size and past the one-shot path; f32 also across several
    # staging chunks (5 MB), and at 64 MiB with 2 ranks (time: the machine has 2 cores).
    sizes = "4,4100,70000;" + {2: "5000000,67108864", 4: "5000000", 8: ""}[n]
    run_ranks(eight, n, sizes)


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
