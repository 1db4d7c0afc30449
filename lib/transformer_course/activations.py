"""Element-wise non-linearities used by the feed-forward sub-layer."""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from ._checks import check_array


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
