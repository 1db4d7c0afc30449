"""Softmax: turn a row of scores into a probability distribution.

    softmax(x)_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k

Subtracting the row maximum m changes nothing mathematically (it cancels in the
ratio) but keeps ``exp`` from overflowing (theory.md §1.2).
"""

from __future__ import annotations

import numpy as np

from ._checks import check_array, check_distributions, check_scores


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


def attention_entropy(weights, axis: int = -1) -> np.ndarray:
    """Entropy in nats of each distribution along ``axis``, with ``0 ln 0 = 0`` exactly.

    Args:
        weights: ``(..., n)`` non-negative rows summing to 1 (attention weights); a row of
            zeros (a query whose keys are all masked) is accepted and has entropy 0.
        axis: the axis that holds each distribution.

    Returns:
        Array of ``weights``' shape without ``axis``: ``ln n`` for a uniform row, 0 for one-hot.
    """
    w, axis = check_distributions(weights, axis)
    safe = np.where(w > 0, w, 1)                   # 0 * ln 1 = 0 where the weight is 0
    return -np.sum(w * np.log(safe), axis=axis)

