"""Scaled dot-product attention (Vaswani et al. 2017, eq. 1; theory.md §1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Four steps: score every query against every key, scale by 1/sqrt(d_k), mask,
normalise each row with a softmax and blend the values with those weights.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_finite, check_mask, check_qk, check_qkv  # noqa: F401 (check_mask: also used from here)
from .softmax import softmax


def attention_scores(Q, K) -> np.ndarray:
    """Scaled scores ``Q K^T / sqrt(d_k)``.

    Args:
        Q: queries ``(..., n_q, d_k)``.
        K: keys ``(..., n_k, d_k)``.

    Returns:
        ``(..., n_q, n_k)``: entry ``[i, j]`` says how well query i matches key j.
    """
    Q, K = check_qk(Q, K)
    d_k = Q.shape[-1]
    dtype = np.result_type(Q, K)
    # (..., n_q, d_k) @ (..., d_k, n_k) -> (..., n_q, n_k)
    return (Q @ np.swapaxes(K, -1, -2)) * dtype.type(1.0 / np.sqrt(d_k))


def scaled_dot_product_attention(Q, K, V, mask=None):
    """Scaled dot-product attention, batched over any leading dimensions.

    Args:
        Q: queries ``(..., n_q, d_k)``, ``d_k >= 1``.
        K: keys ``(..., n_k, d_k)``, ``n_k >= 1``.
        V: values ``(..., n_k, d_v)``.
        mask: optional; boolean (True = may attend) or additive float
            (``-inf`` or a large negative number = blocked). Any shape that
            broadcasts to the scores ``(..., n_q, n_k)`` without enlarging
            them, e.g. ``(n_q, n_k)`` shared over batch and heads.

    Returns:
        ``(output, weights)``: output ``(..., n_q, d_v)`` and attention weights
        ``(..., n_q, n_k)`` whose rows sum to 1. A query whose keys are all
        masked gets weights 0 and output 0 (as PyTorch's SDPA does), not NaN.
    """
    Q, K, V = check_qkv(Q, K, V)
    scores = attention_scores(Q, K)              # (..., n_q, n_k)
    if mask is not None:
        scores = apply_mask(scores, mask)        # blocked keys -> -inf
    weights = softmax(scores, axis=-1)           # (..., n_q, n_k), rows sum to 1
    output = weights @ V                          # (..., n_q, d_v)
    return output, weights


def apply_mask(scores: np.ndarray, mask) -> np.ndarray:
    """Scores with a boolean mask (False -> ``-inf``) or an additive float mask applied."""
    mask = check_mask(mask, scores.shape)
    if mask.dtype == bool:
        return np.where(mask, scores, -np.inf).astype(scores.dtype, copy=False)
    check_finite(mask, "mask", allow_neg_inf=True)
    return scores + mask.astype(scores.dtype, copy=False)
