"""A framework op on the device, in the shape a deep-learning framework's op wrapper has
(Python op -> runtime -> device): ``biased_add(x, y, bias)`` takes numpy arrays, returns
``x + y + bias`` computed by the device (a FILL of the bias, two ADDs on two streams ordered
by an event), and is checked against numpy.

    python bindings/python/examples/framework_op.py                      # the default device
    python bindings/python/examples/framework_op.py --device mock:/run/davinci/davinci0.sock
    python bindings/python/examples/framework_op.py --iterations 10000   # called in a loop

The default device is the rule every language shares: $DAVINCI_DEVICE, else this node's
device, else the embedded mock device. ``--iterations N`` calls the op N times in a loop
(the shapes and dtypes in turn), as a framework's training loop does: its fill stream is
never synchronized, and nothing stalls for that.

Inputs go in and the result comes out through zero-copy host views of device memory
(``numpy.frombuffer(buf.view(), dtype)``): one copy each way, the one into device memory.
Device memory comes from a pool, reused from call to call, as a framework's caching
allocator does.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, Optional

import numpy as np

import davinci
from davinci import task

_DTYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32))


class DeviceRuntime:
    """What a framework keeps per device: the open, a pool, a context and two streams."""

    def __init__(self, spec: Optional[str] = None) -> None:
        self.device = davinci.Device(spec)
        self.pool = davinci.MemPool(self.device)
        ctx = self.device.create_context()
        self.fill_stream, self.compute = ctx.create_stream(), ctx.create_stream()
        self.bias_ready = ctx.create_event()

    def upload(self, a: np.ndarray) -> davinci.Buffer:
        buf = self.pool.alloc(max(a.nbytes, 4))
        np.frombuffer(buf.view(), dtype=a.dtype, count=a.size)[:] = a.ravel()
        return buf


_runtimes: Dict[Optional[str], DeviceRuntime] = {}


def biased_add(x: np.ndarray, y: np.ndarray, bias: float, device: Optional[str] = None) -> np.ndarray:
    """``x + y + bias`` elementwise on the device, for float32, int32 or uint32 arrays of
    one shape."""
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"biased_add: x is {x.dtype}{x.shape}, y is {y.dtype}{y.shape}: they must match")
    if x.dtype not in _DTYPES:
        raise TypeError(f"biased_add: {x.dtype} is not supported (float32, int32, uint32)")
    kind = x.dtype  # davinci takes numpy's dtypes as they are
    if x.size == 0:
        return np.empty_like(x)
    rt = _runtimes.get(device) or _runtimes.setdefault(device, DeviceRuntime(device))
    n = x.size * 4
    dx, dy = rt.upload(x), rt.upload(y)
    db, tmp, out = rt.pool.alloc(n), rt.pool.alloc(n), rt.pool.alloc(n)
    # Stream 1 fills the bias; stream 2 adds x + y meanwhile, then waits for the fill.
    rt.fill_stream.submit(task.fill(db.region(0, n), bias, dtype=kind))
    filled = rt.bias_ready.record(rt.fill_stream)
    rt.compute.submit(task.add(tmp.region(0, n), dx.region(0, n), dy.region(0, n), dtype=kind))
    rt.compute.wait_recorded(filled)
    rt.compute.submit(task.add(out.region(0, n), tmp.region(0, n), db.region(0, n), dtype=kind))
    # The inputs may go back to the pool now: the queued tasks hold them until they ran.
    del dx, dy, db, tmp
    rt.compute.synchronize(timeout=30)
    # A copy out of the view: the block goes back to the pool when `out` goes.
    return np.frombuffer(out.view(), dtype=x.dtype, count=x.size).reshape(x.shape).copy()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", help="device: /dev/davinciN, mock:SOCKET or embedded "
                   "(default: $DAVINCI_DEVICE, else this node's device, else embedded)")
    p.add_argument("--iterations", type=int, default=15, metavar="N",
                   help="calls of the op, over 5 shapes and 3 dtypes in turn (default 15)")
    args = p.parse_args()
    if args.iterations < 1:
        p.error(f"--iterations {args.iterations}: give 1 or more")
    rng = np.random.default_rng(25)
    checked = 0
    cases = [(shape, dtype) for shape in [(1,), (7,), (1024,), (33, 17), (4, 256, 3)]
             for dtype in (np.float32, np.int32, np.uint32)]
    start = time.perf_counter()
    for it in range(args.iterations):
        shape, dtype = cases[it % len(cases)]
        if dtype == np.float32:
            x = rng.standard_normal(shape).astype(dtype)
            y = rng.standard_normal(shape).astype(dtype)
            bias = 0.25
        else:
            x = rng.integers(0, 1 << 20, shape).astype(dtype)
            y = rng.integers(0, 1 << 20, shape).astype(dtype)
            bias = 3
        got = biased_add(x, y, bias, args.device)
        want = (x + y) + np.array(bias, dtype=dtype)
        if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
            print(f"framework_op: call {it + 1}: {dtype.__name__}{shape}: device result "
                  "differs from numpy", file=sys.stderr)
            return 1
        checked += x.size
    took = time.perf_counter() - start
    rt = _runtimes[args.device]
    print(f"framework_op: {args.iterations} calls of biased_add ({checked} elements) on "
          f"{rt.device} ({rt.device.source}) match numpy in {took:.2f} s "
          f"(pool: {rt.pool.stats()['driver_allocs']} driver allocations for "
          f"{5 * args.iterations} buffers)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except davinci.DavinciError as e:
        print(f"framework_op: {e}", file=sys.stderr)
        sys.exit(1)
