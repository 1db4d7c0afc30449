"""Block quantisation as GGUF stores it: Q8_0 and Q4_1 (notebook 09; theory.md §10.1).

A weight matrix is cut, row by row, into blocks of 32 consecutive numbers. Each block keeps a
float16 scale (and for Q4_1 a float16 offset) and one small integer per number:

    Q8_0:  x_j ~ d * q_j            q_j in -127..127 (int8),   d = max_j |x_j| / 127
    Q4_1:  x_j ~ d * q_j + m        q_j in 0..15   (4 bits),  m = min_j x_j,  d = (max_j x_j - m) / 15

Bytes per block of 32 numbers (little-endian, as llama.cpp writes them)::

    Q8_0  34 bytes: d (float16) | q_0 .. q_31 (int8)                      8.5 bits per number
    Q4_1  20 bytes: d (float16) | m (float16) | 16 bytes of nibbles       5 bits per number
          byte i holds q_i in its low nibble and q_{i+16} in its high nibble

Rounding to the nearest level, a number is off by at most half a step, d / 2: for Q8_0 at most
max|x| / 254 per block, for Q4_1 at most (max x - min x) / 30 -- plus the float16 rounding of
d and m. Dequantising is one multiply-add per number; quantising (used here only to measure
the error on float weights) picks d, m and the levels.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, describe

BLOCK = 32                                   # numbers per block, both formats
Q8_0_BYTES = 2 + BLOCK                       # 34: float16 d, 32 int8
Q4_1_BYTES = 2 + 2 + BLOCK // 2              # 20: float16 d, float16 m, 16 bytes of nibbles


def _blocks(raw, name: str, block_bytes: int) -> np.ndarray:
    """``raw`` (..., n_blocks * block_bytes) uint8 -> (..., n_blocks, block_bytes), a view."""
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise TypeError(f"{name} must be raw bytes (dtype uint8), got {describe(raw)}")
    if raw.ndim < 1 or raw.shape[-1] % block_bytes:
        raise ValueError(f"{name} must have a last axis that is a multiple of {block_bytes} bytes "
                         f"(whole blocks), got shape {raw.shape}")
    return raw.reshape(*raw.shape[:-1], raw.shape[-1] // block_bytes, block_bytes)


def _float16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The little-endian float16 at bytes ``start, start+1`` of every block: (..., n_blocks, 1)."""
    return np.ascontiguousarray(blocks[..., start:start + 2]).view("<f2")


def dequantize_q8_0(raw) -> np.ndarray:
    """Q8_0 bytes -> float32 numbers: ``x = d * q`` (notebook 09's exercise).

    float32 holds every Q8_0 number exactly (an 11-bit float16 ``d`` times a 7-bit level), so a
    float64 model widens these (``smollm2.dequantize``) without losing anything.

    Args:
        raw: uint8 array ``(..., n_blocks * 34)``, e.g. one row of a matrix per leading index.

    Returns:
        float32 ``(..., n_blocks * 32)``.
    """
    blocks = _blocks(raw, "raw", Q8_0_BYTES)                   # (..., n_blocks, 34)
    d = _float16(blocks, 0).astype(np.float32)                  # (..., n_blocks, 1)
    q = blocks[..., 2:].view(np.int8).astype(np.float32)        # (..., n_blocks, 32)
    return (d * q).reshape(*blocks.shape[:-2], -1)               # (..., n_blocks * 32)


def dequantize_q4_1(raw) -> np.ndarray:
    """Q4_1 bytes -> float32 numbers: ``x = d * q + m`` (notebook 09's exercise).

    ``d * q`` is exact in float32 (11 + 4 bits); the sum with ``m`` is rounded once to float32, as
    llama.cpp and the ``gguf`` package compute it. (On SmolLM2's file that rounding never happens:
    float32 widened to float64 equals the sum in float64 for all 134,479,872 numbers, measured.)

    Args:
        raw: uint8 array ``(..., n_blocks * 20)``.

    Returns:
        float32 ``(..., n_blocks * 32)``; within a block, numbers 0..15 come from the low nibbles of
        the 16 packed bytes and numbers 16..31 from their high nibbles.
    """
    blocks = _blocks(raw, "raw", Q4_1_BYTES)                   # (..., n_blocks, 20)
    d = _float16(blocks, 0).astype(np.float32)                  # (..., n_blocks, 1)
    m = _float16(blocks, 2).astype(np.float32)                  # (..., n_blocks, 1)
    packed = blocks[..., 4:]                                    # (..., n_blocks, 16)
    q = np.concatenate([packed & 0x0F, packed >> 4], axis=-1)   # (..., n_blocks, 32): low, then high
    return (d * q.astype(np.float32) + m).reshape(*blocks.shape[:-2], -1)


def _float_blocks(x) -> np.ndarray:
    x = as_float_array(x, "x", min_ndim=1)
    if x.shape[-1] % BLOCK:
        raise ValueError(f"x must have a last axis that is a multiple of {BLOCK}, got shape {x.shape}")
    return x.astype(np.float32).reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)


def quantize_q8_0(x) -> np.ndarray:
    """Numbers -> Q8_0 bytes (round to nearest), the inverse of :func:`dequantize_q8_0`.

    Args:
        x: ``(..., n)`` floats, ``n`` a multiple of 32.

    Returns:
        uint8 ``(..., n // 32 * 34)``.
    """
    v = _float_blocks(x)                                              # (..., n_blocks, 32)
    d = (np.abs(v).max(axis=-1, keepdims=True) / 127).astype(np.float16)
    scale = d.astype(np.float32)
    inv = 1 / np.where(scale != 0, scale, 1)                          # an all-zero block: any scale gives q = 0
    q = np.clip(np.rint(v * inv), -127, 127).astype(np.int8)          # (..., n_blocks, 32)
    out = np.concatenate([d.view(np.uint8), q.view(np.uint8)], axis=-1)   # (..., n_blocks, 34)
    return out.reshape(*v.shape[:-2], -1)


def quantize_q4_1(x) -> np.ndarray:
    """Numbers -> Q4_1 bytes (round to nearest), the inverse of :func:`dequantize_q4_1`.

    Args:
        x: ``(..., n)`` floats, ``n`` a multiple of 32.

    Returns:
        uint8 ``(..., n // 32 * 20)``.
    """
    v = _float_blocks(x)                                              # (..., n_blocks, 32)
    m = v.min(axis=-1, keepdims=True).astype(np.float16)
    d = ((v.max(axis=-1, keepdims=True) - m) / 15).astype(np.float16)
    scale = d.astype(np.float32)
    inv = 1 / np.where(scale != 0, scale, 1)                          # a constant block: any scale gives q = 0
    q = np.clip(np.rint((v - m.astype(np.float32)) * inv), 0, 15).astype(np.uint8)
    packed = q[..., :16] | (q[..., 16:] << 4)                         # (..., n_blocks, 16)
    out = np.concatenate([d.view(np.uint8), m.view(np.uint8), packed], axis=-1)   # (..., n_blocks, 20)
    return out.reshape(*v.shape[:-2], -1)


def bits_per_number(kind: str) -> float:
    """Storage cost of one number: 8.5 for Q8_0, 5.0 for Q4_1, 32 for F32, 16 for F16."""
    sizes = {"Q8_0": Q8_0_BYTES * 8 / BLOCK, "Q4_1": Q4_1_BYTES * 8 / BLOCK, "F32": 32.0, "F16": 16.0}
    if kind not in sizes:
        raise ValueError(f"kind must be one of {sorted(sizes)}, got {describe(kind)}")
    return sizes[kind]
