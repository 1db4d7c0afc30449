"""Element-wise non-linearities used by the feed-forward sub-layer."""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from ._checks import as_float_array


def relu(x) -> np.ndarray:
    """``max(0, x)`` element-wise; same shape and dtype as ``x``."""
    x = as_float_array(x, "x", min_ndim=0)
    return np.maximum(x, x.dtype.type(0))


def gelu(x) -> np.ndarray:
    """Exact GELU, ``x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`` (BERT's form, PyTorch's default).

    The tanh approximation differs by up to ~1e-3; this is the erf form.
    Same shape and dtype as ``x``.
    """
    x = as_float_array(x, "x", min_ndim=0)
    half = x.dtype.type(0.5)
    return half * x * (1 + erf(x * x.dtype.type(1 / np.sqrt(2))))
