"""The position-wise feed-forward sub-layer (theory.md §5.2).

    FFN(x) = act(x W_1 + b_1) W_2 + b_2

The same two-layer MLP is applied to every token vector independently.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_matrix, check_rng, check_vector, positive_int
from .activations import gelu, relu

ACTIVATIONS = {"relu": relu, "gelu": gelu}


class PositionwiseFeedForward:
    """Two linear maps with a non-linearity between them, applied token by token.

    Args:
        d_model: token width.
        d_ff: hidden width (the paper uses 4 * d_model).
        rng: ``numpy.random.Generator`` for the initial weights.
        activation: ``"relu"`` (the paper) or ``"gelu"`` (BERT; the exact erf form -- in float32 with
            an erf accurate to float32 rounding, see ``_gelu_float32_inplace``).

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
        x = as_float_array(x, "x", min_ndim=1)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, got shape {x.shape}")
        # Every token of every sequence as one row: two 2-D products, (batch·n, d) @ W, which are
        # several times faster than stacks of small (n, d) products.
        rows = x.reshape(-1, self.d_model)                                    # (batch·n, d_model)
        hidden = _affine(rows, self.W_1, self.b_1)                            # (batch·n, d_ff), ours
        if self.activation == "gelu" and hidden.dtype == np.float32:
            hidden = _gelu_float32_inplace(hidden)
        else:
            hidden = ACTIVATIONS[self.activation](hidden)
        out = _affine(hidden, self.W_2, self.b_2)                             # (batch·n, d_model)
        return out.reshape(x.shape)                                           # (..., n, d_model)


def _affine(x, W, b):
    """``x @ W + b``, adding ``b`` in place when that keeps the dtype."""
    y = x @ W
    if np.result_type(y, b) == y.dtype:
        y += b
        return y
    return y + b


# The exact GELU, 0.5 x (1 + erf(x / sqrt 2)), for float32 hidden layers. SciPy's erf costs ~20 ns per
# element (it works in double precision), which made it the slowest step of a real model's forward pass.
# In float32, erf is evaluated here with Abramowitz & Stegun 7.1.26,
#     erf(z) = 1 - t (a1 + a2 t + a3 t^2 + a4 t^3 + a5 t^4) exp(-z^2),   t = 1 / (1 + p z),   z >= 0,
# whose error (at most 1.5e-7) is about float32's resolution of 1 + erf (6e-8 to 1.2e-7): the GELU is off
# by at most ~2e-7 |x| (tests/test_pretrained_minilm.py checks it; PyTorch's own float32 GELU is off by
# ~1e-6). float64 and every other dtype use SciPy's erf (activations.gelu), exact to double rounding.
# The array is processed in place, in pieces of ~32k elements so that the temporaries stay in the CPU
# cache: ~22 cheap passes instead of one slow one.
_AS_P = 0.3275911
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_PIECE = 32768


def _gelu_float32_inplace(h):
    """``h <- 0.5 h (1 + erf(h / sqrt 2))`` for a float32 ``(rows, width)`` array; returns ``h``."""
    f = np.float32
    rows, width = h.shape
    step = max(1, _PIECE // width)
    z2, t, y = (np.empty((min(step, rows), width), dtype=f) for _ in range(3))
    for start in range(0, rows, step):
        x = h[start:start + step]                              # (step, width), a view
        n = x.shape[0]
        zz, tt, yy = z2[:n], t[:n], y[:n]
        np.multiply(x, x, out=zz)
        zz *= f(-0.5)                                          # -z^2, z = |x| / sqrt 2
        np.abs(x, out=tt)
        tt *= f(_AS_P / np.sqrt(2.0))
        tt += f(1.0)
        np.reciprocal(tt, out=tt)                              # t = 1 / (1 + p z)
        np.multiply(tt, f(-_AS_A[4]), out=yy)
        for a in _AS_A[3::-1]:                                 # Horner: yy = -t (a1 + a2 t + ... + a5 t^4)
            yy += f(-a)
            yy *= tt
        np.exp(zz, out=zz)
        yy *= zz
        yy += f(1.0)                                           # erf(z)
        np.copysign(yy, x, out=yy)                             # erf(x / sqrt 2)
        yy += f(1.0)
        x *= yy
        x *= f(0.5)
    return h
