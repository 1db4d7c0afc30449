"""A LLaMA-style decoder in NumPy: the blocks that replaced the 2017 ones (notebook 09; theory.md §10).

One layer of a LLaMA-family model (SmolLM2, Llama 2/3, Mistral, Qwen share it)::

    h   = x + Attention(RMSNorm(x))          pre-norm, no biases
    out = h + SwiGLU(RMSNorm(h))

with, against the 2017 Transformer of notebooks 01-05:

    RMSNorm(x)   = g * x / sqrt(mean(x^2) + eps)            (LayerNorm without centring or shift)
    RoPE         q, k rotated pair by pair by the angle  pos * base^(-2i/d_head)   (no position
                 vector added to the input: the rotation of notebook 04 applied to q and k, so
                 q_m . k_n depends on m - n only)
    SwiGLU(x)    = (silu(x W_gate) * (x W_up)) W_down       (a gated feed-forward; silu(z) = z sigmoid(z))
    grouped-query attention: n_heads query heads share n_kv_heads key/value heads (each group of
                 n_heads / n_kv_heads consecutive query heads reads one key/value head), so the
                 KV cache is n_heads / n_kv_heads times smaller
    tied embeddings: the output head is the token-embedding matrix, logits = h E^T

Rotation convention: pairs of ADJACENT features (2i, 2i+1), as in notebook 04 and in llama.cpp's
GGUF files (which store W_Q and W_K with their output features permuted for it). Hugging Face's
checkpoints rotate the two HALVES (i, i + d/2) instead; the two conventions are the same model up
to that permutation of W_Q's and W_K's output features.

The pieces live in their concepts' modules and this file composes them: ``rms_norm`` in
``normalization.py`` (beside ``layer_norm``), RoPE in ``positional.py`` (beside the sinusoids), ``silu``
in ``activations.py``, ``swiglu`` in ``feedforward.py``, grouped-query attention in ``attention.py`` (a
case of ``scaled_dot_product_attention``), each with its backward. They are imported here too, so
``transformer_course.llama.rms_norm`` and the others keep working. ``Llama(config, weights, dtype,
pieces)`` runs on other functions of the same signatures (:class:`LlamaPieces`), e.g. a student's.

Weights are kept as the file stores them -- matrices (out, in), like ``nn.Linear`` -- and used as
``x @ W.T``: a transposed view, no copy. Everything stays in the model's dtype (float32 or float64);
the position tables are cast to it, so no float64 leaks into a float32 forward pass.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ._checks import check_finite, describe, float_dtype, positive_int
# The pieces a LLaMA layer is composed of, each in its concept's module (imported here so that
# ``transformer_course.llama.rms_norm`` etc. keep working for the notebooks, lora.py and the tests).
from .activations import silu, silu_backward  # noqa: F401
from .attention import (grouped_query_attention, grouped_query_attention_backward,  # noqa: F401
                        grouped_query_attention_with_weights, kv_head_gradient)
from .backward import tied_head_backward  # noqa: F401
from .feedforward import swiglu, swiglu_backward  # noqa: F401
from .kv_cache import LayerCaches, PreallocatedKVCache
from .normalization import rms_norm, rms_norm_backward  # noqa: F401
from .positional import apply_rope, rope_backward, rope_frequencies, rope_tables, rotate_pairs  # noqa: F401


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LlamaConfig:
    """The shape of a LLaMA-style model (for SmolLM2-135M: 30, 576, 9, 3, 1536, 49152, 1e5, 1e-5)."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    rope_base: float
    eps: float
    context_length: int = 8192

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


MODEL_DTYPES = (np.float32, np.float64)     # what Llama computes in

# GGUF tensor names of layer L, relative to "blk.L.": matrices (out, in), norms (d,)
LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")


class KVCache(LayerCaches):
    """Keys and values of every layer for the positions seen so far, preallocated for ``capacity``.

    ``cache[L].keys`` and ``cache[L].values``: ``(n_kv_heads, length, d_head)`` views of layer L's
    slice of ``keys``/``values`` ``(n_layers, n_kv_heads, capacity, d_head)`` (:class:`~transformer_course.kv_cache.PreallocatedKVCache`). Memory:
    ``2 * n_layers * n_kv_heads * d_head * capacity`` numbers -- ``n_heads / n_kv_heads`` times less
    than one key/value head per query head would need. ``Llama.forward`` takes any
    :class:`~transformer_course.kv_cache.LayerCaches` (``LayerCaches.growing(...)`` works the same).
    """

    def __init__(self, config: LlamaConfig, capacity: int, dtype=np.float32):
        capacity = positive_int(capacity, "capacity")
        shape = (config.n_layers, config.n_kv_heads, capacity, config.d_head)
        self.keys = np.zeros(shape, dtype=dtype)          # every layer's buffers, (n_layers, Hkv, capacity, dh)
        self.values = np.zeros(shape, dtype=dtype)
        super().__init__(PreallocatedKVCache.on_buffers(self.keys[L], self.values[L]) for L in range(config.n_layers))


