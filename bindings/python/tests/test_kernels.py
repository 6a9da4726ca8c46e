"""The device's built-in kernels from Python (ABI 1.5): Device.kernels() lists them; GEMM of
numpy float16 matrices into float32 agrees with numpy within the documented bound, int8 GEMM
exactly; elementwise ops broadcast numpy's way; reductions, softmax and norms agree with
numpy; a memset of any bytes; bad arguments raise the errors Python users expect."""

from __future__ import annotations

import numpy as np
import pytest

import davinci
from davinci import task


def host(buf: davinci.Buffer, dtype: type, count: int) -> np.ndarray:
    """The buffer's first `count` elements of `dtype`, viewed zero-copy through numpy."""
    return np.asarray(buf).view(dtype)[:count]


def put(dev: davinci.Device, arr: np.ndarray) -> davinci.Buffer:
    buf = dev.alloc(max(arr.nbytes, 64))
    np.asarray(buf)[: arr.nbytes] = np.frombuffer(arr.tobytes(), dtype=np.uint8)
    return buf


def test_the_kernels_are_listed_with_their_dtypes(spec: str) -> None:
    dev = davinci.Device(spec)
    names = [k["name"] for k in dev.kernels()]
    assert names == ["gemm", "elementwise", "reduce", "softmax", "norm"]
    gemm = dev.kernels()[0]
    assert gemm["params_size"] == 128 and "f16" in gemm["dtypes"] and "bf16" in gemm["dtypes"]


def test_gemm_of_f16_into_f32_and_int8_into_int32(spec: str) -> None:
    dev = davinci.Device(spec)
    s = dev.create_context().create_stream()
    rng = np.random.default_rng(7)
    m, n, k = 33, 17, 65
    a = rng.uniform(-2, 2, (m, k)).astype(np.float16)
    b = rng.uniform(-2, 2, (n, k)).astype(np.float16)  # stored transposed
    c0 = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    ba, bb, bc = put(dev, a), put(dev, b), put(dev, c0)
    s.submit(task.gemm(ba, bb, bc, m, n, k, dtype=np.float16, dtype_c="f32", trans_b=True,
                       alpha=0.5, beta=2.0))
    s.synchronize()
    got = host(bc, np.float32, m * n).reshape(m, n)
    want = 0.5 * (a.astype(np.float64) @ b.astype(np.float64).T) + 2.0 * c0
    mag = 0.5 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)).T) + 2.0 * np.abs(c0)
    assert np.all(np.abs(got - want) <= (k + 2) * 2.0**-24 * mag + 2 * 2.0**-24 * np.abs(want) + 1e-30)
    # int8 x int8 -> int32, exact.
    ai = rng.integers(-128, 128, (m, k), dtype=np.int8)
    bi = rng.integers(-128, 128, (k, n), dtype=np.int8)
    ci = dev.alloc(m * n * 4)
    s.submit(task.gemm(put(dev, ai), put(dev, bi), ci, m, n, k, dtype="i8", dtype_c=np.int32))
    s.synchronize()
    assert np.array_equal(host(ci, np.int32, m * n).reshape(m, n),
                          ai.astype(np.int32) @ bi.astype(np.int32))


def test_elementwise_reduce_softmax_and_norms_agree_with_numpy(spec: str) -> None:
    dev = davinci.Device(spec)
    s = dev.create_context().create_stream()
    rng = np.random.default_rng(11)
    x = rng.uniform(-3, 3, (4, 8)).astype(np.float32)
    row = rng.uniform(-1, 1, (8,)).astype(np.float32)
    bx, br, out = put(dev, x), put(dev, row), dev.alloc(4 * 8 * 4)
    s.submit(task.elementwise("mul", out, bx, br, shape=(4, 8), b_shape=(8,)))
    s.synchronize()
    assert np.array_equal(host(out, np.float32, 32).reshape(4, 8), x * row)
    sums = dev.alloc(16)
    s.submit(task.reduce("sum", sums, bx, shape=(4, 8), axis=1))
    s.synchronize()
    assert np.allclose(host(sums, np.float32, 4), x.astype(np.float64).sum(axis=1), rtol=1e-6)
    sm = dev.alloc(4 * 8 * 2)
    s.submit(task.softmax(sm, bx, 4, 8, dtype_dst=np.float16))
    s.synchronize()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    assert np.allclose(host(sm, np.float16, 32).reshape(4, 8), want, rtol=2**-10, atol=2**-24)
    gamma = rng.uniform(0.5, 1.5, (8,)).astype(np.float32)
    ln = dev.alloc(4 * 8 * 4)
    s.submit(task.norm(ln, bx, 4, 8, kind="layer", gamma=put(dev, gamma), eps=1e-5))
    s.synchronize()
    xd = x.astype(np.float64)
    mu, var = xd.mean(axis=1, keepdims=True), xd.var(axis=1, keepdims=True)
    assert np.allclose(host(ln, np.float32, 32).reshape(4, 8),
                       (xd - mu) / np.sqrt(var + np.float32(1e-5)) * gamma, rtol=1e-6, atol=1e-6)
    gelu = dev.alloc(4 * 8 * 4)
    s.submit(task.elementwise("gelu", gelu, bx, shape=(4, 8)))
    s.synchronize()
    want = 0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)))
    assert np.allclose(host(gelu, np.float32, 32).reshape(4, 8), want, rtol=2**-13, atol=1e-7)


def test_fill_bytes_and_bad_arguments(spec: str) -> None:
    dev = davinci.Device(spec)
    s = dev.create_context().create_stream()
    buf = dev.alloc(64)
    np.asarray(buf)[:] = 0
    s.submit(task.fill_bytes(buf.region(5, 12), 0x7F))
    s.synchronize()
    assert list(np.asarray(buf)[:16]) == [0] * 5 + [0x7F] * 7 + [0] * 4
    with pytest.raises(TypeError, match="dtype"):
        task.gemm(buf, buf, buf, 1, 1, 1, dtype=3.5)
    with pytest.raises(ValueError, match="op"):
        task.elementwise("pow", buf, buf, buf, shape=(4,))
    with pytest.raises(ValueError, match="broadcast"):
        task.elementwise("add", buf, buf, buf, shape=(4,), a_shape=(3,))
    with pytest.raises(ValueError, match="A reaches 256 bytes"):
        task.gemm(buf, buf, buf, 8, 8, 8)
    with pytest.raises(ValueError, match="alpha must be 1"):
        task.gemm(buf, buf, buf, 2, 2, 2, dtype="i8", dtype_c="i32", alpha=2.0)
