"""The position-wise feed-forward sub-layers: the 2017 MLP (theory.md §5.2) and LLaMA's SwiGLU (§10).

    FFN(x) = act(x W_1 + b_1) W_2 + b_2

The same two-layer MLP is applied to every token vector independently.
"""

from __future__ import annotations

import numpy as np

from ._checks import (as_float_array, check_array, check_matrix, check_rng, check_vector, check_width, float_dtype,
                      positive_int)
from .activations import gelu, relu, silu, silu_backward

ACTIVATIONS = {"relu": relu, "gelu": gelu}


class PositionwiseFeedForward:
    """Two linear maps with a non-linearity between them, applied token by token.

    Args:
        d_model: token width.
        d_ff: hidden width (the paper uses 4 * d_model).
        rng: ``numpy.random.Generator`` for the initial weights.
        activation: ``"relu"`` (the paper) or ``"gelu"`` (BERT; the exact erf form).
        dtype: floating dtype of the parameters.

    Attributes:
        W_1 ``(d_model, d_ff)``, b_1 ``(d_ff,)``, W_2 ``(d_ff, d_model)``, b_2 ``(d_model,)``.
    """

    def __init__(self, d_model: int, d_ff: int, *, rng, activation: str = "relu", dtype=np.float64):
        self.d_model = positive_int(d_model, "d_model")
        self.d_ff = positive_int(d_ff, "d_ff")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        rng = check_rng(rng)
        dtype = float_dtype(dtype)
        # PyTorch's nn.Linear default: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        l1, l2 = 1 / np.sqrt(self.d_model), 1 / np.sqrt(self.d_ff)
        self.W_1 = rng.uniform(-l1, l1, (self.d_model, self.d_ff)).astype(dtype)
        self.b_1 = rng.uniform(-l1, l1, self.d_ff).astype(dtype)
        self.W_2 = rng.uniform(-l2, l2, (self.d_ff, self.d_model)).astype(dtype)
        self.b_2 = rng.uniform(-l2, l2, self.d_model).astype(dtype)

    def set_weights(self, W_1, b_1, W_2, b_2):
        """Replace all parameters (``x @ W`` convention), checking every shape."""
        self.W_1 = check_matrix(W_1, "W_1", (self.d_model, self.d_ff))
        self.b_1 = check_vector(b_1, "b_1", self.d_ff)
        self.W_2 = check_matrix(W_2, "W_2", (self.d_ff, self.d_model))
        self.b_2 = check_vector(b_2, "b_2", self.d_model)
        return self

    def __call__(self, x) -> np.ndarray:
        """``(..., n, d_model)`` -> ``(..., n, d_model)``."""
        x = check_width(x, "x", self.d_model)
        return _two_layers(x, self.W_1, self.b_1, self.W_2, self.b_2, ACTIVATIONS[self.activation])


def feed_forward(x, W_1, b_1, W_2, b_2) -> np.ndarray:
    """``max(0, x W_1 + b_1) W_2 + b_2``, token by token (notebook 05; ReLU, as in the paper).

    Args:
        x: ``(..., n, d_model)``.
        W_1: ``(d_model, d_ff)``, b_1: ``(d_ff,)``, W_2: ``(d_ff, d_model)``, b_2: ``(d_model,)``.

    Returns:
        ``(..., n, d_model)``. :class:`PositionwiseFeedForward` holds the weights and offers GELU.
    """
    W_1 = check_array(W_1, "W_1", min_ndim=2)
    if W_1.ndim != 2:
        raise ValueError(f"W_1 must be a (d_model, d_ff) matrix, got shape {W_1.shape}")
    d_model, d_ff = W_1.shape
    x = check_width(x, "x", d_model)
    return _two_layers(x, W_1, check_vector(b_1, "b_1", d_ff), check_matrix(W_2, "W_2", (d_ff, d_model)),
                       check_vector(b_2, "b_2", d_model), relu)


def _two_layers(x, W_1, b_1, W_2, b_2, activation):
    """The one feed-forward computation (:func:`feed_forward` and the class call it)."""
    hidden = activation(x @ W_1 + b_1)                                  # (..., n, d_ff)
    return hidden @ W_2 + b_2                                           # (..., n, d_model)


# -- SwiGLU: LLaMA's gated feed-forward (notebook 09) ----------------------------------------------

def swiglu(x, W_gate, W_up, W_down) -> np.ndarray:
    """The gated feed-forward ``(silu(x W_gate^T) * (x W_up^T)) W_down^T``.

    Args:
        x: ``(..., d)``.
        W_gate, W_up: ``(d_ff, d)``, stored (out, in).
        W_down: ``(d, d_ff)``.

    Returns:
        ``(..., d)``, float32 for float32 ``x`` and weights (silu is stable for any gate, :func:`silu`).
    """
    x = as_float_array(x, "x", min_ndim=1)
    gate = x @ W_gate.T                                                   # (..., d_ff)
    up = x @ W_up.T                                                       # (..., d_ff)
    return (silu(gate) * up) @ W_down.T                                   # (..., d)


def swiglu_backward(grad_output, x, W_gate, W_up, W_down):
    """Gradient through :func:`swiglu`: ``y = (silu(x W_gate^T) * (x W_up^T)) W_down^T``.

        a = x W_gate^T, u = x W_up^T, s = silu(a) * u
        dW_down = dy^T s,  ds = dy W_down,  da = silu'(a) (ds * u),  du = ds * silu(a)
        dW_gate = da^T x,  dW_up = du^T x,  dx = da W_gate + du W_up

    Returns:
        ``(dx, dW_gate, dW_up, dW_down)``, each of the shape of what it differentiates (weights (out, in)).
    """
    x = as_float_array(x, "x", min_ndim=1)
    dy = as_float_array(grad_output, "grad_output", min_ndim=1)
    if dy.shape != x.shape:
        raise ValueError(f"grad_output must have the shape of x {x.shape}, got shape {dy.shape}")
    d = x.shape[-1]
    rows, d_rows = x.reshape(-1, d), dy.reshape(-1, d)                    # (tokens, d)
    a, u = rows @ W_gate.T, rows @ W_up.T                                 # (tokens, d_ff)
    act = silu(a)
    dW_down = d_rows.T @ (act * u)                                        # (d, d_ff)
    ds = d_rows @ W_down                                                  # (tokens, d_ff)
    da = silu_backward(ds * u, a)
    du = ds * act
    dx = (da @ W_gate + du @ W_up).reshape(x.shape)
    return dx, da.T @ rows, du.T @ rows, dW_down
