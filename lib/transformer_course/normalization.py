"""Layer normalisation (Ba et al. 2016; theory.md §5.1) and RMSNorm (Zhang & Sennrich 2019; §10), with their backwards.

    LN(x) = gamma * (x - mean(x)) / sqrt(var(x) + eps) + beta

Statistics are taken over the last axis: each token vector is normalised on its own.
When a linear map reads the result, gamma and beta can be folded into that map
(``fold_layer_norm``): LN(x) @ W + b = xhat @ (gamma[:, None] * W) + (beta @ W + b).
"""

from __future__ import annotations

import numbers

import numpy as np

from ._checks import as_float_array, check_array, check_vector, describe, positive_float, row_max_abs


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
    with np.errstate(over="ignore", invalid="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        centred = x - mean
        var = np.mean(centred * centred, axis=-1, keepdims=True)
        out = centred / np.sqrt(var + x.dtype.type(eps))
    overflowed = ~np.isfinite(var)                  # float32 |x| ~ 1e20: the squares are inf
    if overflowed.any():                            # those rows again, scaled (_checks.py's overflow rule)
        out = np.where(overflowed, _layer_norm_scaled(x, eps), out)
    if gamma is not None:
        out = out * check_vector(gamma, "gamma", d).astype(x.dtype, copy=False)
    if beta is not None:
        out = out + check_vector(beta, "beta", d).astype(x.dtype, copy=False)
    return out


def _layer_norm_scaled(x: np.ndarray, eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` computed on ``x / s``, ``s`` = the row's max ``|x|``:
    ``var(x) + eps = s^2 (var(x / s) + eps / s^2)``, and nothing in it can overflow."""
    s = row_max_abs(x)                                              # (..., 1)
    xs = x / s                                                      # entries in [-1, 1]
    centred = xs - xs.mean(axis=-1, keepdims=True)
    denom = np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + x.dtype.type(eps) / s / s)
    # eps / s^2 underflows to 0 when s^2 >> 1 / eps: a row with denom 0 is constant, centred = 0 exactly -> 0
    return centred / np.where(denom > 0, denom, 1)


def fold_layer_norm(gamma, beta, W, b):
    """Fold a layer norm's scale and shift into the linear map that reads its output.

    With xhat = (x - mean) / sqrt(var + eps), the normalised vector before the scale
    and shift, LN(x) = gamma * xhat + beta, and

        LN(x) @ W + b = (xhat * gamma) @ W + beta @ W + b = xhat @ W' + b',
        W' = gamma[:, None] * W   (row j of W scaled by gamma_j, i.e. diag(gamma) @ W),
        b' = beta @ W + b,

    so a layer norm with gamma = 1, beta = 0 followed by (W', b') computes the same as
    the original pair, for every x. Only a linear map that is the layer norm's SOLE
    reader can absorb it (pre-LN: the query, key and value projections after ln1, the
    first feed-forward layer after ln2); in post-LN the normalised vector is also the
    residual stream, which would lose gamma and beta.

    Args:
        gamma: ``(d,)`` the layer norm's scale.
        beta: ``(d,)`` its shift.
        W: ``(d, m)`` the next linear map (rows are input features: ``x @ W``).
        b: ``(m,)`` its bias.

    Returns:
        ``(W_folded (d, m), b_folded (m,))``.
    """
    W = check_array(W, "W", min_ndim=2)
    if W.ndim != 2:
        raise ValueError(f"W must be a matrix (d, m), got shape {W.shape}")
    d, m = W.shape
    gamma = check_vector(gamma, "gamma", d)
    beta = check_vector(beta, "beta", d)
    b = check_vector(b, "b", m)
    W_folded = gamma[:, None] * W                 # (d, 1) * (d, m): row j scaled by gamma_j
    b_folded = beta @ W + b                       # (d,) @ (d, m) + (m,) -> (m,)
    return W_folded, b_folded


# -- RMSNorm (LLaMA's norm: LayerNorm without the centring or the shift; notebook 09) --------------

def rms_norm(x, weight, eps: float = 1e-5) -> np.ndarray:
    """RMSNorm (Zhang & Sennrich 2019): ``weight * x / sqrt(mean(x**2) + eps)`` over the last axis.

    Args:
        x: ``(..., d)``.
        weight: the gain ``(d,)``.
        eps: added to the mean square.

    Returns:
        ``(..., d)`` in ``x``'s dtype.
    """
    x = as_float_array(x, "x", min_ndim=1)
    weight = as_float_array(weight, "weight", min_ndim=1)
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"weight must have shape ({x.shape[-1]},) to match x's last axis, got shape {weight.shape}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or eps <= 0:
        raise ValueError(f"eps must be a positive number, got {describe(eps)}")
    with np.errstate(over="ignore"):
        mean_square = np.mean(x * x, axis=-1, keepdims=True)             # (..., 1)
    out = x / np.sqrt(mean_square + x.dtype.type(eps))
    overflowed = ~np.isfinite(mean_square)               # |x| ~ 1e19 in float32: x * x is inf
    if overflowed.any():                                 # those rows again, scaled (_checks.py's rule)
        s = row_max_abs(x)                                               # (..., 1)
        xs = x / s
        eps_s = x.dtype.type(eps) / s / s                                # 0 once s^2 >> 1 / eps
        out = np.where(overflowed, xs / np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True) + eps_s), out)
    return out * weight.astype(x.dtype, copy=False)


def rms_norm_backward(grad_output, x, weight, eps: float = 1e-5):
    """Gradient through ``y = weight * x * r``, ``r = 1 / sqrt(mean(x**2) + eps)`` (forward: :func:`rms_norm`).

    With ``xhat = x * r`` and ``g = grad_output * weight`` (theory: LayerNorm's gradient without the
    centring term, since RMSNorm subtracts no mean)::

        dL/dx      = r * (g - xhat * mean(g * xhat))
        dL/dweight = sum over every leading axis of grad_output * xhat

    Args:
        grad_output: ``dL/dy`` ``(..., d)``.
        x: the forward's input ``(..., d)``.
        weight: the gain ``(d,)``.
        eps: the forward's eps.

    Returns:
        ``(dx, dweight)``: ``(..., d)`` and ``(d,)``.
    """
    x = as_float_array(x, "x", min_ndim=1)
    dy = as_float_array(grad_output, "grad_output", min_ndim=1)
    if dy.shape != x.shape:
        raise ValueError(f"grad_output must have the shape of x {x.shape}, got shape {dy.shape}")
    weight = as_float_array(weight, "weight", min_ndim=1)
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"weight must have shape ({x.shape[-1]},) to match x's last axis, got shape {weight.shape}")
    d = x.shape[-1]
    with np.errstate(over="ignore"):
        mean_square = np.mean(x * x, axis=-1, keepdims=True)                           # (..., 1)
    r = 1.0 / np.sqrt(mean_square + x.dtype.type(eps))                                  # (..., 1)
    xhat = x * r                                                                        # (..., d)
    overflowed = ~np.isfinite(mean_square)               # the forward's rule: those rows again, scaled
    if overflowed.any():                                 # r = r_s / s with r_s from x / s, s = max |x|
        s = row_max_abs(x)                                                              # (..., 1)
        xs = x / s
        r_s = 1.0 / np.sqrt(np.mean(xs * xs, axis=-1, keepdims=True) + x.dtype.type(eps) / s / s)
        r = np.where(overflowed, r_s / s, r)
        xhat = np.where(overflowed, xs * r_s, xhat)
    g = dy * weight.astype(x.dtype, copy=False)
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    dweight = np.sum((dy * xhat).reshape(-1, d), axis=0)
    return dx, dweight
