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
    as_float_array,
    check_array,
    check_finite,
    check_mask,
    check_qk,
    check_qkv,
    check_same_shape,
    check_scores_finite,
    describe,
    positive_float,
    positive_int,
    scores_may_overflow,
)
from .softmax import softmax, softmax_backward


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


# -- its backward ----------------------------------------------------------------------------------

def attention_backward(grad_output, Q, K, V, mask=None):
    """Gradient through ``O = softmax(Q K^T / sqrt(d_k) + mask) V``
    (forward: :func:`transformer_course.attention.scaled_dot_product_attention`).

        dV = P^T dO,   dP = dO V^T,   dS = softmax_backward(P, dP),
        dQ = dS K / sqrt(d_k),   dK = dS^T Q / sqrt(d_k)

    A blocked key has ``P = 0``, so ``dS`` -- and every gradient through it -- is exactly 0 there.

    Args:
        grad_output: ``dL/dO`` ``(..., n_q, d_v)``.
        Q, K, V: the forward's inputs ``(..., n_q, d_k)``, ``(..., n_k, d_k)``, ``(..., n_k, d_v)``.
        mask: the forward's mask (boolean, True = may attend, or additive float), or None.
            The weights ``P`` are recomputed from ``Q``, ``K`` and the mask (one forward's work).

    Returns:
        ``(dQ, dK, dV)`` with the shapes of ``Q``, ``K``, ``V``.
    """
    Q, K, V = check_qkv(Q, K, V)
    dO = as_float_array(grad_output, "grad_output", min_ndim=2)
    check_same_shape(dO, "grad_output", Q.shape[:-1] + V.shape[-1:], "the output (..., n_q, d_v)")
    _, P = scaled_dot_product_attention(Q, K, V, mask)          # (..., n_q, n_k)
    return _attention_backward_given_weights(dO, Q, K, V, P)


def _attention_backward_given_weights(dO, Q, K, V, P):
    """:func:`attention_backward` once the weights ``P`` (..., n_q, n_k) are known (checked inputs)."""
    scale = np.result_type(Q, K).type(1.0 / np.sqrt(Q.shape[-1]))     # keeps float32 in float32
    dV = np.swapaxes(P, -1, -2) @ dO                              # (..., n_k, n_q) @ (..., n_q, d_v)
    dP = dO @ np.swapaxes(V, -1, -2)                              # (..., n_q, n_k)
    dS = softmax_backward(P, dP) * scale                          # (..., n_q, n_k), d/d(Q K^T)
    dQ = dS @ K                                                   # (..., n_q, d_k)
    dK = np.swapaxes(dS, -1, -2) @ Q                              # (..., n_k, d_k)
    return dQ, dK, dV


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


# -- grouped-query attention: causal attention where groups of query heads share a key/value head --

def _grouped(q, k, v, query_positions, grad_output=None):
    """Checks shared by grouped-query attention's forward and backward; the group's queries as one
    block ``(n_kv, group * n_q, d)`` over its key/value head and the causal mask for that block."""
    q = as_float_array(q, "q", min_ndim=3)
    k = as_float_array(k, "k", min_ndim=3)
    v = as_float_array(v, "v", min_ndim=3)
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    if q.ndim != 3 or k.ndim != 3 or k.shape[2] != d or v.shape != k.shape:
        raise ValueError(f"expected q (n_heads, n_q, d) and k, v (n_kv_heads, n_k, d) with the same d; "
                         f"got q {q.shape}, k {k.shape}, v {v.shape}")
    if n_heads % n_kv:
        raise ValueError(f"n_kv_heads = {n_kv} must divide n_heads = {n_heads}")
    if grad_output is not None:
        check_same_shape(as_float_array(grad_output, "grad_output", min_ndim=3), "grad_output", q.shape, "q")
    if query_positions is None:
        query_positions = np.arange(n_k - n_q, n_k)
    query_positions = np.asarray(query_positions)
    if query_positions.shape != (n_q,):
        raise ValueError(f"query_positions must have shape ({n_q},), got {describe(query_positions)}")
    group = n_heads // n_kv
    qg = q.reshape(n_kv, group * n_q, d)                  # (n_kv, group*n_q, d): query head h -> kv head h // group
    return qg, k, v, _sees(query_positions, n_k, group)


def _sees(query_positions, n_k: int, group: int) -> np.ndarray:
    """``(group * n_q, n_k)``: True where a query may see a key (at or before its position), for each of the
    group's query heads stacked one after the other."""
    sees = np.arange(n_k)[None, :] <= query_positions[:, None]           # (n_q, n_k)
    return np.tile(sees, (group, 1))                                     # (group*n_q, n_k): the same for each head


def grouped_query_attention(q, k, v):
    """Causal attention where groups of query heads share one key/value head (notebook 09's exercise).

    Query head ``h`` reads key/value head ``h // (n_heads // n_kv_heads)``; the queries are the last
    ``n_q`` positions ``n_k - n_q .. n_k - 1`` (with a KV cache: the new tokens), and a query sees the
    keys at positions ``<=`` its own. The output of :func:`grouped_query_attention_with_weights`.

    Args:
        q: ``(n_heads, n_q, d)`` queries (already rotated).
        k, v: ``(n_kv_heads, n_k, d)`` keys (rotated) and values, positions ``0..n_k-1``;
            ``n_kv_heads`` must divide ``n_heads``.

    Returns:
        ``(n_heads, n_q, d)`` in ``q``'s dtype.
    """
    return grouped_query_attention_with_weights(q, k, v)[0]


