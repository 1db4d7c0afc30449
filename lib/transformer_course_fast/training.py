"""A fast training step (forward + backward + AdamW) for notebook 10's :class:`TinyDecoder`.

:mod:`transformer_course.training` is the readable reference: ``TinyDecoder.loss_and_grads``
composes the backward of each piece and ``AdamW.step`` loops over the parameters. On the
notebook's model (2 layers, d 32, 2 heads, batch 32 x 32 tokens) every array is small -- the
largest products are 1024 x 32 x 96 -- so the step's time is mostly per-call overhead: argument
checks, fresh arrays (their first touch is a page fault), and NumPy loops that are short in the
innermost axis. :class:`FastTrainer` computes exactly the same step with:

* **Feature-major activations.** The residual stream is kept as ``x^T`` ``(d, tokens)``, not
  ``(tokens, d)``. Every per-token operation (layer norm's mean and scale, softmax over the vocabulary,
  the loss) then broadcasts a ``(1, tokens)`` row over ``d`` long contiguous rows, instead of one
  32-element inner loop per token (in NumPy the latter costs ~15 ns per token per pass, more than
  the arithmetic). Products use BLAS's transposes, so the layout costs no copies.
* **Attention weights stored keys-major** ``P^T[h, key, b, query]``: the mask, the softmax's max,
  its sum and its normalisation all work on contiguous ``(batch x query)`` rows; the batched
  products read per-``(h, b)`` strided views of it (BLAS-compatible, so NumPy calls ``gemm``).
  The softmax's backward uses ``rowsum(dP * P) = rowsum(dO * O)`` (FlashAttention-2's ``D``),
  a sum over ``d_head`` instead of over the keys.
* **One flat buffer for the parameters, one for the gradients**, AdamW's moments likewise: the
  update is a dozen NumPy calls on ~12 000 numbers, not a dozen per parameter. ``W_Q | W_K | W_V`` of
  a layer are the column blocks of one ``(d, 3d)`` matrix, so the projection and its gradients are
  one product each. ``model.params[name]`` become views into the flat buffer (same values):
  the model and the trainer share the weights, and AdamW updates them in place.
* **Buffers reused across steps** (one set per batch shape), the causal mask and the position
  table expanded once to the batch's layout, every product and ufunc written with ``out=``.
* **Checks once**: the model and the hyperparameters at construction, each batch's shape, dtype
  and token range on entry; nothing inside the step.
* **The embedding gradient by one** ``np.bincount`` over flat ``(token, feature)`` indices (built
  once per batch), summed in float64: in this step's layout it measured 56 us, against 74 us for
  the product with the batch's one-hot matrix (plus 12 us to build it) and 450 us for ``np.add.at``
  (one thread, 2-core machine under load).
* **Padded rows** for the arrays the per-head products read and write (q, k, v, the weights, the
  heads' outputs and their gradients): with T = 1024 float32 tokens a head's rows would lie exactly
  4 KiB apart and share cache sets. Element-wise passes over them run over whole padded rows, which
  keeps them contiguous (the padding stays finite). Measured: the six batched products of a layer
  2-25 % faster, the step on one thread 1.61 -> 1.55 ms (on two, whose halves have 2 KiB rows,
  1.395 -> 1.376 ms).
* **The batch's sequences shared among Python threads** (default: as many as OpenBLAS has), OpenBLAS
  held at one thread during the step. A step is ~120 NumPy calls of 2-60 us on arrays of 32k-100k
  numbers, and every call returns to the GIL. Measured on the 2-core benchmark machine (one process,
  A/B interleaved): with the other core free (nothing else running, load falling to 1.7) two threads
  took 1.33 ms against 1.50 on one; with two other jobs on the machine (load 1.4-2.5), 1.73 against
  1.61 -- each thread then waits for the other's GIL while that thread is not scheduled. Two other
  ways to use the second core measured worse under that load and were dropped: a helper thread for
  the weight gradients while the backward pass goes on (1.70 against 1.68), and OpenBLAS's two
  threads for the large products only (10 ms: its second thread spins between products and is not
  scheduled while the other core is busy). ``threads=1`` for a busy machine.

Every number is checked against the readable model and AdamW (tests/test_fast_training.py).
"""

from __future__ import annotations

import math

import numpy as np

from transformer_course._checks import describe
from transformer_course.activations import erf
from transformer_course.training import LN_EPS, AdamW, TinyDecoder

