"""davinci.ray_collective: a ``ray.util.collective`` backend named ``"DAVINCI"`` over
davinci-ccl (``davinci.ccl``). ``import davinci.ray`` registers it (in the driver and in every
actor that imports it, as Ray requires)::

    import ray.util.collective as col
    import davinci.ray as dray

    @ray.remote
    class Worker:
        def setup(self, world, rank):
            col.init_collective_group(world, rank, backend="DAVINCI", group_name="g")
        def step(self):
            grads = dray.DeviceTensor.from_numpy(np.ones(1024, np.float32)).numpy()
            col.allreduce(grads, group_name="g")      # in place, on the device's memory
            return float(grads[0])

Ray's collective API takes numpy arrays (or torch/cupy tensors): a ``DeviceTensor``'s
``numpy()`` view is one, over device memory, and the collective runs on that memory in place;
any other contiguous array is staged through a device buffer of the process's device
(``davinci.ray.device()``). Types: float32, float16, int32. Operators: SUM, PRODUCT, MIN, MAX.
Not yet: ``send`` and ``recv`` (davinci-ccl has no point-to-point calls yet).
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Tuple

import numpy as np

import davinci
import davinci.ccl as ccl

from ray.experimental import internal_kv
from ray.util.collective.collective_group.base_collective_group import BaseGroup
from ray.util.collective.types import ReduceOp

BACKEND = "DAVINCI"

_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32"}
_OPS = {ReduceOp.SUM: "sum", ReduceOp.PRODUCT: "prod", ReduceOp.MIN: "min", ReduceOp.MAX: "max"}


def _dtype(a: np.ndarray) -> str:
    try:
        return _DTYPES[a.dtype]
    except KeyError:
        raise TypeError(
            f"the {BACKEND} collective backend takes float32, float16 and int32 arrays, "
            f"not {a.dtype}"
        ) from None


def _op(opts: Any) -> str:
    op = getattr(opts, "reduceOp", ReduceOp.SUM)
    try:
        return _OPS[op]
    except KeyError:
        raise ValueError(f"reduce op {op} is not one of SUM, PRODUCT, MIN, MAX") from None


def _buffer_of(a: np.ndarray) -> Optional[davinci.Buffer]:
    """The davinci Buffer whose whole host view `a` is (a DeviceTensor's numpy()), if any."""
    base: Any = a
    for _ in range(8):
        if isinstance(base, memoryview):
            base = base.obj
        elif isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        else:
            break
    if not isinstance(base, davinci.Buffer) or not a.flags.c_contiguous:
        return None
    start = a.__array_interface__["data"][0]
    if start != np.asarray(base).__array_interface__["data"][0]:
        return None  # a slice starting inside it: staged
    return base


class _Operand:
    """An array as a device buffer: its own memory when it is a DeviceTensor's view, else a
    staging buffer copied in (and, for outputs, back out by ``done``)."""

    def __init__(self, dev: davinci.Device, a: np.ndarray, copy_in: bool = True) -> None:
        if not isinstance(a, np.ndarray):
            raise TypeError(f"the {BACKEND} backend takes numpy arrays, not {type(a).__name__}")
        self.array = a
        buf = _buffer_of(a)
        self.staged = buf is None
        if buf is None:
            if not a.flags.c_contiguous:
                raise ValueError("the array must be C-contiguous")
            buf = dev.alloc(max(a.nbytes, 1))
            if copy_in and a.nbytes:
                np.asarray(buf)[: a.nbytes] = a.view(np.uint8).reshape(-1)
        self.buffer = buf

    def done(self) -> None:
        if self.staged:
            if self.array.nbytes:
                self.array.view(np.uint8).reshape(-1)[:] = np.asarray(self.buffer)[: self.array.nbytes]
            self.buffer.close()


class DavinciGroup(BaseGroup):
    """A ``ray.util.collective`` group over a davinci-ccl communicator: rank 0 makes the unique
    id and hands it to the others through Ray's internal key-value store."""

    def __init__(self, world_size: int, rank: int, group_name: str) -> None:
        super().__init__(world_size, rank, group_name)
        from davinci.ray import device

        key = f"davinci-ccl/{group_name}".encode()
        if rank == 0:
            uid = ccl.unique_id()
            internal_kv._internal_kv_put(key, uid.encode(), overwrite=True)
        else:
            deadline = time.monotonic() + 60
            got = None
            while got is None:
                got = internal_kv._internal_kv_get(key)
                if got is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{BACKEND} group {group_name!r}: rank 0 published no unique id in 60 s"
                        )
                    time.sleep(0.01)
            uid = got.decode()
        self._comm = ccl.Comm(uid, world_size, rank)
        if rank == 0:
            internal_kv._internal_kv_del(key)
        self._dev = device()
        self._stream = self._dev.create_context().create_stream()

    @classmethod
    def backend(cls) -> str:
        return BACKEND

    @classmethod
    def check_backend_availability(cls) -> bool:
        return True

    def destroy_group(self) -> None:
        self._comm.close()
        self._stream.close()

    def allreduce(self, tensors: List[np.ndarray], allreduce_options: Any = None) -> None:
        for a in tensors:
            x = _Operand(self._dev, a)
            self._comm.all_reduce(x.buffer, x.buffer, self._stream, dtype=_dtype(a), op=_op(allreduce_options), count=a.size)
            x.done()

    def barrier(self, barrier_options: Any = None) -> None:
        self._comm.barrier()

    def reduce(self, tensors: List[np.ndarray], reduce_options: Any = None) -> None:
        root = getattr(reduce_options, "root_rank", 0)
        for a in tensors:
            x = _Operand(self._dev, a)
            self._comm.reduce(x.buffer, x.buffer, self._stream, dtype=_dtype(a), op=_op(reduce_options), root=root, count=a.size)
            x.done()

    def broadcast(self, tensors: List[np.ndarray], broadcast_options: Any = None) -> None:
        root = getattr(broadcast_options, "root_rank", 0)
        for a in tensors:
            x = _Operand(self._dev, a, copy_in=self.rank == root)
            self._comm.broadcast(x.buffer, x.buffer, self._stream, dtype=_dtype(a), root=root, count=a.size)
            x.done()

    def allgather(self, tensor_lists: List[List[np.ndarray]], tensors: List[np.ndarray], allgather_options: Any = None) -> None:
        for outs, a in zip(tensor_lists, tensors):
            _same(outs, a, self.world_size)
            x = _Operand(self._dev, a)
            big = self._dev.alloc(max(a.nbytes * self.world_size, 1))
            self._comm.all_gather(x.buffer, big, self._stream, dtype=_dtype(a), count=a.size)
            view = np.asarray(big)
            for r, o in enumerate(outs):
                o.view(np.uint8).reshape(-1)[:] = view[r * a.nbytes : (r + 1) * a.nbytes]
            big.close()
            x.done()

    def reducescatter(self, tensors: List[np.ndarray], tensor_lists: List[List[np.ndarray]], reducescatter_options: Any = None) -> None:
        for a, ins in zip(tensors, tensor_lists):
            _same(ins, a, self.world_size)
            big = self._dev.alloc(max(a.nbytes * self.world_size, 1))
            view = np.asarray(big)
            for r, i in enumerate(ins):
                view[r * a.nbytes : (r + 1) * a.nbytes] = np.ascontiguousarray(i).view(np.uint8).reshape(-1)
            x = _Operand(self._dev, a, copy_in=False)
            self._comm.reduce_scatter(big, x.buffer, self._stream, dtype=_dtype(a), op=_op(reducescatter_options), count=a.size)
            x.done()
            big.close()

    def send(self, tensors: List[np.ndarray], send_options: Any) -> None:
        peer = getattr(send_options, "dst_rank", 0)
        n = getattr(send_options, "n_elements", 0)
        for a in tensors:
            x = _Operand(self._dev, a)
            self._comm.send(x.buffer, peer, self._stream, dtype=_dtype(a), count=n or a.size)
            x.done()

    def recv(self, tensors: List[np.ndarray], recv_options: Any) -> None:
        peer = getattr(recv_options, "src_rank", 0)
        n = getattr(recv_options, "n_elements", 0)
        for a in tensors:
            x = _Operand(self._dev, a, copy_in=False)
            self._comm.recv(x.buffer, peer, self._stream, dtype=_dtype(a), count=n or a.size)
            x.done()


def _same(arrays: List[np.ndarray], like: np.ndarray, n: int) -> None:
    if len(arrays) != n or any(t.shape != like.shape or t.dtype != like.dtype for t in arrays):
        raise ValueError(
            f"{n} arrays of shape {like.shape} and dtype {like.dtype} expected, one per rank"
        )


def register() -> None:
    """Registers the backend with ``ray.util.collective`` (idempotent)."""
    from ray.util.collective.backend_registry import _global_registry, register_collective_backend

    if not _global_registry.is_registered(BACKEND):
        register_collective_backend(BACKEND, DavinciGroup)
