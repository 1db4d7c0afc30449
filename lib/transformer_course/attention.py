"""Scaled dot-product attention (Vaswani et al. 2017, eq. 1; theory.md §1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Four steps: score every query against every key, scale by 1/sqrt(d_k), mask,
normalise each row with a softmax and blend the values with those weights.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_finite, describe
from .softmax import softmax


def check_mask(mask, score_shape) -> np.ndarray:
    """A boolean (True = may attend) or additive float mask that broadcasts to
    ``score_shape`` = ``(..., n_q, n_k)`` without enlarging it, as an array.
    (Finiteness of a float mask is checked by the caller, each in its own way.)"""
    mask = np.asarray(mask)
    if mask.dtype == object or not (
        mask.dtype == bool or np.issubdtype(mask.dtype, np.floating)
    ):
        raise TypeError(
            "mask must be boolean (True = may attend) or floating (added to the "
            f"scores, -inf = blocked), got {describe(mask)}"
        )
    try:
        broadcast = np.broadcast_shapes(mask.shape, score_shape)
    except ValueError:
        broadcast = None
    if broadcast != tuple(score_shape):
        raise ValueError(
            f"mask of shape {mask.shape} does not broadcast to the score shape "
            f"{tuple(score_shape)} (..., n_q, n_k)"
        )
    return mask


def _mask_scores(scores: np.ndarray, mask) -> np.ndarray:
    """Apply a boolean (True = may attend) or additive float mask to scores."""
    mask = check_mask(mask, scores.shape)
    if mask.dtype == bool:
        return np.where(mask, scores, -np.inf).astype(scores.dtype, copy=False)
    check_finite(mask, "mask", allow_neg_inf=True)
    return scores + mask.astype(scores.dtype, copy=False)


def _check_qk(Q, K):
    """Q ``(..., n_q, d_k)`` and K ``(..., n_k, d_k)`` as float arrays with matching d_k and batch."""
    Q = as_float_array(Q, "Q", min_ndim=2)
    K = as_float_array(K, "K", min_ndim=2)
    if Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            f"Q and K must have the same last dimension d_k, got Q {Q.shape} and K {K.shape}"
        )
    if Q.shape[:-2] != K.shape[:-2]:
        raise ValueError(
            f"Q and K must have the same leading (batch) dimensions, got Q {Q.shape} and K {K.shape}"
        )
    return Q, K


def check_qkv(Q, K, V):
    """Shape checks shared by every attention: returns Q, K, V as float arrays.

    Q ``(..., n_q, d_k)``, K ``(..., n_k, d_k)``, V ``(..., n_k, d_v)``, one batch shape.
    (Finiteness is checked by the caller, each in its own way.)
    """
    Q, K = _check_qk(Q, K)
    V = as_float_array(V, "V", min_ndim=2)
    if K.shape[-2] != V.shape[-2]:
        raise ValueError(
            "K and V must have the same number of positions n_k (axis -2), "
            f"got K {K.shape} and V {V.shape}"
        )
    if K.shape[:-2] != V.shape[:-2]:
        raise ValueError(
            f"K and V must have the same leading (batch) dimensions, got K {K.shape} and V {V.shape}"
        )
    return Q, K, V


def attention_scores(Q, K) -> np.ndarray:
    """Scaled scores ``Q K^T / sqrt(d_k)``.

    Args:
        Q: queries ``(..., n_q, d_k)``.
        K: keys ``(..., n_k, d_k)``.

    Returns:
        ``(..., n_q, n_k)``: entry ``[i, j]`` says how well query i matches key j.
    """
    Q, K = _check_qk(Q, K)
    d_k = Q.shape[-1]
    dtype = np.result_type(Q, K)
    # (..., n_q, d_k) @ (..., d_k, n_k) -> (..., n_q, n_k)
    return (Q @ np.swapaxes(K, -1, -2)) * dtype.type(1.0 / np.sqrt(d_k))


def scaled_dot_product_attention(Q, K, V, mask=None):
    """Scaled dot-product attention, batched over any leading dimensions.

    Args:
        Q: queries ``(..., n_q, d_k)``.
        K: keys ``(..., n_k, d_k)``.
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
    for name, arr in (("Q", Q), ("K", K), ("V", V)):
        check_finite(arr, name)
    scores = attention_scores(Q, K)              # (..., n_q, n_k)
    if mask is not None:
        scores = _mask_scores(scores, mask)
    weights = softmax(scores, axis=-1)           # (..., n_q, n_k), rows sum to 1
    output = weights @ V                          # (..., n_q, d_v)
    return output, weights