from ._threads import _effective_threads, _executor, _openblas_api, _single_threaded_blas

__all__ = ["FastTrainer"]

_QKV = ("W_Q", "W_K", "W_V")


def _layout(model: TinyDecoder) -> tuple[int, list]:
    """Where every parameter lives in the flat buffer: ``(size, [(name, offset, shape, columns)])``.

    Parameters follow ``model.params``' order; a layer's ``W_Q``, ``W_K``, ``W_V`` are the column
    blocks ``columns`` of one ``(d, 3d)`` matrix placed where ``W_Q`` comes.
    """
    d, entries, offset, blocks = model.d_model, [], 0, {}
    for name, value in model.params.items():
        layer, _, short = name.rpartition(".")
        if short in _QKV:
            if layer not in blocks:
                blocks[layer] = offset
                offset += 3 * d * d
            j = _QKV.index(short)
            entries.append((name, blocks[layer], (d, 3 * d), slice(j * d, (j + 1) * d)))
        else:
            entries.append((name, offset, value.shape, None))
            offset += value.size
    return offset, entries


def _views(flat: np.ndarray, entries) -> tuple[dict, dict]:
    """Views of ``flat`` for every entry of :func:`_layout`: ``(name -> view, layer -> (d, 3d) block)``."""
    out, blocks = {}, {}
    for name, offset, shape, columns in entries:
        view = flat[offset:offset + math.prod(shape)].reshape(shape)
        if columns is not None:
            blocks[name.rpartition(".")[0]] = view
            view = view[:, columns]
        out[name] = view
    return out, blocks


class _Layer:
    """One block's parameters and gradients as the step uses them (views of the flat buffers)."""

    def __init__(self, params: dict, grads: dict, blocks: tuple, layer: int, ffn: bool):
        def column(store, name):                  # (k,) vector as a (k, 1) column: broadcasts over tokens
            return store[f"{layer}.{name}"].reshape(-1, 1)

        self.W_qkv, self.dW_qkv = blocks[0][str(layer)], blocks[1][str(layer)]   # (d, 3d): W_Q | W_K | W_V
        self.W_O, self.dW_O = params[f"{layer}.W_O"], grads[f"{layer}.W_O"]
        self.g1, self.b1 = column(params, "ln1.gamma"), column(params, "ln1.beta")
        self.dg1, self.db1 = grads[f"{layer}.ln1.gamma"], grads[f"{layer}.ln1.beta"]
        self.ffn = ffn
        if ffn:
            self.g2, self.b2 = column(params, "ln2.gamma"), column(params, "ln2.beta")
            self.dg2, self.db2 = grads[f"{layer}.ln2.gamma"], grads[f"{layer}.ln2.beta"]
            self.W_1, self.dW_1 = params[f"{layer}.W_1"], grads[f"{layer}.W_1"]
            self.W_2, self.dW_2 = params[f"{layer}.W_2"], grads[f"{layer}.W_2"]
            self.c1, self.dc1 = column(params, "b_1"), grads[f"{layer}.b_1"]
            self.c2, self.dc2 = column(params, "b_2"), grads[f"{layer}.b_2"]


