"""Attention over blocks of keys with an online softmax (Milakov & Gimelshein 2018; notebook 06).

The naive attention holds every score of a query at once, ``(..., n_q, n_k)``. The online
softmax reads the keys block by block and keeps three running quantities per query:

    m   = max of the scores seen so far
    l   = sum of exp(s - m) over the keys seen so far
    acc = sum of exp(s - m) v over the keys seen so far

When a block raises the maximum from m to m', the old sums are rescaled by exp(m - m'). After
the last block, ``acc / l`` is exactly ``softmax(Q K^T / sqrt(d_k)) V``, with only one block of
scores, ``(..., n_q, block_size)``, in memory at a time.

This is the reference both for notebook 06's exercise (its solution is tested against it) and
for the tiled, threaded version in ``transformer_course_fast`` (tested against it too).
"""

from __future__ import annotations

import numpy as np

from ._checks import check_qkv, positive_int


def online_softmax_attention(Q, K, V, block_size: int) -> np.ndarray:
    """``softmax(Q K^T / sqrt(d_k)) V``, computed over blocks of ``block_size`` keys.

    Args:
        Q: queries ``(..., n_q, d_k)``.
        K: keys ``(..., n_k, d_k)``, ``n_k >= 1``.
        V: values ``(..., n_k, d_v)``.
        block_size: keys per block; the last block may be shorter.

    Returns:
        ``(..., n_q, d_v)``, equal to ``scaled_dot_product_attention(Q, K, V)[0]`` up to rounding.
    """
    Q, K, V = check_qkv(Q, K, V)
    block_size = positive_int(block_size, "block_size")
    dtype = np.result_type(Q, K, V)
    scale = 1.0 / np.sqrt(Q.shape[-1])
    row_max = np.full(Q.shape[:-1] + (1,), -np.inf, dtype)            # (..., n_q, 1)   m
    row_sum = np.zeros(Q.shape[:-1] + (1,), dtype)                    # (..., n_q, 1)   l
    acc = np.zeros(Q.shape[:-1] + (V.shape[-1],), dtype)              # (..., n_q, d_v) acc
    for start in range(0, K.shape[-2], block_size):
        K_block = K[..., start:start + block_size, :]                 # (..., b, d_k)
        V_block = V[..., start:start + block_size, :]                 # (..., b, d_v)
        scores = (Q @ np.swapaxes(K_block, -1, -2)) * dtype.type(scale)   # (..., n_q, b)
        new_max = np.maximum(row_max, scores.max(axis=-1, keepdims=True))
        rescale = np.exp(row_max - new_max)                           # old sums to the new max (0 at first)
        p = np.exp(scores - new_max)                                  # (..., n_q, b)
        row_sum = row_sum * rescale + p.sum(axis=-1, keepdims=True)
        acc = acc * rescale + p @ V_block                             # (..., n_q, d_v)
        row_max = new_max
    return acc / row_sum                                              # (..., n_q, d_v)
