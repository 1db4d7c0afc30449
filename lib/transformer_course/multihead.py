"""Multi-head attention: h attentions side by side, all in one batched product.

    head_i = Attention(X W_Q[:, i], X W_K[:, i], X W_V[:, i])
    MultiHead(X) = Concat(head_1, ..., head_h) W_O          (theory.md §3)

The projections are packed: ``W_Q`` is ``(d_model, d_model)`` and its columns
``i*d_head:(i+1)*d_head`` belong to head i. So one matrix product projects for
every head at once, and a reshape + transpose gives each head its own slice.
Convention: ``X @ W`` (rows are tokens). PyTorch stores the transpose and
computes ``X @ W.T``; see :mod:`transformer_course.torch_interop`.
"""

from __future__ import annotations

import numpy as np

from ._checks import (
    check_array,
    check_attention_inputs,
    check_matrix,
    check_rng,
    check_vector,
    float_dtype,
    positive_int,
)
from .attention import scaled_dot_product_attention
from .masks import combine_with_key_padding


def split_heads(x, n_heads: int) -> np.ndarray:
    """``(..., n, d_model)`` -> ``(..., n_heads, n, d_head)``, d_head = d_model / n_heads."""
    x = check_array(x, "x", min_ndim=2)
    n_heads = positive_int(n_heads, "n_heads")
    *lead, n, d_model = x.shape
    if d_model % n_heads:
        raise ValueError(
            f"the last dimension d_model={d_model} of x must be divisible by n_heads={n_heads}"
        )
    d_head = d_model // n_heads
    x = x.reshape(*lead, n, n_heads, d_head)     # (..., n, h, d_head)
    return np.swapaxes(x, -2, -3)                # (..., h, n, d_head)


def merge_heads(x) -> np.ndarray:
    """``(..., n_heads, n, d_head)`` -> ``(..., n, n_heads * d_head)``; inverse of :func:`split_heads`."""
    x = check_array(x, "x", min_ndim=3)
    *lead, h, n, d_head = x.shape
    x = np.swapaxes(x, -2, -3)                   # (..., n, h, d_head)
    return x.reshape(*lead, n, h * d_head)       # (..., n, d_model)


