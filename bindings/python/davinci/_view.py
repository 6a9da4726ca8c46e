"""Helpers of the native module's ``Buffer``.

Host views need nothing here any more: ``Buffer`` implements the buffer protocol itself
(``memoryview(buf)``, ``buf.view()``, ``np.asarray(buf)``), each view holding the buffer's
memory until it is released.
"""

from __future__ import annotations

from typing import Any


def as_bytes(data: Any) -> bytes:
    """The bytes of any buffer-protocol object (bytearray, memoryview, a numpy array), in C
    order."""
    return memoryview(data).tobytes()