def grouped_query_attention_unchecked(q, k, v):
    """:func:`grouped_query_attention`'s arithmetic without its checks (of the arguments, of NaN, of scores that
    overflow), for a caller that checks once what a failure would show: ``Llama.forward`` checks its logits and,
    when they are not finite, runs again on the checked version to name the cause. The same operations in the
    same order as the checked version, so the same numbers; ``q`` ``(n_heads, n_q, d)``, ``k``, ``v``
    ``(n_kv_heads, n_k, d)`` of one dtype, the queries the last ``n_q`` positions."""
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    group = n_heads // n_kv
    with np.errstate(over="ignore", invalid="ignore"):    # an overflow shows as inf or NaN in the caller's check
        scores = (q.reshape(n_kv, group * n_q, d) @ k.swapaxes(1, 2)) * q.dtype.type(1.0 / np.sqrt(d))  # (n_kv, group*n_q, n_k)
        if n_q > 1:                                       # a single (last) query sees every key: no mask
            scores = np.where(_sees(np.arange(n_k - n_q, n_k), n_k, group), scores, -np.inf)
        exps = np.exp(scores - scores.max(axis=-1, keepdims=True))      # the softmax over the keys
        return ((exps / exps.sum(axis=-1, keepdims=True)) @ v).reshape(n_heads, n_q, d)


def grouped_query_attention_with_weights(q, k, v, query_positions=None):
    """:func:`grouped_query_attention` and its attention weights (the maps of notebook 09's induction
    heads; LoRA's backward reuses them).

    It is :func:`scaled_dot_product_attention` itself: the ``group`` query heads that share a key/value
    head are stacked into one block of ``group * n_q`` queries over that head, with the causal mask.

    Args:
        q, k, v: as for :func:`grouped_query_attention`.
        query_positions: ``(n_q,)`` positions of the queries; default the last ``n_q`` positions,
            ``n_k - n_q .. n_k - 1``. A query sees keys at positions ``<=`` its own.

    Returns:
        ``(out, weights)``: ``(n_heads, n_q, d)`` in ``q``'s dtype and ``(n_heads, n_q, n_k)``.
    """
    qg, k, v, mask = _grouped(q, k, v, query_positions)
    n_heads, n_q, d = np.shape(q)
    out, weights = scaled_dot_product_attention(qg, k, v, mask)          # (n_kv, group*n_q, d), (.., n_k)
    return out.reshape(n_heads, n_q, d), weights.reshape(n_heads, n_q, k.shape[1])


def grouped_query_attention_backward(grad_output, q, k, v, query_positions=None, weights=None):
    """Gradient through :func:`grouped_query_attention` (causal, query head ``h`` reads key/value
    head ``h // group``).

    It is :func:`attention_backward` on the forward's blocks: each key/value head is read by the
    ``group`` query heads of its group, so ITS gradient is the SUM of what those heads send back, and
    stacking the group's queries into one ``(group * n_q)`` block, as the forward does, makes the
    matrix products ``P^T dO`` and ``dS^T Q`` do that sum.

    Args:
        grad_output: ``dL/dout`` ``(n_heads, n_q, d)``.
        q, k, v, query_positions: the forward's inputs.
        weights: the forward's attention weights ``(n_heads, n_q, n_k)``; recomputed when None.

    Returns:
        ``(dq, dk, dv)`` with the shapes of ``q``, ``k``, ``v``.
    """
    qg, k, v, mask = _grouped(q, k, v, query_positions, grad_output)
    n_heads, n_q, d = np.shape(q)
    dOg = np.asarray(grad_output).reshape(qg.shape)                     # (n_kv, group*n_q, d)
    if weights is None:
        _, P = scaled_dot_product_attention(qg, k, v, mask)              # (n_kv, group*n_q, n_k)
    else:
        P = as_float_array(weights, "weights", min_ndim=3)
        check_same_shape(P, "weights", (n_heads, n_q, k.shape[1]), "the scores (n_heads, n_q, n_k)")
        P = P.reshape(qg.shape[:2] + (k.shape[1],))                       # (n_kv, group*n_q, n_k)
    dqg, dk, dv = _attention_backward_given_weights(dOg, qg, k, v, P)    # dk, dv summed over the group
    return dqg.reshape(n_heads, n_q, d), dk, dv


def kv_head_gradient(grad_per_query_head, n_kv_heads: int) -> np.ndarray:
    """The gradient of the shared key (or value) heads from the gradients each query head sends back.

    In grouped-query attention query head ``h`` reads key/value head ``h // (n_heads / n_kv_heads)``.
    If each query head had its own copy of its key/value head, it would get the gradient
    ``grad_per_query_head[h]``; the shared head is used by every query head of its group, so its
    gradient is the SUM over the group (a parameter used twice gets both gradients).

    Args:
        grad_per_query_head: ``(n_heads, n, d)``.
        n_kv_heads: must divide ``n_heads``.

    Returns:
        ``(n_kv_heads, n, d)``.
    """
    g = as_float_array(grad_per_query_head, "grad_per_query_head", min_ndim=3)
    n_kv_heads = positive_int(n_kv_heads, "n_kv_heads")
    if g.ndim != 3 or g.shape[0] % n_kv_heads:
        raise ValueError(f"grad_per_query_head must be (n_heads, n, d) with n_heads a multiple of "
                         f"n_kv_heads = {n_kv_heads}, got {describe(g)}")
    return g.reshape(n_kv_heads, g.shape[0] // n_kv_heads, *g.shape[1:]).sum(axis=1)
