"""The next-token loss: mean cross-entropy between logits and the true tokens (theory.md §11.5).

    L = -(1/N) sum_i log softmax(z_i)[y_i] = (1/N) sum_i (logsumexp(z_i) - z_i[y_i])

Its gradient is :func:`transformer_course.backward.cross_entropy_backward`.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_finite, describe


def check_targets(targets, logit_shape) -> np.ndarray:
    """Integer targets ``(...)`` matching ``logit_shape`` ``(..., V)``, each in ``0..V-1``."""
    y = np.asarray(targets)
    if not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"targets must be integer token ids, got {describe(targets)}")
    if y.shape != tuple(logit_shape[:-1]):
        raise ValueError(f"targets must have shape {tuple(logit_shape[:-1])} (logits without the "
                         f"vocabulary axis), got shape {y.shape}")
    if y.size and (y.min() < 0 or y.max() >= logit_shape[-1]):
        raise ValueError(f"targets must lie in 0..{logit_shape[-1] - 1}, got {y.min()}..{y.max()}")
    return y


def cross_entropy(logits, targets) -> float:
    """Mean cross-entropy in nats.

    Args:
        logits: ``(..., V)`` unnormalised scores, one row per position.
        targets: integers ``(...)``, the token each row should predict.

    Returns:
        A float: the mean over all positions of ``logsumexp(z) - z[y]`` (``ln V`` for uniform logits).
    """
    z = as_float_array(logits, "logits")
    check_finite(z, "logits")
    y = check_targets(targets, z.shape)
    top = z.max(axis=-1, keepdims=True)                                   # (..., 1), the max-shift
    logsumexp = top[..., 0] + np.log(np.sum(np.exp(z - top), axis=-1))   # (...)
    picked = np.take_along_axis(z, y[..., None], axis=-1)[..., 0]         # (...), z[y]
    return float(np.mean(logsumexp - picked))


def language_model_loss(logits, ids) -> float:
    """Mean next-token cross-entropy (nats) of a causal language model (notebook 08, theory.md §9.1).

    Args:
        logits: ``(..., n, V)``; row ``t`` is the guess of the token after ``ids[..., t]``.
        ids: ``(..., n)`` ints in ``0..V-1``, the sequence(s) the logits were computed from.

    Returns:
        The mean of :func:`cross_entropy` over rows ``0..n-2`` scored against
        ``ids[..., 1:]`` (the last row has no target).
    """
    z = as_float_array(logits, "logits", min_ndim=2)
    ids = np.asarray(ids)
    if ids.shape != z.shape[:-1] or ids.shape[-1] < 2:
        raise ValueError(f"ids must have shape logits.shape[:-1] = {z.shape[:-1]} with n >= 2 positions, "
                         f"got {describe(ids)}")
    return cross_entropy(z[..., :-1, :], ids[..., 1:])                       # (..., n-1, V) vs (..., n-1)