@dataclass(frozen=True)
class LlamaPieces:
    """The functions a LLaMA layer is composed of; ``Llama(..., pieces=...)`` runs on other ones (notebook 09's
    own, say). Any object with these four attributes will do (a ``SimpleNamespace``, a module), called as

        rms_norm(x, weight, eps)                 apply_rope(x, positions, base)
        swiglu(x, W_gate, W_up, W_down)          grouped_query_attention(q, k, v)   (causal, queries last)
    """

    rms_norm: Callable = rms_norm
    apply_rope: Callable = apply_rope
    swiglu: Callable = swiglu
    grouped_query_attention: Callable = grouped_query_attention


PIECES = ("rms_norm", "apply_rope", "swiglu", "grouped_query_attention")


def piece(pieces, name: str):
    """``pieces[name]`` of a mapping (a notebook's ``globals()``), else ``getattr(pieces, name)``; None if absent."""
    if hasattr(pieces, "get") and hasattr(pieces, "keys"):
        return pieces.get(name)
    return getattr(pieces, name, None)


def llama_pieces(pieces=None):
    """The functions a :class:`Llama` is composed of: :class:`LlamaPieces` (the concept modules') for None,
    else ``pieces`` (an object with the attributes of :data:`PIECES`; a mapping is read by name), checked."""
    if pieces is None:
        return LlamaPieces()
    if hasattr(pieces, "get") and hasattr(pieces, "keys"):
        pieces = LlamaPieces(**{name: piece(pieces, name) for name in PIECES})
    for name in PIECES:
        if not callable(getattr(pieces, name, None)):
            raise TypeError(f"pieces.{name} must be a function, got {describe(getattr(pieces, name, None))}")
    return pieces


