"""The Transformer encoder block (Vaswani et al. 2017, §3.1; theory.md §5).

Post-LN (the paper):  z = LN(x + MHA(x));   out = LN(z + FFN(z))
Pre-LN (the option):  z = x + MHA(LN(x));   out = z + FFN(LN(z))

Shape in equals shape out, ``(..., n, d_model)``, so blocks stack.
"""

from __future__ import annotations

import numpy as np

from ._checks import (
    check_array,
    check_matrix,
    check_rng,
    check_vector,
    check_width,
    describe,
    float_dtype,
    positive_float,
    positive_int,
)
from .feedforward import PositionwiseFeedForward, feed_forward
from .multihead import MultiHeadAttention, _project_attend_merge
from .normalization import layer_norm


class TransformerEncoderBlock:
    """Self-attention and a feed-forward sub-layer, each with a residual and a layer norm.

    Args:
        d_model: token width.
        n_heads: attention heads (must divide d_model).
        d_ff: feed-forward hidden width; default ``4 * d_model``.
        rng: ``numpy.random.Generator`` for the initial weights.
        norm_first: False = post-LN (the paper, PyTorch's default); True = pre-LN.
        activation: ``"relu"`` (the paper) or ``"gelu"``, the exact GELU
            ``0.5 x (1 + erf(x / sqrt 2))`` (BERT's ``"hidden_act": "gelu"``), not the tanh
            approximation (which differs from it by up to 4.7e-4). There is no tanh option.
        eps: layer-norm epsilon.
        dtype: floating dtype of the weights and of the computation (default float64).

    Attributes:
        attention (:class:`MultiHeadAttention`), feed_forward
        (:class:`PositionwiseFeedForward`), ln1_gamma, ln1_beta, ln2_gamma, ln2_beta ``(d_model,)``.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, *, rng,
                 norm_first: bool = False, activation: str = "relu", eps: float = 1e-5,
                 dtype=np.float64):
        self.d_model = positive_int(d_model, "d_model")
        self.d_ff = 4 * self.d_model if d_ff is None else positive_int(d_ff, "d_ff")
        rng = check_rng(rng)
        if not isinstance(norm_first, bool):
            raise TypeError(f"norm_first must be True or False, got {norm_first!r}")
        self.norm_first = norm_first
        self.eps = positive_float(eps, "eps")
        dtype = float_dtype(dtype)
        self.attention = MultiHeadAttention(self.d_model, n_heads, rng=rng, dtype=dtype)
        self.feed_forward = PositionwiseFeedForward(self.d_model, self.d_ff, rng=rng,
                                                    activation=activation, dtype=dtype)
        self.ln1_gamma = np.ones(self.d_model, dtype=dtype)
        self.ln1_beta = np.zeros(self.d_model, dtype=dtype)
        self.ln2_gamma = np.ones(self.d_model, dtype=dtype)
        self.ln2_beta = np.zeros(self.d_model, dtype=dtype)

    @property
    def n_heads(self) -> int:
        return self.attention.n_heads

    def _ln1(self, x):
        return layer_norm(x, self.ln1_gamma, self.ln1_beta, self.eps)

    def _ln2(self, x):
        return layer_norm(x, self.ln2_gamma, self.ln2_beta, self.eps)

    def __call__(self, x, *, mask=None, key_padding_mask=None):
        """``(..., n, d_model)`` -> ``(output (..., n, d_model), weights (..., n_heads, n, n))``.

        ``mask`` and ``key_padding_mask`` are passed to the attention
        (True = may attend).
        """
        x = check_width(x, "x", self.d_model, min_ndim=2)                  # (..., n, d_model)
        return _residual_block(x, lambda h: self.attention(h, mask=mask, key_padding_mask=key_padding_mask),
                               self.feed_forward, self._ln1, self._ln2, self.norm_first)


PARAMS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_1", "b_1", "W_2", "b_2",
          "ln1_gamma", "ln1_beta", "ln2_gamma", "ln2_beta")


def encoder_block(x, params, n_heads, norm_first=False):
    """One encoder block from a dict of arrays (notebook 05): ReLU, layer-norm eps 1e-5, no mask.

    Args:
        x: ``(..., n, d_model)``.
        params: dict with W_Q, W_K, W_V, W_O ``(d_model, d_model)``; b_Q, b_K, b_V, b_O ``(d_model,)``;
            W_1 ``(d_model, d_ff)``, b_1 ``(d_ff,)``, W_2 ``(d_ff, d_model)``, b_2 ``(d_model,)``;
            ln1_gamma, ln1_beta, ln2_gamma, ln2_beta ``(d_model,)``.
        n_heads: attention heads (must divide d_model).
        norm_first: False = post-LN, True = pre-LN (the module docstring's two equations).

    Returns:
        ``(output (..., n, d_model), weights (..., n_heads, n, n))``. :class:`TransformerEncoderBlock`
        holds the same parameters and adds GELU, another eps and masks.
    """
    x = check_array(x, "x", min_ndim=2)
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays, got {describe(params)}")
    if missing := [k for k in PARAMS if k not in params]:
        raise ValueError(f"params lacks {missing} (expected the keys {list(PARAMS)})")
    if not isinstance(norm_first, bool):
        raise TypeError(f"norm_first must be True or False, got {norm_first!r}")
    p, d = params, x.shape[-1]
    weights = tuple(check_matrix(p[k], k, (d, d)) for k in ("W_Q", "W_K", "W_V", "W_O"))
    biases = tuple(check_vector(p[k], k, d) for k in ("b_Q", "b_K", "b_V", "b_O"))
    n_heads = positive_int(n_heads, "n_heads")
    return _residual_block(
        x, lambda h: _project_attend_merge(h, h, h, weights, biases, n_heads, None),
        lambda h: feed_forward(h, p["W_1"], p["b_1"], p["W_2"], p["b_2"]),
        lambda h: layer_norm(h, p["ln1_gamma"], p["ln1_beta"]),
        lambda h: layer_norm(h, p["ln2_gamma"], p["ln2_beta"]), norm_first)


def _residual_block(x, attention, ffn, ln1, ln2, norm_first):
    """The block's arrangement of its sub-layers, residuals and norms (the one copy: the class and
    :func:`encoder_block` pass their sub-layers in). ``attention(h)`` returns ``(output, weights)``."""
    if norm_first:                                                     # pre-LN
        attended, weights = attention(ln1(x))
        z = x + attended                                               # residual around attention
        return z + ffn(ln2(z)), weights                                # residual around the FFN
    attended, weights = attention(x)                                   # post-LN
    z = ln1(x + attended)                                              # add & norm
    return ln2(z + ffn(z)), weights                                    # add & norm
