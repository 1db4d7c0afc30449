"""Scaled dot-product attention (Vaswani et al. 2017, eq. 1; theory.md §1).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Four steps: score every query against every key, scale by 1/sqrt(d_k), mask,
normalise each row with a softmax and blend the values with those weights.
:func:`lookup_query` runs the lookup backwards: it designs the query that
retrieves one given key with a given weight.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._checks import (  # noqa: F401 (check_mask: also used from here)
    check_array,
    check_finite,
    check_mask,
    check_qk,
    check_qkv,
    check_scores_finite,
    describe,
    positive_float,
    scores_may_overflow,
)
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
    with np.errstate(over="ignore", invalid="ignore"):
        # (..., n_q, d_k) @ (..., d_k, n_k) -> (..., n_q, n_k)
        scores = (Q @ np.swapaxes(K, -1, -2)) * dtype.type(1.0 / np.sqrt(d_k))
    if scores_may_overflow(Q, K):                   # huge Q or K: refuse scores that overflowed
        check_scores_finite(scores, Q, K)
    return scores


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


def lookup_query(K, j: int, confidence: float = 0.99) -> np.ndarray:
    """The shortest query that retrieves key ``j`` with weight exactly ``confidence`` (notebook 01).

    Attention scores are linear in the query, so a query can be designed: ask for the scaled
    scores ``s = K q / sqrt(d)`` to be ``m`` for key ``j`` and ``0`` for every other key. The
    softmax of that row gives key ``j`` the weight ``e^m / (e^m + n - 1)``, which equals
    ``confidence`` for the margin

        m = ln((n - 1) * confidence / (1 - confidence)).

    ``K q = sqrt(d) * m * e_j`` is ``n`` equations in ``d >= n`` unknowns; of its solutions the
    shortest lies in the span of the keys, ``q = K^T a`` with ``(K K^T) a = sqrt(d) m e_j``
    (what ``np.linalg.lstsq`` returns). The plain ``q = c * K[j]`` fails whenever another key
    has a larger dot product with ``K[j]`` than ``K[j]`` itself (a longer key nearby).

    Args:
        K: keys ``(n, d)``, ``2 <= n <= d``, rows linearly independent (else no query sets
            the n scores independently: ``ValueError``).
        j: index of the key to retrieve, ``0 <= j < n`` (negative indices count from the end).
        confidence: the weight key ``j`` must get, ``0 < confidence < 1``.

    Returns:
        ``q`` ``(d,)`` with ``softmax(K q / sqrt(d))[j] == confidence`` and the weight
        ``(1 - confidence) / (n - 1)`` on every other key.
    """
    K = check_array(K, "K", min_ndim=2)
    if K.ndim != 2:
        raise ValueError(f"K must be a 2-D array of keys (n, d), got shape {K.shape}")
    n, d = K.shape
    if not 2 <= n <= d:
        raise ValueError(f"K must have 2 <= n <= d keys (n, d) so that every score can be set, got shape {K.shape}")
    if isinstance(j, (bool, np.bool_)) or not isinstance(j, numbers.Integral):
        raise TypeError(f"j must be an integer index of a key, got {describe(j)}")
    if not -n <= j < n:
        raise ValueError(f"j must index one of the n={n} keys, -{n} <= j < {n}, got {j}")
    confidence = positive_float(confidence, "confidence")
    if not confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    rank = np.linalg.matrix_rank(K)
    if rank < n:
        raise ValueError(f"the n={n} rows of K must be linearly independent (else no query sets their scores "
                         f"independently), got rank {rank}")
    margin = np.log((n - 1) * confidence / (1.0 - confidence))    # score gap that gives weight `confidence`
    target = np.zeros(n)
    target[j] = np.sqrt(d) * margin                                # K q = sqrt(d) * scaled scores
    # n equations, d >= n unknowns: lstsq returns the minimum-norm solution, q = K^T (K K^T)^{-1} target
    return np.linalg.lstsq(K, target, rcond=None)[0]               # (d,)
