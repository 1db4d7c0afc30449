"""Sinusoidal positional encoding (Vaswani et al. 2017, §3.5; theory.md §4).

    PE[pos, 2i]   = sin(pos / 10000^(2i/d_model))
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))

Each pair of dimensions (2i, 2i+1) is a point on a circle turning at its own
frequency, so PE[pos + k] is PE[pos] rotated pair by pair: a fixed linear map
that depends on k only. Read as a clock with d_model/2 hands, the encoding can
be read back: ``decode_position`` takes the slowest hand for the rough position
and lets each faster hand refine it.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_array, positive_int


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
    """:func:`shift_matrix` under the name notebook 09 and the tests use (the same function)."""
    return shift_matrix(k, d_model)


def shift_matrix(k: int, d_model: int) -> np.ndarray:
    """The ``(d_model, d_model)`` matrix M_k with ``PE[pos + k] = PE[pos] @ M_k`` for every pos (notebook 04).

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


def decodable_range(d_model: int) -> float:
    """How far ``decode_position`` reads: ``0.45 * P``, P = 2 pi / w_last the period of the slowest pair.

    Beyond P / 2 the slowest hand has turned more than half way and position p looks to
    it like p - P; the margin of 0.05 P leaves room for noise (about 2 100 positions at
    d_model = 64, where 0.45 P is about 21 200).
    """
    return 0.45 * 2 * np.pi / frequencies(d_model)[-1]


def decode_position(pe) -> np.ndarray:
    """The integer position p whose sinusoidal encoding is ``pe``, read coarse to fine.

    Pair i of PE[p] is the point (sin, cos) of the angle p * w_i, so ``arctan2`` gives
    that angle back, but only modulo 2 pi: the fast pairs are precise and wrap, the
    slowest pair does not wrap below half its period and is coarse. Start from the
    slowest pair's estimate and let each faster pair choose the number of whole turns
    closest to the estimate so far:

        p_est  <- theta_last / w_last                      (theta in (-pi, pi])
        turns  =  round((p_est * w_i - theta_i) / (2 pi))   for i = last-1, ..., 0
        p_est  <- (theta_i + 2 pi turns) / w_i

    and round the final estimate (w_0 = 1). O(d_model) work and memory per vector: no
    table of candidate encodings.

    Args:
        pe: ``(d_model,)`` or ``(n, d_model)``, even ``d_model``: encodings of positions
            ``0 <= p < decodable_range(d_model)``. Every entry may be off by up to 0.01
            (e.g. after storage in bfloat16): each angle is then off by at most
            delta = asin(0.01 sqrt 2) < 0.015 rad. One unwrapping step needs
            delta * (1 + w_i / w_(i+1)) < pi, i.e. delta < pi / (1 + 10000^(2/d_model)),
            at least 0.031 (d_model = 4); the final rounding needs delta < 0.5.

    Returns:
        int64 array ``()`` or ``(n,)``: the positions.
    """
    pe = check_array(pe, "pe", nonempty=(-1,))
    if pe.ndim > 2:
        raise ValueError(f"pe must have shape (d_model,) or (n, d_model), got shape {pe.shape}")
    d_model = pe.shape[-1]
    if d_model % 2:
        raise ValueError(f"pe must have an even last dimension d_model (sin, cos pairs), got shape {pe.shape}")
    w = frequencies(d_model)                                   # (d_model/2,) fast -> slow
    theta = np.arctan2(pe[..., 0::2], pe[..., 1::2])           # (..., d_model/2) angles in (-pi, pi]
    estimate = theta[..., -1] / w[-1]                          # (...) the slowest hand: coarse, no wrap
    for i in range(d_model // 2 - 2, -1, -1):                  # ever faster hands refine it
        turns = np.round((estimate * w[i] - theta[..., i]) / (2 * np.pi))   # (...) whole turns of pair i
        estimate = (theta[..., i] + 2 * np.pi * turns) / w[i]               # (...)
    return np.round(estimate).astype(np.int64)
