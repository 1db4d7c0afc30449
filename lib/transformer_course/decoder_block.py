"""The decoder block: causal self-attention over a KV cache, cross-attention, a feed-forward (notebook 08).

A decoder block has up to three sub-layers, each with a residual and a layer norm
(theory.md §6.2, §9):

    post-LN (the paper)                       pre-LN (GPT-2)
    a   = LN1(y + SelfAttn(y; causal))        a   = y + SelfAttn(LN1(y); causal)
    b   = LN2(a + CrossAttn(a, memory))       b   = a + CrossAttn(LN2(a), memory)
    out = LN3(b + FFN(b))                     out = b + FFN(LN3(b))

A decoder-only model (GPT) has no memory and drops the cross-attention; decoder.py composes such
blocks into a language model.

**The KV cache** (``kv_cache.py``: a growing and a preallocated one, interchangeable). With the causal mask, the keys and values of positions
``0..t`` never change when token ``t+1`` is appended (theory.md §6.2, lemma).
So a generating model keeps them, per layer, in a cache of shape
``(..., n_heads, n_past, d_head)`` and, for each new token, computes one query,
one key and one value, appends the key and value, and attends over the cache.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import as_float_array, check_finite, check_rng, describe, positive_int
from .attention import scaled_dot_product_attention
from .feedforward import PositionwiseFeedForward
from .kv_cache import GrowingKVCache, PreallocatedKVCache
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .normalization import layer_norm


# Notebook 08's name for one layer's cache: the growing one (kv_cache.py holds both implementations).
KVCache = GrowingKVCache
LAYER_CACHES = (GrowingKVCache, PreallocatedKVCache)     # what a decoder block accepts as its cache


def offset_causal_mask(n_new: int, n_past: int) -> np.ndarray:
    """Mask ``(n_new, n_past + n_new)`` for ``n_new`` queries that follow ``n_past`` cached keys.

    Query ``i`` sits at absolute position ``n_past + i`` and may attend to keys
    ``0..n_past + i``: entry ``[i, j]`` is True when ``j <= n_past + i``. With
    ``n_past = 0`` this is :func:`~transformer_course.masks.causal_mask`.
    """
    n_new = positive_int(n_new, "n_new")
    if isinstance(n_past, bool) or not isinstance(n_past, (int, np.integer)) or n_past < 0:
        raise ValueError(f"n_past must be an int >= 0, got {describe(n_past)}")
    return np.tril(np.ones((n_new, n_past + n_new), dtype=bool), k=int(n_past))


def causal_self_attention(attention: MultiHeadAttention, x, cache: KVCache | None = None):
    """Masked self-attention of new tokens over the cached ones and themselves.

    Args:
        attention: the layer's weights (a :class:`MultiHeadAttention`).
        x: the new tokens, ``(..., n_new, d_model)``.
        cache: None (nothing seen yet) or the :class:`KVCache` of the earlier
            positions, ``(..., n_heads, n_past, d_head)``.

    Returns:
        ``(output, weights, new_cache)``: ``(..., n_new, d_model)``, per-head weights
        ``(..., n_heads, n_new, n_past + n_new)`` and the cache with the new keys and
        values appended (``n_past + n_new`` positions). Feeding a sequence in one call
        or in pieces gives the same outputs (up to rounding).
    """
    return _attend_over_cache(attention, x, cache)


def _project(x, W, b):
    """x @ W + b; a projection without a bias (b is None) adds nothing."""
    return x @ W if b is None else x @ W + b


def _attend_over_cache(attention, x, cache):
    # The blocks call this directly: the grader replaces the public function by a stub in
    # notebook 08's sandbox (the notebook asks for it), while the blocks must keep working.
    if not isinstance(attention, MultiHeadAttention):
        raise TypeError(f"attention must be a MultiHeadAttention, got {describe(attention)}")
    x = as_float_array(x, "x", min_ndim=2)
    check_finite(x, "x")
    if x.shape[-1] != attention.d_model:
        raise ValueError(f"x must have last dimension d_model={attention.d_model}, got shape {x.shape}")
    h, d_head = attention.n_heads, attention.d_head
    q = split_heads(_project(x, attention.W_Q, attention.b_Q), h)   # (..., h, n_new, d_head)
    k = split_heads(_project(x, attention.W_K, attention.b_K), h)   # (..., h, n_new, d_head)
    v = split_heads(_project(x, attention.W_V, attention.b_V), h)   # (..., h, n_new, d_head)
    if cache is None:
        cache = KVCache(k[..., :0, :], v[..., :0, :])                          # (..., h, 0, d_head)
    elif not isinstance(cache, LAYER_CACHES):
        raise TypeError(f"cache must be None or a KVCache (GrowingKVCache or PreallocatedKVCache), got {describe(cache)}")
    elif cache.keys.shape[:-2] != k.shape[:-2] or cache.keys.shape[-1] != d_head or \
            cache.values.shape != cache.keys.shape:
        raise ValueError(f"cache must hold keys and values of shape {k.shape[:-2] + ('n_past', d_head)}, "
                         f"got {cache.keys.shape} and {cache.values.shape}")
    n_past, n_new = cache.length, x.shape[-2]
    cache = cache.append(k, v)                                                 # (..., h, n_past + n_new, d_head)
    mask = offset_causal_mask(n_new, n_past)                                   # (n_new, n_past + n_new)
    heads, weights = scaled_dot_product_attention(q, cache.keys, cache.values, mask=mask)
    output = _project(merge_heads(heads), attention.W_O, attention.b_O)   # (..., n_new, d_model)
    return output, weights, cache


class DecoderBlockOutput(NamedTuple):
    """What a decoder block returns.

    Attributes:
        output: ``(..., n_new, d_model)``.
        self_weights: ``(..., n_heads, n_new, n_past + n_new)``.
        cross_weights: ``(..., n_heads, n_new, n_enc)``, or None without cross-attention.
        cache: the self-attention :class:`KVCache` after this call.
    """

    output: np.ndarray
    self_weights: np.ndarray
    cross_weights: np.ndarray | None
    cache: KVCache


class TransformerDecoderBlock:
    """Masked self-attention, optional cross-attention and a feed-forward network.

    The self-attention is always causal (query i sees positions ``<= n_past + i``) and takes no
    other mask: unlike ``torch.nn.TransformerDecoderLayer`` there is no ``tgt_mask`` and no
    ``tgt_key_padding_mask``. Sequences of different lengths are run one by one (or padded at the
    end, where causality keeps padding from reaching the real tokens before it). Only the
    cross-attention takes a mask, ``memory_key_padding_mask``.

    Args:
        d_model: token width.
        n_heads: attention heads (must divide d_model).
        d_ff: feed-forward hidden width; default ``4 * d_model``.
        rng: ``numpy.random.Generator`` for the initial weights.
        cross_attention: True for the encoder-decoder block (three sub-layers),
            False for a decoder-only (GPT) block.
        attention_only: True drops the feed-forward network and every layer norm
            (``y + SelfAttn(y)`` [``+ CrossAttn``]), for circuits set by hand.
        norm_first: False = post-LN (the paper, PyTorch's default); True = pre-LN.
        activation: ``"relu"`` or ``"gelu"``.
        eps: layer-norm epsilon.

    Attributes:
        self_attention, cross_attention (:class:`MultiHeadAttention`, or None),
        feed_forward (:class:`PositionwiseFeedForward`, or None), and
        ``ln{1,2,3}_gamma``, ``ln{1,2,3}_beta`` ``(d_model,)`` (ln2 is the cross-attention's).
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, *, rng,
                 cross_attention: bool = True, attention_only: bool = False, norm_first: bool = False,
                 activation: str = "relu", eps: float = 1e-5, dtype=np.float64):
        self.d_model = positive_int(d_model, "d_model")
        self.d_ff = 4 * self.d_model if d_ff is None else positive_int(d_ff, "d_ff")
        rng = check_rng(rng)
        for name, flag in (("cross_attention", cross_attention), ("attention_only", attention_only),
                           ("norm_first", norm_first)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        self.norm_first, self.attention_only, self.eps = norm_first, attention_only, eps
        self.self_attention = MultiHeadAttention(self.d_model, n_heads, rng=rng, dtype=dtype)
        self.cross_attention = (MultiHeadAttention(self.d_model, n_heads, rng=rng, dtype=dtype)
                                if cross_attention else None)
        self.feed_forward = None if attention_only else PositionwiseFeedForward(
            self.d_model, self.d_ff, rng=rng, activation=activation, dtype=dtype)
        for i in (1, 2, 3):
            setattr(self, f"ln{i}_gamma", np.ones(self.d_model, dtype=dtype))
            setattr(self, f"ln{i}_beta", np.zeros(self.d_model, dtype=dtype))

    @property
    def n_heads(self) -> int:
        return self.self_attention.n_heads

    def _norm(self, i, x):
        if self.attention_only:
            return x
        return layer_norm(x, getattr(self, f"ln{i}_gamma"), getattr(self, f"ln{i}_beta"), self.eps)

    def __call__(self, x, memory=None, *, cache: KVCache | None = None,
                 memory_key_padding_mask=None) -> DecoderBlockOutput:
        """Run the block on new tokens ``x`` ``(..., n_new, d_model)``.

        Args:
            x: the new target-side tokens.
            memory: the encoder output ``(..., n_enc, d_model)``; required with
                cross-attention, refused without.
            cache: the self-attention :class:`KVCache` of earlier positions, or None.
            memory_key_padding_mask: optional boolean ``(..., n_enc)``, True for real source tokens.
        """
        x = as_float_array(x, "x", min_ndim=2)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, got shape {x.shape}")
        if self.cross_attention is None and memory is not None:
            raise ValueError("this block has no cross-attention (cross_attention=False): pass memory=None")
        if self.cross_attention is not None and memory is None:
            raise ValueError("this block has cross-attention: pass the encoder output as memory "
                             "(..., n_enc, d_model)")
        pre = self.norm_first or self.attention_only          # attention-only: residuals, no norms
        # 1. masked self-attention (+ residual, norm)
        attended, self_weights, cache = _attend_over_cache(
            self.self_attention, self._norm(1, x) if pre else x, cache)
        a = x + attended if pre else self._norm(1, x + attended)
        # 2. cross-attention: queries from the decoder, keys and values from the encoder
        cross_weights = None
        b = a
        if self.cross_attention is not None:
            crossed, cross_weights = self.cross_attention(
                self._norm(2, a) if pre else a, memory, memory, key_padding_mask=memory_key_padding_mask)
            b = a + crossed if pre else self._norm(2, a + crossed)
        # 3. feed-forward
        if self.feed_forward is None:
            out = b
        elif pre:
            out = b + self.feed_forward(self._norm(3, b))
        else:
            out = self._norm(3, b + self.feed_forward(b))
        return DecoderBlockOutput(out, self_weights, cross_weights, cache)
