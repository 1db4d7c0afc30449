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
:meth:`Llama.layer` is the one composition of a layer: :meth:`Llama.forward` runs it on one sequence with a
KV cache, ``lora.LoRAModel`` on a batch with adapters, keeping what its backward pass needs.

Weights have the file's shapes -- matrices (out, in), like ``nn.Linear`` -- and are used as ``x @ W.T``. In
memory each is laid out as its transpose (Fortran order): ``W.T`` is then an (in, out) array read row by row,
so a decode step's one-row product streams the weights in order (OpenBLAS's ``gemv_n``; with the file's
(out, in) layout it takes ``gemv_t``, up to 1.5x slower here). Projections that read the same input --
``W_Q | W_K | W_V``, and ``W_gate | W_up`` -- are stored stacked, each matrix a view of its stack, so that
one product computes them together (a larger matrix also streams faster than three small ones). Everything
stays in the model's dtype (float32 or float64); the position tables are cast to it, so no float64 leaks
into a float32 forward pass.

Checks: the ids and the cache once per :meth:`Llama.forward`; the weights once, when the model is built. The
concept modules' grouped-query attention checks its arguments and its scores for overflow on every call; the
forward runs its arithmetic alone (``attention.grouped_query_attention_unchecked``) in every layer and checks
the logits once at the end -- if they are not finite, it runs again with the checked attention, which names
the cause.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ._checks import check_finite, describe, float_dtype, positive_int
# The pieces a LLaMA layer is composed of, each in its concept's module (imported here so that
# ``transformer_course.llama.rms_norm`` etc. keep working for the notebooks, lora.py and the tests).
from .activations import silu, silu_backward  # noqa: F401
from .attention import (grouped_query_attention, grouped_query_attention_backward,  # noqa: F401
                        grouped_query_attention_unchecked, grouped_query_attention_with_weights, kv_head_gradient)
from .backward import tied_head_backward  # noqa: F401
from .feedforward import swiglu, swiglu_backward  # noqa: F401
from .kv_cache import LayerCaches, PreallocatedKVCache, check_model_cache
from .normalization import rms_norm, rms_norm_backward  # noqa: F401
from .positional import apply_rope, rope_backward, rope_frequencies, rope_tables, rotate_pairs  # noqa: F401


def stack_heads(a) -> np.ndarray:
    """``(..., h, n, dh)`` -> ``(B*h, n, dh)``: the heads of every sequence of a batch as the heads of one sequence.
    Grouped-query attention on the stacks is the batch's (:meth:`Llama._attention` says why), so a function written
    for ``(n_heads, n, dh)`` arrays serves a batch in one call, forward and backward."""
    return a.reshape((-1,) + a.shape[-2:])


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
# Projections that read the same input, stored as one stack each (Llama.stacks): the stack's name, its members
STACKS = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_gate_up": ("ffn_gate", "ffn_up")}


