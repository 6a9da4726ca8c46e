"""davinci: the davinci-shim runtime for Python.

Open a device (``Device()``: ``$DAVINCI_DEVICE``, else an embedded mock device;
``Device("mock:/run/davinci/davinci0.sock")``; ``Device("/dev/davinci0")``; ``Device(1)``: device 1 of
``visible_devices()``, as ``DAVINCI_VISIBLE_DEVICES``/``ASCEND_VISIBLE_DEVICES`` say), make a context,
streams and events, allocate device memory (``Device.alloc``, ``MemPool``), build tasks with
``davinci.task`` and submit them. Host views of device memory are zero-copy ``memoryview``
objects (``Buffer.view()``; ``numpy.frombuffer(buf.view(), dtype=numpy.float32)``) that keep
their buffer alive. Errors are ``DavinciError`` (an ``OSError``) subclasses carrying
``errno``, ``op`` and ``message``. Blocking calls release the GIL; Ctrl-C interrupts waits.
See bindings/python/README.md.
"""

from ._davinci import (
    SLICE_SECONDS,
    Buffer,
    Completion,
    Context,
    Device,
    Event,
    HostHold,
    ImportedEvent,
    MemPool,
    Recorded,
    Region,
    Stream,
    Task,
    __version__,
    device_count,
    errno_name,
    visible_devices,
)
from ._errors import (
    ClosedError,
    DavinciError,
    DeviceBusyError,
    DeviceMemoryError,
    DeviceNotFoundError,
    DevicePermissionError,
    DeviceTimeoutError,
    InvalidArgumentError,
    TaskError,
)
from . import task
from ._trace import trace

__all__ = [
    "SLICE_SECONDS",
    "Buffer",
    "ClosedError",
    "Completion",
    "Context",
    "DavinciError",
    "Device",
    "DeviceBusyError",
    "DeviceMemoryError",
    "DeviceNotFoundError",
    "DevicePermissionError",
    "DeviceTimeoutError",
    "Event",
    "HostHold",
    "ImportedEvent",
    "InvalidArgumentError",
    "MemPool",
    "Recorded",
    "Region",
    "Stream",
    "Task",
    "TaskError",
    "__version__",
    "device_count",
    "errno_name",
    "task",
    "trace",
    "visible_devices",
]
