"""Task builders: descriptors over device buffers, checked on the host before they are
submitted, that keep the buffers they name alive until they have run (``davinci_shim::task``).

Operands are ``Buffer`` objects or byte ranges of them (``buf.region(start, stop)``):

* ``fill(dst, value, dtype=None, user_data=0)``: every 4-byte word of ``dst`` set to
  ``value`` as ``dtype``; without one the value implies it (a numpy scalar its own type:
  ``np.float32(0.5)`` f32; a float f32; a negative int i32; another int u32);
* ``copy(dst, src, user_data=0)``: ``src``'s bytes into ``dst`` (the same length);
* ``add(dst, a, b, dtype="f32", user_data=0)``: ``dst = a + b`` elementwise;

dtypes are "f32", "i32", "u32", numpy's names ("float32", "<f4"), numpy dtypes and scalar
types (``np.float32``, ``np.dtype("int32")``, ``x.dtype``). A wrong type (``fill(buf, "x")``,
``dtype=5``) raises ``TypeError``, a wrong value (``dtype=np.float64``, a value out of the
type's range) ``InvalidArgumentError`` (a ``ValueError``), each naming the argument.
* ``nop(user_data=0)``: a task that does nothing.

What the device would refuse (lengths that differ, misaligned or empty ranges) raises
``InvalidArgumentError`` here, naming the operand.

The device's built-in kernels (ABI 1.5; ``Device.kernels()`` lists them), with dtypes "f32",
"f16", "bf16", "i8", "i32" (numpy's ``np.float16`` etc. too; bf16 by name):

* ``gemm(a, b, c, m, n, k, dtype=..., trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
  batch=1, ...)``: ``c = alpha * op(a) @ op(b) + beta * c`` (f32 accumulation; i8 into i32);
* ``elementwise(op, dst, a, b=None, shape=..., a_shape=None, b_shape=None, dtype=...)``:
  "add", "sub", "mul", "div", "max", "min", "relu", "gelu", "silu", "exp", "cast",
  broadcasting numpy's way;
* ``reduce(op, dst, src, shape=..., axis=...)``: "sum" or "max" along an axis;
* ``softmax(dst, src, rows, cols)``, ``norm(dst, src, rows, cols, kind="layer"|"rms",
  gamma=None, beta=None, eps=1e-5)``;
* ``fill_bytes(dst, value)``: a memset of any offset and length.
"""

from ._davinci import Task
from ._davinci import task_add as add
from ._davinci import task_copy as copy
from ._davinci import task_fill as fill
from ._davinci import task_elementwise as elementwise
from ._davinci import task_fill_bytes as fill_bytes
from ._davinci import task_gemm as gemm
from ._davinci import task_nop as nop
from ._davinci import task_norm as norm
from ._davinci import task_reduce as reduce
from ._davinci import task_softmax as softmax

__all__ = [
    "Task",
    "add",
    "copy",
    "elementwise",
    "fill",
    "fill_bytes",
    "gemm",
    "nop",
    "norm",
    "reduce",
    "softmax",
]