def transposed_layout(matrices) -> np.ndarray:
    """``matrices`` ``(out_i, in)`` stacked into one ``(sum out_i, in)`` array laid out as its transpose (Fortran
    order): ``stack.T`` is a C-contiguous ``(in, sum out_i)`` array, so ``x @ stack.T`` reads it row by row."""
    stack = np.empty((sum(W.shape[0] for W in matrices), matrices[0].shape[1]), matrices[0].dtype, order="F")
    start = 0
    for W in matrices:
        stack[start:start + W.shape[0]] = W
        start = start + W.shape[0]
    return stack


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
        embedding = cast(weights["token_embd.weight"])
        if embedding.shape != (config.vocab_size, config.d_model):
            raise ValueError(f"token_embd.weight must have shape {(config.vocab_size, config.d_model)}, "
                             f"got {embedding.shape}")
        self.embedding = transposed_layout([embedding])                         # (V, d); E^T streams for the head
        self.final_norm = cast(weights["output_norm.weight"])                   # (d,)
        d, nq, nkv, F = config.d_model, config.n_heads * config.d_head, config.n_kv_heads * config.d_head, config.d_ff
        shapes = {"attn_norm": (d,), "attn_q": (nq, d), "attn_k": (nkv, d), "attn_v": (nkv, d), "attn_output": (d, nq),
                  "ffn_norm": (d,), "ffn_gate": (F, d), "ffn_up": (F, d), "ffn_down": (d, F)}
        self.layers, self.stacks = [], []
        for L in range(config.n_layers):
            w = {name: cast(weights[f"blk.{L}.{name}.weight"]) for name in LAYER_TENSORS}
            for name, a in w.items():
                if a.shape != shapes[name]:
                    raise ValueError(f"weights['blk.{L}.{name}.weight'] must have shape {shapes[name]}, got {a.shape}")
            stacks = {stack: transposed_layout([w[name] for name in names]) for stack, names in STACKS.items()}
            layer = {name: a if a.ndim == 1 else transposed_layout([a]) for name, a in w.items()}
            for stack, names in STACKS.items():                                  # each matrix a view of its stack
                bounds = np.cumsum([0] + [w[name].shape[0] for name in names])
                layer.update({name: stacks[stack][lo:hi] for name, lo, hi in zip(names, bounds, bounds[1:])})
            self.layers.append(layer)
            self.stacks.append(stacks)
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

    def truncated(self, n_layers: int) -> "Llama":
        """The first ``n_layers`` layers of this model, then its final norm and head, sharing its weight arrays: a
        cheaper model of the same vocabulary ("early exit"; a drafter for speculative decoding, speculative.py)."""
        n_layers = positive_int(n_layers, "n_layers")
        if n_layers > self.config.n_layers:
            raise ValueError(f"n_layers must be in 1..{self.config.n_layers} (this model's layers), got {n_layers}")
        other = copy.copy(self)
        other.config = dataclasses.replace(self.config, n_layers=n_layers)
        other.layers, other.stacks = self.layers[:n_layers], self.stacks[:n_layers]
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
        n = ids.size
        start = check_model_cache(cache, cfg.n_layers, n)
        if start + n > cfg.context_length:
            raise ValueError(f"ids would sit at positions {start}..{start + n - 1}, past the model's context of "
                             f"{cfg.context_length} positions (0..{cfg.context_length - 1}, the range RoPE was "
                             f"trained on): {n} ids after {start} cached")
        positions = np.arange(start, start + n)
        if return_weights and self.pieces.grouped_query_attention is not grouped_query_attention:
            raise ValueError("return_weights needs the package's grouped_query_attention (its weights come from "
                             "grouped_query_attention_with_weights); this model's piece is "
                             f"{describe(self.pieces.grouped_query_attention)}, which returns the output only")

        logits, weights = self._layers_and_head(ids, positions, cache, return_weights, checked=False)
        if not (np.isfinite(logits.max()) and np.isfinite(logits.min())):    # NaN propagates, +-inf shows
            if cache is not None:                                          # something overflowed: again, with the
                cache.truncate(start)                                      # checked attention, to name the cause
            logits, weights = self._layers_and_head(ids, positions, cache, return_weights, checked=True)
        return (logits, weights) if return_weights else logits

    def _layers_and_head(self, ids, positions, cache, return_weights: bool, checked: bool):
        """The forward pass proper: ``(logits (n, V), the layers' attention weights or None)``."""
        x = self.embedding[ids]                                          # (n, d)
        all_weights = []
        for L in range(self.config.n_layers):
            if return_weights:
                x, weights = self.layer(L, x, positions, cache, return_weights=True)
                all_weights.append(weights)
            else:
                x = self.layer(L, x, positions, cache, checked=checked)  # (n, d)
        return self.head(x), (all_weights if return_weights else None)  # (n, V)

    def head(self, x) -> np.ndarray:
        """Logits ``(..., V)`` of the residual stream ``x`` ``(..., d)`` leaving the last layer: the final RMSNorm,
        then the tied output head ``h E^T``."""
        rows = np.reshape(x, (-1, self.config.d_model))                 # (tokens, d): one 2-D product
        h = self._as_model(self.pieces.rms_norm(rows, self.final_norm, self.config.eps))
        return (h @ self.embedding.T).reshape(np.shape(x)[:-1] + (self.config.vocab_size,))

    def layer(self, L: int, x, positions, cache=None, *, adapted=None, keep=None, return_weights=False, checked=True):
        """Layer ``L`` on the residual stream ``x`` ``(..., n, d)`` of tokens at ``positions`` ``(n,)``: THE composition
        of a LLaMA layer, on this model's pieces. :meth:`forward` runs it on one sequence ``(n, d)`` with a KV
        cache; :class:`~transformer_course.lora.LoRAModel` on a batch ``(B, n, d)``, with adapters, keeping what its
        backward pass needs::

            a = rms_norm(x);  q, k = rope(a W_q^T), rope(a W_k^T);  v = a W_v^T;  o = attention(q, k, v)
            x1 = x + o W_o^T;  m = rms_norm(x1);  x2 = x1 + swiglu(m)

        Everything but the attention works on the rows ``(tokens, ·)`` of the batch: one 2-D matrix product per
        weight (a 3-D @ 2-D matmul would loop over the batch).

        Args:
            L: the layer's index. x: ``(..., n, d)`` in the model's dtype. positions: ``(n,)`` integers.
            cache: a :class:`~transformer_course.kv_cache.LayerCaches` (one sequence, ``x`` ``(n, d)``): the new
                keys and values are appended to layer L's, and the attention reads every cached position.
            adapted: ``{name: f}``: the projections of :data:`LAYER_TENSORS` computed as ``f(rows)`` ``(tokens, out)``
                instead of ``rows W^T`` (LoRA's adapters).
            keep: a dict that receives what a backward pass needs, as rows ``(tokens, ·)``: the inputs of the two
                norms, ``x`` and ``x1``; ``gate``, ``up`` and ``act`` = silu(gate); per head, the rotated ``q``
                ``(..., H, n, dh)``, ``k`` and ``v`` ``(..., Hkv, n, dh)`` and the attention ``weights``
                ``(..., H, n, n)`` (None unless the attention piece is the package's, which gives them); and
                ``inputs``: ``{name: rows}``, the input of each ADAPTED projection, which its adapter's gradient
                needs (a frozen projection passes ``dy W`` down: its input is not kept, and its memory is reused).
            return_weights: also return the attention weights ``(..., H, n, n_k)`` (the package's attention only).
            checked: False runs the package's attention without its checks (:meth:`forward` checks the logits).

        q, k and v read the same ``a``, gate and up the same ``m``: each group is one product over its stacked
        matrices (:meth:`projections`). The feed-forward is the model's ``swiglu`` piece when that is a notebook's
        own; otherwise -- the package's ``swiglu``, ``keep`` given, or one of its three matrices adapted -- it is
        composed open, ``ffn_down(silu(gate) * up)`` (``silu`` of ``activations.py``, what the package's ``swiglu``
        computes): gate and up then come from one product, adapters reach the matrices, and the backward gets
        ``gate`` and ``up`` (a closed swiglu gives neither: it would have to compute the two ``(d_ff, d)`` products
        again, half the forward's arithmetic).
        """
        cfg, w, p, as_model = self.config, self.layers[L], self.pieces, self._as_model
        if cache is not None and np.ndim(x) != 2:
            raise ValueError(f"a cache holds one sequence: x must be (n, d), got {describe(x)}")
        adapted = adapted or {}
        proj = lambda name, y: adapted[name](y) if name in adapted else y @ w[name].T       # noqa: E731 (tokens, out)
        lead, dh = x.shape[:-1], cfg.d_head                              # (..., n), d_head
        heads = lambda y, h: y.reshape(lead + (h, dh)).swapaxes(-2, -3)  # noqa: E731 (tokens, h*dh) -> (..., h, n, dh)
        rows = x.reshape(-1, cfg.d_model)                                # (tokens, d)

        a = as_model(p.rms_norm(rows, w["attn_norm"], cfg.eps))         # (tokens, d)
        q, k, v = self.projections(L, "attn_qkv", a, adapted)            # (tokens, H*dh), (tokens, Hkv*dh) x 2
        q = as_model(p.apply_rope(heads(q, cfg.n_heads), positions, cfg.rope_base))      # (..., H, n, dh)
        k = as_model(p.apply_rope(heads(k, cfg.n_kv_heads), positions, cfg.rope_base))   # (..., Hkv, n, dh)
        v = heads(v, cfg.n_kv_heads)                                     # (..., Hkv, n, dh)
        k_all, v_all = (k, v) if cache is None else cache.append(L, k, v)   # (..., Hkv, n_k, dh) each
        o, weights = self._attention(q, k_all, v_all, return_weights or keep is not None, checked)  # (..., H, n, dh)
        o = o.swapaxes(-2, -3).reshape(rows.shape)                       # (tokens, H*dh) = (tokens, d)
        x1 = rows + proj("attn_output", o)
        m = as_model(p.rms_norm(x1, w["ffn_norm"], cfg.eps))
        if keep is None and p.swiglu is not swiglu and not adapted.keys() & {"ffn_gate", "ffn_up", "ffn_down"}:
            x2 = x1 + as_model(p.swiglu(m, w["ffn_gate"], w["ffn_up"], w["ffn_down"]))
        else:                                                            # open: the package's, adapters, backward
            gate, up = self.projections(L, "ffn_gate_up", m, adapted)    # (tokens, d_ff) each
            act = silu(gate)
            s = act * up
            x2 = x1 + proj("ffn_down", s)
            if keep is not None:
                inputs = {"attn_q": a, "attn_k": a, "attn_v": a, "attn_output": o,
                          "ffn_gate": m, "ffn_up": m, "ffn_down": s}
                keep.update(x=rows, q=q, k=k, v=v, weights=weights, x1=x1, gate=gate, up=up, act=act,
                            inputs={name: inputs[name] for name in adapted})
        x2 = x2.reshape(x.shape)                                         # (..., n, d)
        return (x2, weights) if return_weights else x2

    def projections(self, L: int, stack: str, y, adapted=None) -> list:
        """``y W^T`` ``(tokens, out)`` for each matrix of ``stack`` (:data:`STACKS`: ``"attn_qkv"`` or ``"ffn_gate_up"``,
        matrices that read the same ``y``): one product over the stacked matrices, split -- or, when an adapter replaces
        one of them (``adapted``, LoRA's), one product each."""
        names, w = STACKS[stack], self.layers[L]
        if adapted and adapted.keys() & set(names):
            return [adapted[name](y) if name in adapted else y @ w[name].T for name in names]
        widths = np.cumsum([w[name].shape[0] for name in names])[:-1]   # where one output ends and the next begins
        return np.split(y @ self.stacks[L][stack].T, widths, axis=-1)   # (tokens, sum of outs) -> one per matrix

    def _attention(self, q, k, v, want_weights: bool, checked: bool = True):
        """The model's grouped-query attention on ``q`` ``(..., H, n, dh)``, ``k``, ``v`` ``(..., Hkv, n_k, dh)``, in
        one call: the sequences of a batch are more heads. Query head h of sequence b, row ``b H + h`` of the stack, reads
        row ``(b H + h) // group = b Hkv + h // group``: its own sequence's key/value head h // group. Returns
        ``(out (..., H, n, dh), weights (..., H, n, n_k) or None)``: the weights when wanted and the piece is the
        package's (:func:`grouped_query_attention_with_weights`, the same output bits). ``checked=False`` runs the
        package's attention as :func:`grouped_query_attention_unchecked` (the same numbers, no checks)."""
        package = self.pieces.grouped_query_attention is grouped_query_attention
        if want_weights and package:
            out, weights = grouped_query_attention_with_weights(stack_heads(q), stack_heads(k), stack_heads(v))
            return out.reshape(q.shape), weights.reshape(q.shape[:-1] + k.shape[-2:-1])
        attend = grouped_query_attention_unchecked if package and not checked else self.pieces.grouped_query_attention
        out = attend(stack_heads(q), stack_heads(k), stack_heads(v))     # (B*H, n, dh)
        return self._as_model(out).reshape(q.shape), None

    def _as_model(self, a) -> np.ndarray:
        """A piece's output in the model's dtype (a no-op for the package's pieces, which keep it)."""
        return np.asarray(a).astype(self.dtype, copy=False)

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
