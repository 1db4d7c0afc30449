"""Layer normalisation (Ba et al. 2016; theory.md §5.1).

    LN(x) = gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta

Statistics are taken over the last axis: each token vector is normalised on its own.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_array, check_vector, positive_float


def layer_norm(x, gamma=None, beta=None, eps: float = 1e-5) -> np.ndarray:
    """Normalise every vector along the last axis to mean 0 and variance 1, then scale and shift.

    Args:
        x: ``(..., d)``, ``d >= 1``.
        gamma: scale ``(d,)``; default ones.
        beta: shift ``(d,)``; default zeros.
        eps: added to the variance (PyTorch's default 1e-5; BERT uses 1e-12).

    Returns:
        ``(..., d)``, same dtype as ``x``.
    """
    x = check_array(x, "x", nonempty=(-1,))
    eps = positive_float(eps, "eps")
    d = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=-1, keepdims=True)
    out = centred / np.sqrt(var + x.dtype.type(eps))
    if gamma is not None:
        out = out * check_vector(gamma, "gamma", d).astype(x.dtype, copy=False)
    if beta is not None:
        out = out + check_vector(beta, "beta", d).astype(x.dtype, copy=False)
    return out
