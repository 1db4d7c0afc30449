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

Weights are kept as the file stores them -- matrices (out, in), like ``nn.Linear`` -- and used as
``x @ W.T``: a transposed view, no copy. Everything stays in the model's dtype (float32 or float64);
the position tables are cast to it, so no float64 leaks into a float32 forward pass.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ._checks import (as_float_array, check_finite, check_scores_finite, describe, float_dtype, positive_int,
                      row_max_abs)
from .softmax import softmax


# ---------------------------------------------------------------------------
# The blocks
# ---------------------------------------------------------------------------
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
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(eps))    # (..., 1)
    xhat = x * r                                                                        # (..., d)
    g = dy * weight.astype(x.dtype, copy=False)
    dx = r * (g - xhat * np.mean(g * xhat, axis=-1, keepdims=True))
    dweight = np.sum((dy * xhat).reshape(-1, d), axis=0)
    return dx, dweight


def rope_frequencies(d_head: int, base: float = 10000.0) -> np.ndarray:
    """Angular frequency of each adjacent pair: ``base ** (-2i / d_head)``, ``(d_head // 2,)`` float64."""
    d_head = positive_int(d_head, "d_head")
    if d_head % 2:
        raise ValueError(f"d_head must be even (features rotate in pairs), got {d_head}")
    return base ** (-np.arange(0, d_head, 2) / d_head)


