"""Sinusoidal positional encoding (Vaswani et al. 2017, §3.5; theory.md §4) and RoPE (Su et al. 2021; §10).

    PE[pos, 2i]   = sin(pos / 10000^(2i/d_model))
    PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model))

Each pair of dimensions (2i, 2i+1) is a point on a circle turning at its own
frequency, so PE[pos + k] is PE[pos] rotated pair by pair: a fixed linear map
that depends on k only. Read as a clock with d_model/2 hands, the encoding can
be read back: ``decode_position`` takes the slowest hand for the rough position
and lets each faster hand refine it.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._checks import as_float_array, check_array, describe, positive_int


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """Angular frequency of each dimension pair, ``w_i = base ** (-2i / d_model)``: ``(ceil(d_model / 2),)``
    float64, from 1 down to ~1/base (the sinusoids' ladder; RoPE's, :func:`rope_frequencies`, is this one)."""
    d_model = positive_int(d_model, "d_model")
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not np.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a finite number > 1, got {describe(base)}")
    two_i = np.arange(0, d_model, 2)                # (ceil(d_model / 2),)
    return float(base) ** (-two_i / d_model)


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


def slowest_pair_position(pe) -> np.ndarray:
    """The position the slowest pair of ``pe`` reads on its own, rounded: notebook 04's baseline for
    ``decode_position`` (exact without noise, ``0 <= p < decodable_range(d_model)``; coarse with it).

    pe: ``(d_model,)`` or ``(n, d_model)``, even ``d_model``.   returns: int64 ``()`` or ``(n,)``.
    """
    pe = check_array(pe, "pe", nonempty=(-1,))
    if pe.ndim > 2 or pe.shape[-1] % 2:
        raise ValueError(f"pe must have shape (d_model,) or (n, d_model) with d_model even, got shape {pe.shape}")
    theta = np.arctan2(pe[..., -2], pe[..., -1])               # (...) the slowest pair's angle in (-pi, pi]
    return np.round(theta / frequencies(pe.shape[-1])[-1]).astype(np.int64)


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


# -- RoPE: the same pairwise rotation applied to queries and keys (notebook 09) --------------------

def rope_frequencies(d_head: int, base: float = 10000.0) -> np.ndarray:
    """Angular frequency of each adjacent pair: ``base ** (-2i / d_head)``, ``(d_head // 2,)`` float64 --
    the sinusoids' ladder (:func:`frequencies`) over a head's even width, with the model's base."""
    d_head = positive_int(d_head, "d_head")
    if d_head % 2:
        raise ValueError(f"d_head must be even (features rotate in pairs), got {d_head}")
    return frequencies(d_head, base)


def rope_tables(positions, d_head: int, base: float = 10000.0, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``position * frequency``: two ``(n, d_head // 2)`` arrays of ``dtype``.

    The angles are computed in float64 and then cast: the tables never turn a float32
    computation into a float64 one.
    """
    positions = np.asarray(positions)
    if positions.ndim != 1 or not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(f"positions must be a 1-D array of integers, got {describe(positions)}")
    angles = positions[:, None] * rope_frequencies(d_head, base)[None, :]     # (n, d_head/2)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def apply_rope(x, positions, base: float = 10000.0) -> np.ndarray:
    """Rotate each adjacent pair ``(x[2i], x[2i+1])`` of the vector at position ``p`` by ``p * w_i``.

        x'[2i]   = x[2i] cos(p w_i) - x[2i+1] sin(p w_i)
        x'[2i+1] = x[2i] sin(p w_i) + x[2i+1] cos(p w_i)        w_i = base ** (-2i / d)

    Args:
        x: ``(..., n, d)`` with ``d`` even: queries or keys of one or more heads.
        positions: ``(n,)`` integer positions of the n vectors.
        base: the frequency base (10000 in the RoPE paper, 1e5 in SmolLM2).

    Returns:
        ``(..., n, d)`` in ``x``'s dtype. Lengths are kept, and ``apply_rope(q, [m]) .
        apply_rope(k, [n])`` depends on ``m - n`` only.
    """
    x = as_float_array(x, "x", min_ndim=2)
    n, d = x.shape[-2:]
    positions = np.asarray(positions)
    if positions.shape != (n,):
        raise ValueError(f"positions must have shape ({n},), one per vector of x, got {describe(positions)}")
    cos, sin = rope_tables(positions, d, base, x.dtype)                   # (n, d/2) each
    return rotate_pairs(x, cos, sin)


def rotate_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """The rotation itself, given the tables: ``x`` ``(..., n, d)``, ``cos``/``sin`` ``(n, d/2)``."""
    even, odd = x[..., 0::2], x[..., 1::2]                               # (..., n, d/2) each
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def rope_backward(grad_output, positions, base: float = 10000.0) -> np.ndarray:
    """Gradient through ``apply_rope(x, positions, base)`` with respect to ``x``.

    RoPE multiplies each pair by a rotation matrix ``R(p w_i)``; the gradient is multiplied by its
    transpose, ``R(p w_i)^T = R(-p w_i)``: the same rotation by the opposite angle (the inverse).

    Args:
        grad_output: ``dL/dx'`` ``(..., n, d)``.
        positions: the forward's ``(n,)`` positions.
        base: the forward's frequency base.

    Returns:
        ``dL/dx`` ``(..., n, d)``.
    """
    g = as_float_array(grad_output, "grad_output", min_ndim=2)
    n, d = g.shape[-2:]
    positions = np.asarray(positions)
    if positions.shape != (n,):
        raise ValueError(f"positions must have shape ({n},), one per vector of grad_output, got {describe(positions)}")
    cos, sin = rope_tables(positions, d, base, g.dtype)
    return rotate_pairs(g, cos, -sin)
