"""davinci.ray: davinci devices in Ray.

A **Ray Direct Transport** named ``"DAVINCI"``: an actor method returns ``DeviceTensor``
objects (device memory with a dtype and a shape) and the actors that receive the result get
them without a copy through Ray's object store: the sender exports each tensor's buffer under
a lease (ABI 1.5), Ray carries the metadata (tokens, dtypes, shapes, node id, device UUID),
and the receiver imports the buffers and wraps them again. One-sided, same node, same device.
When Ray's reference counting frees the object, the sender ends the exports; a receiver's
tensors stay valid until it lets go of them (the lease), even if the sender dropped its own.
If the sender dies, its memory is reclaimed and the receiver's tasks on it fail with
``EACCES`` (``DeviceTensor.is_revoked()`` says so)::

    import ray, numpy as np, davinci.ray as dray

    # Importing davinci.ray registered the transport (dray.register() does it again, harmlessly).

    @ray.remote
    class Producer:
        @ray.method(tensor_transport="DAVINCI")
        def produce(self, n):
            return dray.DeviceTensor.from_numpy(np.arange(n, dtype=np.float32))

    @ray.remote(enable_tensor_transport=True)  # receives: Ray's transfer thread
    class Consumer:
        def total(self, t):    # t: a DeviceTensor, imported, no copy
            return float(t.numpy().sum())

    p, c = Producer.remote(), Consumer.remote()
    print(ray.get(c.total.remote(p.produce.remote(1024))))

An actor that receives but has no method sending through the transport is created with
``@ray.remote(enable_tensor_transport=True)``, as for Ray's own transports: without it Ray
runs a transfer on the actor's main thread, behind the task that waits for it, and that task
times out after 60 s.

Every process uses one davinci client for Ray work, ``davinci.ray.device()`` (opened from
``DAVINCI_DEVICE``, else the first of ``DAVINCI_VISIBLE_DEVICES`` / ``ASCEND_VISIBLE_DEVICES``,
else the node's device): memory imported by one client is not another client's, so make
tensors and streams from it. The device must be shared (``davinci-mockd --share-mode
shared``, or a kernel device in shared mode) for several actors to open it.

Channels that pickle what they carry (a Ray **compiled graph**'s, queues) move a tensor by
reference with ``share(t)``: a small picklable ``SharedTensor`` (export token under a lease,
dtype, shape, node and device) whose ``open()`` on the receiver imports the memory
(``examples/ray_compiled_graph.py``).

Importing this module also registers a ``ray.util.collective`` backend named ``"DAVINCI"``
over davinci-ccl (``davinci.ray_collective``).

Requires ``ray`` (2.60 or later); importing this module without it raises ``ImportError``.
"""

from __future__ import annotations

import collections
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

import davinci
from davinci import task as _task

try:
    import ray
    from ray.experimental.rdt.tensor_transport_manager import (
        CommunicatorMetadata,
        TensorTransportManager,
        TensorTransportMetadata,
    )
except ImportError as _e:  # pragma: no cover - exercised where ray is absent
    raise ImportError(
        "davinci.ray needs Ray 2.60 or later with Ray Direct Transport "
        "(pip install 'ray>=2.60'): " + str(_e)
    ) from _e

__all__ = [
    "TRANSPORT",
    "DEVICE_TYPE",
    "DeviceTensor",
    "DavinciTransportError",
    "DavinciTensorTransport",
    "DavinciTransportMetadata",
    "SharedTensor",
    "SHARE_KEEP",
    "share",
    "device",
    "set_device",
    "register",
]

#: The transport's name, for ``@ray.method(tensor_transport=...)``.
TRANSPORT = "DAVINCI"
#: The device type a ``DeviceTensor`` reports (Ray checks it against the transport's).
DEVICE_TYPE = "davinci"

_lock = threading.Lock()
_device: Optional[davinci.Device] = None
_uuid: Optional[str] = None


class DavinciTransportError(RuntimeError):
    """A transfer that cannot happen: the sender is gone, another node or device, or the
    tokens name nothing this process may import. The message says which."""


def device() -> davinci.Device:
    """This process's davinci client for Ray work, opened on first use with
    ``davinci.Device()`` (``DAVINCI_DEVICE``, else the visible devices' first, else the
    node's device) unless ``set_device`` chose one. The transport imports into it; make
    tensors and streams from it too."""
    global _device
    with _lock:
        if _device is None or _device.closed:
            _device = davinci.Device()
        return _device


