"""LoRA: low-rank adapters on a frozen LLaMA-style model, trained with hand-written backward passes
(notebook 11; Hu et al. 2021).

A frozen projection ``y = x W^T`` (W ``(out, in)``, as the file stores it) gets a trainable low-rank
correction::

    y = x W^T + (alpha / r) (x A^T) B^T         A (r, in), B (out, r), r << min(in, out)

B starts at zero, so the adapted model starts as the base model exactly; A starts random, so the
first step's gradient of B, ``(alpha / r) dy^T (x A^T)``, is not zero. Only A and B are trained.

What the backward pass needs, and what it does not:

* the frozen weights get no gradient: through a frozen projection only ``dx = dy W`` flows;
* the layers BELOW the lowest adapted layer hold nothing to train and nothing above them depends
  on a gradient through them: no backward pass runs there, and since their weights never change,
  their output -- the residual stream entering the lowest adapted layer -- is computed once for
  the training set (:meth:`LoRAModel.hidden_below`) and reused at every step;
* the loss is taken on the answer tokens only, so the output head (49152 x 576 for SmolLM2, the
  biggest matrix of the model) is applied to those positions only, forward and backward.

Every step is built from the concept modules' forward and backward passes (``llama.py``); the
functions a notebook asks the student to write can be passed in ``pieces`` so that the training
runs on them (:data:`PIECES`).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._checks import as_float_array, describe, positive_int
from .backward import cross_entropy_backward
from .llama import (LAYER_TENSORS, Llama, grouped_query_attention_backward, grouped_query_attention_with_weights,
                    rms_norm, rms_norm_backward, rope_backward, rope_tables, rotate_pairs, silu, silu_backward)
from .loss import cross_entropy

TARGETS = tuple(n for n in LAYER_TENSORS if not n.endswith("_norm"))   # the seven projections


def lora_forward(x, W, A, B, scale: float) -> np.ndarray:
    """``x W^T + scale (x A^T) B^T``: a frozen projection with a low-rank adapter.

    Args:
        x: ``(..., in)``; W: ``(out, in)`` frozen; A: ``(r, in)``; B: ``(out, r)``; scale: alpha / r.

    Returns:
        ``(..., out)``. The adapter never forms the ``(out, in)`` matrix ``B A``: two thin products.
    """
    x = as_float_array(x, "x", min_ndim=1)
    _check_adapter(x, W, A, B)
    rows = x.reshape(-1, x.shape[-1])                 # one 2-D product (a 3-D @ 2-D matmul loops over the batch)
    return (rows @ W.T + scale * ((rows @ A.T) @ B.T)).reshape(x.shape[:-1] + (W.shape[0],))


def lora_backward(grad_output, x, W, A, B, scale: float):
    """Gradient through :func:`lora_forward` with ``W`` frozen.

        z = x A^T                     (..., r)
        dB = scale dy^T z             (out, r)      summed over every leading axis
        dz = scale dy B               (..., r)
        dA = dz^T x                   (r, in)
        dx = dy W + dz A              (..., in)

    Returns:
        ``(dx, dA, dB)``.
    """
    x = as_float_array(x, "x", min_ndim=1)
    dy = as_float_array(grad_output, "grad_output", min_ndim=1)
    _check_adapter(x, W, A, B)
    if dy.shape != x.shape[:-1] + (W.shape[0],):
        raise ValueError(f"grad_output must have shape {x.shape[:-1] + (W.shape[0],)} (x's leading axes, W's "
                         f"out), got shape {dy.shape}")
    rows, d_rows = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    z = rows @ A.T                                                       # (tokens, r)
    dB = scale * (d_rows.T @ z)                                          # (out, r)
    dz = scale * (d_rows @ B)                                            # (tokens, r)
    dA = dz.T @ rows                                                     # (r, in)
    dx = (d_rows @ W + dz @ A).reshape(x.shape)
    return dx, dA, dB


def _check_adapter(x, W, A, B):
    W, A, B = np.asarray(W), np.asarray(A), np.asarray(B)
    if W.ndim != 2 or A.ndim != 2 or B.ndim != 2 or A.shape[1] != W.shape[1] or B.shape != (W.shape[0], A.shape[0]) \
            or x.shape[-1] != W.shape[1]:
        raise ValueError(f"expected x (..., in), W (out, in), A (r, in), B (out, r); got x {x.shape}, W {W.shape}, "
                         f"A {A.shape}, B {B.shape}")


# The pieces the training composes; a notebook may replace any of them by the student's own.
PIECES = {"rms_norm_backward": rms_norm_backward, "rope_backward": rope_backward,
          "lora_forward": lora_forward, "lora_backward": lora_backward}


def adapter_name(layer: int, target: str, which: str) -> str:
    """The safetensors key of an adapter matrix, PEFT-like: ``blk.L.<target>.lora_A`` / ``lora_B``."""
    return f"blk.{layer}.{target}.lora_{which}"


class LoRAModel:
    """A frozen :class:`~transformer_course.llama.Llama` with adapters on ``targets`` of ``layers``.

    Args:
        model: the base model (its weights are read, never written).
        layers: the layer indices that get adapters.
        targets: projection names among :data:`TARGETS` (e.g. ``("attn_q", "attn_v")``).
        rank: r. alpha: the scale is ``alpha / r``.
        rng: draws A ~ N(0, 1 / in); B = 0.
        pieces: replacements for :data:`PIECES` (the student's functions).
    """

    def __init__(self, model: Llama, layers, targets=("attn_q", "attn_v"), rank: int = 8, alpha: float = 16.0,
                 *, rng=None, pieces=None):
        self.model = model
        cfg = model.config
        self.layers = sorted({int(L) for L in layers})
        if not self.layers or self.layers[0] < 0 or self.layers[-1] >= cfg.n_layers:
            raise ValueError(f"layers must be a non-empty set of indices in 0..{cfg.n_layers - 1}, got {describe(layers)}")
        bad = [t for t in targets if t not in TARGETS]
        if bad or not targets:
            raise ValueError(f"targets must be a non-empty subset of {TARGETS}, got {describe(targets)}")
        self.targets = tuple(targets)
        self.rank = positive_int(rank, "rank")
        self.alpha = float(alpha)
        self.scale = self.alpha / self.rank
        self.pieces = {**PIECES, **(pieces or {})}
        unknown = set(self.pieces) - set(PIECES)
        if unknown:
            raise ValueError(f"pieces may replace {sorted(PIECES)}, got unknown {sorted(unknown)}")
        rng = np.random.default_rng(0) if rng is None else rng
        dt = model.dtype
        self.adapters = {}
        for L in self.layers:
            for t in self.targets:
                out, inp = model.layers[L][t].shape
                self.adapters[adapter_name(L, t, "A")] = rng.normal(0, 1 / np.sqrt(inp), (self.rank, inp)).astype(dt)
                self.adapters[adapter_name(L, t, "B")] = np.zeros((out, self.rank), dtype=dt)
        self.timings = {}

    @property
    def lowest(self) -> int:
        return self.layers[0]

    def n_parameters(self) -> int:
        return sum(a.size for a in self.adapters.values())

    # -- forward pieces ------------------------------------------------------------------------
    def _project(self, L, target, x):
        # on 2-D rows (tokens, in): one matrix product per weight, whatever the pieces do with a 3-D array
        W = self.model.layers[L][target]
        rows = x.reshape(-1, x.shape[-1])
        key = adapter_name(L, target, "A")
        if key in self.adapters:
            out = self.pieces["lora_forward"](rows, W, self.adapters[key], self.adapters[adapter_name(L, target, "B")],
                                              self.scale)
        else:
            out = rows @ W.T
        return out.reshape(x.shape[:-1] + (W.shape[0],))

    def _project_backward(self, L, target, dy, x, grads):
        W = self.model.layers[L][target]
        rows, d_rows = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
        key = adapter_name(L, target, "A")
        if key in self.adapters:
            dx, dA, dB = self.pieces["lora_backward"](d_rows, rows, W, self.adapters[key],
                                                      self.adapters[adapter_name(L, target, "B")], self.scale)
            grads[key] = dA
            grads[adapter_name(L, target, "B")] = dB
        else:
            dx = d_rows @ W                                              # frozen: only dx flows
        return dx.reshape(x.shape)

    def layer_forward(self, L, x, positions, cache=None):
        """One layer on ``x`` ``(B, n, d)`` (sequences at ``positions``); fills ``cache`` for the backward."""
        cfg, w = self.model.config, self.model.layers[L]
        b, n, d = x.shape
        cos, sin = rope_tables(positions, cfg.d_head, cfg.rope_base, x.dtype)
        a = rms_norm(x, w["attn_norm"], cfg.eps)
        heads = lambda y, h: y.reshape(b, n, h, cfg.d_head).transpose(0, 2, 1, 3)   # noqa: E731  (B, h, n, dh)
        q = rotate_pairs(heads(self._project(L, "attn_q", a), cfg.n_heads), cos, sin)
        k = rotate_pairs(heads(self._project(L, "attn_k", a), cfg.n_kv_heads), cos, sin)
        v = heads(self._project(L, "attn_v", a), cfg.n_kv_heads)
        outs, weights = zip(*(grouped_query_attention_with_weights(q[i], k[i], v[i], positions)
                              for i in range(b)))
        o = np.stack(outs).transpose(0, 2, 1, 3).reshape(b, n, d)
        x1 = x + self._project(L, "attn_output", o)
        m = rms_norm(x1, w["ffn_norm"], cfg.eps)
        gate, up = self._project(L, "ffn_gate", m), self._project(L, "ffn_up", m)
        s = silu(gate) * up
        x2 = x1 + self._project(L, "ffn_down", s)
        if cache is not None:
            cache.update(x=x, a=a, q=q, k=k, v=v, weights=weights, o=o, x1=x1, m=m, gate=gate, up=up, s=s,
                         positions=positions)
        return x2

    def layer_backward(self, L, dx2, c, grads):
        """Gradient of one layer: ``dL/dx`` from ``dL/dx2``; adapter gradients go into ``grads``."""
        cfg, w = self.model.config, self.model.layers[L]
        b, n, d = dx2.shape
        p = self.pieces
        ds = self._project_backward(L, "ffn_down", dx2, c["s"], grads)
        dgate = silu_backward(ds * c["up"], c["gate"])
        dup = ds * silu(c["gate"])
        dm = self._project_backward(L, "ffn_gate", dgate, c["m"], grads) + \
            self._project_backward(L, "ffn_up", dup, c["m"], grads)
        dx1 = dx2 + p["rms_norm_backward"](dm, c["x1"], w["ffn_norm"], cfg.eps)[0]
        do = self._project_backward(L, "attn_output", dx1, c["o"], grads)
        do = do.reshape(b, n, cfg.n_heads, cfg.d_head).transpose(0, 2, 1, 3)
        dq, dk, dv = (np.stack(g) for g in zip(*(
            grouped_query_attention_backward(do[i], c["q"][i], c["k"][i], c["v"][i], c["positions"], c["weights"][i])
            for i in range(b))))
        dq = p["rope_backward"](dq, c["positions"], cfg.rope_base)
        dk = p["rope_backward"](dk, c["positions"], cfg.rope_base)
        flat = lambda g: g.transpose(0, 2, 1, 3).reshape(b, n, -1)       # noqa: E731  (B, n, h*dh)
        da = self._project_backward(L, "attn_q", flat(dq), c["a"], grads) + \
            self._project_backward(L, "attn_k", flat(dk), c["a"], grads) + \
            self._project_backward(L, "attn_v", flat(dv), c["a"], grads)
        return dx1 + p["rms_norm_backward"](da, c["x"], w["attn_norm"], cfg.eps)[0]

    # -- whole model ----------------------------------------------------------------------------
    def hidden_below(self, ids) -> np.ndarray:
        """The residual stream entering the lowest adapted layer, for ids ``(B, n)``: ``(B, n, d)``.

        Nothing below that layer is trained, so this is computed once and reused at every step.
        """
        ids = _check_ids(ids, self.model.config.vocab_size)
        x = self.model.embedding[ids]
        positions = np.arange(ids.shape[1])
        for L in range(self.lowest):
            x = self.layer_forward(L, x, positions)
        return x

    def logits(self, ids) -> np.ndarray:
        """Logits ``(B, n, V)`` of the adapted model (every position; for evaluation)."""
        ids = _check_ids(ids, self.model.config.vocab_size)
        x = self.model.embedding[ids]
        positions = np.arange(ids.shape[1])
        for L in range(self.model.config.n_layers):
            x = self.layer_forward(L, x, positions)
        return rms_norm(x, self.model.final_norm, self.model.config.eps) @ self.model.embedding.T

    def logits_from(self, x_low, select) -> np.ndarray:
        """Logits ``(m, V)`` at the positions ``select`` ``(B, n)`` (booleans), from :meth:`hidden_below`'s
        output: the adapted layers and the head only (the layers below are shared with the base model)."""
        x_low = as_float_array(x_low, "x_low", min_ndim=3)
        select = np.asarray(select, dtype=bool)
        if select.shape != x_low.shape[:2]:
            raise ValueError(f"select must have shape {x_low.shape[:2]}, got {describe(select)}")
        x, positions = x_low, np.arange(x_low.shape[1])
        for L in range(self.lowest, self.model.config.n_layers):
            x = self.layer_forward(L, x, positions)
        return rms_norm(x[select], self.model.final_norm, self.model.config.eps) @ self.model.embedding.T

    def loss_and_grads(self, x_low, targets, loss_mask):
        """Mean cross-entropy on the positions of ``loss_mask`` and its gradient for every adapter.

        Args:
            x_low: :meth:`hidden_below` of the inputs ``(B, n, d)``.
            targets: ``(B, n)`` the next token at every position.
            loss_mask: ``(B, n)`` booleans: the positions whose prediction counts (the answer).

        Returns:
            ``(loss, grads)``, ``grads`` keyed like :attr:`adapters`. :attr:`timings` gets the seconds
            spent in the adapted layers and in the output head (forward and backward each).
        """
        cfg, E = self.model.config, self.model.embedding
        x_low = as_float_array(x_low, "x_low", min_ndim=3)
        targets, loss_mask = np.asarray(targets), np.asarray(loss_mask, dtype=bool)
        if targets.shape != x_low.shape[:2] or loss_mask.shape != x_low.shape[:2] or not loss_mask.any():
            raise ValueError(f"targets and loss_mask must have shape {x_low.shape[:2]} and the mask select a position; "
                             f"got {describe(targets)}, {describe(loss_mask)}")
        positions = np.arange(x_low.shape[1])
        t0 = time.perf_counter()
        caches, x = [], x_low
        for L in range(self.lowest, cfg.n_layers):
            caches.append({})
            x = self.layer_forward(L, x, positions, caches[-1])
        t1 = time.perf_counter()
        xs = x[loss_mask]                                                   # (m, d): the answer positions only
        h = rms_norm(xs, self.model.final_norm, cfg.eps)
        logits = h @ E.T                                                    # (m, V)
        loss = cross_entropy(logits, targets[loss_mask])
        dlogits = cross_entropy_backward(logits, targets[loss_mask])
        dh = dlogits @ E                                                    # frozen tied head: only dh flows
        dxs = self.pieces["rms_norm_backward"](dh, xs, self.model.final_norm, cfg.eps)[0]
        dx = np.zeros_like(x)
        dx[loss_mask] = dxs
        t2 = time.perf_counter()
        grads = {}
        for L, c in zip(range(cfg.n_layers - 1, self.lowest - 1, -1), reversed(caches)):
            dx = self.layer_backward(L, dx, c, grads)
        t3 = time.perf_counter()
        self.timings = {"layers_forward": t1 - t0, "head": t2 - t1, "layers_backward": t3 - t2}
        return float(loss), grads

    # -- merge, save, load ----------------------------------------------------------------------
    def merged_weights(self) -> dict:
        """The base model's GGUF-named weights with ``W + (alpha / r) B A`` folded into each adapted W.

        The merged matrix is the adapted layer's map written as a matrix: row i of its transpose is the
        layer (``pieces["lora_forward"]``) applied to the basis vector e_i, so the adapted map is defined
        in one place. Where a notebook asks for lora_forward (11), the merge runs on the student's."""
        m = self.model
        weights = {"token_embd.weight": m.embedding, "output_norm.weight": m.final_norm}
        for L, layer in enumerate(m.layers):
            for name, W in layer.items():
                key = adapter_name(L, name, "A")
                if key in self.adapters:
                    basis = np.eye(W.shape[1], dtype=W.dtype)                          # (in, in): e_0 .. e_{in-1}
                    W = self.pieces["lora_forward"](basis, W, self.adapters[key], self.adapters[adapter_name(L, name, "B")],
                                                    self.scale).T                      # (in, out) -> (out, in)
                weights[f"blk.{L}.{name}.weight"] = W
        return weights

    def merged(self) -> Llama:
        """A plain :class:`Llama` with the adapters folded in (no adapter cost at inference)."""
        return Llama(self.model.config, self.merged_weights(), self.model.dtype, self.model.pieces)

    def save(self, path) -> Path:
        """The adapters, rank and alpha as a safetensors file (only A and B: the base stays where it is)."""
        from safetensors.numpy import save_file

        path = Path(path)
        save_file({k: np.ascontiguousarray(v) for k, v in self.adapters.items()}, str(path),
                  metadata={"rank": str(self.rank), "alpha": repr(self.alpha), "targets": ",".join(self.targets),
                            "layers": ",".join(map(str, self.layers))})
        return path

    @classmethod
    def load(cls, model: Llama, path, pieces=None) -> "LoRAModel":
        """The adapters of :meth:`save` on ``model``."""
        from safetensors import safe_open
        from safetensors.numpy import load_file

        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata()
        lora = cls(model, [int(L) for L in meta["layers"].split(",")], tuple(meta["targets"].split(",")),
                   int(meta["rank"]), float(meta["alpha"]), pieces=pieces)
        tensors = load_file(str(path))
        if set(tensors) != set(lora.adapters):
            raise ValueError(f"{path} holds adapters {sorted(set(tensors) ^ set(lora.adapters))[:3]} ... that do not "
                             "match its own metadata")
        lora.adapters = {k: v.astype(model.dtype, copy=False) for k, v in tensors.items()}
        return lora


def _check_ids(ids, vocab_size):
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a non-empty (batch, n) array of integers, got {describe(ids)}")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(f"ids must lie in 0..{vocab_size - 1}, got {ids.min()}..{ids.max()}")
    return ids

