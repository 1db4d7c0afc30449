"""A decoder-only language model composed of decoder blocks, and a hand-set induction model
(notebook 08; theory.md §6.2, §9).

    logits = final(X_L) @ W_U,   X_0 = W_E[ids] + W_P[positions],   X_l = block_l(X_{l-1})

The blocks (causal self-attention over a KV cache, cross-attention, the feed-forward) are in
decoder_block.py, the caches in kv_cache.py, the step functions (``CachedStep``, ``UncachedStep``, for
any model with ``new_cache``/``forward(ids, cache)``) in generation.py, the PyTorch adapter in
torch_interop.py; they are imported here too, so ``transformer_course.decoder.TransformerDecoderBlock``,
``transformer_course.decoder.CachedStep`` and the others keep working.
"""

from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_matrix, check_rng, describe, positive_int
from .decoder_block import (  # noqa: F401 (re-exported: notebook 08 and the tests import them from here)
    DecoderBlockOutput,
    KVCache,
    TransformerDecoderBlock,
    attention_params,
    causal_self_attention,
    cross_attention,
    decoder_block,
    offset_causal_mask,
)
from .generation import CachedStep, UncachedStep  # noqa: F401 (notebook 08 imports its step functions from here)
from .kv_cache import GrowingKVCache, LayerCaches, PreallocatedKVCache, check_model_cache
from .loss import language_model_loss  # noqa: F401 (notebook 08's loss; it lives with the others)
from .normalization import layer_norm
from .torch_interop import decoder_block_from_torch  # noqa: F401 (the adapter lives with the others)


class DecoderLM:
    """A decoder-only language model: embeddings, decoder blocks, unembedding.

    ``logits = final(X_L) @ W_U`` with ``X_0 = W_E[ids] + W_P[positions]`` and
    ``X_l = block_l(X_{l-1})`` (causal, no cross-attention).

    Args:
        W_E: token embedding ``(V, d_model)``.
        W_P: learned position embedding ``(n_max, d_model)``; ``n_max`` is the longest context.
        blocks: list of :class:`TransformerDecoderBlock` built with ``cross_attention=False``.
        W_U: unembedding ``(d_model, V)``.
        final_norm: apply a layer norm (gamma 1, beta 0) before ``W_U`` (as GPT-2 does).
        causal_self_attention: None (the package's), or a function with the parameters of
            :func:`causal_self_attention` that every block's masked self-attention (and its cache) runs on:
            notebook 08 passes the student's.
    """

    def __init__(self, W_E, W_P, blocks, W_U, *, final_norm: bool = False, causal_self_attention=None):
        self.W_E = as_float_array(W_E, "W_E", min_ndim=2)
        self.vocab_size, self.d_model = self.W_E.shape
        self.W_P = check_matrix(W_P, "W_P", (np.shape(W_P)[0], self.d_model))
        self.W_U = check_matrix(W_U, "W_U", (self.d_model, self.vocab_size))
        self.blocks = list(blocks)
        for i, block in enumerate(self.blocks):
            if not isinstance(block, TransformerDecoderBlock) or block.cross_attention is not None:
                raise TypeError(f"blocks[{i}] must be a TransformerDecoderBlock with cross_attention=False")
            if block.d_model != self.d_model:
                raise ValueError(f"blocks[{i}] has d_model={block.d_model}, expected {self.d_model}")
        self.final_norm = final_norm
        if causal_self_attention is not None and not callable(causal_self_attention):
            raise TypeError(f"causal_self_attention must be None or a function (x, params, n_heads, cache), "
                            f"got {describe(causal_self_attention)}")
        self.causal_self_attention = causal_self_attention

    def with_self_attention(self, causal_self_attention) -> "DecoderLM":
        """The same weights (the same arrays), with every block's self-attention computed by
        ``causal_self_attention`` (None = the package's)."""
        return DecoderLM(self.W_E, self.W_P, self.blocks, self.W_U, final_norm=self.final_norm,
                         causal_self_attention=causal_self_attention)

    @property
    def max_len(self) -> int:
        return self.W_P.shape[0]

    @classmethod
    def random(cls, vocab_size: int, d_model: int, n_heads: int, n_layers: int, max_len: int, *, rng,
               norm_first: bool = True):
        """A GPT-shaped model with random weights (pre-LN and a final norm by default)."""
        rng = check_rng(rng)
        scale = 1.0 / np.sqrt(d_model)
        blocks = [TransformerDecoderBlock(d_model, n_heads, rng=rng, cross_attention=False, norm_first=norm_first)
                  for _ in range(n_layers)]
        return cls(rng.normal(size=(vocab_size, d_model)), 0.1 * rng.normal(size=(max_len, d_model)), blocks,
                   scale * rng.normal(size=(d_model, vocab_size)), final_norm=True)

    def _check_ids(self, ids, start):
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be a non-empty 1-D array of ints, got {describe(ids)}")
        if (ids < 0).any() or (ids >= self.vocab_size).any():
            raise ValueError(f"token ids must be in 0..{self.vocab_size - 1}, got {ids.tolist()}")
        if start + ids.size > self.max_len:
            raise ValueError(f"the context holds at most max_len={self.max_len} tokens, "
                             f"got {start + ids.size}")
        return ids

    @property
    def dtype(self) -> np.dtype:
        """What the residual stream, the keys and the values are computed in."""
        return np.result_type(self.W_E, self.W_P, *{b.self_attention.W_K.dtype for b in self.blocks})

    def new_cache(self, capacity: int | None = None) -> LayerCaches:
        """An empty cache for :meth:`forward`: one per block, growing (``capacity=None``) or preallocated
        for ``capacity`` positions; each ``(n_heads, length, d_head)``."""
        attentions = [block.self_attention for block in self.blocks]
        if capacity is None:
            return LayerCaches(GrowingKVCache(np.zeros((a.n_heads, 0, a.d_head), self.dtype),
                                              np.zeros((a.n_heads, 0, a.d_head), self.dtype)) for a in attentions)
        capacity = positive_int(capacity, "capacity")
        return LayerCaches(PreallocatedKVCache(a.n_heads, capacity, a.d_head, self.dtype) for a in attentions)

    def forward(self, ids, cache: LayerCaches | None = None, return_weights: bool = False):
        """Logits for new tokens ``ids`` ``(n_new,)`` after the cached ones, extending ``cache`` in place.

        Args:
            ids: ``(n_new,)`` token ids, at positions ``cache.length ..`` (``0..n_new-1`` without a cache).
            cache: None, or a :class:`~transformer_course.kv_cache.LayerCaches` with one cache per block
                (:meth:`new_cache`); the new positions' keys and values are appended to it.
            return_weights: also return every block's self-attention weights.

        Returns:
            logits ``(n_new, V)``; with ``return_weights`` also a list with, per block, the weights
            ``(n_heads, n_new, n_past + n_new)``.
        """
        start = check_model_cache(cache, len(self.blocks), np.size(ids))
        ids = self._check_ids(ids, start)
        x = self.W_E[ids] + self.W_P[start:start + ids.size]      # (n_new, d_model)
        weights = []
        for i, block in enumerate(self.blocks):
            result = block(x, cache=None if cache is None else cache[i],
                           self_attention=self.causal_self_attention)
            x = result.output
            if cache is not None:
                cache[i] = result.cache                           # (n_heads, n_past + n_new, d_head) each
            weights.append(result.self_weights)
        if self.final_norm:
            x = layer_norm(x)
        logits = x @ self.W_U                                     # (n_new, V)
        return (logits, weights) if return_weights else logits

    def logits(self, ids) -> np.ndarray:
        """``(n, V)``: row ``t`` scores token ``t + 1`` given tokens ``0..t``."""
        return self.forward(ids)


