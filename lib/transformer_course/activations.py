"""Element-wise non-linearities used by the feed-forward sub-layers: ReLU, GELU, SiLU, with their derivatives."""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from ._checks import as_float_array, check_array, check_same_shape


def relu(x) -> np.ndarray:
    """``max(0, x)`` element-wise; same shape and dtype as ``x``."""
    x = check_array(x, "x", min_ndim=0)
    return np.maximum(x, x.dtype.type(0))


def gelu(x) -> np.ndarray:
    """Exact GELU, ``x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`` (BERT's form, PyTorch's default).

    The tanh approximation differs by up to ~1e-3; this is the erf form.
    Same shape and dtype as ``x``.
    """
    x = check_array(x, "x", min_ndim=0)
    z = x.astype(np.promote_types(x.dtype, np.float32))       # SciPy's erf has no float16 loop
    return (0.5 * z * (1 + erf(z / 2 ** 0.5))).astype(x.dtype, copy=False)


def gelu_backward(grad_output, x) -> np.ndarray:
    """Gradient through the exact ``gelu(x) = x Phi(x)`` (forward: :func:`transformer_course.activations.gelu`).

        d gelu / dx = Phi(x) + x phi(x),   Phi = standard normal CDF, phi = its density.

    Args / returns: ``grad_output`` and ``x`` of one shape; ``dL/dx`` of that shape.
    """
    x = as_float_array(x, "x", min_ndim=0)
    dy = as_float_array(grad_output, "grad_output", min_ndim=0)
    check_same_shape(dy, "grad_output", x.shape, "x")
    cdf = 0.5 * (1.0 + erf(x / np.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return dy * (cdf + x * pdf)


# -- SiLU (swish), the gate of SwiGLU (notebook 09) ------------------------------------------------

def silu(x) -> np.ndarray:
    """``x * sigmoid(x) = x / (1 + exp(-x))`` element-wise (also called swish), in ``x``'s dtype.

    Stable for any ``x``: where ``exp(-x)`` overflows (``x < -88`` in float32, ``< -709`` in float64) the
    result is ``x / inf = -0``, silu's limit, with the overflow warning silenced.
    """
    x = as_float_array(x, "x", min_ndim=0)
    with np.errstate(over="ignore"):                # exp(-x) = inf for x << 0 gives x / inf = -0
        return x / (1 + np.exp(-x))


def silu_backward(grad_output, x) -> np.ndarray:
    """Gradient through ``silu(x) = x sigmoid(x)`` (forward: :func:`silu`).

        silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x)))
    """
    x = as_float_array(x, "x", min_ndim=0)
    dy = as_float_array(grad_output, "grad_output", min_ndim=0)
    if dy.shape != x.shape:
        raise ValueError(f"grad_output must have the shape of x {x.shape}, got shape {dy.shape}")
    with np.errstate(over="ignore"):
        s = 1 / (1 + np.exp(-x))
    return dy * (s * (1 + x * (1 - s)))
