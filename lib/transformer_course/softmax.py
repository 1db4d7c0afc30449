"""Softmax: turn a row of scores into a probability distribution.

    softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k

Subtracting the row maximum m changes nothing mathematically (it cancels in the
ratio) but keeps ``exp`` from overflowing (theory.md §1.2).
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_array, check_distributions, check_same_shape, check_scores


def softmax(x, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    Args:
        x: scores, any shape ``(..., n)`` with ``n >= 1``; ``-inf`` marks an entry that
            must get weight 0 (a masked key). NaN and ``+inf`` are refused.
        axis: the axis that sums to one (default: the last).

    Returns:
        Array of the same shape and floating dtype as ``x``; every slice along
        ``axis`` is non-negative and sums to 1 -- except a slice whose entries
        are all ``-inf`` (everything masked), which is all zeros, never NaN.
    """
    x, axis = check_scores(x, axis)
    row_max = np.max(x, axis=axis, keepdims=True)
    # A fully masked slice has max -inf; shift it by 0 so exp gives exact zeros.
    row_max = np.where(np.isneginf(row_max), 0.0, row_max).astype(x.dtype, copy=False)
    exps = np.exp(x - row_max)
    total = np.sum(exps, axis=axis, keepdims=True)
    return exps / np.where(total == 0, 1, total).astype(x.dtype, copy=False)


# -- its backward ----------------------------------------------------------------------------------

# exp_portable: e**x from operations IEEE 754 rounds the same way on every CPU.
_LN2_HI = 0.693145751953125            # ln 2 to 16 bits: k * _LN2_HI is exact for |k| < 2**37
_LN2_LO = 1.4286068203094172321e-06    # ln 2 - _LN2_HI
_INV_LN2 = 1.4426950408889634          # 1 / ln 2, a literal: np.log itself has per-CPU paths
_TAYLOR = [1.0 / np.prod(np.arange(1.0, n + 1)) for n in range(14)]   # 1/n!, n = 0..13


def exp_portable(x) -> np.ndarray:
    """``e**x`` in float64, the same bits on every CPU.

    ``np.exp`` picks one of several SIMD implementations at run time (AVX-512, AVX2, or the
    baseline's libm): each is accurate to an ulp or so, but their last bits differ, and whatever is
    made of those bits (round-off itself, as in notebook 10's finite-difference figure) differs with
    them. This one uses only ``+``, ``*``, ``np.rint`` and ``np.ldexp``, which IEEE 754 defines exactly
    (each result correctly rounded), so every CPU and every SIMD path computes the same number:

        e**x = 2**k * e**r,  k = rint(x / ln 2),  r = x - k ln 2 (|r| <= 0.35, ln 2 in two parts),

    with ``e**r`` from its Taylor polynomial to degree 13 (truncation below 1e-17 relatively),
    evaluated by Horner's rule. Agrees with ``np.exp`` to a few ulp (tests/test_portable_exp.py);
    about 20 times slower. ``-inf`` gives 0, ``+inf`` and arguments above ln(finfo.max) give inf.
    """
    x = np.asarray(x, dtype=np.float64)
    clipped = np.clip(np.nan_to_num(x, nan=0.0, posinf=710.0, neginf=-746.0), -746.0, 710.0)
    k = np.rint(clipped * _INV_LN2)
    r = (clipped - k * _LN2_HI) - k * _LN2_LO
    poly = np.full_like(r, _TAYLOR[-1])
    for c in reversed(_TAYLOR[:-1]):
        poly = poly * r + c
    with np.errstate(over="ignore", under="ignore"):
        out = np.ldexp(poly, k.astype(np.int64))
    return np.where(np.isnan(x), np.nan, out)


def softmax_jacobian(p) -> np.ndarray:
    """Jacobian of the softmax at output ``p``: ``J = diag(p) - p p^T`` (theory.md §2.2).

    Args:
        p: softmax output(s), shape ``(..., n)``, each row a distribution.

    Returns:
        ``(..., n, n)``; ``J[..., i, j] = d softmax_i / d x_j``. Its norm goes to 0 as
        ``p`` approaches one-hot, which is how a saturated softmax stops gradients.
    """
    p = check_array(p, "p")
    n = p.shape[-1]
    # (..., n, 1) * (n, n) - (..., n, 1) * (..., 1, n) -> (..., n, n)
    return p[..., :, None] * np.eye(n, dtype=p.dtype) - p[..., :, None] * p[..., None, :]


def softmax_backward(p, g) -> np.ndarray:
    """Gradient through ``p = softmax(s)`` along the last axis, without forming the Jacobian
    (forward: :func:`softmax`). Notebook 02 asks for it first and notebook 10 again, with these
    parameters both times.

    With the Jacobian ``J = diag(p) - p p^T`` of each row (theory.md §2.2, symmetric),
    ``dL/ds = J g = p * (g - <g, p>)``: one product and one row sum, never the ``(n, n)`` matrix.

    Args:
        p: the softmax output ``(..., n)`` (rows sum to 1, or are all 0 when fully masked).
        g: ``dL/dp``, the shape of ``p``.

    Returns:
        ``dL/ds``, the shape of ``p``; exactly 0 where ``p`` is 0 (a masked key).
    """
    p = as_float_array(p, "p")
    g = as_float_array(g, "g")
    check_same_shape(g, "g", p.shape, "p")
    return p * (g - np.sum(g * p, axis=-1, keepdims=True))     # (..., n)


def attention_entropy(weights) -> np.ndarray:
    """Entropy in nats of each distribution along the last axis, with ``0 ln 0 = 0`` exactly.

    Args:
        weights: ``(..., n)`` non-negative rows summing to 1 (attention weights); a row of
            zeros (a query whose keys are all masked) is accepted and has entropy 0.

    Returns:
        ``(...)``: ``ln n`` for a uniform row, 0 for one-hot.
    """
    w, axis = check_distributions(weights, -1)
    safe = np.where(w > 0, w, 1)                   # 0 * ln 1 = 0 where the weight is 0
    return -np.sum(w * np.log(safe), axis=axis)

