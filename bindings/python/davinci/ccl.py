"""davinci.ccl: collectives across davinci devices (davinci-ccl), shaped like NCCL/HCCL.

One rank per device (or several on one device), each in its own process::

    import davinci, davinci.ccl as ccl, numpy as np

    uid = ccl.unique_id()                    # once, in one rank; send it to the others
    comm = ccl.Comm(uid, nranks, rank)       # every rank; returns when all joined
    dev = davinci.Device(f"mock:/run/davinci/davinci{rank}.sock")
    s = dev.create_context().create_stream()
    x = dev.alloc(4 * n); np.asarray(x).view(np.float32)[:] = ...
    comm.all_reduce(x, x, s, dtype="f32", op="sum")   # in place, every rank the same bits

``all_reduce`` (op ``"sum"``, ``"prod"``, ``"max"``, ``"min"``), ``all_gather``,
``reduce_scatter``, ``broadcast`` and ``reduce``; ``send`` and ``recv`` to and from a peer,
alone or together in a group (NCCL's ``ncclGroupStart``/``ncclGroupEnd``)::

    with comm.group(s) as g:                   # a ring shift: no rank waits on another
        g.send(x, (rank + 1) % nranks, dtype="f32")
        g.recv(y, (rank - 1) % nranks, dtype="f32")

on ``"f32"``, ``"f16"``, ``"bf16"`` and
``"i32"`` (numpy's float32, float16 and int32 too); ``count`` defaults to what the buffers
hold. Blocking: each call waits for the work queued on the stream, runs, and returns with
the result in place; after ``comm.stream_ordered(ctx)`` each call queues and returns at once
instead (NCCL's model: work submitted to the stream before it is its input, work after it
sees its result; ``comm.synchronize()`` raises a failed call's error). Data moves through the host (a shared-memory segment per
communicator), so any devices of one node work together.
"""

from __future__ import annotations

from ._davinci import Comm, Group


def unique_id() -> str:
    """A new id (32 hex digits) naming one communicator to its ranks."""
    return Comm.unique_id()


__all__ = ["Comm", "Group", "unique_id"]