class Llama:
    """A LLaMA-style decoder from a dict of GGUF-named float arrays.

    ``weights``: ``"token_embd.weight"`` ``(V, d)`` (also the output head: tied),
    ``"output_norm.weight"`` ``(d,)``, and for every layer L the ``"blk.L.<name>.weight"`` of
    :data:`LAYER_TENSORS`. W_Q and W_K are in GGUF's order (adjacent-pair RoPE). ``pieces``: the
    functions it is composed of (:class:`LlamaPieces`; default the concept modules').
    """

    def __init__(self, config: LlamaConfig, weights: dict, dtype=np.float32, pieces=None):
        self.config = config
        self.pieces = llama_pieces(pieces)
        self.dtype = float_dtype(dtype, allowed=MODEL_DTYPES)
        missing = [f"blk.{L}.{n}.weight" for L in range(config.n_layers) for n in LAYER_TENSORS
                   if f"blk.{L}.{n}.weight" not in weights]
        missing = missing + [n for n in ("token_embd.weight", "output_norm.weight") if n not in weights]
        if missing:
            raise KeyError(f"weights lacks {len(missing)} tensor(s), e.g. {missing[:3]}")
        cast = lambda a: np.asarray(a).astype(self.dtype, copy=False)   # noqa: E731
        self.embedding = cast(weights["token_embd.weight"])                     # (V, d)
        if self.embedding.shape != (config.vocab_size, config.d_model):
            raise ValueError(f"token_embd.weight must have shape {(config.vocab_size, config.d_model)}, "
                             f"got {self.embedding.shape}")
        self.final_norm = cast(weights["output_norm.weight"])                   # (d,)
        self.layers = [{name: cast(weights[f"blk.{L}.{name}.weight"]) for name in LAYER_TENSORS}
                       for L in range(config.n_layers)]
        tensors = {"token_embd.weight": self.embedding, "output_norm.weight": self.final_norm}
        tensors.update({f"blk.{L}.{name}.weight": layer[name] for L, layer in enumerate(self.layers) for name in layer})
        for name, a in tensors.items():                 # min and max: NaN propagates, +-inf shows; 2 fast passes
            if a.size and not (np.isfinite(a.min()) and np.isfinite(a.max())):
                check_finite(a, f"weights[{name!r}]")

    def with_pieces(self, pieces) -> "Llama":
        """This model, sharing its weight arrays, composed of ``pieces`` (see :func:`llama_pieces`; None = the
        concept modules'), e.g. a notebook's own ``rms_norm``, ``apply_rope``, ``swiglu``, ``grouped_query_attention``."""
        other = copy.copy(self)
        other.pieces = llama_pieces(pieces)
        return other

    def new_cache(self, capacity: int | None = None) -> LayerCaches:
        """An empty cache for :meth:`forward`: growing (``capacity=None``), or a :class:`KVCache` preallocated
        for ``capacity`` positions; each layer's ``(n_kv_heads, length, d_head)`` in the model's dtype."""
        if capacity is None:
            return LayerCaches.growing(self.config.n_layers, self.config.n_kv_heads, self.config.d_head, self.dtype)
        return KVCache(self.config, capacity, self.dtype)

    def forward(self, ids, cache: KVCache | None = None, return_weights: bool = False):
        """Logits for every new token, using and extending ``cache`` when given.

        Args:
            ids: ``(n,)`` token ids; with a cache they sit at positions ``cache.length ..
                cache.length + n - 1``, else at ``0..n-1``.
            cache: a :class:`KVCache` or any :class:`~transformer_course.kv_cache.LayerCaches` (updated in place), or None.
            return_weights: also return each layer's attention weights (computed by
                :func:`~transformer_course.attention.grouped_query_attention_with_weights`: only on
                the concept modules' ``grouped_query_attention``).

        Returns:
            logits ``(n, V)``; with ``return_weights`` also a list of ``n_layers`` arrays
            ``(n_heads, n, n_k)``.
        """
        cfg = self.config
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be a non-empty 1-D array of integers, got {describe(ids)}")
        if ids.min() < 0 or ids.max() >= cfg.vocab_size:
            raise ValueError(f"ids must lie in 0..{cfg.vocab_size - 1}, got {ids.min()}..{ids.max()}")
        start = 0 if cache is None else cache.length
        n = ids.size
        if cache is not None and not isinstance(cache, LayerCaches):
            raise TypeError(f"cache must be None or a KVCache (LayerCaches), got {describe(cache)}")
        if cache is not None and len(cache) != cfg.n_layers:
            raise ValueError(f"cache holds {len(cache)} layers, the model has {cfg.n_layers}")
        if cache is not None and cache.capacity is not None and start + n > cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} positions; {start} used, {n} more requested")
        if start + n > cfg.context_length:
            raise ValueError(f"ids would sit at positions {start}..{start + n - 1}, past the model's context of "
                             f"{cfg.context_length} positions (0..{cfg.context_length - 1}, the range RoPE was "
                             f"trained on): {n} ids after {start} cached")
        positions = np.arange(start, start + n)
        p = self.pieces
        if return_weights and p.grouped_query_attention is not grouped_query_attention:
            raise ValueError("return_weights needs the package's grouped_query_attention (its weights come from "
                             "grouped_query_attention_with_weights); this model's piece is "
                             f"{describe(p.grouped_query_attention)}, which returns the output only")
        as_model = lambda a: np.asarray(a).astype(self.dtype, copy=False)   # noqa: E731 (a no-op for the package's)

        x = self.embedding[ids]                                          # (n, d)
        all_weights = []
        for L, w in enumerate(self.layers):
            h = as_model(p.rms_norm(x, w["attn_norm"], cfg.eps))         # (n, d)
            q = (h @ w["attn_q"].T).reshape(n, cfg.n_heads, cfg.d_head).transpose(1, 0, 2)      # (H, n, dh)
            k = (h @ w["attn_k"].T).reshape(n, cfg.n_kv_heads, cfg.d_head).transpose(1, 0, 2)   # (Hkv, n, dh)
            v = (h @ w["attn_v"].T).reshape(n, cfg.n_kv_heads, cfg.d_head).transpose(1, 0, 2)   # (Hkv, n, dh)
            q = as_model(p.apply_rope(q, positions, cfg.rope_base))     # (H, n, dh)
            k = as_model(p.apply_rope(k, positions, cfg.rope_base))     # (Hkv, n, dh)
            if cache is not None:                                        # append, then read all positions
                k, v = cache.append(L, k, v)                             # (Hkv, n_k, dh) each
            # the queries are the last n of the n_k positions: the attention's default, nothing to pass
            if return_weights:
                attn, weights = grouped_query_attention_with_weights(q, k, v)
                all_weights.append(weights)
            else:
                attn = as_model(p.grouped_query_attention(q, k, v))      # (H, n, dh)
            attn = attn.transpose(1, 0, 2).reshape(n, cfg.d_model)      # (n, H*dh) = (n, d)
            x = x + attn @ w["attn_output"].T
            h = as_model(p.rms_norm(x, w["ffn_norm"], cfg.eps))
            x = x + as_model(p.swiglu(h, w["ffn_gate"], w["ffn_up"], w["ffn_down"]))
        logits = as_model(p.rms_norm(x, self.final_norm, cfg.eps)) @ self.embedding.T    # (n, V): tied head
        return (logits, all_weights) if return_weights else logits

    def generate_greedy(self, prompt_ids, n_new: int, use_cache: bool = True) -> np.ndarray:
        """Greedy decoding: ``prompt_ids`` then ``n_new`` argmax tokens; without the cache every
        step runs the whole sequence again (the slow way; the result must be identical)."""
        from .generation import CachedStep, UncachedStep, check_n_new, check_prompt_ids, generate

        prompt_ids, n_new = check_prompt_ids(prompt_ids), check_n_new(n_new)
        if prompt_ids.max() >= self.config.vocab_size:
            raise ValueError(f"prompt_ids must lie in 0..{self.config.vocab_size - 1}, got {prompt_ids.max()}")
        if prompt_ids.size + n_new > self.config.context_length:
            raise ValueError(f"{prompt_ids.size} prompt ids + n_new={n_new} = {prompt_ids.size + n_new} positions, "
                             f"past the model's context of {self.config.context_length}")
        step = CachedStep(self, self.new_cache(prompt_ids.size + n_new)) if use_cache else UncachedStep(self)
        return generate(step, prompt_ids, n_new, temperature=0.0)