def rope_tables(positions, d_head: int, base: float = 10000.0, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``position * frequency``: two ``(n, d_head // 2)`` arrays of ``dtype``.

    The angles are computed in float64 and then cast: the tables never turn a float32
    computation into a float64 one.
    """
    positions = np.asarray(positions)
    if positions.ndim != 1 or not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(f"positions must be a 1-D array of integers, got {describe(positions)}")
    angles = positions[:, None] * rope_frequencies(d_head, base)[None, :]     # (n, d_head/2)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def apply_rope(x, positions, base: float = 10000.0) -> np.ndarray:
    """Rotate each adjacent pair ``(x[2i], x[2i+1])`` of the vector at position ``p`` by ``p * w_i``.

        x'[2i]   = x[2i] cos(p w_i) - x[2i+1] sin(p w_i)
        x'[2i+1] = x[2i] sin(p w_i) + x[2i+1] cos(p w_i)        w_i = base ** (-2i / d)

    Args:
        x: ``(..., n, d)`` with ``d`` even: queries or keys of one or more heads.
        positions: ``(n,)`` integer positions of the n vectors.
        base: the frequency base (10000 in the RoPE paper, 1e5 in SmolLM2).

    Returns:
        ``(..., n, d)`` in ``x``'s dtype. Lengths are kept, and ``apply_rope(q, [m]) .
        apply_rope(k, [n])`` depends on ``m - n`` only.
    """
    x = as_float_array(x, "x", min_ndim=2)
    n, d = x.shape[-2:]
    positions = np.asarray(positions)
    if positions.shape != (n,):
        raise ValueError(f"positions must have shape ({n},), one per vector of x, got {describe(positions)}")
    cos, sin = rope_tables(positions, d, base, x.dtype)                   # (n, d/2) each
    return rotate_pairs(x, cos, sin)


def rotate_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """The rotation itself, given the tables: ``x`` ``(..., n, d)``, ``cos``/``sin`` ``(n, d/2)``."""
    even, odd = x[..., 0::2], x[..., 1::2]                               # (..., n, d/2) each
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def rope_backward(grad_output, positions, base: float = 10000.0) -> np.ndarray:
    """Gradient through ``apply_rope(x, positions, base)`` with respect to ``x``.

    RoPE multiplies each pair by a rotation matrix ``R(p w_i)``; the gradient is multiplied by its
    transpose, ``R(p w_i)^T = R(-p w_i)``: the same rotation by the opposite angle (the inverse).

    Args:
        grad_output: ``dL/dx'`` ``(..., n, d)``.
        positions: the forward's ``(n,)`` positions.
        base: the forward's frequency base.

    Returns:
        ``dL/dx`` ``(..., n, d)``.
    """
    g = as_float_array(grad_output, "grad_output", min_ndim=2)
    n, d = g.shape[-2:]
    positions = np.asarray(positions)
    if positions.shape != (n,):
        raise ValueError(f"positions must have shape ({n},), one per vector of grad_output, got {describe(positions)}")
    cos, sin = rope_tables(positions, d, base, g.dtype)
    return rotate_pairs(g, cos, -sin)


def silu(x) -> np.ndarray:
    """``x * sigmoid(x) = x / (1 + exp(-x))`` element-wise (also called swish), in ``x``'s dtype.

    Stable for any ``x``: where ``exp(-x)`` overflows (``x < -88`` in float32, ``< -709`` in float64) the
    result is ``x / inf = -0``, silu's limit, with the overflow warning silenced.
    """
    x = as_float_array(x, "x", min_ndim=0)
    with np.errstate(over="ignore"):                # exp(-x) = inf for x << 0 gives x / inf = -0
        return x / (1 + np.exp(-x))


def silu_backward(grad_output, x) -> np.ndarray:
    """Gradient through ``silu(x) = x sigmoid(x)`` (forward: :func:`silu`).

        silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x)))
    """
    x = as_float_array(x, "x", min_ndim=0)
    dy = as_float_array(grad_output, "grad_output", min_ndim=0)
    if dy.shape != x.shape:
        raise ValueError(f"grad_output must have the shape of x {x.shape}, got shape {dy.shape}")
    with np.errstate(over="ignore"):
        s = 1 / (1 + np.exp(-x))
    return dy * (s * (1 + x * (1 - s)))


def swiglu(x, W_gate, W_up, W_down) -> np.ndarray:
    """The gated feed-forward ``(silu(x W_gate^T) * (x W_up^T)) W_down^T``.

    Args:
        x: ``(..., d)``.
        W_gate, W_up: ``(d_ff, d)``, stored (out, in).
        W_down: ``(d, d_ff)``.

    Returns:
        ``(..., d)``, float32 for float32 ``x`` and weights (silu is stable for any gate, :func:`silu`).
    """
    x = as_float_array(x, "x", min_ndim=1)
    gate = x @ W_gate.T                                                   # (..., d_ff)
    up = x @ W_up.T                                                       # (..., d_ff)
    return (silu(gate) * up) @ W_down.T                                   # (..., d)


def swiglu_backward(grad_output, x, W_gate, W_up, W_down):
    """Gradient through :func:`swiglu`: ``y = (silu(x W_gate^T) * (x W_up^T)) W_down^T``.

        a = x W_gate^T, u = x W_up^T, s = silu(a) * u
        dW_down = dy^T s,  ds = dy W_down,  da = silu'(a) (ds * u),  du = ds * silu(a)
        dW_gate = da^T x,  dW_up = du^T x,  dx = da W_gate + du W_up

    Returns:
        ``(dx, dW_gate, dW_up, dW_down)``, each of the shape of what it differentiates (weights (out, in)).
    """
    x = as_float_array(x, "x", min_ndim=1)
    dy = as_float_array(grad_output, "grad_output", min_ndim=1)
    if dy.shape != x.shape:
        raise ValueError(f"grad_output must have the shape of x {x.shape}, got shape {dy.shape}")
    d = x.shape[-1]
    rows, d_rows = x.reshape(-1, d), dy.reshape(-1, d)                    # (tokens, d)
    a, u = rows @ W_gate.T, rows @ W_up.T                                 # (tokens, d_ff)
    act = silu(a)
    dW_down = d_rows.T @ (act * u)                                        # (d, d_ff)
    ds = d_rows @ W_down                                                  # (tokens, d_ff)
    da = silu_backward(ds * u, a)
    du = ds * act
    dx = (da @ W_gate + du @ W_up).reshape(x.shape)
    return dx, da.T @ rows, du.T @ rows, dW_down


def grouped_query_attention(q, k, v, query_positions=None, return_weights: bool = False):
    """Causal attention where groups of query heads share one key/value head.

    Query head ``h`` reads key/value head ``h // (n_heads // n_kv_heads)``.

    Args:
        q: ``(n_heads, n_q, d)`` queries (already rotated).
        k, v: ``(n_kv_heads, n_k, d)`` keys (rotated) and values, positions ``0..n_k-1``;
            ``n_kv_heads`` must divide ``n_heads``.
        query_positions: ``(n_q,)`` positions of the queries; default the last ``n_q`` positions,
            ``n_k - n_q .. n_k - 1`` (the case with a KV cache). A query sees keys at positions
            ``<=`` its own.
        return_weights: also return the attention weights.

    Returns:
        ``(n_heads, n_q, d)`` in ``q``'s dtype, and with ``return_weights`` the weights ``(n_heads, n_q, n_k)``.
    """
    q = as_float_array(q, "q", min_ndim=3)
    k = as_float_array(k, "k", min_ndim=3)
    v = as_float_array(v, "v", min_ndim=3)
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    if q.ndim != 3 or k.ndim != 3 or k.shape[2] != d or v.shape != k.shape:
        raise ValueError(f"expected q (n_heads, n_q, d) and k, v (n_kv_heads, n_k, d) with the same d; "
                         f"got q {q.shape}, k {k.shape}, v {v.shape}")
    if n_heads % n_kv:
        raise ValueError(f"n_kv_heads = {n_kv} must divide n_heads = {n_heads}")
    if query_positions is None:
        query_positions = np.arange(n_k - n_q, n_k)
    query_positions = np.asarray(query_positions)
    if query_positions.shape != (n_q,):
        raise ValueError(f"query_positions must have shape ({n_q},), got {describe(query_positions)}")
    group = n_heads // n_kv

    qg = q.reshape(n_kv, group * n_q, d)                                   # (n_kv, group*n_q, d): head h -> h // group
    with np.errstate(over="ignore", invalid="ignore"):
        scores = (qg @ k.transpose(0, 2, 1)) * q.dtype.type(1 / np.sqrt(d))   # (n_kv, group*n_q, n_k)
    check_scores_finite(scores, q, k, "q and k")          # overflowed scores would read as masked (-inf)
    scores = scores.reshape(n_kv, group, n_q, n_k)
    future = np.arange(n_k)[None, :] > query_positions[:, None]           # (n_q, n_k): keys after the query
    scores = np.where(future, -np.inf, scores).astype(q.dtype, copy=False)
    weights = softmax(scores, axis=-1)                                     # (n_kv, group, n_q, n_k)
    out = weights.reshape(n_kv, group * n_q, n_k) @ v                      # (n_kv, group*n_q, d)
    out = out.reshape(n_heads, n_q, d)
    if return_weights:
        return out, weights.reshape(n_heads, n_q, n_k)
    return out


def grouped_query_attention_backward(grad_output, q, k, v, query_positions=None, weights=None):
    """Gradient through :func:`grouped_query_attention` (causal, query head ``h`` reads key/value
    head ``h // group``).

    Per query head it is the attention backward of notebook 10 (``dV = P^T dO``, ``dS`` through the
    softmax, ``dQ = dS K / sqrt(d)``, ``dK = dS^T Q / sqrt(d)``). A key/value head is read by the
    ``group`` query heads of its group, so ITS gradient is the SUM of what those heads send back:
    reshaping the group's queries into one ``(group * n_q)`` block, as the forward does, makes the
    matrix products do that sum.

    Args:
        grad_output: ``dL/dout`` ``(n_heads, n_q, d)``.
        q, k, v, query_positions: the forward's inputs.
        weights: the forward's attention weights ``(n_heads, n_q, n_k)``; recomputed when None.

    Returns:
        ``(dq, dk, dv)`` with the shapes of ``q``, ``k``, ``v``.
    """
    q = as_float_array(q, "q", min_ndim=3)
    k = as_float_array(k, "k", min_ndim=3)
    v = as_float_array(v, "v", min_ndim=3)
    dO = as_float_array(grad_output, "grad_output", min_ndim=3)
    if dO.shape != q.shape:
        raise ValueError(f"grad_output must have the shape of q {q.shape}, got shape {dO.shape}")
    if weights is None:
        _, weights = grouped_query_attention(q, k, v, query_positions, return_weights=True)
    n_heads, n_q, d = q.shape
    n_kv, n_k, _ = k.shape
    group = n_heads // n_kv
    P = np.asarray(weights).reshape(n_kv, group * n_q, n_k)                  # the group's rows together
    dOg = dO.reshape(n_kv, group * n_q, d)
    qg = q.reshape(n_kv, group * n_q, d)
    dv = P.transpose(0, 2, 1) @ dOg                                          # (n_kv, n_k, d): summed over the group
    dP = dOg @ v.transpose(0, 2, 1)                                          # (n_kv, group*n_q, n_k)
    dS = P * (dP - np.sum(dP * P, axis=-1, keepdims=True)) * q.dtype.type(1 / np.sqrt(d))
    dq = (dS @ k).reshape(n_heads, n_q, d)
    dk = dS.transpose(0, 2, 1) @ qg                                          # (n_kv, n_k, d): summed over the group
    return dq, dk, dv


def kv_head_gradient(grad_per_query_head, n_kv_heads: int) -> np.ndarray:
    """The gradient of the shared key (or value) heads from the gradients each query head sends back.

    In grouped-query attention query head ``h`` reads key/value head ``h // (n_heads / n_kv_heads)``.
    If each query head had its own copy of its key/value head, it would get the gradient
    ``grad_per_query_head[h]``; the shared head is used by every query head of its group, so its
    gradient is the SUM over the group (a parameter used twice gets both gradients).

    Args:
        grad_per_query_head: ``(n_heads, n, d)``.
        n_kv_heads: must divide ``n_heads``.

    Returns:
        ``(n_kv_heads, n, d)``.
    """
    g = as_float_array(grad_per_query_head, "grad_per_query_head", min_ndim=3)
    n_kv_heads = positive_int(n_kv_heads, "n_kv_heads")
    if g.ndim != 3 or g.shape[0] % n_kv_heads:
        raise ValueError(f"grad_per_query_head must be (n_heads, n, d) with n_heads a multiple of "
                         f"n_kv_heads = {n_kv_heads}, got {describe(g)}")
    return g.reshape(n_kv_heads, g.shape[0] // n_kv_heads, *g.shape[1:]).sum(axis=1)


def tied_head_backward(grad_logits, h, embedding):
    """Gradient through the tied output head ``logits = h E^T``.

    Returns ``(dh, dE_head)``: ``dh = dlogits E`` ``(..., d)`` and ``dE_head = dlogits^T h`` ``(V, d)``.
    The embedding table is also the input lookup ``x = E[ids]``, so the whole gradient of ``E`` is
    ``dE_head + embedding_backward(dx, ids, V)`` (the two uses add).
    """
    g = as_float_array(grad_logits, "grad_logits", min_ndim=1)
    h = as_float_array(h, "h", min_ndim=1)
    E = as_float_array(embedding, "embedding", min_ndim=2)
    if g.shape[:-1] != h.shape[:-1] or g.shape[-1] != E.shape[0] or h.shape[-1] != E.shape[1]:
        raise ValueError(f"expected grad_logits (..., V={E.shape[0]}) and h (..., d={E.shape[1]}) with the same "
                         f"leading axes, got {describe(g)} and {describe(h)}")
    dh = g @ E
    dE = g.reshape(-1, E.shape[0]).T @ h.reshape(-1, E.shape[1])
    return dh, dE


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


class KVCache:
    """Keys and values of every layer for the positions seen so far.

    ``keys[l]`` and ``values[l]``: ``(n_kv_heads, capacity, d_head)``; positions ``0..length-1`` are
    filled. Memory: ``2 * n_layers * n_kv_heads * d_head * capacity`` numbers -- ``n_heads /
    n_kv_heads`` times less than one key/value head per query head would need.
    """

    def __init__(self, config: LlamaConfig, capacity: int, dtype=np.float32):
        capacity = positive_int(capacity, "capacity")
        shape = (config.n_layers, config.n_kv_heads, capacity, config.d_head)
        self.keys = np.zeros(shape, dtype=dtype)
        self.values = np.zeros(shape, dtype=dtype)
        self.capacity = capacity
        self.length = 0

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes


class Llama:
    """A LLaMA-style decoder from a dict of GGUF-named float arrays.

    ``weights``: ``"token_embd.weight"`` ``(V, d)`` (also the output head: tied),
    ``"output_norm.weight"`` ``(d,)``, and for every layer L the ``"blk.L.<name>.weight"`` of
    :data:`LAYER_TENSORS`. W_Q and W_K are in GGUF's order (adjacent-pair RoPE).
    """

    def __init__(self, config: LlamaConfig, weights: dict, dtype=np.float32):
        self.config = config
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

    def new_cache(self, capacity: int = 1024) -> KVCache:
        return KVCache(self.config, capacity, self.dtype)

    def forward(self, ids, cache: KVCache | None = None, return_weights: bool = False):
        """Logits for every new token, using and extending ``cache`` when given.

        Args:
            ids: ``(n,)`` token ids; with a cache they sit at positions ``cache.length ..
                cache.length + n - 1``, else at ``0..n-1``.
            cache: a :class:`KVCache` (updated in place) or None.
            return_weights: also return each layer's attention weights.

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
        if cache is not None and start + n > cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} positions; {start} used, {n} more requested")
        if start + n > cfg.context_length:
            raise ValueError(f"ids would sit at positions {start}..{start + n - 1}, past the model's context of "
                             f"{cfg.context_length} positions (0..{cfg.context_length - 1}, the range RoPE was "
                             f"trained on): {n} ids after {start} cached")
        positions = np.arange(start, start + n)
        cos, sin = rope_tables(positions, cfg.d_head, cfg.rope_base, self.dtype)   # (n, d_head/2)

        x = self.embedding[ids]                                          # (n, d)
        all_weights = []
        for L, w in enumerate(self.layers):
            h = rms_norm(x, w["attn_norm"], cfg.eps)                     # (n, d)
            q = (h @ w["attn_q"].T).reshape(n, cfg.n_heads, cfg.d_head).transpose(1, 0, 2)      # (H, n, dh)
            k = (h @ w["attn_k"].T).reshape(n, cfg.n_kv_heads, cfg.d_head).transpose(1, 0, 2)   # (Hkv, n, dh)
            v = (h @ w["attn_v"].T).reshape(n, cfg.n_kv_heads, cfg.d_head).transpose(1, 0, 2)   # (Hkv, n, dh)
            q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
            if cache is not None:                                        # append, then read all positions
                cache.keys[L, :, start:start + n] = k
                cache.values[L, :, start:start + n] = v
                k = cache.keys[L, :, :start + n]                         # (Hkv, n_k, dh)
                v = cache.values[L, :, :start + n]
            attn = grouped_query_attention(q, k, v, positions, return_weights)
            if return_weights:
                attn, weights = attn
                all_weights.append(weights)
            attn = attn.transpose(1, 0, 2).reshape(n, cfg.d_model)      # (n, H*dh) = (n, d)
            x = x + attn @ w["attn_output"].T
            h = rms_norm(x, w["ffn_norm"], cfg.eps)
            x = x + swiglu(h, w["ffn_gate"], w["ffn_up"], w["ffn_down"])
        if cache is not None:
            cache.length = start + n
        logits = rms_norm(x, self.final_norm, cfg.eps) @ self.embedding.T    # (n, V): tied head
        return (logits, all_weights) if return_weights else logits

    def step_function(self, cache: KVCache):
        """``step(ids) -> logits (V,)`` for ``generation.generate``: feeds the ids the cache has not seen."""
        def step(ids):
            ids = np.asarray(ids)
            return self.forward(ids[cache.length:], cache)[-1]
        return step

    def generate_greedy(self, prompt_ids, n_new: int, use_cache: bool = True) -> np.ndarray:
        """Greedy decoding: ``prompt_ids`` then ``n_new`` argmax tokens; without the cache every
        step runs the whole sequence again (the slow way; the result must be identical)."""
        from .generation import check_n_new, check_prompt_ids, generate

        prompt_ids, n_new = check_prompt_ids(prompt_ids), check_n_new(n_new)
        if prompt_ids.max() >= self.config.vocab_size:
            raise ValueError(f"prompt_ids must lie in 0..{self.config.vocab_size - 1}, got {prompt_ids.max()}")
        if prompt_ids.size + n_new > self.config.context_length:
            raise ValueError(f"{prompt_ids.size} prompt ids + n_new={n_new} = {prompt_ids.size + n_new} positions, "
                             f"past the model's context of {self.config.context_length}")
        if use_cache:
            step = self.step_function(self.new_cache(prompt_ids.size + n_new))
        else:
            step = lambda ids: self.forward(ids)[-1]                      # noqa: E731
        return generate(step, prompt_ids, n_new, temperature=0.0)
