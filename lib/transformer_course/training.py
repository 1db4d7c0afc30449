"""Training a tiny decoder in NumPy: the model, its backward pass, AdamW, the data and the head scores
(theory.md §11; notebook 10).

The model (``TinyDecoder``) is a GPT-style decoder small enough to train in seconds on a laptop:

    x_0 = E[tokens] + PE                                   (sinusoidal positions, fixed)
    x_l = x_{l-1} + MHA(LN_1(x_{l-1}))  [+ FFN(LN_2(...))]  (pre-LN blocks, causal self-attention)
    logits = LN_f(x_L) U,   loss = mean cross-entropy of the next token

Attention-only by default (``d_ff=None``), with no attention biases, like the two-layer models in
which induction heads were first described (Olsson et al. 2022). Every gradient is computed by
the six backward passes of :mod:`transformer_course.backward` (notebook 10's exercises);
:func:`tiny_block_backward` composes them for one block. Any other set of the same six functions
(a student's) can be passed as ``backward=`` to :meth:`TinyDecoder.loss_and_grads` and :func:`train`;
:func:`yours_or_reference` collects them, taking the reference for a stub that is not written yet.
Parameters live in a flat ``dict`` name -> array, gradients in a dict with the same keys.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np

from ._checks import check_rng, describe, positive_int
from .activations import gelu
from .attention import scaled_dot_product_attention
from .backward import (
    attention_backward,
    cross_entropy_backward,
    embedding_backward,
    feed_forward_backward,
    layer_norm_backward,
    softmax_backward,
)
from .loss import cross_entropy
from .masks import causal_mask
from .multihead import merge_heads, split_heads
from .normalization import layer_norm
from .positional import positional_encoding

LN_EPS = 1e-5


# -- one decoder block ---------------------------------------------------------------------------------

def tiny_block(x, p: dict, n_heads: int, mask):
    """One pre-LN decoder block of :class:`TinyDecoder` on ``x`` ``(batch, n, d)`` (no cross-attention,
    no attention biases; notebook 08's ``decoder_block`` is the encoder-decoder block of
    :mod:`transformer_course.decoder`); ``p`` holds this block's parameters
    (``ln1.gamma``, ``ln1.beta``, ``W_Q``, ``W_K``, ``W_V``, ``W_O`` and, with a feed-forward,
    ``ln2.gamma``, ``ln2.beta``, ``W_1``, ``b_1``, ``W_2``, ``b_2``).

    Returns ``(y, cache)``: ``y`` ``(batch, n, d)`` and what :func:`tiny_block_backward` needs,
    including the attention weights ``cache["weights"]`` ``(batch, heads, n, n)``.
    """
    a = layer_norm(x, p["ln1.gamma"], p["ln1.beta"], LN_EPS)          # (B, n, d)
    # multihead's split_heads / merge_heads, not its _project_attend_merge: the backward needs q, k, v and
    # the merged heads, which that one does not return.
    q = split_heads(a @ p["W_Q"], n_heads)                            # (B, h, n, d_head)
    k = split_heads(a @ p["W_K"], n_heads)
    v = split_heads(a @ p["W_V"], n_heads)
    heads, weights = scaled_dot_product_attention(q, k, v, mask)      # (B, h, n, d_head), (B, h, n, n)
    merged = merge_heads(heads)                                       # (B, n, d)
    x1 = x + merged @ p["W_O"]
    cache = dict(x=x, a=a, q=q, k=k, v=v, weights=weights, merged=merged, x1=x1, mask=mask)
    if "W_1" not in p:
        return x1, cache
    m = layer_norm(x1, p["ln2.gamma"], p["ln2.beta"], LN_EPS)
    cache["m"] = m
    # The feed-forward of PositionwiseFeedForward(activation="gelu"), written out: (B, n, d) -> (B, n, d)
    return x1 + gelu(m @ p["W_1"] + p["b_1"]) @ p["W_2"] + p["b_2"], cache


def tiny_block_backward(grad_y, p: dict, cache: dict, backward=None):
    """Gradient through :func:`tiny_block`: ``(dx, grads)`` with ``grads`` keyed like ``p``.

    Composed from the backward of each piece, last piece first: the residual adds copy the
    gradient to both branches; each branch goes back through its sub-layer and its layer norm.
    ``backward``: the backward functions to compose (see :func:`backward_pieces`); None = the package's.
    """
    b = backward_pieces(backward)
    grads = {}
    dx1 = grad_y
    if "W_1" in p:                                                    # y = x1 + FFN(LN_2(x1))
        dm, grads["W_1"], grads["b_1"], grads["W_2"], grads["b_2"] = b.feed_forward_backward(
            grad_y, cache["m"], p["W_1"], p["b_1"], p["W_2"], p["b_2"])
        dx1_ln, grads["ln2.gamma"], grads["ln2.beta"] = b.layer_norm_backward(
            dm, cache["x1"], p["ln2.gamma"], LN_EPS)
        dx1 = grad_y + dx1_ln
    d = dx1.shape[-1]
    rows = dx1.reshape(-1, d)                                         # (B·n, d): x1 = x + merged W_O
    grads["W_O"] = cache["merged"].reshape(-1, d).T @ rows
    d_heads = split_heads(dx1 @ p["W_O"].T, cache["q"].shape[-3])     # (B, h, n, d_head)
    dq, dk, dv = b.attention_backward(d_heads, cache["q"], cache["k"], cache["v"], cache["mask"])
    a_rows = cache["a"].reshape(-1, d)                                # (B·n, d)
    da = 0.0
    for name, dh in (("W_Q", dq), ("W_K", dk), ("W_V", dv)):
        d_proj = merge_heads(dh)                                      # (B, n, d)
        grads[name] = a_rows.T @ d_proj.reshape(-1, d)
        da = da + d_proj @ p[name].T
    dx_ln, grads["ln1.gamma"], grads["ln1.beta"] = b.layer_norm_backward(da, cache["x"], p["ln1.gamma"], LN_EPS)
    return dx1 + dx_ln, grads


# -- which backward functions ----------------------------------------------------------------------------

# The six backward passes of notebook 10 (softmax_backward is reached through attention_backward).
BACKWARD_PIECES = ("softmax_backward", "attention_backward", "layer_norm_backward", "feed_forward_backward",
                   "cross_entropy_backward", "embedding_backward")


_REFERENCE_BACKWARD = SimpleNamespace(
    softmax_backward=softmax_backward, attention_backward=attention_backward,
    layer_norm_backward=layer_norm_backward, feed_forward_backward=feed_forward_backward,
    cross_entropy_backward=cross_entropy_backward, embedding_backward=embedding_backward)


def backward_pieces(backward=None) -> SimpleNamespace:
    """The backward functions a gradient is composed of, as a namespace with the six names of
    :data:`BACKWARD_PIECES`.

    ``backward``: None (the package's :mod:`transformer_course.backward`), a module or object with
    those attributes, or a mapping name -> function (e.g. a notebook's ``globals()``).
    """
    if backward is None:
        backward = _REFERENCE_BACKWARD
    get = backward.get if hasattr(backward, "get") and hasattr(backward, "keys") else \
        (lambda name: getattr(backward, name, None))
    pieces = {name: get(name) for name in BACKWARD_PIECES}
    missing = [name for name, fn in pieces.items() if not callable(fn)]
    if missing:
        raise TypeError(f"backward must provide the functions {', '.join(BACKWARD_PIECES)}; "
                        f"{describe(backward)} has no callable {', '.join(missing)}")
    return SimpleNamespace(**pieces)


# -- which functions: the student's or the reference ---------------------------------------------------

def is_stub(fn) -> bool:
    """True for a function that is not written yet: its code raises ``NotImplementedError``
    (nbgrader's ``raise NotImplementedError()`` stub). A wrapped function (the exercise rule's
    monitor, ``functools.wraps``) is judged by the function it wraps."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return code is not None and "NotImplementedError" in code.co_names


def yours_or_reference(namespace, names, reference):
    """Collect the functions ``names`` from ``namespace`` (a mapping such as a notebook's ``globals()``),
    taking the one of the module ``reference`` for every name that is missing or still a stub.

    Returns ``(pieces, yours, fallen_back)``: a namespace name -> function, and the names taken from
    ``namespace`` and from ``reference``.
    """
    chosen, yours, fallen_back = {}, [], []
    for name in names:
        fn = namespace.get(name)
        if callable(fn) and not is_stub(fn):
            chosen[name] = fn
            yours.append(name)
        else:
            chosen[name] = getattr(reference, name)
            fallen_back.append(name)
    return SimpleNamespace(**chosen), yours, fallen_back


# -- the model -----------------------------------------------------------------------------------------

class TinyDecoder:
    """A small causal decoder, trained with :func:`train`.

    Args:
        vocab_size, n_positions, d_model, n_layers, n_heads: sizes (``d_model % n_heads == 0``).
        rng: ``numpy.random.Generator`` for the initial weights.
        d_ff: hidden width of a GELU feed-forward in every block, or None (attention only).
        dtype: float64 (exact gradients checks, reproducible) or float32 (speed).

    Init: embeddings N(0, 0.02); W_Q, W_K, W_V, W_1 and the unembedding U with std 1/sqrt(d);
    W_O and W_2 with std 1/sqrt(2 L fan_in), so the residual stream's variance grows slowly with depth.
    """

    def __init__(self, vocab_size=64, n_positions=32, d_model=32, n_layers=2, n_heads=2, *, rng,
                 d_ff=None, dtype=np.float64):
        self.vocab_size = positive_int(vocab_size, "vocab_size")
        self.n_positions = positive_int(n_positions, "n_positions")
        self.d_model = positive_int(d_model, "d_model")
        self.n_layers = positive_int(n_layers, "n_layers")
        self.n_heads = positive_int(n_heads, "n_heads")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_ff = None if d_ff is None else positive_int(d_ff, "d_ff")
        rng = check_rng(rng)
        d, L = self.d_model, self.n_layers

        def normal(std, *shape):
            return rng.normal(0.0, std, shape).astype(dtype)

        p = {"E": normal(0.02, vocab_size, d)}
        for layer in range(L):
            pre = f"{layer}."
            p[pre + "ln1.gamma"], p[pre + "ln1.beta"] = np.ones(d, dtype), np.zeros(d, dtype)
            for name in ("W_Q", "W_K", "W_V"):
                p[pre + name] = normal(1 / np.sqrt(d), d, d)
            p[pre + "W_O"] = normal(1 / np.sqrt(2 * L * d), d, d)
            if self.d_ff:
                p[pre + "ln2.gamma"], p[pre + "ln2.beta"] = np.ones(d, dtype), np.zeros(d, dtype)
                p[pre + "W_1"], p[pre + "b_1"] = normal(1 / np.sqrt(d), d, self.d_ff), np.zeros(self.d_ff, dtype)
                p[pre + "W_2"] = normal(1 / np.sqrt(2 * L * self.d_ff), self.d_ff, d)
                p[pre + "b_2"] = np.zeros(d, dtype)
        p["lnf.gamma"], p["lnf.beta"] = np.ones(d, dtype), np.zeros(d, dtype)
        p["U"] = normal(1 / np.sqrt(d), d, vocab_size)
        self.params = p
        self.positions = positional_encoding(n_positions, d).astype(dtype)   # (n_positions, d), fixed

    def block_params(self, layer: int) -> dict:
        """The parameters of block ``layer`` without their ``"layer."`` prefix (the same arrays)."""
        pre = f"{layer}."
        return {k[len(pre):]: v for k, v in self.params.items() if k.startswith(pre)}

    def forward(self, tokens):
        """``tokens`` ``(batch, n)`` integers -> ``(logits (batch, n, V), cache)``;
        ``cache["weights"][l]`` holds layer l's attention weights ``(batch, heads, n, n)``."""
        tokens = np.asarray(tokens)
        if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"tokens must be a (batch, n) integer array, got shape {tokens.shape}, dtype {tokens.dtype}")
        n = tokens.shape[1]
        if n > self.n_positions:
            raise ValueError(f"sequences of {n} tokens exceed n_positions={self.n_positions}")
        mask = causal_mask(n)                                              # (n, n)
        x = self.params["E"][tokens] + self.positions[:n]                  # (B, n, d)
        blocks = []
        for layer in range(self.n_layers):
            x, c = tiny_block(x, self.block_params(layer), self.n_heads, mask)
            blocks.append(c)
        xf = layer_norm(x, self.params["lnf.gamma"], self.params["lnf.beta"], LN_EPS)
        logits = xf @ self.params["U"]                                     # (B, n, V)
        cache = dict(tokens=tokens, blocks=blocks, x_last=x, xf=xf,
                     weights=[c["weights"] for c in blocks])
        return logits, cache

    def loss(self, tokens, targets) -> float:
        """Mean next-token cross-entropy (nats) of ``targets`` ``(batch, n)`` given ``tokens``."""
        return cross_entropy(self.forward(tokens)[0], targets)

    def loss_and_grads(self, tokens, targets, *, backward=None):
        """``(loss, grads, cache)``: the loss, dL/d(every parameter) keyed like ``params``, the forward cache.

        ``backward``: the backward functions the gradient is composed of (see :func:`backward_pieces`);
        None = the package's :mod:`transformer_course.backward`."""
        b = backward_pieces(backward)
        logits, cache = self.forward(tokens)
        loss = cross_entropy(logits, targets)
        d = self.d_model
        dlogits = b.cross_entropy_backward(logits, targets)                # (B, n, V)
        grads = {"U": cache["xf"].reshape(-1, d).T @ dlogits.reshape(-1, self.vocab_size)}
        dxf = dlogits @ self.params["U"].T                                 # (B, n, d)
        dx, grads["lnf.gamma"], grads["lnf.beta"] = b.layer_norm_backward(
            dxf, cache["x_last"], self.params["lnf.gamma"], LN_EPS)
        for layer in reversed(range(self.n_layers)):
            dx, g = tiny_block_backward(dx, self.block_params(layer), cache["blocks"][layer], b)
            grads.update({f"{layer}.{k}": v for k, v in g.items()})
        grads["E"] = b.embedding_backward(dx, cache["tokens"], self.vocab_size)
        return loss, grads, cache


# -- the optimiser -------------------------------------------------------------------------------------

class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019), PyTorch's ``torch.optim.AdamW`` update.

    For every parameter, at step t with gradient g:

        p <- p (1 - lr wd)                              (decay, not part of the gradient)
        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2
        p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    Args:
        params: dict name -> array, updated in place.
        lr, betas, eps, weight_decay: as in PyTorch (its defaults except betas (0.9, 0.98), wd 0).
    """

    def __init__(self, params: dict, lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0):
        if not lr > 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or not eps > 0 or weight_decay < 0:
            raise ValueError(f"need lr > 0, 0 <= betas < 1, eps > 0, weight_decay >= 0; got "
                             f"lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        self.params, self.lr, self.betas, self.eps, self.weight_decay = params, lr, betas, eps, weight_decay
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict) -> None:
        """One update of every parameter from ``grads`` (same keys and shapes as ``params``)."""
        if grads.keys() != self.params.keys():
            raise ValueError(f"grads must have the keys of params; missing {sorted(self.params.keys() - grads.keys())}, "
                             f"unknown {sorted(grads.keys() - self.params.keys())}")
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t                        # bias corrections
        for k, p in self.params.items():
            g = grads[k]
            decayed = p * (1 - self.lr * self.weight_decay)                  # decoupled weight decay
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            # p[...] = ...: the model holds these very arrays, so the update writes into them
            # (Python floats keep p's dtype)
            p[...] = decayed - (self.lr / c1) * self.m[k] / (np.sqrt(self.v[k]) / c2 ** 0.5 + self.eps)


# -- data ----------------------------------------------------------------------------------------------

def periodic_sequences(rng, batch: int, length: int, vocab_size: int, periods) -> np.ndarray:
    """Sequences that repeat a random block: ``x[b, t] = r_b[t mod periods[b]]``.

    Args:
        rng: ``numpy.random.Generator``.
        batch, length, vocab_size: sizes; tokens are uniform in ``0..vocab_size-1``.
        periods: one int for every sequence, or ``(batch,)`` ints, each in ``1..length``.

    Returns:
        ``(batch, length)`` int64. Once a block has been seen, every later token is predictable
        by looking back one period -- the job of an induction head.
    """
    rng = check_rng(rng)
    batch, length = positive_int(batch, "batch"), positive_int(length, "length")
    periods = np.broadcast_to(np.asarray(periods), (batch,))
    if not np.issubdtype(periods.dtype, np.integer) or periods.min() < 1 or periods.max() > length:
        raise ValueError(f"periods must be integers in 1..{length}, got {periods.tolist()}")
    blocks = rng.integers(0, vocab_size, size=(batch, length))          # r_b, only the first p_b used
    t = np.arange(length)[None, :] % periods[:, None]                  # (batch, length)
    return np.take_along_axis(blocks, t, axis=1)


def training_batch(rng, batch=32, length=33, vocab_size=64, min_period=2, max_period=16):
    """A batch for next-token training: each sequence periodic with its own random period in
    ``min_period..max_period`` (one fixed period lets the model learn a positional shortcut instead
    of an induction circuit; notebook 10 §6). Returns ``(inputs, targets)``, each ``(batch, length - 1)``."""
    periods = check_rng(rng).integers(min_period, max_period + 1, size=batch)
    seq = periodic_sequences(rng, batch, length, vocab_size, periods)
    return seq[:, :-1], seq[:, 1:]


# -- measuring heads -----------------------------------------------------------------------------------

def previous_token_score(weights) -> np.ndarray:
    """Mean attention from position i to i-1 over positions 1.. and the batch:
    ``weights`` ``(batch, heads, n, n)`` -> ``(heads,)``; 1 for a perfect previous-token head."""
    w = np.asarray(weights)
    n = w.shape[-1]
    return w[..., np.arange(1, n), np.arange(n - 1)].mean(axis=(0, -1))


def induction_score(weights, period: int) -> np.ndarray:
    """Mean attention from position i to i - period + 1 (the token after the previous occurrence of
    the current one) over the positions ``i >= period``: ``(batch, heads, n, n)`` -> ``(heads,)``."""
    w = np.asarray(weights)
    n = w.shape[-1]
    i = np.arange(period, n)
    return w[..., i, i - period + 1].mean(axis=(0, -1))


def repeat_loss(model: TinyDecoder, seq, period: int):
    """``(loss, weights)`` on periodic sequences ``seq`` ``(batch, n + 1)``: the mean cross-entropy of
    the predictable tokens only (targets at positions ``>= period``) and every layer's attention weights."""
    logits, cache = model.forward(seq[:, :-1])
    loss = cross_entropy(logits[:, period - 1:], seq[:, period:])
    return loss, cache["weights"]


