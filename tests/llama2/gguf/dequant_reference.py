#!/usr/bin/env python3
"""Prints the expected values of tests/llama2/gguf_test.cpp's dequantization cases, computed by
gguf-py's own NumPy dequantizer (an implementation independent of ours).

Usage (outside CI): python3 -m venv /tmp/v && /tmp/v/bin/pip install gguf==0.19.0 numpy &&
  /tmp/v/bin/python tests/llama2/gguf/dequant_reference.py
The blocks are the test's: bytes from the LCG x = 1103515245 x + 12345 (mod 2^32), byte = (x >> 16) & 255,
seed 7, then each block's half-float fields set (d = 0.0123, m = -0.5, dmin = 0.0456).
"""
import numpy as np
from gguf import GGMLQuantizationType as T, quants

LAYOUT = {T.Q8_0: (32, 34), T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q4_K: (256, 144), T.Q5_K: (256, 176),
          T.Q6_K: (256, 210), T.F16: (1, 2), T.BF16: (1, 2)}
N = 512
SAMPLES = [0, 1, 15, 16, 17, 31, 32, 63, 64, 100, 127, 128, 200, 255, 256, 300, 383, 384, 450, 511]


def lcg_bytes(n, seed=7):
    x, out = seed, bytearray()
    for _ in range(n):
        x = (1103515245 * x + 12345) & 0xFFFFFFFF
        out.append((x >> 16) & 0xFF)
    return out


def h(v):
    return np.float16(v).tobytes()


for t, (elems, nbytes) in LAYOUT.items():
    blocks = N // elems
    raw = lcg_bytes(blocks * nbytes)
    if t not in (T.F16, T.BF16):
        for b in range(blocks):
            o = b * nbytes
            if t == T.Q6_K:
                raw[o + 208:o + 210] = h(0.0123)
            else:
                raw[o:o + 2] = h(0.0123)
                if t == T.Q4_1:
                    raw[o + 2:o + 4] = h(-0.5)
                if t in (T.Q4_K, T.Q5_K):
                    raw[o + 2:o + 4] = h(0.0456)
    elif t == T.F16:
        # keep the halves finite: clear the top exponent bit of every high byte
        for i in range(1, len(raw), 2):
            raw[i] &= 0xBF
    else:
        for i in range(1, len(raw), 2):
            raw[i] &= 0xBF
    arr = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(1, -1)
    y = quants.dequantize(arr, t).reshape(-1).astype(np.float32)
    assert y.size == N and np.all(np.isfinite(y)), t
    vals = ", ".join(f"{float(y[i]):.9g}f" for i in SAMPLES)
    print(f"{{TensorType::{t.name}, {float(np.sum(y.astype(np.float64))):.17g}, {{{vals}}}}},")
