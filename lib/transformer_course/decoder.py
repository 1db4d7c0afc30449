"""The decoder: causal self-attention with a KV cache, cross-attention, the decoder block, a tiny LM.

A decoder block has up to three sub-layers, each with a residual and a layer norm
(theory.md §6.2, §9):

    post-LN (the paper)                       pre-LN (GPT-2)
    a   = LN1(y + SelfAttn(y; causal))        a   = y + SelfAttn(LN1(y); causal)
    b   = LN2(a + CrossAttn(a, memory))       b   = a + CrossAttn(LN2(a), memory)
    out = LN3(b + FFN(b))                     out = b + FFN(LN3(b))

A decoder-only model (GPT) has no memory and drops the cross-attention.

**The KV cache** (``kv_cache.py``: a growing and a preallocated one, interchangeable). With the causal mask, the keys and values of positions
``0..t`` never change when token ``t+1`` is appended (theory.md §6.2, lemma).
So a generating model keeps them, per layer, in a cache of shape
``(..., n_heads, n_past, d_head)`` and, for each new token, computes one query,
one key and one value, appends the key and value, and attends over the cache.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import as_float_array, check_finite, check_matrix, check_rng, describe, positive_int
from .feedforward import PositionwiseFeedForward
from .multihead import MultiHeadAttention, merge_heads, split_heads
from .normalization import layer_norm
from .attention import scaled_dot_product_attention
from .kv_cache import GrowingKVCache, PreallocatedKVCache


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
    """

    def __init__(self, W_E, W_P, blocks, W_U, *, final_norm: bool = False):
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

    def forward(self, ids, caches: list[KVCache] | None = None):
        """Logits for new tokens ``ids`` ``(n_new,)`` after the cached ones.

        Returns:
            ``(logits, caches, weights)``: ``(n_new, V)``; one :class:`KVCache` per
            block (``n_past + n_new`` positions); per block the self-attention
            weights ``(n_heads, n_new, n_past + n_new)``.
        """
        start = 0 if caches is None else caches[0].length
        ids = self._check_ids(ids, start)
        x = self.W_E[ids] + self.W_P[start:start + ids.size]      # (n_new, d_model)
        new_caches, weights = [], []
        for i, block in enumerate(self.blocks):
            result = block(x, cache=None if caches is None else caches[i])
            x = result.output
            new_caches.append(result.cache)
            weights.append(result.self_weights)
        if self.final_norm:
            x = layer_norm(x)
        return x @ self.W_U, new_caches, weights                  # (n_new, V)

    def logits(self, ids) -> np.ndarray:
        """``(n, V)``: row ``t`` scores token ``t + 1`` given tokens ``0..t``."""
        return self.forward(ids)[0]


class UncachedStep:
    """``step(ids) -> logits (V,)`` that recomputes the whole prefix every call (for ``generate``)."""

    def __init__(self, model: DecoderLM):
        self.model = model

    def __call__(self, ids) -> np.ndarray:
        return self.model.logits(ids)[-1]                          # (V,)


class CachedStep:
    """``step(ids) -> logits (V,)`` that keeps a KV cache and only runs the tokens it has not seen.

    The first call processes the whole prompt; each later call one token.
    ``ids`` must extend the sequence of the previous call.
    """

    def __init__(self, model: DecoderLM):
        self.model = model
        self.caches: list[KVCache] | None = None
        self.seen = np.zeros(0, dtype=np.int64)

    def __call__(self, ids) -> np.ndarray:
        ids = np.asarray(ids)
        n_seen = self.seen.size
        if ids.size <= n_seen or not np.array_equal(ids[:n_seen], self.seen):
            raise ValueError("CachedStep: ids must extend the tokens of the previous call "
                             "(make a new CachedStep for a new sequence)")
        logits, self.caches, _ = self.model.forward(ids[n_seen:], self.caches)
        self.seen = ids.copy()
        return logits[-1]                                          # (V,)

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by the caches of all layers."""
        return 0 if self.caches is None else sum(c.nbytes for c in self.caches)


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


def decoder_block_from_torch(layer, dtype=np.float64) -> TransformerDecoderBlock:
    """A :class:`TransformerDecoderBlock` with the weights of a ``torch.nn.TransformerDecoderLayer``."""
    from .torch_interop import activation_from_torch, multihead_from_torch

    activation = activation_from_torch(layer.activation)
    d_model, d_ff = layer.self_attn.embed_dim, layer.linear1.out_features
    block = TransformerDecoderBlock(d_model, layer.self_attn.num_heads, d_ff, rng=np.random.default_rng(0),
                                    norm_first=bool(layer.norm_first), activation=activation,
                                    eps=float(layer.norm1.eps), dtype=dtype)
    block.self_attention = multihead_from_torch(layer.self_attn, dtype)
    block.cross_attention = multihead_from_torch(layer.multihead_attn, dtype)

    def np_(t):
        return t.detach().cpu().numpy().astype(dtype)

    block.feed_forward.set_weights(np_(layer.linear1.weight).T, np_(layer.linear1.bias),
                                   np_(layer.linear2.weight).T, np_(layer.linear2.bias))
    for i in (1, 2, 3):
        norm = getattr(layer, f"norm{i}")
        setattr(block, f"ln{i}_gamma", np_(norm.weight))
        setattr(block, f"ln{i}_beta", np_(norm.bias))
    return block
