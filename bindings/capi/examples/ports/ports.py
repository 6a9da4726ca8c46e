"""The two ports of issue 43 run from Python: numpy arrays handed to a C extension over
libdavinci (ports.c, loaded with ctypes), its results checked element by element against a
numpy reference within a stated bound.

  python3 ports.py --lib PATH/libports.so --device DEVICE

1. catlass_linear (torch_catlass's path): y = relu(x @ w.T + bias), x and w float16, bias
   and y float32. The device multiplies in f32 (products of f16 values are exact in f32) and
   rounds each sum of k products once per step, so |y - ref| <= k * 2^-24 * (|x| @ |w|.T +
   |bias|) + 2^-24 * |ref|, where ref is the f64 result of the same f16 inputs.
2. mllm_block (an mLLM-style backend): one transformer block forward, f16 weights, f32
   activations, single head. Its bound is relative to the block's scale: every element within
   2e-5 * (1 + max|ref|) of the f64 reference of the same f16 weights (f32 accumulation over
   at most f terms per step, a softmax and two norms; measured: about 1e-6).
"""

from __future__ import annotations

import argparse
import ctypes
import sys

import numpy as np

F16P = ctypes.POINTER(ctypes.c_uint16)
F32P = ctypes.POINTER(ctypes.c_float)
I32P = ctypes.POINTER(ctypes.c_int32)


def ptr(a: np.ndarray, kind):  # type: ignore[no-untyped-def]
    assert a.flags["C_CONTIGUOUS"]
    return a.ctypes.data_as(kind)


def f16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.astype(np.float16))


def call(fn, device: str, *args) -> None:  # type: ignore[no-untyped-def]
    err = ctypes.create_string_buffer(512)
    rc = fn(device.encode(), *args, err, ctypes.c_size_t(len(err)))
    if rc != 0:
        raise RuntimeError(f"{fn.__name__}: {rc}: {err.value.decode(errors='replace')}")


def catlass_linear(lib: ctypes.CDLL, device: str, rng: np.random.Generator) -> float:
    m, n, k = 96, 80, 160
    x = f16(rng.uniform(-1, 1, (m, k)))
    w = f16(rng.uniform(-1, 1, (n, k)))
    bias = rng.uniform(-4, 4, n).astype(np.float32)
    y = np.zeros((m, n), np.float32)
    lib.catlass_linear.restype = ctypes.c_int
    call(lib.catlass_linear, device, m, n, k, ptr(x, F16P), ptr(w, F16P), ptr(bias, F32P),
         ptr(y, F32P))
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    ref = np.maximum(xd @ wd.T + bias, 0)
    bound = k * 2.0**-24 * (np.abs(xd) @ np.abs(wd).T + np.abs(bias)) + 2.0**-24 * np.abs(ref)
    err = np.abs(y - ref)
    assert np.all(err <= bound), f"catlass_linear: max error {err.max()} beyond its bound"
    return float(err.max())


def rmsnorm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(1e-6)) * g


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def mllm_block(lib: ctypes.CDLL, device: str, rng: np.random.Generator) -> float:
    seq, d, f, vocab = 24, 64, 128, 100
    tokens = rng.integers(0, vocab, seq).astype(np.int32)
    emb = f16(rng.normal(0, 1, (vocab, d)))
    ws = [f16(rng.normal(0, d**-0.5, (d, d))) for _ in range(4)]
    w1 = f16(rng.normal(0, d**-0.5, (d, f)))
    w2 = f16(rng.normal(0, f**-0.5, (f, d)))
    g1 = rng.uniform(0.5, 1.5, d).astype(np.float32)
    g2 = rng.uniform(0.5, 1.5, d).astype(np.float32)
    y = np.zeros((seq, d), np.float32)
    lib.mllm_block.restype = ctypes.c_int
    call(lib.mllm_block, device, seq, d, f, vocab, ptr(tokens, I32P), ptr(emb, F16P),
         *[ptr(w, F16P) for w in ws], ptr(w1, F16P), ptr(w2, F16P), ptr(g1, F32P),
         ptr(g2, F32P), ptr(y, F32P))
    wq, wk, wv, wo = (w.astype(np.float64) for w in ws)
    x = emb.astype(np.float64)[tokens]
    h = rmsnorm(x, g1)
    q, kk, v = h @ wq, h @ wk, h @ wv
    a = softmax(q @ kk.T / np.sqrt(d)) @ v
    x = x + a @ wo
    h = rmsnorm(x, g2)
    ref = x + gelu(h @ w1.astype(np.float64)) @ w2.astype(np.float64)
    err = np.abs(y - ref)
    bound = 2e-5 * (1 + np.abs(ref).max())
    assert np.all(err <= bound), f"mllm_block: max error {err.max()} beyond {bound}"
    return float(err.max())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", required=True, help="the ports' shared library (libports.so)")
    p.add_argument("--device", default="embedded", help="the device (embedded, mock:PATH, /dev/davinciN)")
    args = p.parse_args()
    lib = ctypes.CDLL(args.lib)
    rng = np.random.default_rng(43)
    e1 = catlass_linear(lib, args.device, rng)
    e2 = mllm_block(lib, args.device, rng)
    print(f"ports on {args.device}: catlass_linear max error {e1:.3g}, mllm_block max error {e2:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
