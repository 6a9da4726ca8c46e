"""A Ray pipeline of three actors on one davinci device, tensors moved by the "DAVINCI" Ray
Direct Transport (davinci.ray): a producer fills each item on the device, a transformer
copies it into a tensor of its own on the device and adds one on the host view, a consumer
checks it. Every item is checked; the run prints items per second and the time per
hand-off, and, with ``--object-store``, the same pipeline through Ray's object store (the
tensors pickled as bytes) to compare.

    davinci-mockd --share-mode shared --socket-dir /tmp/d &
    python bindings/python/examples/ray_pipeline.py --device mock:/tmp/d/davinci0.sock

Needs Ray 2.60 or later (pip install 'ray>=2.60') and a shared device every actor opens
(davinci-mockd --share-mode shared, or a kernel device in shared mode).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import davinci

try:
    import ray

    import davinci.ray as dray
except ImportError as e:  # pragma: no cover
    raise SystemExit(f"ray_pipeline: {e}")


def make_actors(transport: str | None):
    method = ray.method(tensor_transport=transport) if transport else (lambda f: f)

    @ray.remote
    class Producer:
        def __init__(self) -> None:
            self.s = dray.device().create_context().create_stream()

        @method
        def produce(self, i: int, n: int) -> dray.DeviceTensor:
            t = dray.DeviceTensor.empty((n,), np.float32)
            self.s.submit(davinci.task.fill(t.buffer, int(np.float32(i).view(np.uint32))))
            # Reaped here: a queued task holds its buffer until its stream reaps it.
            self.s.synchronize(timeout=30)
            return t

    @ray.remote
    class Transformer:
        def __init__(self) -> None:
            self.s = dray.device().create_context().create_stream()

        @method
        def transform(self, t: dray.DeviceTensor) -> dray.DeviceTensor:
            out = dray.DeviceTensor.empty(t.shape, t.dtype)
            self.s.submit(davinci.task.copy(out.buffer, t.buffer))
            self.s.synchronize(timeout=30)
            out.numpy()[:] += 1.0
            return out

    @ray.remote(enable_tensor_transport=bool(transport))
    class Consumer:
        def check(self, t: dray.DeviceTensor, want: float) -> bool:
            a = t.numpy()
            return bool(a[0] == want and a[-1] == want)

    return Producer.remote(), Transformer.remote(), Consumer.remote()


def run(transport: str | None, items: int, n: int, window: int) -> float:
    p, t, c = make_actors(transport)
    # Warm up (actor start, first mappings).
    assert ray.get(c.check.remote(t.transform.remote(p.produce.remote(0, n)), 1.0), timeout=120)
    start = time.perf_counter()
    pending, bad = [], 0
    for i in range(items):
        pending.append(c.check.remote(t.transform.remote(p.produce.remote(i, n)), float(i + 1)))
        if len(pending) >= window:
            bad += sum(not ok for ok in ray.get(pending, timeout=300))
            pending = []
    bad += sum(not ok for ok in ray.get(pending, timeout=300))
    took = time.perf_counter() - start
    for a in (p, t, c):
        ray.kill(a)
    if bad:
        raise SystemExit(f"ray_pipeline: {bad} of {items} items were wrong")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=os.environ.get("DAVINCI_DEVICE"),
                    help="the shared device every actor opens (default: $DAVINCI_DEVICE)")
    ap.add_argument("--items", type=int, default=200, help="items through the pipeline")
    ap.add_argument("--bytes", type=int, default=256 << 10, help="bytes per item")
    ap.add_argument("--window", type=int, default=16, help="items in flight at most")
    ap.add_argument("--object-store", action="store_true",
                    help="also run it through Ray's object store, to compare")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if not args.device:
        ap.error("name the device: --device mock:/path/davinci0.sock or /dev/davinciN")
    os.environ["DAVINCI_DEVICE"] = args.device
    n = max(args.bytes // 4, 1)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"DAVINCI_DEVICE": args.device}})
    figures = {}
    modes = [("DAVINCI", "davinci transport")] + ([(None, "object store")] if args.object_store else [])
    for transport, name in modes:
        took = run(transport, args.items, n, args.window)
        figures[name] = {
            "items": args.items,
            "bytes_per_item": n * 4,
            "items_per_s": args.items / took,
            # Two hand-offs per item (producer -> transformer -> consumer).
            "us_per_handoff": took / args.items / 2 * 1e6,
        }
    ray.shutdown()
    if args.json:
        import json

        print(json.dumps(figures, indent=2))
    else:
        for name, f in figures.items():
            print(f"{name:>18}: {f['items']} items of {f['bytes_per_item']} bytes, "
                  f"{f['items_per_s']:.0f} items/s, {f['us_per_handoff']:.0f} us per hand-off "
                  "(every item checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