def set_device(dev: davinci.Device) -> None:
    """Makes ``dev`` this process's device for Ray work (before any transfer)."""
    global _device, _uuid
    if not isinstance(dev, davinci.Device):
        raise TypeError(f"set_device takes a davinci.Device, not {type(dev).__name__}")
    with _lock:
        _device, _uuid = dev, None


def _device_uuid(dev: davinci.Device) -> str:
    global _uuid
    with _lock:
        if _uuid is None or dev is not _device:
            u = dev.uuid()
            if dev is _device:
                _uuid = u
            return u
        return _uuid


class DeviceTensor:
    """Device memory with a dtype and a shape: what the ``"DAVINCI"`` transport moves.

    ``buffer`` is the ``davinci.Buffer`` (an allocation of this process's device, or an
    import of another process's); ``numpy()`` is a zero-copy host view of it. Outside the
    transport (a plain ``ray.put``, pickling) a tensor travels as a copy of its bytes and is
    allocated again on the receiving process's device."""

    __slots__ = ("buffer", "dtype", "shape", "__weakref__")

    def __init__(self, buffer: davinci.Buffer, dtype: Any, shape: Sequence[int]) -> None:
        dt = np.dtype(dtype)
        shp = tuple(int(d) for d in shape)
        if any(d < 0 for d in shp):
            raise ValueError(f"DeviceTensor: negative dimension in shape {shp}")
        need = int(np.prod(shp, dtype=np.int64)) * dt.itemsize
        if need > buffer.nbytes:
            raise ValueError(
                f"DeviceTensor: shape {shp} of {dt} needs {need} bytes, the buffer has "
                f"{buffer.nbytes}"
            )
        self.buffer = buffer
        self.dtype = dt
        self.shape = shp

    @classmethod
    def empty(
        cls,
        shape: Sequence[int],
        dtype: Any = np.float32,
        dev: Optional[davinci.Device] = None,
    ) -> "DeviceTensor":
        """A new tensor on ``dev`` (default: ``device()``), zeroed."""
        dt = np.dtype(dtype)
        shp = tuple(int(d) for d in shape)
        nbytes = max(int(np.prod(shp, dtype=np.int64)) * dt.itemsize, 1)
        return cls((dev or device()).alloc(nbytes), dt, shp)

    @classmethod
    def from_numpy(
        cls, array: np.ndarray, dev: Optional[davinci.Device] = None
    ) -> "DeviceTensor":
        """A new tensor on ``dev`` (default: ``device()``) holding a copy of ``array``."""
        a = np.ascontiguousarray(array)
        t = cls.empty(a.shape, a.dtype, dev)
        if a.nbytes:
            t.numpy()[...] = a
        return t

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def device(self) -> str:
        """The device type, ``"davinci"`` (Ray's check of a transport's devices)."""
        return DEVICE_TYPE

    def numpy(self) -> np.ndarray:
        """A zero-copy host view (it keeps the buffer mapped while it lives)."""
        count = int(np.prod(self.shape, dtype=np.int64))
        return np.frombuffer(self.buffer.view(), dtype=self.dtype, count=count).reshape(
            self.shape
        )

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def is_revoked(self) -> bool:
        """Whether the memory is gone under this (imported) tensor: its sender died, or
        freed a buffer it had not exported under a lease."""
        return self.buffer.is_revoked()

    def close(self) -> None:
        """Lets go of the memory now (an import ends; a lease whose last import this was
        frees the sender's memory)."""
        self.buffer.close()

    def __reduce__(self):
        # Not through the transport: the bytes travel (the object store's way).
        return (_from_host, (self.numpy().copy(),))

    def __repr__(self) -> str:
        kind = "imported " if self.buffer.is_imported else ""
        return (
            f"<davinci.ray.DeviceTensor {kind}{self.dtype} {self.shape} at "
            f"{self.buffer.dev_addr:#x}>"
        )


def _from_host(array: np.ndarray) -> DeviceTensor:
    return DeviceTensor.from_numpy(array)


@dataclass
class DavinciCommunicatorMetadata(CommunicatorMetadata):
    """Nothing to agree on: the receiver reads what the sender exported."""