class MultiHeadAttention:
    """Multi-head attention with packed projection weights.

    Args:
        d_model: width of the token vectors.
        n_heads: number of heads; must divide ``d_model``.
        rng: ``numpy.random.Generator`` for the initial weights.
        bias: whether the four projections have bias vectors.
        dtype: floating dtype of the parameters.

    Attributes:
        W_Q, W_K, W_V, W_O: ``(d_model, d_model)`` each, used as ``X @ W``.
        b_Q, b_K, b_V, b_O: ``(d_model,)`` each, or None when ``bias=False``.
    """

    def __init__(self, d_model: int, n_heads: int, *, rng, bias: bool = True, dtype=np.float64):
        self.d_model = positive_int(d_model, "d_model")
        self.n_heads = positive_int(n_heads, "n_heads")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads} "
                f"(each head gets d_model / n_heads dimensions)"
            )
        self.d_head = self.d_model // self.n_heads
        rng = check_rng(rng)
        dtype = float_dtype(dtype)
        # Xavier/Glorot uniform, as PyTorch initialises its in-projection.
        limit = np.sqrt(6.0 / (2 * self.d_model))

        def weight():
            return rng.uniform(-limit, limit, (self.d_model, self.d_model)).astype(dtype)

        self.W_Q, self.W_K, self.W_V, self.W_O = weight(), weight(), weight(), weight()
        if bias:
            zeros = lambda: np.zeros(self.d_model, dtype=dtype)  # noqa: E731
            self.b_Q, self.b_K, self.b_V, self.b_O = zeros(), zeros(), zeros(), zeros()
        else:
            self.b_Q = self.b_K = self.b_V = self.b_O = None

    # -- parameters ---------------------------------------------------------
    def set_weights(self, W_Q, W_K, W_V, W_O, b_Q=None, b_K=None, b_V=None, b_O=None):
        """Replace all parameters (``X @ W`` convention), checking every shape."""
        shape = (self.d_model, self.d_model)
        self.W_Q = check_matrix(W_Q, "W_Q", shape)
        self.W_K = check_matrix(W_K, "W_K", shape)
        self.W_V = check_matrix(W_V, "W_V", shape)
        self.W_O = check_matrix(W_O, "W_O", shape)
        biases = {"b_Q": b_Q, "b_K": b_K, "b_V": b_V, "b_O": b_O}
        for name, b in biases.items():
            setattr(self, name, None if b is None else check_vector(b, name, self.d_model))
        return self

    @property
    def n_parameters(self) -> int:
        """Number of scalars in the weights and biases: 4 d_model^2 (+ 4 d_model)."""
        arrays = [self.W_Q, self.W_K, self.W_V, self.W_O, self.b_Q, self.b_K, self.b_V, self.b_O]
        return sum(a.size for a in arrays if a is not None)

    # -- forward ------------------------------------------------------------
    def __call__(self, query, key=None, value=None, *, mask=None, key_padding_mask=None):
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        Args:
            query: ``(..., n_q, d_model)``.
            key, value: ``(..., n_k, d_model)``, ``n_k >= 1``; default to ``query``.
            mask: optional boolean (True = may attend) or additive float mask
                broadcastable to ``(..., n_heads, n_q, n_k)``, e.g. ``(n_q, n_k)``.
            key_padding_mask: optional boolean ``(..., n_k)``, True for real
                tokens (as :func:`~transformer_course.masks.padding_mask` returns).

        Returns:
            ``(output, weights)``: ``(..., n_q, d_model)`` and per-head weights
            ``(..., n_heads, n_q, n_k)``.
        """
        query, key, value = check_attention_inputs(query, key, value, self.d_model)
        combined = combine_with_key_padding(mask, key_padding_mask, key.shape)   # (..., 1|h, n_q|1, n_k)
        return _project_attend_merge(query, key, value, (self.W_Q, self.W_K, self.W_V, self.W_O),
                                     (self.b_Q, self.b_K, self.b_V, self.b_O), self.n_heads, combined)


def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    """Multi-head self-attention with packed projections and no biases (notebook 03).

    Args:
        X: ``(..., n, d_model)``.
        W_Q, W_K, W_V, W_O: ``(d_model, d_model)`` each, used as ``X @ W``.
        n_heads: number of heads; must divide ``d_model``.
        mask: None, boolean (True = may attend) or additive float, broadcastable to
            ``(..., n_heads, n, n)``.

    Returns:
        ``(output, weights)``: ``(..., n, d_model)`` and ``(..., n_heads, n, n)``.
        :class:`MultiHeadAttention` is this with biases, cross-attention and a key-padding mask.
    """
    X = check_array(X, "X", min_ndim=2)
    shape = (X.shape[-1], X.shape[-1])
    weights = tuple(check_matrix(W, name, shape) for W, name in ((W_Q, "W_Q"), (W_K, "W_K"), (W_V, "W_V"), (W_O, "W_O")))
    return _project_attend_merge(X, X, X, weights, (None,) * 4, n_heads, mask)


def _project_attend_merge(query, key, value, weights, biases, n_heads, mask):
    """Project into heads, attend per head, merge and project out: the one multi-head computation
    (:func:`multi_head_attention` and :class:`MultiHeadAttention` both call it)."""
    (W_Q, W_K, W_V, W_O), (b_Q, b_K, b_V, b_O) = weights, biases
    q = split_heads(query @ W_Q + _zero_if_none(b_Q), n_heads)       # (..., h, n_q, d_head)
    k = split_heads(key @ W_K + _zero_if_none(b_K), n_heads)         # (..., h, n_k, d_head)
    v = split_heads(value @ W_V + _zero_if_none(b_V), n_heads)       # (..., h, n_k, d_head)
    heads, attn = scaled_dot_product_attention(q, k, v, mask=mask)   # (..., h, n_q, d_head)
    concat = merge_heads(heads)                                      # (..., n_q, d_model)
    return concat @ W_O + _zero_if_none(b_O), attn                   # (..., n_q, d_model)


def _zero_if_none(bias):
    """A projection without a bias adds 0."""
    return 0 if bias is None else bias


def head_bilinear_forms(W_Q, W_K, n_heads: int) -> np.ndarray:
    """Each head's scaled score as one bilinear form of the token vectors (notebook 03).

    Head i scores token t against token u with ``(x_t W_Q^(i)) . (x_u W_K^(i)) / sqrt(d_head)``,
    where ``W_Q^(i) = W_Q[:, i*d_head:(i+1)*d_head]`` is a column block. Drop the two token
    vectors and what remains is one ``(d_model, d_model)`` matrix per head,

        A_i = W_Q^(i) W_K^(i)^T / sqrt(d_head),   scores_i = X A_i X^T,

    of rank at most ``d_head``: what a head can compare is fixed by its weights, before any input.

    Args:
        W_Q, W_K: ``(d_model, d_model)`` each, used as ``X @ W``.
        n_heads: number of heads; must divide ``d_model``.

    Returns:
        ``(n_heads, d_model, d_model)``; ``X @ A[i] @ X^T`` is head i's score matrix before the
        softmax (already divided by ``sqrt(d_head)``).
    """
    W_Q = check_array(W_Q, "W_Q", min_ndim=2)
    if W_Q.ndim != 2 or W_Q.shape[0] != W_Q.shape[1]:
        raise ValueError(f"W_Q must be a square (d_model, d_model) matrix, got shape {W_Q.shape}")
    W_K = check_matrix(W_K, "W_K", W_Q.shape)
    q_blocks = split_heads(W_Q, n_heads)          # (h, d_model, d_head): column block i of W_Q
    k_blocks = split_heads(W_K, n_heads)          # (h, d_model, d_head)
    d_head = q_blocks.shape[-1]
    # (h, d_model, d_head) @ (h, d_head, d_model) -> (h, d_model, d_model)
    return q_blocks @ np.swapaxes(k_blocks, -1, -2) / np.sqrt(d_head)