def induction_model(vocab_size: int, max_len: int, *, sharpness: float = 20.0) -> DecoderLM:
    """A two-layer attention-only decoder whose weights are set by hand to copy.

    Task: predict the token that followed the previous occurrence of the current
    token (``... A B ... A -> B``). Token 0 is a beginning-of-sequence marker that
    must open every sequence and appear nowhere else.

    The residual stream ``(d_model = 3 V + max_len)`` has four slots:
    ``[token one-hot | position one-hot | previous token | copied token]``.

    * Layer 1, the *previous-token head*: the query of position ``p`` matches the
      key of position ``p - 1`` (positional slots), and the value writes that
      position's token into the "previous token" slot.
    * Layer 2, the *induction head*: the query (current token) matches keys whose
      "previous token" equals it -- the positions right after earlier occurrences --
      and the value copies their token into the "copied token" slot.
    * The unembedding reads the copied-token slot.

    ``sharpness`` is the score gap (after the ``1/sqrt(d_head)`` scaling) between a
    match and a non-match: the weight that leaks to non-matches is at most
    ``n e^{-sharpness}``.
    """
    V = positive_int(vocab_size, "vocab_size")
    P = positive_int(max_len, "max_len")
    d = 3 * V + P
    tok, pos, prev, copy = slice(0, V), slice(V, V + P), slice(V + P, 2 * V + P), slice(2 * V + P, d)
    gain = sharpness * np.sqrt(d)                                  # scores are divided by sqrt(d_head = d)
    rng = np.random.default_rng(0)                                 # unused initial weights, all replaced
    blocks = [TransformerDecoderBlock(d, 1, rng=rng, cross_attention=False, attention_only=True)
              for _ in range(2)]
    zeros = lambda: np.zeros((d, d))                               # noqa: E731

    # Layer 1: q_p = gain e_p, k_j = e_{j+1}  ->  score gain iff j = p - 1; v_j = token of j into "prev".
    W_Q, W_K, W_V, W_O = zeros(), zeros(), zeros(), np.eye(d)
    W_Q[pos, pos] = gain * np.eye(P)
    W_K[pos, pos] = np.eye(P, k=1)                                 # row j (position j) -> column j + 1
    W_V[tok, prev] = np.eye(V)
    blocks[0].self_attention.set_weights(W_Q, W_K, W_V, W_O)

    # Layer 2: q_p = gain * token(p), k_j = previous token of j; v_j = token of j into "copy".
    W_Q, W_K, W_V = zeros(), zeros(), zeros()
    W_Q[tok, tok] = gain * np.eye(V)
    W_K[prev, tok] = np.eye(V)
    W_V[tok, copy] = np.eye(V)
    blocks[1].self_attention.set_weights(W_Q, W_K, W_V, W_O)

    W_E = np.zeros((V, d))
    W_E[:, tok] = np.eye(V)
    W_P = np.zeros((P, d))
    W_P[:, pos] = np.eye(P)
    W_U = np.zeros((d, V))
    W_U[copy, :] = sharpness * np.eye(V)                           # logit gap `sharpness` for a clean copy
    return DecoderLM(W_E, W_P, blocks, W_U)
