"""Zero-copy host views of device memory (``Buffer.view()``), on the standard library.

The native module hands out a ``HostHold``: the address and length of the buffer's host
mapping in this process, and a hold that keeps the buffer allocated and mapped while it
lives. Here a ``ctypes`` array is laid over that address (no copy) with the hold attached to
it, and a ``memoryview`` of the array is returned: the memoryview, every slice or cast of it
and every numpy array made from it reference the ctypes array, which references the hold. So
the buffer lives while any view of it does. (A plain abi3 extension cannot implement the
buffer protocol itself before CPython 3.11, hence ctypes, which can.)
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.lru_cache(maxsize=256)
def _bytes_type(n: int) -> Any:
    # A subclass defined here (not ctypes.c_ubyte * n, which ctypes caches forever): its
    # instances have a __dict__ to carry the hold.
    return type(ctypes.Array)("HostBytes", (ctypes.Array,), {"_type_": ctypes.c_ubyte, "_length_": n})


def make_view(hold: Any, fmt: str = "B") -> memoryview:
    """A writable memoryview of ``hold``'s mapping, as ``fmt`` ("B", "f", "i" or "I")."""
    arr = _bytes_type(hold.nbytes).from_address(hold.address)
    arr._davinci_hold = hold
    view = memoryview(arr).cast("B")
    return view if fmt == "B" else view.cast(fmt)


def as_bytes(data: Any) -> bytes:
    """The bytes of any buffer-protocol object (bytearray, memoryview, a numpy array), in C
    order."""
    return memoryview(data).tobytes()
