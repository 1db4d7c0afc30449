"""Sinusoidal positional encoding (Vaswani et al. 2017, §3.5; theory.md §4).

    PE[pos, 2i]   = sin(pos / 10000^(2i/d_model))
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))

Each pair of dimensions (2i, 2i+1) is a point on a circle turning at its own
frequency, so PE[pos + k] is PE[pos] rotated pair by pair: a fixed linear map
that depends on k only.
"""

from __future__ import annotations

import numpy as np

from ._checks import positive_int


def frequencies(d_model: int) -> np.ndarray:
    """Angular frequency of each dimension pair: ``(ceil(d_model / 2),)``, from 1 down to ~1e-4."""
    d_model = positive_int(d_model, "d_model")
    two_i = np.arange(0, d_model, 2)
    return 1.0 / np.power(10000.0, two_i / d_model)


def positional_encoding(n_positions: int, d_model: int) -> np.ndarray:
    """The sinusoidal encoding of positions ``0..n_positions-1``.

    Args:
        n_positions: number of positions.
        d_model: width of the token vectors (odd widths drop the last cosine).

    Returns:
        float64 array ``(n_positions, d_model)``; even columns hold sines and
        odd columns cosines; every entry lies in [-1, 1].
    """
    n_positions = positive_int(n_positions, "n_positions")
    d_model = positive_int(d_model, "d_model")
    pos = np.arange(n_positions)[:, None]           # (n, 1)
    angles = pos * frequencies(d_model)[None, :]    # (n, ceil(d/2))
    pe = np.empty((n_positions, d_model))
    pe[:, 0::2] = np.sin(angles)                    # even dims: sin
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2]) # odd dims: cos
    return pe


def relative_shift_matrix(k: int, d_model: int) -> np.ndarray:
    """The ``(d_model, d_model)`` matrix M_k with ``PE[pos + k] = PE[pos] @ M_k`` for every pos.

    Block diagonal: pair (2i, 2i+1) is rotated by the angle ``k * w_i``.
    Requires an even ``d_model``.
    """
    d_model = positive_int(d_model, "d_model")
    if d_model % 2:
        raise ValueError(f"d_model must be even for the pairwise rotation, got {d_model}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer offset, got {type(k).__name__}")
    m = np.zeros((d_model, d_model))
    for i, w in enumerate(frequencies(d_model)):
        c, s = np.cos(k * w), np.sin(k * w)
        # row vector [sin a, cos a] @ [[c, -s], [s, c]] = [sin(a + kw), cos(a + kw)]
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, -s], [s, c]]
    return m