@dataclass
class DavinciTransportMetadata(TensorTransportMetadata):
    """What travels with an object: per tensor an export token (``tensor_meta`` has its
    shape and dtype), and where the memory is (node, device UUID and path)."""

    tokens: Optional[List[str]] = None
    node_id: Optional[str] = None
    device_uuid: Optional[str] = None
    device_path: Optional[str] = None


class DavinciTensorTransport(TensorTransportManager):
    """Ray Direct Transport over davinci exports with leases (one-sided, same node)."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        # Per object: the buffers this sender exported for it (held until Ray frees it).
        self._sent: Dict[str, List[davinci.Buffer]] = {}
        # Per exported buffer (id): how many live objects name it (one export each time).
        self._exports: Dict[int, int] = {}

    @property
    def tensor_transport_backend(self) -> str:
        return TRANSPORT

    @staticmethod
    def is_one_sided() -> bool:
        return True

    @staticmethod
    def can_abort_transport() -> bool:
        # A receive is an import: it never blocks on the sender, nothing to interrupt.
        return True

    def actor_has_tensor_transport(self, actor: "ray.actor.ActorHandle") -> bool:
        return True

    def extract_tensor_transport_metadata(
        self, obj_id: str, rdt_object: List[Any]
    ) -> DavinciTransportMetadata:
        meta: List[Tuple[Tuple[int, ...], np.dtype]] = []
        tokens: List[str] = []
        if not rdt_object:
            return DavinciTransportMetadata(tensor_meta=[], tensor_device=None, tokens=[])
        dev = device()
        # The tensors' producers may still be running on this client's streams.
        dev.synchronize()
        exported: List[davinci.Buffer] = []
        for t in rdt_object:
            if not isinstance(t, DeviceTensor):
                raise TypeError(
                    f"the {TRANSPORT} transport moves davinci.ray.DeviceTensor objects, "
                    f"not {type(t).__name__}"
                )
            if t.buffer.is_imported:
                raise DavinciTransportError(
                    "a DeviceTensor received from another actor cannot be sent on: its "
                    "memory is the first sender's (copy it into a tensor of this actor's: "
                    "DeviceTensor.empty + davinci.task.copy)"
                )
            tokens.append(t.buffer.export(lease=True))
            meta.append((t.shape, t.dtype))
            exported.append(t.buffer)
        with self._mu:
            self._sent[obj_id] = exported
            for b in exported:
                self._exports[id(b)] = self._exports.get(id(b), 0) + 1
        return DavinciTransportMetadata(
            tensor_meta=meta,
            tensor_device=DEVICE_TYPE,
            tokens=tokens,
            node_id=ray.get_runtime_context().get_node_id(),
            device_uuid=_device_uuid(dev),
            device_path=dev.path,
        )

    def get_communicator_metadata(
        self,
        src_actor: "ray.actor.ActorHandle",
        dst_actor: "ray.actor.ActorHandle",
        backend: Optional[str] = None,
    ) -> DavinciCommunicatorMetadata:
        return DavinciCommunicatorMetadata()

    def _import(self, dev: davinci.Device, token: str, obj_id: str) -> davinci.Buffer:
        return _import_token(dev, token, f"object {obj_id}")

    def recv_multiple_tensors(
        self,
        obj_id: str,
        tensor_transport_metadata: TensorTransportMetadata,
        communicator_metadata: CommunicatorMetadata,
        target_buffers: Optional[List[Any]] = None,
    ) -> List[Any]:
        m = tensor_transport_metadata
        if not isinstance(m, DavinciTransportMetadata):
            raise DavinciTransportError(
                f"metadata of another transport ({type(m).__name__}) given to {TRANSPORT}"
            )
        if not m.tensor_meta:
            return []
        here = ray.get_runtime_context().get_node_id()
        if m.node_id != here:
            raise DavinciTransportError(
                f"object {obj_id}: the {TRANSPORT} transport moves tensors within one node; "
                f"the sender is on node {m.node_id}, this receiver on {here}"
            )
        dev = device()
        mine = _device_uuid(dev)
        if m.device_uuid != mine:
            raise DavinciTransportError(
                f"object {obj_id}: the sender's tensors are on device {m.device_uuid} "
                f"({m.device_path}), this receiver's device is {mine} ({dev.path}): give both "
                "actors the same device (DAVINCI_DEVICE, or DAVINCI_VISIBLE_DEVICES)"
            )
        tensors: List[Any] = []
        for i, (token, (shape, dtype)) in enumerate(zip(m.tokens or [], m.tensor_meta)):
            t = DeviceTensor(self._import(dev, token, obj_id), dtype, shape)
            if target_buffers:
                tensors.append(_copy_into(dev, target_buffers[i], t))
            else:
                tensors.append(t)
        return tensors

    def send_multiple_tensors(
        self,
        tensors: List[Any],
        tensor_transport_metadata: TensorTransportMetadata,
        communicator_metadata: CommunicatorMetadata,
    ) -> None:
        raise NotImplementedError(
            f"the {TRANSPORT} transport is one-sided: the receiver imports, nothing is sent"
        )

    def garbage_collect(
        self, obj_id: str, tensor_transport_meta: TensorTransportMetadata, tensors: List[Any]
    ) -> None:
        with self._mu:
            bufs = self._sent.pop(obj_id, [])
            ending = []
            for b in bufs:
                n = self._exports.get(id(b), 0) - 1
                if n <= 0:
                    self._exports.pop(id(b), None)
                    ending.append(b)
                else:
                    self._exports[id(b)] = n
        for b in ending:
            # Its exports end: no new import; a receiver's import keeps the memory (the
            # lease) until it lets go. A buffer closed meanwhile has ended them already.
            if not b.closed:
                try:
                    b.unexport()
                except davinci.DavinciError:
                    pass

    def abort_transport(
        self, obj_id: str, communicator_metadata: CommunicatorMetadata
    ) -> None:
        # A receive never waits on the sender: nothing in flight to stop.
        return None


# Per token: this process's import, while something holds it (a token imported again while
# held gives the same buffer: one import per client and export).
_imports: Dict[str, "weakref.ReferenceType[davinci.Buffer]"] = {}


def _import_token(dev: davinci.Device, token: str, what: str) -> davinci.Buffer:
    global _imports
    with _lock:
        ref = _imports.get(token)
        held = ref() if ref is not None else None
        if held is not None and not held.closed:
            return held
    try:
        buf = dev.import_buffer(token)
    except davinci.DavinciError as e:
        if davinci.errno_name(e.errno) == "ENOENT":
            raise DavinciTransportError(
                f"{what}: the sender's device memory is gone (its actor died, or its export "
                f"ended before this receiver imported it): {e}"
            ) from e
        raise
    with _lock:
        _imports[token] = weakref.ref(buf)
        # Forget dead imports now and then (bounded by the live ones).
        if len(_imports) > 1024:
            _imports = {k: r for k, r in _imports.items() if r() is not None}
    return buf


@dataclass(frozen=True)
class SharedTensor:
    """A ``DeviceTensor`` by reference, for channels that pickle what they carry (a Ray
    compiled graph's, a queue, a pipe): an export token under a lease, the dtype and shape,
    and where the memory is (node, device UUID and path). Made by ``share``; the receiver's
    ``open()`` imports the memory, no copy. Same node and device only."""

    token: str
    dtype: str
    shape: Tuple[int, ...]
    node_id: str
    device_uuid: str
    device_path: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def open(self) -> DeviceTensor:
        """The tensor, imported into this process's client (``device()``); opening one
        token again while its import lives gives the same buffer. Raises
        ``DavinciTransportError`` if the memory is elsewhere or gone (the sender died, or
        shared more than its ``keep`` tensors since)."""
        here = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        if here is not None and self.node_id and self.node_id != here:
            raise DavinciTransportError(
                f"a shared tensor of node {self.node_id} opened on node {here}: "
                f"{TRANSPORT} tensors stay on their node"
            )
        dev = device()
        mine = _device_uuid(dev)
        if self.device_uuid != mine:
            raise DavinciTransportError(
                f"the shared tensor is on device {self.device_uuid} ({self.device_path}), "
                f"this process's device is {mine} ({dev.path}): give both the same device "
                "(DAVINCI_DEVICE, or DAVINCI_VISIBLE_DEVICES)"
            )
        buf = _import_token(dev, self.token, f"shared tensor {self.token}")
        return DeviceTensor(buf, self.dtype, self.shape)


#: How many of its latest shares a process keeps exported by default (``share``'s keep).
SHARE_KEEP = 8
# The buffers shared, oldest first, and how many of those shares name each buffer.
_shared: "collections.deque[davinci.Buffer]" = collections.deque()
_shared_counts: Dict[int, int] = {}
_shared_tokens: Dict[int, str] = {}


def share(t: DeviceTensor, *, keep: int = SHARE_KEEP, synchronize: bool = True) -> SharedTensor:
    """Exports ``t`` under a lease and returns the picklable ``SharedTensor`` that names it
    (first waiting for the work queued on this process's client, unless ``synchronize`` is
    False: the caller synchronized the streams that wrote ``t``). The export stays open for
    this process's next ``keep`` shares (a bounded window: a receiver opens it within that,
    as a compiled graph's next stage does), then ends; a receiver's import keeps the memory
    valid after that, and after this process drops ``t``, until the receiver lets go. A
    tensor shared again while its export is open keeps its token (a ring of reused tensors
    costs one export each)."""
    if not isinstance(t, DeviceTensor):
        raise TypeError(f"share takes a davinci.ray.DeviceTensor, not {type(t).__name__}")
    if keep < 1:
        raise ValueError(f"share: keep {keep}: at least 1")
    if t.buffer.is_imported:
        raise DavinciTransportError(
            "a DeviceTensor received from another process cannot be shared on: its memory "
            "is the first sender's (copy it into a tensor of this process's)"
        )
    dev = device()
    if synchronize:
        dev.synchronize()
    with _lock:
        open_token = _shared_tokens.get(id(t.buffer)) if _shared_counts.get(id(t.buffer)) else None
    token = open_token or t.buffer.export(lease=True)
    ending = []
    with _lock:
        _shared.append(t.buffer)
        _shared_counts[id(t.buffer)] = _shared_counts.get(id(t.buffer), 0) + 1
        _shared_tokens[id(t.buffer)] = token
        while len(_shared) > keep:
            old = _shared.popleft()
            n = _shared_counts.get(id(old), 0) - 1
            if n <= 0:
                _shared_counts.pop(id(old), None)
                _shared_tokens.pop(id(old), None)
                ending.append(old)
            else:
                _shared_counts[id(old)] = n
    for b in ending:
        if not b.closed:
            try:
                b.unexport()
            except davinci.DavinciError:
                pass
    return SharedTensor(
        token=token,
        dtype=t.dtype.str,
        shape=t.shape,
        node_id=ray.get_runtime_context().get_node_id() if ray.is_initialized() else "",
        device_uuid=_device_uuid(dev),
        device_path=dev.path,
    )


def _copy_into(dev: davinci.Device, target: Any, src: DeviceTensor) -> DeviceTensor:
    if not isinstance(target, DeviceTensor):
        raise TypeError(
            f"{TRANSPORT} receives into DeviceTensor target buffers, not {type(target).__name__}"
        )
    if target.nbytes < src.nbytes:
        raise ValueError(
            f"target buffer of {target.nbytes} bytes for a {src.nbytes}-byte tensor"
        )
    s = dev.create_context().create_stream()
    try:
        s.submit(_task.copy(target.buffer.region(0, src.nbytes), src.buffer.region(0, src.nbytes)))
        s.synchronize()
    finally:
        s.close()
    return DeviceTensor(target.buffer, src.dtype, src.shape)


_registered = False


def register() -> None:
    """Registers the ``"DAVINCI"`` transport, and the ``"DAVINCI"`` ``ray.util.collective``
    backend (``davinci.ray_collective``), with Ray (idempotent; importing this module
    does it). It must happen in the driver before the actor classes that name the transport
    are defined (Ray checks the name then) and created (Ray hands the registration to
    them)."""
    global _registered
    with _lock:
        if _registered:
            return
        from ray.experimental import register_tensor_transport

        try:
            register_tensor_transport(
                TRANSPORT, [DEVICE_TYPE], DavinciTensorTransport, DeviceTensor
            )
        except ValueError as e:
            if "already registered" not in str(e):
                raise
        # The collective backend (ray.util.collective, backend="DAVINCI") too.
        from davinci import ray_collective

        ray_collective.register()
        _registered = True


# Importing the module registers the transport, so that `@ray.method(tensor_transport=
# "DAVINCI")`, which Ray checks when the class is defined, works right after the import.
register()
