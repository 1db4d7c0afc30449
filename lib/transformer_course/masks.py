"""Masks that say which keys a query may attend to (True = may attend).

A boolean mask is turned into scores of ``-inf`` where it is False, so those
keys get weight exactly 0 after the softmax.
"""

from __future__ import annotations

import numpy as np

from ._checks import check_array, describe, positive_int
from .softmax import softmax


def causal_mask(n: int) -> np.ndarray:
    """Lower-triangular mask for autoregressive (decoder) attention.

    Args:
        n: sequence length.

    Returns:
        Boolean array of shape ``(n, n)``; entry ``[i, j]`` is True when query
        ``i`` may attend to key ``j``, i.e. when ``j <= i`` (no peeking ahead).
    """
    n = positive_int(n, "n")
    return np.tril(np.ones((n, n), dtype=bool))


def padding_mask(lengths, n: int) -> np.ndarray:
    """Key mask for a padded batch: real tokens True, padding False.

    Args:
        lengths: sequence of ``batch`` integers, the true length of each
            sequence, each in ``1..n``.
        n: padded length.

    Returns:
        Boolean array of shape ``(batch, n)``: one flag per key position. Scores
        have more axes than that (queries, and heads in multi-head attention),
        so the mask needs new axes to broadcast against them; which ones
        depends on the layout of the scores.
    """
    n = positive_int(n, "n")
    arr = np.asarray(lengths)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"lengths must be a non-empty 1-D sequence of integers, got {describe(lengths)}"
        )
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"lengths must hold integers, got dtype {arr.dtype}")
    if (arr < 1).any() or (arr > n).any():
        raise ValueError(f"every length must be between 1 and n={n}, got {arr.tolist()}")
    return np.arange(n)[None, :] < arr[:, None]


def combine_with_key_padding(mask, key_padding_mask, key_shape) -> np.ndarray | None:
    """One mask for per-head scores from an attention mask and a key padding mask.

    Args:
        mask: None, boolean (True = may attend) or float (additive) attention mask.
        key_padding_mask: None or boolean ``(..., n_k)``, True for real tokens.
        key_shape: shape of the keys ``(..., n_k, d_model)``.

    Returns:
        None, or a mask broadcastable to ``(..., n_heads, n_q, n_k)``: the padding becomes
        False (boolean mask) or ``-inf`` (float mask). Other mask dtypes are passed on
        unchanged, for the attention to refuse with its own message.
    """
    combined = None if mask is None else np.asarray(mask)
    if key_padding_mask is None:
        return combined
    kpm = np.asarray(key_padding_mask)
    if kpm.dtype != bool:
        raise TypeError(f"key_padding_mask must be boolean (True = real token), got {describe(kpm)}")
    if kpm.shape != tuple(key_shape[:-1]):
        raise ValueError(
            f"key_padding_mask must have shape {tuple(key_shape[:-1])} (..., n_k), got {kpm.shape}"
        )
    kpm = kpm[..., None, None, :]                                  # (..., 1, 1, n_k)
    if combined is None:
        return kpm
    if combined.dtype == bool:
        return combined & kpm
    if np.issubdtype(combined.dtype, np.floating):
        return np.where(kpm, combined, -np.inf)
    return combined


def leaked_weight(scores, allowed, mask_value) -> np.ndarray:
    """The softmax weight that reaches blocked keys when they are penalised by ``mask_value`` (notebook 06).

    A weak mask adds a finite ``mask_value`` (``-1e4``, ``-30``) instead of ``-inf``; a blocked key whose
    score is within a few units of ``-mask_value`` of the row's best keeps a visible weight.

    Args:
        scores: ``(..., n_q, n_k)`` attention scores.
        allowed: boolean, the shape of ``scores``; True = may attend.
        mask_value: a negative float or ``-inf``, added to the blocked scores.

    Returns:
        ``(..., n_q)``: each query's total weight on its blocked keys; exactly 0 for ``-inf``.
    """
    scores = check_array(scores, "scores", min_ndim=2)
    allowed = np.asarray(allowed)
    if allowed.dtype != bool or allowed.shape != scores.shape:
        raise ValueError(f"allowed must be a boolean array of the shape of scores {scores.shape}, "
                         f"got {describe(allowed)}")
    if isinstance(mask_value, (bool, np.bool_)) or not isinstance(mask_value, (int, float, np.number)) \
            or not (mask_value < 0):
        raise ValueError(f"mask_value must be a negative number or -inf, got {describe(mask_value)}")
    masked = np.where(allowed, scores, scores + mask_value)        # (..., n_q, n_k)
    return np.where(allowed, 0.0, softmax(masked, axis=-1)).sum(axis=-1)   # (..., n_q)
