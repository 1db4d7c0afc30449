"""A fast SmolLM2 (LLaMA-style) decoder in NumPy: one token at the memory's speed.

:class:`transformer_course.llama.Llama` is the readable reference (notebook 09). At batch 1 a
decode step multiplies one vector by every weight matrix of the model once: 30 layers x 7
matrices plus the tied output head, 134.5 M numbers, 538 MB in float32. No cache holds that, so
the step cannot be faster than the time to stream those bytes from memory -- the *bound*, measured
by ``bench/llm_speed.py`` as OpenBLAS matrix-vector products over these very matrices. What the
readable model spends beyond it is Python and NumPy calls, fresh arrays, copies and checks.
:class:`FastLlama` computes the same function with:

* **One GEMV per weight matrix, fused where the input is shared.** ``W_Q | W_K | W_V`` are the row
  blocks of one ``(H d_h + 2 H_kv d_h, d)`` matrix, ``W_gate | W_up`` of one ``(2 d_ff, d)``, so a
  layer is four products (qkv, o, gate+up, down) and the head is one more, over the embedding.
* **Weights laid out for the product.** Each matrix is stored transposed, ``(in, out)``
  C-contiguous, and used as ``x @ W^T`` (OpenBLAS's ``gemv_n``: streams the matrix once, in order).
* **Constants folded into the weights once.** RMSNorm's gain multiplies the columns of the matrix
  that follows it (``(x r g) W^T = r x (W diag g)^T``), and ``1/sqrt(d_head)`` the rows of ``W_Q``.
  W_Q's and W_K's output features are permuted within each head from adjacent pairs ``(2i, 2i+1)``
  to halves ``(i, i + d_h/2)``: the rotation then works on two contiguous halves, and every score
  ``q . k`` is unchanged (the same permutation of both vectors).
* **Preallocated buffers, in place.** The residual stream, the projections, RoPE's scratch and the
  scores live in arrays allocated once per model; every ufunc and product writes with ``out=``.
  The KV cache is one preallocated array per kind (:class:`FastKVCache`).
* **Checks once per call**: the weights at construction; the ids and the cache on entry to
  :meth:`FastLlama.forward` / :meth:`FastLlama.decode_step`; nothing inside the layers.
* **Batched prefill**: a prompt of ``n`` tokens goes through every layer as ``(n, d)`` matrix
  products (GEMM), with causal attention over blocks of queries.
* **A few tokens, one read of the weights** (the verify pass of speculative decoding,
  ``transformer_course.speculative``): 2 to ``stacked_rows`` new tokens multiply each matrix as one GEMV
  per row in one matmul call -- the matrix streams from memory for the first row and comes from the cache
  for the others -- since OpenBLAS's GEMM, which packs the matrix first, costs ~2-3 one-row passes at
  2-8 rows (:meth:`FastLlama._times`). The cache rolls back with ``FastKVCache.truncate``.

The result equals the readable model up to rounding (float32 and float64; the bounds are in
tests/test_fast_llama.py), and greedy continuations are identical.

The only place this module touches the readable package's loader is :func:`course_smollm2`; the
model itself takes a config and a dict of GGUF-named arrays, like the readable ``Llama``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
from dataclasses import dataclass

import numpy as np

from transformer_course._checks import describe, positive_int
from transformer_course.kv_cache import check_truncate
from transformer_course.positional import rope_frequencies

from ._threads import openblas_corename

__all__ = ["FastKVCache", "FastLlama", "course_smollm2", "load_fast_smollm2"]

# GGUF tensor names of one layer (relative to "blk.L."), as in transformer_course.llama
_LAYER = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
_CONFIG_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "rope_base", "eps")
#: Queries per block in the prefill's attention: scores of at most ``n_heads x 256 x n_k`` at a time.
PREFILL_BLOCK = 256
#: Up to this many rows, ``rows @ W`` is computed as one GEMV per row in one matmul call (the matrix comes from
#: memory for the first row and from the cache for the others); above it as one GEMM, which packs the weight
#: matrix before multiplying. Which is cheaper for 2-16 rows depends on OpenBLAS's kernel (measured on SmolLM2's
#: matrices, see :meth:`FastLlama._times`): per kernel name, the default for the others.
STACKED_ROWS = {"SkylakeX": 8, "Cooperlake": 8, "SapphireRapids": 8, None: 3}
#: A matrix larger than this (the head) is multiplied row by row in column blocks of at most this many bytes,
#: so that each block is still in the cache for the next row.
CACHED_BYTES = 8 * 2**20


# ---------------------------------------------------------------------------------------------
# The one dependency on the readable package's loader
# ---------------------------------------------------------------------------------------------
def course_smollm2(path=None, dtype=np.float32):
    """SmolLM2 read by ``transformer_course.smollm2`` (its public loader):
    ``(config, weights, wrapper)`` -- the config, the GGUF-named float arrays, and a
    ``SmolLM2`` wrapper (tokenizer, metadata) whose ``model`` is the readable ``Llama``
    built on the same arrays (no second copy). Update here when that API changes."""
    from transformer_course import smollm2
    from transformer_course.llama import Llama

    contents = smollm2.read_smollm2_gguf(path)
    config = smollm2.config_from_metadata(contents.metadata)
    weights = smollm2.weights_from_gguf(contents, dtype)
    wrapper = smollm2.SmolLM2(Llama(config, weights, dtype), smollm2.tokenizer_from_metadata(contents.metadata),
                              contents.metadata, contents.kinds)
    return config, weights, wrapper


def load_fast_smollm2(path=None, dtype=np.float32):
    """``(fast, lm)``: a :class:`FastLlama` of SmolLM2-135M and the readable ``SmolLM2``
    (``lm.model``, ``lm.encode``, ``lm.decode``) from the same file and the same arrays."""
    config, weights, lm = course_smollm2(path, dtype)
    return FastLlama(config, weights, dtype), lm


# ---------------------------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------------------------
class FastKVCache:
    """Keys (rotated, in the model's half-split order) and values of every layer.

    ``keys``, ``values``: ``(n_layers, n_kv_heads, capacity, d_head)``; positions ``0..length-1``
    are filled. Made by :meth:`FastLlama.new_cache`; only the model that made it reads it.
    """

    def __init__(self, config, capacity: int, dtype):
        self.capacity = positive_int(capacity, "capacity")
        shape = (config.n_layers, config.n_kv_heads, self.capacity, config.d_model // config.n_heads)
        self.keys = np.zeros(shape, dtype=dtype)
        self.values = np.zeros(shape, dtype=dtype)
        self.length = 0

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def truncate(self, length: int) -> "FastKVCache":
        """Keep positions ``0..length-1`` (speculative decoding's rollback); returns itself."""
        self.length = check_truncate(length, self.length)
        return self


# ---------------------------------------------------------------------------------------------
# Weights, prepared once
# ---------------------------------------------------------------------------------------------
def _half_split(n_heads: int, d_head: int) -> np.ndarray:
    """Row order that takes each head's adjacent pairs (2i, 2i+1) to halves (i, i + d_head/2)."""
    within = np.concatenate([np.arange(0, d_head, 2), np.arange(1, d_head, 2)])      # (d_head,)
    return (np.arange(n_heads)[:, None] * d_head + within[None, :]).reshape(-1)         # (n_heads*d_head,)


@dataclass
class _Layer:
    """One layer's matrices, transposed to ``(in, out)`` C-contiguous, constants folded in."""

    qkv: np.ndarray        # (d, H dh + 2 Hkv dh): attn_norm gain, 1/sqrt(dh), half-split q and k
    o: np.ndarray          # (H dh, d)
    gate_up: np.ndarray    # (d, 2 d_ff): ffn_norm gain folded
    down: np.ndarray       # (d_ff, d)


def _prepare_layer(w: dict, cfg, dtype) -> _Layer:
    """Fuse, fold, permute and transpose one layer's weights (each product rounded once, in ``dtype``)."""
    dh = cfg.d_model // cfg.n_heads
    a = lambda name: np.asarray(w[name]).astype(dtype, copy=False)      # noqa: E731
    g_attn, g_ffn = a("attn_norm"), a("ffn_norm")                        # (d,)
    n_q, n_kv = cfg.n_heads * dh, cfg.n_kv_heads * dh
    qkv = np.empty((cfg.d_model, n_q + 2 * n_kv), dtype)                 # (in, out)
    # W^T diag-scaled by the gain on its rows (the input features); W_Q also by 1/sqrt(dh)
    scale_q = (g_attn.astype(np.float64) / math.sqrt(dh)).astype(dtype)
    np.multiply(a("attn_q")[_half_split(cfg.n_heads, dh)].T, scale_q[:, None], out=qkv[:, :n_q])
    np.multiply(a("attn_k")[_half_split(cfg.n_kv_heads, dh)].T, g_attn[:, None], out=qkv[:, n_q:n_q + n_kv])
    np.multiply(a("attn_v").T, g_attn[:, None], out=qkv[:, n_q + n_kv:])
    gate_up = np.empty((cfg.d_model, 2 * cfg.d_ff), dtype)
    np.multiply(a("ffn_gate").T, g_ffn[:, None], out=gate_up[:, :cfg.d_ff])
    np.multiply(a("ffn_up").T, g_ffn[:, None], out=gate_up[:, cfg.d_ff:])
    t = lambda name: np.ascontiguousarray(a(name).T)                    # noqa: E731  (out, in) -> (in, out)
    return _Layer(qkv=qkv, o=t("attn_output"), gate_up=gate_up, down=t("ffn_down"))


def _check_weights(cfg, weights: dict) -> None:
    d, dh, F, V = cfg.d_model, cfg.d_model // cfg.n_heads, cfg.d_ff, cfg.vocab_size
    shapes = {"attn_norm": (d,), "attn_q": (cfg.n_heads * dh, d), "attn_k": (cfg.n_kv_heads * dh, d),
              "attn_v": (cfg.n_kv_heads * dh, d), "attn_output": (d, cfg.n_heads * dh), "ffn_norm": (d,),
              "ffn_gate": (F, d), "ffn_up": (F, d), "ffn_down": (d, F)}
    expected = {"token_embd.weight": (V, d), "output_norm.weight": (d,)}
    expected.update({f"blk.{L}.{n}.weight": s for L in range(cfg.n_layers) for n, s in shapes.items()})
    missing = [name for name in expected if name not in weights]
    if missing:
        raise KeyError(f"weights lacks {len(missing)} tensor(s), e.g. {missing[:3]}")
    for name, shape in expected.items():
        a = np.asarray(weights[name])
        if a.shape != shape:
            raise ValueError(f"weights[{name!r}] must have shape {shape}, got {a.shape}")
        if a.dtype.kind != "f":
            raise TypeError(f"weights[{name!r}] must be a float array, got {describe(a)}")
        if not (np.isfinite(a.min()) and np.isfinite(a.max())):            # NaN propagates, +-inf shows
            raise ValueError(f"weights[{name!r}] must be finite, got NaN or inf")


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------
class FastLlama:
    """The readable :class:`transformer_course.llama.Llama`, fast: same arguments, same function.

    Args:
        config: a ``transformer_course.llama.LlamaConfig`` (or anything with its fields).
        weights: dict of GGUF-named arrays, as for the readable model (W_Q, W_K in GGUF's
            adjacent-pair order; matrices ``(out, in)``).
        dtype: float32 or float64; every computation stays in it.

    The weights are copied into the fast layout (about the model's size again; the caller's
    dict can be dropped afterwards).
    """

    def __init__(self, config, weights: dict, dtype=np.float32):
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {describe(dtype)}")
        for field in _CONFIG_FIELDS:
            if not hasattr(config, field):
                raise TypeError(f"config must have the fields of LlamaConfig {_CONFIG_FIELDS}, "
                                f"got {describe(config)} (no {field!r})")
        if config.d_model % config.n_heads or config.n_heads % config.n_kv_heads or (config.d_model // config.n_heads) % 2:
            raise ValueError(f"config needs n_heads | d_model, n_kv_heads | n_heads and an even d_head, got {config}")
        _check_weights(config, weights)
        self.config, self.dtype = config, dtype
        corename = openblas_corename()
        self.stacked_rows = STACKED_ROWS.get(corename, STACKED_ROWS[None])   # see _times
        c = self.config
        self.d_head = c.d_model // c.n_heads
        self.group = c.n_heads // c.n_kv_heads
        self._nq, self._nkv = c.n_heads * self.d_head, c.n_kv_heads * self.d_head
        self._eps = float(c.eps)
        self.layers = [_prepare_layer({n: weights[f"blk.{L}.{n}.weight"] for n in _LAYER}, c, dtype)
                       for L in range(c.n_layers)]
        # The tied head, transposed (d, V): logits = h @ E^T streams it in order; a token's
        # embedding is one of its columns.
        self.embedding_t = np.ascontiguousarray(np.asarray(weights["token_embd.weight"]).T, dtype=dtype)
        self.final_norm = np.asarray(weights["output_norm.weight"]).astype(dtype)
        half = self.d_head // 2
        self._inv_freq = rope_frequencies(self.d_head, c.rope_base)                      # (dh/2,) float64
        # decode-step buffers (one token)
        t = dtype
        self._x = np.empty(c.d_model, t)
        self._h = np.empty(c.d_model, t)
        self._tmp = np.empty(c.d_model, t)
        self._qkv = np.empty(self._nq + 2 * self._nkv, t)
        self._gu = np.empty(2 * c.d_ff, t)
        self._act = np.empty(c.d_ff, t)
        n_rot = c.n_heads + c.n_kv_heads
        self._rot = [np.empty((n_rot, half), t) for _ in range(2)]
        self._att = np.empty(self._nq, t)
        self._cos, self._sin = np.empty(half, t), np.empty(half, t)
        self._scores = np.empty(0, t)
        self._sums = np.empty((c.n_kv_heads, self.group, 1), t)

    # -- public --------------------------------------------------------------------------------

    @property
    def weight_bytes_per_token(self) -> int:
        """Bytes of weights one decode step reads: every matrix once (norm gains are folded)."""
        return sum(a.nbytes for layer in self.layers for a in vars(layer).values()) + self.embedding_t.nbytes

    def matrices(self) -> list[np.ndarray]:
        """The arrays a decode step multiplies by, in order (for measuring the bound)."""
        return [a for layer in self.layers for a in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [self.embedding_t]

    def truncated(self, n_layers: int) -> "FastLlama":
        """The first ``n_layers`` layers, then the final norm and head, sharing this model's prepared arrays (as
        ``Llama.truncated``: a drafter for speculative decoding)."""
        n_layers = positive_int(n_layers, "n_layers")
        if n_layers > self.config.n_layers:
            raise ValueError(f"n_layers must be in 1..{self.config.n_layers} (this model's layers), got {n_layers}")
        other = copy.copy(self)
        other.config = (dataclasses.replace(self.config, n_layers=n_layers) if dataclasses.is_dataclass(self.config)
                        else types.SimpleNamespace(**{**vars(self.config), "n_layers": n_layers}))
        other.layers = self.layers[:n_layers]
        return other

    def new_cache(self, capacity: int = 1024) -> FastKVCache:
        return FastKVCache(self.config, capacity, self.dtype)

    def forward(self, ids, cache: FastKVCache | None = None, last_only: bool = False) -> np.ndarray:
        """Logits for the new tokens, using and extending ``cache`` when given.

        Args:
            ids: ``(n,)`` token ids at positions ``cache.length ..`` (or ``0..n-1`` without a cache).
            cache: a :class:`FastKVCache` of this model (updated in place), or None.
            last_only: return only the last position's logits ``(V,)`` (what generation needs).

        Returns:
            ``(n, V)`` logits (``(V,)`` with ``last_only``), in the model's dtype.
        """
        ids = self._check_ids(ids)
        if cache is None:
            self._check_context(0, ids.size)
            cache = self.new_cache(ids.size)
        else:
            self._check_cache(cache, ids.size)
        if ids.size == 1:
            logits = self._decode(int(ids[0]), cache)
            return logits if last_only else logits[None, :]
        return self._prefill(ids, cache, last_only)

    def decode_step(self, token, cache: FastKVCache) -> np.ndarray:
        """Logits ``(V,)`` after one more token (at position ``cache.length``)."""
        if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
            raise TypeError(f"token must be an integer id, got {describe(token)}")
        if not 0 <= token < self.config.vocab_size:
            raise ValueError(f"token must lie in 0..{self.config.vocab_size - 1}, got {token}")
        self._check_cache(cache, 1)
        return self._decode(int(token), cache)

    def generate_greedy(self, prompt_ids, n_new: int, use_cache: bool = True) -> np.ndarray:
        """The prompt then ``n_new`` argmax tokens (the readable ``Llama.generate_greedy``'s result);
        without the cache every step runs the whole sequence again."""
        ids = self._check_ids(prompt_ids)
        if isinstance(n_new, (bool, np.bool_)) or not isinstance(n_new, (int, np.integer)) or n_new < 0:
            raise ValueError(f"n_new must be an integer >= 0, got {describe(n_new)}")
        n_new = int(n_new)
        self._check_context(0, ids.size + n_new)
        out = np.empty(ids.size + n_new, dtype=np.int64)
        out[:ids.size] = ids
        if n_new == 0:
            return out
        if use_cache:
            cache = self.new_cache(ids.size + n_new)
            logits = self.forward(ids, cache, last_only=True)
            for i in range(n_new):
                out[ids.size + i] = token = int(np.argmax(logits))
                if i + 1 < n_new:
                    logits = self._decode(token, cache)
        else:
            for i in range(n_new):
                out[ids.size + i] = int(np.argmax(self.forward(out[:ids.size + i], last_only=True)))
        return out

    # -- checks --------------------------------------------------------------------------------

    def _check_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be a non-empty 1-D array of integers, got {describe(ids)}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.config.vocab_size:
            raise ValueError(f"ids must lie in 0..{self.config.vocab_size - 1}, got {lo}..{hi}")
        return ids

    def _check_cache(self, cache, n: int) -> None:
        if not isinstance(cache, FastKVCache):
            raise TypeError(f"cache must be a FastKVCache from this model's new_cache(), got {describe(cache)}")
        expected = (self.config.n_layers, self.config.n_kv_heads, cache.capacity, self.d_head)
        if cache.keys.shape != expected or cache.keys.dtype != self.dtype:
            raise ValueError(f"cache holds {cache.keys.shape} {cache.keys.dtype}, this model needs "
                             f"{expected} {self.dtype}: make it with this model's new_cache()")
        if cache.length + n > cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} positions; {cache.length} used, {n} more requested")
        self._check_context(cache.length, n)

    def _check_context(self, start: int, n: int) -> None:
        limit = getattr(self.config, "context_length", None)
        if limit is not None and start + n > limit:
            raise ValueError(f"ids would sit at positions {start}..{start + n - 1}, past the model's context of "
                             f"{limit} positions (0..{limit - 1}): {n} ids after {start} cached")

    # -- one token ------------------------------------------------------------------------------

    def _decode(self, token: int, cache: FastKVCache) -> np.ndarray:
        c, dh, half = self.config, self.d_head, self.d_head // 2
        nq, nkv, Hkv, g = self._nq, self._nkv, c.n_kv_heads, self.group
        pos = cache.length
        n_k = pos + 1
        x, h, tmp, qkv, gu, act = self._x, self._h, self._tmp, self._qkv, self._gu, self._act
        F, d = c.d_ff, c.d_model
        angle = pos * self._inv_freq                                   # (dh/2,) float64, then cast
        np.cos(angle, out=self._cos, casting="same_kind")
        np.sin(angle, out=self._sin, casting="same_kind")
        cos, sin = self._cos, self._sin
        if self._scores.size < Hkv * g * cache.capacity:                 # room for every position
            self._scores = np.empty(Hkv * g * cache.capacity, self.dtype)
        scores = self._scores[:Hkv * g * n_k].reshape(Hkv, g, n_k)
        sums = self._sums
        rot = qkv[:nq + nkv].reshape(c.n_heads + Hkv, 2, half)        # q and k heads, halves
        first, second = rot[:, 0], rot[:, 1]                           # (H + Hkv, dh/2) views
        t1, t2 = self._rot
        q = qkv[:nq].reshape(Hkv, g, dh)                               # (Hkv, group, dh)
        k_new = qkv[nq:nq + nkv].reshape(Hkv, dh)
        v_new = qkv[nq + nkv:].reshape(Hkv, dh)
        att = self._att.reshape(Hkv, g, dh)
        gate, up = gu[:F], gu[F:]
        eps, inv_d = self._eps, 1.0 / d
        np.copyto(x, self.embedding_t[:, token])
        with np.errstate(over="ignore"):                               # silu: exp(-z) = inf gives -0
            for L, w in enumerate(self.layers):
                # h = RMSNorm(x) (the gain is in W_qkv): one dot product and one scaling
                np.multiply(x, 1.0 / math.sqrt(float(np.dot(x, x)) * inv_d + eps), out=h)
                np.dot(h, w.qkv, out=qkv)                              # (H dh + 2 Hkv dh,)
                # RoPE on q and k: (a, b) -> (a cos - b sin, a sin + b cos), half by half
                np.multiply(first, cos, out=t1)
                np.multiply(second, sin, out=t2)
                np.subtract(t1, t2, out=t1)
                np.multiply(first, sin, out=t2)
                np.multiply(second, cos, out=second)
                np.add(second, t2, out=second)
                np.copyto(first, t1)
                cache.keys[L, :, pos] = k_new
                cache.values[L, :, pos] = v_new
                # attention of the group's queries over every cached key (all are in the past)
                K, V = cache.keys[L, :, :n_k], cache.values[L, :, :n_k]   # (Hkv, n_k, dh)
                np.matmul(q, K.transpose(0, 2, 1), out=scores)         # (Hkv, g, n_k); 1/sqrt(dh) is in W_Q
                np.max(scores, axis=2, keepdims=True, out=sums)
                np.subtract(scores, sums, out=scores)
                np.exp(scores, out=scores)
                np.sum(scores, axis=2, keepdims=True, out=sums)
                np.matmul(scores, V, out=att)                          # (Hkv, g, dh)
                np.divide(att, sums, out=att)
                np.dot(self._att, w.o, out=tmp)
                np.add(x, tmp, out=x)
                # feed-forward
                np.multiply(x, 1.0 / math.sqrt(float(np.dot(x, x)) * inv_d + eps), out=h)
                np.dot(h, w.gate_up, out=gu)                           # (2 d_ff,)
                np.negative(gate, out=act)
                np.exp(act, out=act)
                np.add(act, 1.0, out=act)
                np.divide(gate, act, out=act)                          # silu(gate)
                np.multiply(act, up, out=act)
                np.dot(act, w.down, out=tmp)
                np.add(x, tmp, out=x)
        cache.length = n_k
        np.multiply(x, 1.0 / math.sqrt(float(np.dot(x, x)) * inv_d + eps), out=h)
        np.multiply(h, self.final_norm, out=h)
        return np.dot(h, self.embedding_t)                             # (V,)

    # -- many tokens ----------------------------------------------------------------------------

    def _times(self, x: np.ndarray, W: np.ndarray) -> np.ndarray:
        """``x (n, in) @ W (in, out)``, reading ``W`` from memory once. One GEMM for many rows; for a few
        (2..``self.stacked_rows``: a verify pass of speculative decoding), one GEMV per row in one matmul call over
        the stack ``(n, 1, in)``: the first row streams ``W`` from memory, the others find it in the cache (the
        head, larger than the cache, in column blocks). Measured for all of SmolLM2's matrices, one thread, two
        busy cores (load 2-3), relative to one GEMV pass, at 2 / 4 / 8 / 16 rows: OpenBLAS 0.3.31's GEMM with its
        SkylakeX kernel 2.97 / 3.04 / 3.42 / 4.15, with its Haswell kernel 2.0 / 1.8 / 2.3 / 3.0 (odd row counts
        cost more); the stacked GEMVs 1.44 / 2.05 / 3.09 / 5.3 with either."""
        n = x.shape[0]
        if n == 1 or n > self.stacked_rows:
            return x @ W
        stack = x[:, None, :]                                           # (n, 1, in): n GEMVs
        if W.nbytes <= CACHED_BYTES:
            return np.matmul(stack, W)[:, 0]
        out = np.empty((n, 1, W.shape[1]), np.result_type(x, W))
        cols = max(1, CACHED_BYTES // (W.shape[0] * W.itemsize))
        for c0 in range(0, W.shape[1], cols):
            np.matmul(stack, W[:, c0:c0 + cols], out=out[:, :, c0:c0 + cols])
        return out[:, 0]

    def _rms(self, x: np.ndarray) -> np.ndarray:
        """``x / rms(x)`` row by row (the gain is folded into the next matrix), ``(n, d)``."""
        ms = np.einsum("ij,ij->i", x, x) / x.shape[1]                  # (n,)
        return x * (1.0 / np.sqrt(ms + self.dtype.type(self._eps)))[:, None]

    def _prefill(self, ids: np.ndarray, cache: FastKVCache, last_only: bool) -> np.ndarray:
        c, dh, half = self.config, self.d_head, self.d_head // 2
        nq, nkv, Hkv, g = self._nq, self._nkv, c.n_kv_heads, self.group
        n, start = ids.size, cache.length
        n_k = start + n
        angles = np.arange(start, n_k)[:, None] * self._inv_freq[None, :]           # (n, dh/2) float64
        cos = np.cos(angles).astype(self.dtype)[:, None, :]                          # (n, 1, dh/2)
        sin = np.sin(angles).astype(self.dtype)[:, None, :]
        # causal mask of each block of queries, made once for every layer: key j is allowed for position p if j <= p
        key_pos = np.arange(n_k)
        blocks = [(b0, min(n, b0 + PREFILL_BLOCK)) for b0 in range(0, n, PREFILL_BLOCK)]
        masks = [np.where(key_pos[None, :] > np.arange(start + b0, start + b1)[:, None], -np.inf, 0.0).astype(self.dtype)
                 for b0, b1 in blocks]                                               # (nb, n_k) each: 0 or -inf
        x = np.ascontiguousarray(self.embedding_t[:, ids].T)                         # (n, d)
        with np.errstate(over="ignore"):
            for L, w in enumerate(self.layers):
                qkv = self._times(self._rms(x), w.qkv)                                          # (n, H dh + 2 Hkv dh)
                rot = qkv[:, :nq + nkv].reshape(n, c.n_heads + Hkv, 2, half)
                a, b = rot[:, :, 0], rot[:, :, 1]                                    # (n, H + Hkv, dh/2)
                a_new = a * cos - b * sin
                b *= cos
                b += a * sin
                a[...] = a_new
                cache.keys[L, :, start:n_k] = qkv[:, nq:nq + nkv].reshape(n, Hkv, dh).transpose(1, 0, 2)
                cache.values[L, :, start:n_k] = qkv[:, nq + nkv:].reshape(n, Hkv, dh).transpose(1, 0, 2)
                K, V = cache.keys[L, :, :n_k], cache.values[L, :, :n_k]              # (Hkv, n_k, dh)
                q = qkv[:, :nq].reshape(n, Hkv, g, dh).transpose(1, 2, 0, 3)         # (Hkv, g, n, dh)
                att = np.empty((n, Hkv, g, dh), self.dtype)
                for (b0, b1), mask in zip(blocks, masks):
                    s = q[:, :, b0:b1] @ K.transpose(0, 2, 1)[:, None]              # (Hkv, g, nb, n_k)
                    s += mask
                    s -= s.max(axis=-1, keepdims=True)
                    np.exp(s, out=s)
                    s /= s.sum(axis=-1, keepdims=True)
                    att[b0:b1] = (s @ V[:, None]).transpose(2, 0, 1, 3)             # (nb, Hkv, g, dh)
                x += self._times(att.reshape(n, nq), w.o)
                gu = self._times(self._rms(x), w.gate_up)                                      # (n, 2 d_ff)
                gate, up = gu[:, :c.d_ff], gu[:, c.d_ff:]
                x += self._times(gate / (1 + np.exp(-gate)) * up, w.down)
        cache.length = n_k
        if last_only:
            return (self._rms(x[-1:]) * self.final_norm)[0] @ self.embedding_t      # (V,)
        return self._times(self._rms(x) * self.final_norm, self.embedding_t)         # (n, V)