class _Workspace:
    """Every array one step of batch shape ``(B, n)`` needs, allocated once."""

    def __init__(self, model: TinyDecoder, B: int, n: int, dtype, norm: int):
        d, h, V, L = model.d_model, model.n_heads, model.vocab_size, model.n_layers
        T = B * n
        f = dict(dtype=dtype)
        self.T = T
        self.norm = norm                     # tokens of the whole batch: the loss is their mean
        self.x = [np.empty((d, T), **f) for _ in range(L + 1)]       # residual stream x^T, each layer's input
        self.xhat1 = [np.empty((d, T), **f) for _ in range(L)]         # layer norm: normalised input
        self.r1 = [np.empty(T, **f) for _ in range(L)]                 # and 1 / sqrt(var + eps)
        self.a = [np.empty((d, T), **f) for _ in range(L)]             # LN_1 output
        # the arrays of the per-head products: (rows, Tp) with padded rows, used as their (rows, T) views
        # (see _padded_width); element-wise passes run over whole rows, padding included (it stays finite)
        Tp = _padded_width(T, dtype)
        self.qkv_p = [np.zeros((3 * d, Tp), **f) for _ in range(L)]
        self.qkv = [a[:, :T] for a in self.qkv_p]                      # (3, h, d_head, B, n): q (scaled), k, v
        self.P_p = [np.zeros((h * n, Tp), **f) for _ in range(L)]      # attention weights P^T, keys-major
        self.P = [a[:, :T] for a in self.P_p]                          # (h n_k, B n_q)
        self.merged = [np.zeros((d, Tp), **f)[:, :T] for _ in range(L)]   # heads' outputs (h, d_head, B, n)
        if model.d_ff:
            F = model.d_ff
            self.x1 = [np.empty((d, T), **f) for _ in range(L)]        # after attention, before the FFN
            self.xhat2 = [np.empty((d, T), **f) for _ in range(L)]
            self.r2 = [np.empty(T, **f) for _ in range(L)]
            self.m = [np.empty((d, T), **f) for _ in range(L)]         # LN_2 output
            self.u = [np.empty((F, T), **f) for _ in range(L)]         # W_1^T m + b_1
            self.cdf = [np.empty((F, T), **f) for _ in range(L)]       # Phi(u)
            self.hid = np.empty((F, T), **f)                           # gelu(u) = u Phi(u); then scratch
            self.dhid = np.empty((F, T), **f)
        self.xhatf, self.rf, self.xf = np.empty((d, T), **f), np.empty(T, **f), np.empty((d, T), **f)
        self.logits = np.empty((V, T), **f)                            # logits^T, then softmax, then dlogits
        # scratch
        self.td = [np.empty((d, T), **f) for _ in range(4)]
        self.tT = [np.empty(T, **f) for _ in range(4)]
        self.dqkv_p = np.zeros((3 * d, Tp), **f)
        self.dqkv = self.dqkv_p[:, :T]
        self.dP_p = np.zeros((h * n, Tp), **f)
        self.dP = self.dP_p[:, :T]
        self.dmerged = np.zeros((d, Tp), **f)[:, :T]                   # dO^T (h, d_head, B, n)
        # views for the per-head products, made once (each a view: checked by _split)
        self.heads = [_heads(qkv, h, d // h, B, n) for qkv in self.qkv]        # q, k, v: (h, B, d_head, n)
        self.dheads = _heads(self.dqkv, h, d // h, B, n)                       # dq, dk, dv
        self.Pb = [_split(P, (h, n, B, n)).transpose(0, 2, 1, 3) for P in self.P + [self.dP]]  # (h, B, n_k, n_q)
        self.Pr = [a.reshape(h, n, Tp) for a in self.P_p + [self.dP_p]]        # (h, n_k, B n_q + pad)
        self.Ob = [_split(m, (h, d // h, B, n)).transpose(0, 2, 1, 3)           # (h, B, d_head, n_q)
                   for m in self.merged + [self.dmerged]]
        self.D = np.zeros((h, Tp), **f)                                # (h, B n_q + pad)
        self.gather = np.empty((T, d), **f)
        self.w_qkv_t = np.empty((3 * d, d), **f)                       # dW_qkv^T, then transposed into place
        self.w_u_t = np.empty((V, d), **f)                             # dU^T
        self.embed_index = np.empty((d, T), dtype=np.intp)             # token[t] * d + j at (j, t): dE's flat index
        self.feature = np.arange(d, dtype=np.intp)[:, None]            # (d, 1)
        self.token_row = np.empty(T, dtype=np.intp)                     # token[t] * d
        self.rows = np.arange(T)
        self.ones_T = np.ones(T, **f)
        self.mean_d = np.full(d, 1.0 / d, **f)                         # x^T's mean over features: mean_d @ x^T
        self.ones_V = np.ones(V, **f)
        # additive causal mask in the keys-major layout (key j, batch, query i): 0 if j <= i else -inf
        allowed = np.arange(n)[:, None, None] <= np.arange(n)[None, None, :]          # (n, 1, n)
        self.mask = np.zeros((n, Tp), **f)                             # (n_k, B n_q + pad)
        self.mask[:, :T] = np.broadcast_to(np.where(allowed, 0.0, -np.inf), (n, B, n)).reshape(n, T)
        # the position table in the layout of x^T: positions[t % n] for every token t
        self.positions = np.ascontiguousarray(np.tile(model.positions[:n].T, (1, B)))   # (d, T)
        self.tokens = np.zeros(T, dtype=np.intp)                       # flat token ids of the batch
        self.target_index = np.empty(T, dtype=np.intp)                 # flat index of (target, t) in (V, T)


class _GradSet:
    """One flat gradient buffer with its views and the layers that write into it (one per thread)."""

    def __init__(self, flat, views: dict, blocks: dict, trainer):
        model = trainer.model
        self.flat = flat
        self.layers = [_Layer(trainer._params, views, (trainer._qkv_blocks, blocks), i, bool(model.d_ff))
                       for i in range(model.n_layers)]
        self.dE, self.dU = views["E"], views["U"]
        self.dgf, self.dbf = views["lnf.gamma"], views["lnf.beta"]


class FastTrainer:
    """Forward + backward + AdamW for a :class:`transformer_course.training.TinyDecoder`, fast.

    The same step as::

        loss, grads, _ = model.loss_and_grads(tokens, targets)
        AdamW(model.params, lr, betas, eps, weight_decay).step(grads)   # the same optimiser object each step

    Args:
        model: a ``TinyDecoder`` (float32 or float64, with or without feed-forward). Its
            ``params[name]`` are replaced by views of one flat buffer holding the same values
            (the model keeps working, and sees every update); do not rebind them afterwards.
        lr, betas, eps, weight_decay: AdamW's, checked like :class:`transformer_course.training.AdamW`.
        threads: how many Python threads share a step (default: OpenBLAS's thread count, 1 if it
            cannot be held at one thread; see the module's notes for what two measured). The batch
            is split along its sequences; each thread runs forward and backward on its part into its
            own gradient buffer, the buffers are added, and one AdamW update follows -- the same step
            up to the order of the gradient sums. OpenBLAS is held at one thread during the step.

    Attributes:
        grads: dict name -> gradient of the last :meth:`step` / :meth:`loss_and_grads` (views, rewritten).
        t: the number of updates made.
    """

    def __init__(self, model: TinyDecoder, lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0, threads=None):
        if not isinstance(model, TinyDecoder):
            raise TypeError(f"model must be a transformer_course.training.TinyDecoder, got {describe(model)}")
        AdamW({}, lr, betas, eps, weight_decay)             # the reference's check of the hyperparameters
        dtype = model.params["E"].dtype
        if dtype not in (np.float32, np.float64) or any(p.dtype != dtype for p in model.params.values()):
            raise TypeError("model.params must all be float32 or all float64, got "
                            f"{sorted({str(p.dtype) for p in model.params.values()})}")
        self.model, self.dtype = model, dtype
        # Python floats: under NEP 50 they take the arrays' dtype (an np.float64 would promote float32)
        self.lr, self.beta1, self.beta2 = float(lr), float(betas[0]), float(betas[1])
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.t = 0
        size, entries = _layout(model)
        self._flat = np.empty(size, dtype)
        self._flat_grad = np.zeros(size, dtype)
        params, qkv_blocks = _views(self._flat, entries)
        for name, view in params.items():
            view[...] = model.params[name]
        model.params.update(params)                         # the model now reads the flat buffer
        self.params = model.params
        self.grads, grad_blocks = _views(self._flat_grad, entries)
        self._m, self._v = np.zeros(size, dtype), np.zeros(size, dtype)
        self._tmp, self._tmp2 = np.empty(size, dtype), np.empty(size, dtype)
        self._params, self._qkv_blocks, self._entries = params, qkv_blocks, entries
        self._grad_sets = [_GradSet(self._flat_grad, self.grads, grad_blocks, self)]
        self._E, self._U = params["E"], params["U"]
        self._gf, self._bf = params["lnf.gamma"].reshape(-1, 1), params["lnf.beta"].reshape(-1, 1)
        self._workspaces: dict = {}
        self._pin_blas = _openblas_api() is not None
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be None or an integer >= 1, got {describe(threads)}")
        self.threads = threads

    # -- public ----------------------------------------------------------------------------------------

    def loss_and_grads(self, tokens, targets) -> float:
        """The mean next-token cross-entropy of ``targets`` given ``tokens`` (both ``(batch, n)``
        integers); fills :attr:`grads`. No update."""
        parts = self._prepare(tokens, targets)
        with _single_threaded_blas() if self._pin_blas else _nullcontext():
            return self._loss_and_grads(parts)

    def step(self, tokens, targets) -> float:
        """One training step: loss, gradients, AdamW update of ``model.params`` in place. Returns the loss."""
        parts = self._prepare(tokens, targets)
        with _single_threaded_blas() if self._pin_blas else _nullcontext():
            loss = self._loss_and_grads(parts)
            self._update()
        return loss

    def update(self) -> None:
        """The AdamW update of ``model.params`` from the current :attr:`grads` (what :meth:`step`
        does after :meth:`loss_and_grads`); ``grads`` may be written by the caller first."""
        self._update()

    # -- the batch -------------------------------------------------------------------------------------

    def _prepare(self, tokens, targets) -> list:
        """Check a batch (shape, dtype, range), split it into one part per thread and set up
        each part's indices; returns the parts' workspaces."""
        model = self.model
        tokens, targets = np.asarray(tokens), np.asarray(targets)
        for name, arr in (("tokens", tokens), ("targets", targets)):
            if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"{name} must be a (batch, n) integer array, got {describe(arr)}")
            if arr.size == 0:
                raise ValueError(f"{name} must not be empty, got {describe(arr)}")
            lo, hi = arr.min(), arr.max()
            if lo < 0 or hi >= model.vocab_size:
                raise ValueError(f"{name} must lie in 0..{model.vocab_size - 1}, got {lo}..{hi}")
        if targets.shape != tokens.shape:
            raise ValueError(f"targets must have the shape of tokens {tokens.shape}, got {targets.shape}")
        B, n = tokens.shape
        if n > model.n_positions:
            raise ValueError(f"sequences of {n} tokens exceed n_positions={model.n_positions}")
        threads = self._python_threads()
        bounds = [0, B] if threads == 1 else np.linspace(0, B, min(threads, B) + 1).astype(int)   # sequences per part
        while len(self._grad_sets) < len(bounds) - 1:                            # a gradient buffer per part
            flat = np.zeros_like(self._flat_grad)
            views, blocks = _views(flat, self._entries)
            self._grad_sets.append(_GradSet(flat, views, blocks, self))
        parts = []
        for part, (b0, b1) in enumerate(zip(bounds[:-1], bounds[1:])):
            key = (part, int(b1 - b0), n, B * n)                                 # one workspace per thread
            ws = self._workspaces.get(key)
            if ws is None:
                ws = self._workspaces[key] = _Workspace(model, key[1], n, self.dtype, B * n)
            np.copyto(ws.tokens, tokens[b0:b1].reshape(-1), casting="unsafe")   # in 0..V-1: checked above
            np.multiply(ws.tokens, model.d_model, out=ws.token_row)
            np.add(ws.token_row, ws.feature, out=ws.embed_index)
            np.multiply(targets[b0:b1].reshape(-1), ws.T, out=ws.target_index)
            ws.target_index += ws.rows
            parts.append(ws)
        return parts

    def _python_threads(self) -> int:
        """Threads that share the batch's sequences: ``threads`` if given, else OpenBLAS's count."""
        if not self._pin_blas:               # OpenBLAS's count cannot be set: one thread, BLAS as it is
            return 1
        return _effective_threads(self.threads)

    def _loss_and_grads(self, parts) -> float:
        """Forward and backward of every part (part k into gradient set k, on its own thread),
        then the gradients summed into :attr:`grads`."""
        def run(k):
            loss = self._forward(parts[k], self._grad_sets[k])
            self._backward(parts[k], self._grad_sets[k])
            return loss

        if len(parts) == 1:
            return run(0)
        futures = [_executor(len(parts) - 1).submit(run, k) for k in range(1, len(parts))]
        try:
            loss = run(0)
        finally:
            losses = [f.result() for f in futures]
        for gs in self._grad_sets[1:len(parts)]:
            self._flat_grad += gs.flat
        return loss + sum(losses)

    # -- forward ---------------------------------------------------------------------------------------

    def _forward(self, ws: _Workspace, gs) -> float:
        # x_0^T = (E[tokens] + positions)^T: gather rows, add while transposing
        np.take(self._E, ws.tokens, axis=0, out=ws.gather)
        np.add(ws.gather.T, ws.positions, out=ws.x[0])
        for i, lay in enumerate(gs.layers):
            self._attention_forward(ws, lay, i)
            if lay.ffn:
                self._ffn_forward(ws, lay, i)
        xf = _ln_forward(ws, ws.x[-1], self._gf, self._bf, ws.xhatf, ws.rf, ws.xf)
        z = ws.logits                                            # (V, T)
        np.matmul(self._U.T, xf, out=z)
        top, s, picked, lse = ws.tT
        np.maximum.reduce(z, axis=0, out=top)
        np.subtract(z, top, out=z)                               # z - max
        np.take(z.reshape(-1), ws.target_index, out=picked)      # (z - max)[target]
        np.exp(z, out=z)
        np.matmul(ws.ones_V, z, out=s)                           # sum over the vocabulary
        np.log(s, out=lse)
        np.subtract(lse, picked, out=lse)                        # logsumexp(z) - z[target]
        loss = float(np.add.reduce(lse)) / ws.norm
        # dL/dlogits = softmax / N - onehot(target) / N, written over z
        np.multiply(s, ws.norm, out=s)
        np.divide(1.0, s, out=s)
        np.multiply(z, s, out=z)
        z.reshape(-1)[ws.target_index] -= 1.0 / ws.norm
        return loss

    def _attention_forward(self, ws, lay: _Layer, i: int) -> None:
        model = self.model
        d, h = model.d_model, model.n_heads
        dh = d // h
        x = ws.x[i]
        a = _ln_forward(ws, x, lay.g1, lay.b1, ws.xhat1[i], ws.r1[i], ws.a[i])
        qkv = ws.qkv[i]
        np.matmul(lay.W_qkv.T, a, out=qkv)                       # (3d, T) = (W_Q | W_K | W_V)^T a^T
        ws.qkv_p[i][:d] *= 1.0 / math.sqrt(dh)                   # q / sqrt(d_head)
        q, k, v = ws.heads[i]                                    # each (h, B, d_head, n), strided
        Pb, Pr = ws.Pb[i], ws.Pr[i]                              # (h, B, n_k, n_q), (h, n_k, T + pad) of P^T
        np.matmul(k.transpose(0, 1, 3, 2), q, out=Pb)            # scores^T = k q^T
        Pr += ws.mask                                            # -inf above the diagonal
        top = ws.D                                               # (h, T + pad) scratch
        np.maximum.reduce(Pr, axis=1, out=top)
        np.subtract(Pr, top[:, None, :], out=Pr)
        np.exp(Pr, out=Pr)
        np.add.reduce(Pr, axis=1, out=top)                       # sum over the keys
        np.divide(1.0, top, out=top)
        np.multiply(Pr, top[:, None, :], out=Pr)                 # softmax over the keys
        np.matmul(v, Pb, out=ws.Ob[i])                           # O^T = v^T P^T, into merged (h, d_head, B, n)
        out = ws.x1[i] if lay.ffn else ws.x[i + 1]
        np.matmul(lay.W_O.T, ws.merged[i], out=out)
        out += x

    def _ffn_forward(self, ws, lay: _Layer, i: int) -> None:
        x1 = ws.x1[i]
        m = _ln_forward(ws, x1, lay.g2, lay.b2, ws.xhat2[i], ws.r2[i], ws.m[i])
        u, cdf, hid = ws.u[i], ws.cdf[i], ws.hid
        np.matmul(lay.W_1.T, m, out=u)
        u += lay.c1
        np.multiply(u, 1.0 / math.sqrt(2.0), out=cdf)
        erf(cdf, out=cdf)
        cdf += 1.0
        cdf *= 0.5                                               # Phi(u)
        np.multiply(u, cdf, out=hid)                             # gelu(u)
        out = ws.x[i + 1]
        np.matmul(lay.W_2.T, hid, out=out)
        out += lay.c2
        out += x1

    # -- backward --------------------------------------------------------------------------------------

    def _backward(self, ws: _Workspace, gs) -> None:
        dz = ws.logits                                           # dL/dlogits^T (V, T)
        _weight_grad(ws.xf, dz, gs.dU, ws.w_u_t)                 # dU = xf^T dlogits
        dxf = ws.td[0]
        np.matmul(self._U, dz, out=dxf)
        dx = ws.td[1]                                            # dL/d(last block's output)
        _ln_backward(ws, dxf, ws.xhatf, ws.rf, self._gf, dx, gs.dgf, gs.dbf, ws.td[2])
        for i in reversed(range(len(gs.layers))):
            lay = gs.layers[i]
            if lay.ffn:
                self._ffn_backward(ws, lay, i, dx)
            self._attention_backward(ws, lay, i, dx)
        # dE[v] = sum of dx_0 over the tokens t with tokens[t] = v: one bincount over (v, feature) pairs
        sums = np.bincount(ws.embed_index.reshape(-1), weights=dx.reshape(-1), minlength=gs.dE.size)
        np.copyto(gs.dE, sums.reshape(gs.dE.shape))

    def _ffn_backward(self, ws, lay: _Layer, i: int, dy) -> None:
        """``dy`` (d, T): dL/d(block output) in, dL/d(x1) out (in place)."""
        u, cdf, hid, dhid = ws.u[i], ws.cdf[i], ws.hid, ws.dhid
        np.multiply(u, cdf, out=hid)                             # gelu(u) again (hid was overwritten)
        np.matmul(hid, dy.T, out=lay.dW_2)
        np.matmul(dy, ws.ones_T, out=lay.dc2)
        np.matmul(lay.W_2, dy, out=dhid)                         # dL/dgelu(u)
        # gelu'(u) = Phi(u) + u phi(u),  phi(u) = exp(-u^2 / 2) / sqrt(2 pi)
        np.multiply(u, u, out=hid)
        hid *= -0.5
        np.exp(hid, out=hid)
        hid *= u
        hid *= 1.0 / math.sqrt(2.0 * math.pi)
        hid += cdf
        dhid *= hid                                              # du
        np.matmul(ws.m[i], dhid.T, out=lay.dW_1)
        np.matmul(dhid, ws.ones_T, out=lay.dc1)
        dm = ws.td[2]
        np.matmul(lay.W_1, dhid, out=dm)
        dx_ln = ws.td[3]
        _ln_backward(ws, dm, ws.xhat2[i], ws.r2[i], lay.g2, dx_ln, lay.dg2, lay.db2, ws.td[0])
        dy += dx_ln

    def _attention_backward(self, ws, lay: _Layer, i: int, dx) -> None:
        """``dx`` (d, T): dL/d(x1) in, dL/d(block input) out (in place)."""
        model = self.model
        d, h = model.d_model, model.n_heads
        dh = d // h
        merged = ws.merged[i]
        np.matmul(merged, dx.T, out=lay.dW_O)                    # dW_O = merged^T dx1
        dmerged = ws.dmerged
        np.matmul(lay.W_O, dx, out=dmerged)                      # dO^T (h, d_head, B, n)
        q, k, v = ws.heads[i]
        dq, dk, dv = ws.dheads
        dO = ws.Ob[-1]                                           # (h, B, d_head, n_q) view of dmerged
        Pb, dPb, dPr = ws.Pb[i], ws.Pb[-1], ws.Pr[-1]            # (h, B, n_k, n_q), same, (h, n_k, T + pad)
        np.matmul(dO, Pb.transpose(0, 1, 3, 2), out=dv)          # dV^T = dO^T P
        np.matmul(v.transpose(0, 1, 3, 2), dO, out=dPb)          # dP^T = v dO^T
        # D = rowsum(dP * P) = rowsum(dO * O), summed over d_head
        prod = ws.td[3]
        np.multiply(dmerged, merged, out=prod)
        D = ws.D                                                 # (h, T + pad): its padding keeps the forward's
        np.add.reduce(prod.reshape(h, dh, -1), axis=1, out=D[:, :prod.shape[1]])
        np.subtract(dPr, D[:, None, :], out=dPr)
        np.multiply(dPr, ws.Pr[i], out=dPr)                      # dS^T = P^T * (dP^T - D)
        np.matmul(k, dPb, out=dq)                                # dq'^T = k^T dS^T
        np.matmul(q, dPb.transpose(0, 1, 3, 2), out=dk)          # dK^T = q'^T dS  (q' holds the scale)
        ws.dqkv_p[:d] *= 1.0 / math.sqrt(dh)                     # dQ = dq' / sqrt(d_head)
        _weight_grad(ws.a[i], ws.dqkv, lay.dW_qkv, ws.w_qkv_t)      # (d, 3d) = a^T dqkv
        da = ws.td[0]
        np.matmul(lay.W_qkv, ws.dqkv, out=da)
        dx_ln = ws.td[3]
        _ln_backward(ws, da, ws.xhat1[i], ws.r1[i], lay.g1, dx_ln, lay.dg1, lay.db1, ws.td[2])
        dx += dx_ln

    # -- AdamW -----------------------------------------------------------------------------------------

    def _update(self) -> None:
        """:meth:`transformer_course.training.AdamW.step` on the flat buffers, the same operations
        in the same order (so the same rounding), in place."""
        self.t += 1
        b1, b2, lr = self.beta1, self.beta2, self.lr
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
        p, g, m, v, tmp, tmp2 = self._flat, self._flat_grad, self._m, self._v, self._tmp, self._tmp2
        if self.weight_decay:
            p *= 1 - lr * self.weight_decay
        m *= b1
        np.multiply(g, 1 - b1, out=tmp)
        m += tmp
        v *= b2
        np.multiply(g, 1 - b2, out=tmp)
        tmp *= g
        v += tmp
        np.sqrt(v, out=tmp)
        tmp /= c2 ** 0.5
        tmp += self.eps
        np.multiply(m, lr / c1, out=tmp2)
        tmp2 /= tmp
        p -= tmp2


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _weight_grad(x, dy, out, scratch):
    """``out = x dy^T`` for feature-major ``x`` ``(d_in, T)``, ``dy`` ``(d_out, T)`` (a weight's gradient).

    Both operands are contiguous along T, the summed axis. OpenBLAS (through NumPy) measured
    ~25% faster computing the ``(d_out, d_in)`` transpose into ``scratch`` and copying it
    over than writing the wide ``(d_in, d_out)`` result directly (d_out = 3d, V here).
    """
    np.matmul(dy, x.T, out=scratch)
    np.copyto(out, scratch.T)


def _heads(qkv, h: int, dh: int, B: int, n: int):
    """q, k, v of a ``(3d, T)`` feature-major projection as ``(h, B, d_head, n)`` strided views."""
    five = _split(qkv, (3, h, dh, B, n))
    return tuple(five[j].transpose(0, 2, 1, 3) for j in range(3))


def _split(a, shape):
    """``a`` reshaped to ``shape`` as a view (raises rather than copy: products write through these)."""
    return np.reshape(a, shape, copy=False)


# Elements added to each row of the arrays the per-head products read and write. Without them, with
# T = 1024 float32 tokens, a head's rows lie 4 KiB apart and fall into the same cache sets; measured
# on the benchmark machine (one thread, batched 32 x 16 x 32 products of notebook 10's step): the
# scores 39 -> 29 us, P V 32 -> 27 us per layer.
_ROW_PAD = 16


def _padded_width(T: int, dtype) -> int:
    """``T`` plus a pad, so that rows of that many elements do not lie a multiple of 4 KiB apart."""
    pad = _ROW_PAD
    while ((T + pad) * np.dtype(dtype).itemsize) % 4096 == 0:
        pad += _ROW_PAD
    return T + pad


def _ln_forward(ws, x, gamma, beta, xhat, r, out):
    """Layer norm of ``x^T`` ``(d, T)`` over the features: ``out = gamma xhat + beta``.
    Keeps ``xhat`` ``(d, T)`` and ``r = 1 / sqrt(var + eps)`` ``(T,)`` for the backward."""
    mu = ws.tT[0]
    np.matmul(ws.mean_d, x, out=mu)                              # mean over the features
    np.subtract(x, mu, out=xhat)                                 # centred
    np.multiply(xhat, xhat, out=out)
    np.matmul(ws.mean_d, out, out=r)                             # var
    r += LN_EPS
    np.sqrt(r, out=r)
    np.divide(1.0, r, out=r)
    xhat *= r
    np.multiply(xhat, gamma, out=out)
    out += beta
    return out


def _ln_backward(ws, dy, xhat, r, gamma, dx, dgamma, dbeta, t):
    """Layer norm's backward on ``(d, T)``: ``dx = r (g - mean(g) - xhat mean(g xhat))``, ``g = dy gamma``;
    ``dgamma = sum_t dy xhat``, ``dbeta = sum_t dy``; ``t`` ``(d, T)`` scratch."""
    np.multiply(dy, xhat, out=t)
    np.matmul(t, ws.ones_T, out=dgamma)
    np.matmul(dy, ws.ones_T, out=dbeta)
    g = dx
    np.multiply(dy, gamma, out=g)
    mg, mgx = ws.tT[1], ws.tT[2]
    np.matmul(ws.mean_d, g, out=mg)
    np.multiply(g, xhat, out=t)
    np.matmul(ws.mean_d, t, out=mgx)
    np.multiply(xhat, mgx, out=t)
    g -= mg
    g -= t
    g *= r
    return dx
