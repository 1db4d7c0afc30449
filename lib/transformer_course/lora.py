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

The forward pass is the model's own: :meth:`Llama.layer <transformer_course.llama.Llama.layer>`, the one
composition of a LLaMA layer, on the model's pieces (``Llama(..., pieces=...)``), with the adapted projections
routed through :func:`lora_forward`; it keeps what the backward needs. The backward is composed here from
the concept modules' backward passes; the ones a notebook asks the student to write can be passed in
``pieces`` so that the training runs on them (:data:`PIECES`).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from ._checks import as_float_array, describe, positive_int
from .backward import cross_entropy_backward
from .llama import (LAYER_TENSORS, Llama, grouped_query_attention_backward, rms_norm_backward, rope_backward,
                    silu_backward, stack_heads)
from .loss import cross_entropy
from .safetensors_file import read_metadata, read_safetensors, write_safetensors

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
        pieces: replacements for :data:`PIECES` (the student's functions). The forward runs on ``model``'s own
            pieces (:class:`~transformer_course.llama.LlamaPieces`).
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

    # -- the adapted projections, forward and backward --------------------------------------------
    def adapted(self, L: int) -> dict:
        """Layer L's adapted projections for :meth:`Llama.layer <transformer_course.llama.Llama.layer>`:
        ``{target: y -> lora_forward(y, W, A, B, scale)}``, empty for a layer without adapters."""
        if L not in self.layers:
            return {}
        return {t: functools.partial(self._lora_projection, L, t) for t in self.targets}

    def _lora_projection(self, L, target, rows):
        A, B = self.adapters[adapter_name(L, target, "A")], self.adapters[adapter_name(L, target, "B")]
        return self.pieces["lora_forward"](rows, self.model.layers[L][target], A, B, self.scale)   # (tokens, out)

    def _project_backward(self, L, target, dy, c, grads):
        """``dL/d(input)`` ``(tokens, in)`` of projection ``target`` from ``dy`` ``(tokens, out)``; an adapted one also
        puts its ``dA``, ``dB`` into ``grads`` (from its input, which the forward kept in ``c["inputs"]``)."""
        W = self.model.layers[L][target]
        if target not in c["inputs"]:
            return dy @ W                                                # frozen: only dx flows
        key_A, key_B = adapter_name(L, target, "A"), adapter_name(L, target, "B")
        dx, grads[key_A], grads[key_B] = self.pieces["lora_backward"](dy, c["inputs"][target], W, self.adapters[key_A],
                                                                     self.adapters[key_B], self.scale)
        return dx

    # -- one layer ----------------------------------------------------------------------------------
    def layer_forward(self, L, x, positions, cache=None):
        """The model's layer L (:meth:`Llama.layer <transformer_course.llama.Llama.layer>`, on the model's pieces) on
        ``x`` ``(B, n, d)`` at ``positions``, with this layer's adapters; ``cache`` (a dict) receives what
        :meth:`layer_backward` needs."""
        if cache is not None:
            cache["positions"] = positions
        return self.model.layer(L, x, positions, adapted=self.adapted(L), keep=cache)

    def layer_backward(self, L, dx2, c, grads, *, to_input: bool = True):
        """Gradient of one layer: ``dL/dx`` from ``dL/dx2`` ``(B, n, d)``; adapter gradients go into ``grads``.

        ``to_input=False`` (the lowest adapted layer: nothing below it needs a gradient) stops once the adapters'
        gradients are known and returns None: the frozen q, k, v projections and the first norm would only carry
        ``dL/dx`` further down."""
        cfg, w = self.model.config, self.model.layers[L]
        p = self.pieces
        shape, dx2 = dx2.shape, dx2.reshape(-1, cfg.d_model)             # rows (tokens, d), as the forward kept them
        ds = self._project_backward(L, "ffn_down", dx2, c, grads)
        dgate = silu_backward(ds * c["up"], c["gate"])
        dup = ds * c["act"]
        dm = self._project_backward(L, "ffn_gate", dgate, c, grads) + self._project_backward(L, "ffn_up", dup, c, grads)
        dx1 = dx2 + p["rms_norm_backward"](dm, c["x1"], w["ffn_norm"], cfg.eps)[0]
        do = self._project_backward(L, "attn_output", dx1, c, grads)               # (tokens, d)
        do = do.reshape(shape[:-1] + (cfg.n_heads, cfg.d_head)).swapaxes(-2, -3)   # (B, H, n, dh)
        dq, dk, dv = self._attention_backward(do, c)
        dq = p["rope_backward"](dq, c["positions"], cfg.rope_base)
        dk = p["rope_backward"](dk, c["positions"], cfg.rope_base)
        rows = lambda g: g.swapaxes(-2, -3).reshape(dx2.shape[0], -1)             # noqa: E731  (tokens, h*dh)
        branches = (("attn_q", dq), ("attn_k", dk), ("attn_v", dv))
        da = [self._project_backward(L, t, rows(g), c, grads) for t, g in branches if to_input or t in c["inputs"]]
        if not to_input:
            return None
        return (dx1 + p["rms_norm_backward"](sum(da), c["x"], w["attn_norm"], cfg.eps)[0]).reshape(shape)

    @staticmethod
    def _attention_backward(do, c):
        """:func:`grouped_query_attention_backward` of the whole batch in one call, the sequences stacked as heads
        as the forward stacked them (``Llama._attention``); the forward's weights when it kept them, else recomputed."""
        weights = None if c["weights"] is None else stack_heads(c["weights"])          # (B*H, n, n)
        dq, dk, dv = grouped_query_attention_backward(stack_heads(do), stack_heads(c["q"]), stack_heads(c["k"]),
                                                      stack_heads(c["v"]), weights=weights)
        return dq.reshape(c["q"].shape), dk.reshape(c["k"].shape), dv.reshape(c["v"].shape)

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
        return self.model.head(x)

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
        return self.model.head(x[select])

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
        logits = self.model.head(xs)                                        # (m, V)
        loss = cross_entropy(logits, targets[loss_mask])
        dlogits = cross_entropy_backward(logits, targets[loss_mask])
        dh = dlogits @ E                                                    # frozen tied head: only dh flows
        dxs = self.pieces["rms_norm_backward"](dh, xs, self.model.final_norm, cfg.eps)[0]
        dx = np.zeros_like(x)
        dx[loss_mask] = dxs
        t2 = time.perf_counter()
        grads = {}
        for L in range(cfg.n_layers - 1, self.lowest - 1, -1):           # each layer's cache freed once used
            dx = self.layer_backward(L, dx, caches.pop(), grads, to_input=L > self.lowest)   # none below the lowest
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
        path = Path(path)
        write_safetensors(self.adapters, path,
                          metadata={"rank": str(self.rank), "alpha": repr(self.alpha), "targets": ",".join(self.targets),
                                    "layers": ",".join(map(str, self.layers))})
        return path

    @classmethod
    def load(cls, model: Llama, path, pieces=None) -> "LoRAModel":
        """The adapters of :meth:`save` on ``model``."""
        meta = read_metadata(path)
        lora = cls(model, [int(L) for L in meta["layers"].split(",")], tuple(meta["targets"].split(",")),
                   int(meta["rank"]), float(meta["alpha"]), pieces=pieces)
        tensors = read_safetensors(path)
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