# -- the training loop ---------------------------------------------------------------------------------

def train(model: TinyDecoder, optimiser: AdamW, rng, steps: int, *, batch=32, eval_sets=None,
          eval_every=25, print_every=0, max_period=16, backward=None):
    """Train ``model`` on fresh :func:`training_batch` data for ``steps`` steps.

    Args:
        eval_sets: dict name -> ``(seq (batch, n + 1), period)`` of periodic sequences; every
            ``eval_every`` steps (and before the first) :func:`repeat_loss` and both head scores
            of every layer are recorded for each.
        print_every: print a progress line (step, mean training loss to 1 decimal) this often; 0 = never.
            No timings are printed, so the output is the same on every machine.
        backward: the backward functions every gradient is composed of (see :func:`backward_pieces`;
            notebook 10 passes the student's); None = the package's.

    Returns:
        ``history`` dict: ``loss`` (steps,) training losses; ``eval_step`` (evals,); for each eval set
        name ``loss/<name>`` (evals,), ``prev/<name>`` and ``induction/<name>`` (evals, layers, heads).
    """
    rng = check_rng(rng)
    steps = positive_int(steps, "steps")
    backward = backward_pieces(backward)
    eval_sets = eval_sets or {}
    hist = {"loss": np.empty(steps), "eval_step": []}
    for name in eval_sets:
        hist[f"loss/{name}"], hist[f"prev/{name}"], hist[f"induction/{name}"] = [], [], []

    def evaluate(step):
        hist["eval_step"].append(step)
        for name, (seq, period) in eval_sets.items():
            loss, weights = repeat_loss(model, seq, period)
            hist[f"loss/{name}"].append(loss)
            hist[f"prev/{name}"].append([previous_token_score(w) for w in weights])
            hist[f"induction/{name}"].append([induction_score(w, period) for w in weights])

    inputs_len = model.n_positions + 1
    for step in range(steps):
        if eval_sets and step % eval_every == 0:
            evaluate(step)
        inputs, targets = training_batch(rng, batch, inputs_len, model.vocab_size, max_period=max_period)
        loss, grads, _ = model.loss_and_grads(inputs, targets, backward=backward)
        optimiser.step(grads)
        hist["loss"][step] = loss
        if print_every and (step + 1) % print_every == 0:
            recent = hist["loss"][max(0, step + 1 - print_every): step + 1].mean()
            print(f"step {step + 1:5d}/{steps}  mean training loss of the last {print_every} steps {recent:.1f}")
    if eval_sets:
        evaluate(steps)
    return {k: np.asarray(v) for k, v in hist.items()}
