"""The exceptions of davinci: one ``DavinciError`` (an ``OSError``) per failure, the subclass
chosen by its errno, carrying what the shim's error carries: ``errno`` (None when the library
found the error itself and it has none), ``op`` (what failed: an ioctl's name such as
``"ALLOC_MEMORY"`` or a method such as ``"Stream.synchronize"``; ``operand`` is the same) and
``message`` (what was wrong). ``str()`` gives all three, as the shim prints them."""

from __future__ import annotations

import errno as _errno
from typing import Dict, Optional, Type


class DavinciError(OSError):
    """A failed davinci operation (``errno``, ``op``, ``message``)."""

    op: str
    message: str

    def __init__(
        self,
        errno: Optional[int],
        strerror: str,
        op: str = "",
        message: Optional[str] = None,
    ) -> None:
        super().__init__(errno, strerror)
        self.op = op
        self.message = strerror if message is None else message

    @property
    def operand(self) -> str:
        """What failed (the same as ``op``)."""
        return self.op

    def __str__(self) -> str:
        return str(self.strerror)


class InvalidArgumentError(DavinciError, ValueError):
    """EINVAL, ERANGE, EOVERFLOW: a bad argument (refused on the host or by the driver)."""


class DeviceTimeoutError(DavinciError, TimeoutError):
    """ETIMEDOUT: a wait's timeout passed."""


class DeviceBusyError(DavinciError):
    """EBUSY, EAGAIN: the device (or this stream's backlog) cannot take it now."""


class DeviceNotFoundError(DavinciError, FileNotFoundError):
    """ENODEV, ENOENT: nothing answers at that path; an unknown export token."""


class DevicePermissionError(DavinciError, PermissionError):
    """EPERM, EACCES: not allowed (admin-only command, another client's memory)."""


class DeviceMemoryError(DavinciError):
    """ENOMEM, ENOSPC: out of device memory or of a bounded table."""


class TaskError(DavinciError):
    """EIO, EFAULT, ECANCELED: a task failed on the device, or its stream was stopped."""


class ClosedError(DavinciError, ValueError):
    """EBADF: the object was closed (``close()`` or the end of its ``with`` block), or a file
    descriptor given (``Device.import_fd``) is not open."""


_BY_ERRNO: Dict[int, Type[DavinciError]] = {
    _errno.EINVAL: InvalidArgumentError,
    _errno.ERANGE: InvalidArgumentError,
    _errno.EOVERFLOW: InvalidArgumentError,
    _errno.ETIMEDOUT: DeviceTimeoutError,
    _errno.EBUSY: DeviceBusyError,
    _errno.EAGAIN: DeviceBusyError,
    _errno.ENODEV: DeviceNotFoundError,
    _errno.ENOENT: DeviceNotFoundError,
    _errno.EPERM: DevicePermissionError,
    _errno.EACCES: DevicePermissionError,
    _errno.ENOMEM: DeviceMemoryError,
    _errno.ENOSPC: DeviceMemoryError,
    _errno.EIO: TaskError,
    _errno.EFAULT: TaskError,
    _errno.ECANCELED: TaskError,
    _errno.EBADF: ClosedError,
}


def _from_shim(errno: Optional[int], op: str, message: str, text: str) -> DavinciError:
    """The exception for a shim error (called by the native module)."""
    cls = _BY_ERRNO.get(errno, DavinciError) if errno is not None else DavinciError
    return cls(errno, text, op, message)
