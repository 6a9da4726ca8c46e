"""Two Python processes, each its own client of one device, hand a device buffer to each
other the way two Ray actors do (the Python twin of shim/examples/ray_actors.rs): the
producer computes into a buffer and exports it; the token (16 hex digits) travels through
their own channel (a multiprocessing pipe); the consumer imports the buffer by the token,
computes ``y = x + x`` from it on the device (no copy through the host) and answers with
the sum; then the producer frees the buffer.

    python bindings/python/examples/two_process.py --device mock:/run/davinci/davinci0.sock

The device must reach other processes (a davinci-mockd device or /dev/davinciN; the embedded
device lives in one process) and be shared: the producer makes it so if it may (an admin,
such as the user who started the daemon), else it says what the operator has to run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
from multiprocessing.connection import Connection

import numpy as np

import davinci
from davinci import task

N = 1 << 16


def producer(spec: str, channel: Connection) -> None:
    dev = davinci.Device(spec)
    try:
        dev.set_share_mode("shared")
    except davinci.DevicePermissionError as e:
        raise SystemExit(f"two_process: {dev} is not shared and this user may not share it: ask "
                         f"the operator for `davinci-smi set -t device-share -i <N> -d 1` ({e})")
    x = dev.alloc(N * 4)
    np.frombuffer(x.view(), np.uint32)[:] = np.arange(N, dtype=np.uint32)
    token = x.export()
    print(f"producer (pid {os.getpid()}): {N} values at {x.dev_addr:#x}, export token {token}",
          flush=True)
    channel.send(token)
    got = channel.recv()
    want = int(np.arange(N, dtype=np.uint64).sum() * 2)
    print(f"producer: the consumer's sum is {got} (expected {want})", flush=True)
    if got != want:
        raise SystemExit("two_process: the consumer saw other bytes")
    del x  # the consumer is done: freeing revokes its import


def consumer(spec: str, channel: Connection) -> None:
    token = channel.recv()
    # Opened once the token is here: the producer has made the device shared by then.
    dev = davinci.Device(spec)
    x = dev.import_buffer(token)
    y = dev.alloc(x.nbytes)
    s = dev.create_context().create_stream()
    s.submit(task.add(y, x, x, dtype="u32"))
    s.synchronize(timeout=30)
    total = int(np.frombuffer(y.view(), np.uint32).sum(dtype=np.uint64))
    print(f"consumer (pid {os.getpid()}): imported {x.dev_addr:#x}, sum of x + x = {total}",
          flush=True)
    channel.send(total)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=os.environ.get("DAVINCI_DEVICE"),
                   help="mock:SOCKET or /dev/davinciN (default: $DAVINCI_DEVICE)")
    args = p.parse_args()
    if not args.device or args.device == "embedded":
        p.error("name a device other processes reach: --device mock:SOCKET or /dev/davinciN")
    ctx = mp.get_context("spawn")  # fresh interpreters, as actors are
    a, b = ctx.Pipe()
    actors = [ctx.Process(target=producer, args=(args.device, a), name="producer"),
              ctx.Process(target=consumer, args=(args.device, b), name="consumer")]
    for actor in actors:
        actor.start()
    for actor in actors:
        actor.join(120)
    failed = [f"{actor.name} (exit {actor.exitcode})" for actor in actors if actor.exitcode != 0]
    if failed:
        for actor in actors:
            if actor.is_alive():
                actor.kill()
        print(f"two_process: {', '.join(failed)} failed", file=sys.stderr)
        return 1
    print("two_process: the buffer went from one process to the other by token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
