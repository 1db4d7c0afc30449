"""Fast attention in NumPy: a tiled online softmax (FlashAttention's loop) and fused projections.

:func:`transformer_course.scaled_dot_product_attention` is the
readable reference: it builds the whole ``(n_q, n_k)`` score matrix, soft-maxes
it and multiplies by V. That costs ``O(n^2)`` memory (1 GiB of float32 scores
at n = 16384) and, because the score matrix falls out of cache, time too.

:func:`flash_attention` computes the same output without ever holding more than
one ``block_q x block_k`` tile of scores per thread (Dao et al. 2022; the
"online softmax" of Milakov & Gimelshein 2018). For each block of queries it
walks over the keys block by block and keeps, per query,

* ``m`` -- the largest score seen so far,
* ``l`` -- the sum of ``exp(score - m)`` seen so far,
* ``acc`` -- the sum of ``exp(score - m) * v`` seen so far.

When a new key block raises the maximum from ``m`` to ``m'``, everything
accumulated so far is rescaled by ``exp(m - m')``; at the end ``acc / l`` is the
softmax-weighted sum of the values. Every step is one large NumPy call on a
whole tile, in place in a buffer the thread reuses, so Python's overhead is paid
per tile, not per element. What makes it fast in NumPy:

* **exp2, not exp.** ``log2(e)/sqrt(d_k)`` is folded into each block of queries,
  so the scores come out of the product in log2 units and ``np.exp2`` (about
  1.6x faster than ``np.exp``) needs no extra multiplication.
* **No running maximum unless it is needed.** The maximum is only there to
  keep ``exp`` from overflowing (and a whole row from underflowing). So each
  block of queries is first computed without it -- the tile is just
  ``exp2(scores)``: no max, no subtraction, no rescaling -- and the result is
  checked afterwards (every row sum finite and not tiny, every output finite),
  which costs a few reductions of the small per-query arrays instead of a pass
  over Q and K beforehand. The rare block that fails (huge activations, a row
  with every key masked, NaN or inf in the inputs) is redone with the classic
  online softmax above; additive masks and ``running_max="always"`` use it
  from the start.
* **Sums by BLAS.** Row sums of a tile are a matrix-vector product with a vector
  of ones (about 3x faster than ``np.sum``); tiles are stored keys-by-queries so K and
  Q enter the products as they are, without transposed copies.
* **Threads that NumPy can actually use.** The ``(heads, query block)`` work
  items are shared among Python threads -- ``matmul`` and ``exp2`` release the
  GIL -- while OpenBLAS is held at one thread for the whole call. Every core then
  runs whole tiles, element-wise steps included (NumPy's ufuncs are
  single-threaded), and OpenBLAS's own threads neither hand off every small
  product nor spin beside ours. Tiny inputs stay on one thread: there, waiting
  for the GIL would cost more than the second core gains.
* **No fresh memory per call.** Touching new pages costs more than the
  arithmetic on small inputs, so each thread keeps its scratch buffers
  (:func:`release_buffers` frees them).

:class:`FastMultiHeadAttention` packs ``W_Q | W_K | W_V`` of a
:class:`transformer_course.MultiHeadAttention` into one
``(d_model, 3 d_model)`` matrix, projects with a single product, feeds strided
per-head views (no copies) to the fast core and lets the core write the heads
straight into the concatenated layout ``W_O`` needs.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from transformer_course._checks import (check_attention_inputs, check_finite, check_mask, check_qkv, describe,
                                       float_dtype, positive_int, scores_may_overflow)
from transformer_course.attention import scaled_dot_product_attention
from transformer_course.masks import combine_with_key_padding
from transformer_course.multihead import MultiHeadAttention

from ._threads import (_MIN_MACS_PER_THREAD, _LOCAL, _GENERATION, _blas_pinned, _buffer,  # noqa: F401
                       _effective_threads, _linear, _parallel_drain, release_buffers)

__all__ = ["FastMultiHeadAttention", "flash_attention", "release_buffers"]

_LOG2E = 1.4426950408889634  # log2(e): exp(x) == exp2(x * log2(e))

#: Default tile sizes (queries x keys). 256 x 1024 float32 scores are 1 MiB,
#: which stays in a core's L2 cache together with the K and V blocks.
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 1024


# ---------------------------------------------------------------------------
# Argument checks: the reference's (transformer_course._checks), with a cheaper
# first pass for finiteness.
# ---------------------------------------------------------------------------
def _check_finite_fast(arr, name, allow_neg_inf=False):
    """:func:`check_finite` at the cost of one reduction: NaN and +-inf make ``x . x``
    (or the sum) non-finite. A finite but huge array may overflow it; then the
    exact check decides."""
    if arr.size == 0:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        if allow_neg_inf:
            hi = arr.max()                                   # NaN propagates through max
            if np.isfinite(hi) or hi == -np.inf:
                return
        elif arr.flags.c_contiguous:
            flat = arr.reshape(-1)                           # a view
            if np.isfinite(np.dot(flat, flat)):              # BLAS: the fastest full pass
                return
        elif np.isfinite(arr.sum()):
            return
    check_finite(arr, name, allow_neg_inf=allow_neg_inf)     # raises with the precise message


def _check_mask(mask, score_shape):
    """:func:`~transformer_course.attention.check_mask`, then finite (but -inf) values of a
    float mask, and as many axes as the scores (size-1 axes prepended)."""
    mask = check_mask(mask, score_shape)
    if mask.dtype != bool:
        _check_finite_fast(mask, "mask", allow_neg_inf=True)
    return mask.reshape((1,) * (len(score_shape) - mask.ndim) + mask.shape)


# ---------------------------------------------------------------------------
# The core
# ---------------------------------------------------------------------------
class _Tiles:
    """Everything a worker thread needs: the inputs as ``(outer..., inner, n, d)`` views.

    ``direct``: try each item without the running maximum first (see
    :meth:`_Worker._direct`). ``deferred``: names of inputs whose finiteness is not
    known yet (``"Q"``, ``"V"``). They are checked once, before the first item that
    needs the online softmax: the direct path's own check fails on any NaN or inf in
    Q or V (a non-finite q makes its whole row of sums 0, inf or NaN; p @ v carries a
    NaN or inf of V, even where p = 0), so an item that passed it saw finite ones."""

    def __init__(self, Q, K, V, out, mask, causal, block_q, block_k, direct, deferred=()):
        self.Q, self.K, self.V, self.out = Q, K, V, out      # (outer..., inner, n, d)
        self.mask, self.causal, self.dtype = mask, causal, Q.dtype
        self.bq, self.bk = block_q, block_k
        self.n_q, self.n_k, self.d_k, self.d_v = Q.shape[-2], K.shape[-2], Q.shape[-1], V.shape[-1]
        # Scores come out of the product already in log2 units: s * log2(e) / sqrt(d_k).
        self.c = _LOG2E / math.sqrt(self.d_k)
        self.direct, self._deferred = direct, list(deferred)
        self._lock, self._error = threading.Lock(), None

    def before_online(self):
        """Raise the precise error if a deferred input holds NaN or inf (checked once per call;
        a thread that comes while another checks waits for the verdict, and shares it)."""
        with self._lock:
            if self._error is not None:
                raise self._error
            try:
                while self._deferred:
                    name = self._deferred[0]
                    _check_finite_fast(getattr(self, name), name)
                    self._deferred.pop(0)
            except ValueError as error:
                self._error = error
                raise

    def mask_block(self, o, h0, h1, i0, i1, j0, j1):
        """The mask for heads h0:h1, queries i0:i1, keys j0:j1 (size-1 axes kept for broadcasting)."""
        m = self.mask
        lead = tuple(0 if m.shape[k] == 1 else o[k] for k in range(len(o)))
        hs = slice(0, 1) if m.shape[len(o)] == 1 else slice(h0, h1)
        qs = slice(None) if m.shape[-2] == 1 else slice(i0, i1)
        ks = slice(None) if m.shape[-1] == 1 else slice(j0, j1)
        return m[lead + (hs, qs, ks)]                         # (G or 1, r or 1, c or 1)


# Below this many scores per thread, one thread is faster: every NumPy call is a
# chance for the threads to wait for each other's GIL (tens of microseconds each).
_MIN_SCORES_PER_THREAD = 1 << 19

# Smallest row sum the direct path accepts (see _Worker._direct): p below the
# smallest normal number (2^-126 in float32, 2^-1022 in float64) then weighs
# less than n_k 2^-66 (2^-422) of the row.
_DIRECT_MIN_SUM = {4: 2.0 ** -60, 8: 2.0 ** -600}




def _scratch(G, r, c, d_k, d_v, dtype):
    """This thread's buffers for tiles of G heads x r queries x c keys (cached per shape)."""
    key = (_GENERATION[0], G, r, c, d_k, d_v, dtype)
    cached = getattr(_LOCAL, "scratch", None)          # (key, buffers): the last shape only
    if cached is None or cached[0] != key:
        buffers = (
            _buffer("S", G * c * r, dtype),            # flat; viewed as (G, keys, queries) per tile
            _buffer("qs", G * r * d_k, dtype),         # c Q for the current query block
            _buffer("acc", G * r * d_v, dtype),        # running sum of p * v
            _buffer("pv", G * r * d_v, dtype),         # one tile's p @ v
            _buffer("l", G * r, dtype),                # running sum of p
            _buffer("lt", G * r, dtype),               # one tile's sum of p
            np.ones(c, dtype),                         # sums as a vector-matrix product
            np.finfo(dtype).tiny, _DIRECT_MIN_SUM[np.dtype(dtype).itemsize])
        cached = _LOCAL.scratch = (key, buffers)
    return cached[1]


class _Worker:
    """Per-thread buffers and the tile loop.

    Tiles are held transposed, keys along the rows: ``S^T = K_block @ (c Q_block)^T``
    has shape ``(G, keys, queries)``, ``c = log2(e)/sqrt(d_k)``. K is used as it is
    stored, the scaled query block is a small contiguous copy that BLAS reads
    through a transposed view; per-query maxima and sums run down the columns, and
    ``P V`` is ``(S^T)^T @ V_block``, again a view. No copy of K or V is made.
    Few, large NumPy calls per tile: each releases the GIL, so the threads overlap.
    """

    def __init__(self, t: _Tiles, G: int):
        r, c = min(t.bq, t.n_q), min(t.bk, t.n_k)
        self.t = t
        (self.S, self.qs, self.acc, self.pv, self.l, self.lt, self.ones, self.tiny,
         self.l_min) = _scratch(G, r, c, t.d_k, t.d_v, t.dtype)


    def run(self, item):
        """One work item: heads h0:h1 x queries i0:i1 against every key they may see."""
        t = self.t
        o, h0, h1, i0, i1 = item
        G, r = h1 - h0, i1 - i0
        K = t.K[o][h0:h1]                                              # (G, n_k, d_k) view
        V = t.V[o][h0:h1]                                              # (G, n_k, d_v) view
        qs = self.qs[:G * r * t.d_k].reshape(G, r, t.d_k)              # (G, r, d_k)
        np.multiply(t.Q[o][h0:h1, i0:i1], t.c, out=qs)                 # c Q: scores in log2 units
        qT = qs.transpose(0, 2, 1)                                     # (G, d_k, r) view
        acc = self.acc[:G * r * t.d_v].reshape(G, r, t.d_v)            # (G, r, d_v)
        l = self.l[:G * r].reshape(G, r)                               # (G, r)
        # Causal: query i sees keys j <= i, so keys from i1 on are never needed.
        k_end = min(t.n_k, i1) if t.causal else t.n_k
        if not (t.direct and self._direct(o, h0, h1, i0, i1, k_end, K, V, qT, acc, l)):
            t.before_online()                                          # NaN/inf in Q or V? raise
            self._online(o, h0, h1, i0, i1, k_end, K, V, qT, acc, l)
            # A row with no key at all has l = 0 and acc = 0: output 0, as the reference.
            np.maximum(l, self.tiny, out=l)
        np.reciprocal(l, out=l)                                        # one division per query,
        np.multiply(acc, l[:, :, None], out=t.out[o][h0:h1, i0:i1])    # not one per output

    def _scores(self, o, h0, h1, i0, i1, j0, j1, K, qT, blocked=-np.inf):
        """One transposed tile of scores, log2 units: ``(G, j1 - j0, r)``. Entries that the causal
        order or a boolean mask block are set to ``blocked``, or, if it is None, left as they are
        for the caller to block later (see :meth:`_block`); an additive mask is added."""
        t = self.t
        G, r = h1 - h0, i1 - i0
        S = self.S[:G * (j1 - j0) * r].reshape(G, j1 - j0, r)         # (G, c, r), contiguous
        np.matmul(K[:, j0:j1], qT, out=S)                              # K (c Q)^T
        if blocked is not None:
            self._block(S, o, h0, h1, i0, i1, j0, j1, blocked)
        if t.mask is not None and t.mask.dtype != bool:
            mb = np.swapaxes(t.mask_block(o, h0, h1, i0, i1, j0, j1), -1, -2)  # (G|1, c|1, r|1)
            S += (mb * _LOG2E).astype(t.dtype, copy=False)
        return S

    def _block(self, S, o, h0, h1, i0, i1, j0, j1, value):
        """Set the tile's entries that the causal order or a boolean mask block to ``value``."""
        t = self.t
        if t.causal and j1 - 1 > i0:                                   # tile crosses the diagonal
            after = np.arange(j0, j1)[:, None] > np.arange(i0, i1)[None, :]   # (c, r): key after query
            np.copyto(S, value, where=after)
        if t.mask is not None and t.mask.dtype == bool:
            mb = np.swapaxes(t.mask_block(o, h0, h1, i0, i1, j0, j1), -1, -2)  # (G|1, c|1, r|1)
            np.copyto(S, value, where=~mb)

    def _direct(self, o, h0, h1, i0, i1, k_end, K, V, qT, acc, l):
        """p = 2^s with no running maximum and no rescaling, then a check that it was safe.

        The maximum only keeps 2^s from overflowing (and whole rows from
        underflowing). Instead of bounding the scores beforehand, the result is
        checked: every sum ``l`` finite and at least ``2^-60`` (float32; ``2^-600``
        for float64) and every ``acc`` finite. Then no p overflowed, and the p that
        underflowed to 0 or lost digits (below ``2^-126``) add up to less than
        ``n_k 2^-126 / l``, far below rounding. Otherwise -- huge scores or values,
        a row with every key masked, NaN or inf in V -- False: redo it the safe way.
        """
        t = self.t
        G, r = h1 - h0, i1 - i0
        lt = self.lt[:G * r].reshape(G, r)
        pv = self.pv[:G * r * t.d_v].reshape(G, r, t.d_v)
        with np.errstate(over="ignore", invalid="ignore"):          # checked below instead
            for j0 in range(0, k_end, t.bk):
                j1 = min(j0 + t.bk, k_end)
                S = self._scores(o, h0, h1, i0, i1, j0, j1, K, qT, blocked=None)   # (G, c, r)
                np.exp2(S, out=S)                                      # p = 2^s, in place
                # p = 0 where blocked, set after exp2: NumPy's float32 exp2 takes a slow path for
                # -inf (and other underflowing) arguments, 5x slower on tiles half of -inf
                self._block(S, o, h0, h1, i0, i1, j0, j1, 0.0)
                P = S.transpose(0, 2, 1)                               # (G, r, c) view
                first = j0 == 0
                np.matmul(self.ones[:j1 - j0], S, out=l if first else lt)   # (G, r) sums over keys
                np.matmul(P, V[:, j0:j1], out=acc if first else pv)    # (G, r, d_v)
                if not first:
                    l += lt
                    acc += pv
            # l >= 0, so a finite total means every l is finite; NaN fails both tests.
            return bool(np.isfinite(l.sum() + acc.sum()) and l.min() >= self.l_min)

    def _online(self, o, h0, h1, i0, i1, k_end, K, V, qT, acc, l):
        """The online softmax: running max m, running sum l, rescaling when m grows."""
        t = self.t
        G, r = h1 - h0, i1 - i0
        lt = self.lt[:G * r].reshape(G, r)
        pv = self.pv[:G * r * t.d_v].reshape(G, r, t.d_v)
        m = shift_old = None
        for j0 in range(0, k_end, t.bk):
            j1 = min(j0 + t.bk, k_end)
            S = self._scores(o, h0, h1, i0, i1, j0, j1, K, qT)        # (G, c, r)
            tile_max = S.max(axis=1)                                   # (G, r)
            m = tile_max if m is None else np.maximum(m, tile_max)
            # A query with every key so far masked has max -inf: shift it by 0 instead.
            shift = np.where(np.isneginf(m), 0, m).astype(t.dtype, copy=False)
            S -= shift[:, None, :]
            np.exp2(S, out=S)                                          # p = 2^(s - m), in place
            P = S.transpose(0, 2, 1)                                   # (G, r, c) view
            if j0 == 0:
                np.matmul(self.ones[:j1 - j0], S, out=l)
                np.matmul(P, V[:, j0:j1], out=acc)
            else:
                alpha = np.exp2(shift_old - shift)                     # rescale the old sums
                l *= alpha
                acc *= alpha[:, :, None]
                np.matmul(self.ones[:j1 - j0], S, out=lt)
                l += lt
                np.matmul(P, V[:, j0:j1], out=pv)
                acc += pv
            shift_old = shift


def _plan(n_heads_inner, n_outer, n_q, n_k, bq, bk, n_threads):
    """Heads per work item (G): enough heads to fill a tile when n is small, but
    never so many that some threads get no work."""
    r, c = min(bq, n_q), min(bk, n_k)
    G = max(1, (bq * bk) // (r * c))
    G = min(G, n_heads_inner)
    q_blocks = -(-n_q // bq)
    groups_needed = -(-n_threads // (n_outer * q_blocks))   # per outer index
    G = max(1, min(G, -(-n_heads_inner // groups_needed)))
    return G


def _flash_core(Q, K, V, out, mask, causal, block_q, block_k, threads, running_max="auto",
                check_finite=False, known_finite=False):
    """Run the tiles. Q, K, V, out: validated ``(..., n, d)`` arrays of one float dtype
    (float32 or float64); ``out`` may be a strided view. mask: None or ``(..., n_q, n_k)``
    with as many axes as the scores (size-1 axes broadcast). ``threads``: an int; the
    caller holds BLAS at one thread when it is > 1 (see :func:`_blas_pinned`).
    ``check_finite``: refuse NaN/inf in Q, K, V. K is checked here (a NaN at a masked
    key, or a -inf that only ever meets queries of one sign, would vanish from the
    scores); Q and V too unless the direct path runs, whose own check covers them
    (see :class:`_Tiles`). ``known_finite``: the caller has seen that all three are finite."""
    lead = Q.shape[:-2]
    if len(lead) == 0:                                    # (n, d) -> (1, n, d)
        Q, K, V, out = Q[None], K[None], V[None], out[None]
        if mask is not None:
            mask = mask[None]
        lead = (1,)
    outer_shape, inner = lead[:-1], lead[-1]
    n_q = Q.shape[-2]
    # Additive masks may add large positive numbers: they always get the running max.
    direct = running_max == "auto" and (mask is None or mask.dtype == bool)
    check_finite = check_finite and not known_finite
    if check_finite:
        _check_finite_fast(K, "K")
        if not direct:
            _check_finite_fast(Q, "Q")
            _check_finite_fast(V, "V")
    if n_q == 0 or inner == 0 or math.prod(outer_shape) == 0 or V.shape[-1] == 0:
        return out
    G = _plan(inner, math.prod(outer_shape), n_q, K.shape[-2], block_q, block_k, threads)
    tiles = _Tiles(Q, K, V, out, mask, causal, block_q, block_k, direct,
                   ("Q", "V") if check_finite and direct else ())
    # One item = G heads x block_q queries, against all (needed) keys.
    items = [(o, h0, min(h0 + G, inner), i0, min(i0 + block_q, n_q))
             for o in np.ndindex(*outer_shape)
             for h0 in range(0, inner, G)
             for i0 in range(0, n_q, block_q)]
    if causal:
        # Long (late) query blocks first, so the threads finish together.
        items.sort(key=lambda it: (-it[4], it[0], it[1]))
    _parallel_drain(items, lambda: _Worker(tiles, G), _Worker.run, threads)
    return out


def _auto_threads(threads, n_scores: int) -> int:
    """One thread when the input is too small to pay for the threads' hand-offs
    (waking a sleeping thread alone costs about 0.1 ms on the benchmark machine)."""
    return 1 if n_scores < _MIN_SCORES_PER_THREAD * threads else threads


def flash_attention(Q, K, V, mask=None, *, causal=False, block_q=DEFAULT_BLOCK_Q,
                    block_k=DEFAULT_BLOCK_K, threads=None, running_max="auto"):
    """Scaled dot-product attention by tiles, without the ``(n_q, n_k)`` weights.

    Same result as ``scaled_dot_product_attention(Q, K, V, mask)[0]`` (within
    rounding), in ``O(block_q * block_k + n * d)`` extra memory per thread.

    Args:
        Q: queries ``(..., n_q, d_k)``.
        K: keys ``(..., n_k, d_k)``.
        V: values ``(..., n_k, d_v)``. Q, K and V share their leading dimensions.
        mask: optional; boolean (True = may attend) or additive float
            (``-inf`` = blocked), any shape that broadcasts to the scores
            ``(..., n_q, n_k)`` without enlarging them -- as for the reference.
        causal: if True, query i attends only to keys ``j <= i`` (PyTorch's
            ``is_causal``); tiles above the diagonal are skipped, not computed.
            Combines with ``mask`` (both must allow a key).
        block_q, block_k: tile size; a tile of scores is ``block_q x block_k``.
        threads: worker threads; default: as many as OpenBLAS would use (the
            number of cores unless limited, e.g. by ``OPENBLAS_NUM_THREADS``),
            but one for small inputs (fewer than ``2**19`` scores per thread).
            Unless ``threads=1`` is given, OpenBLAS is held at one thread per
            product while the call runs (process-wide: NumPy products in other
            threads run single-threaded meanwhile). With ``threads=1`` (one
            worker thread) OpenBLAS keeps its own thread count; for one core in
            all, start Python with ``OPENBLAS_NUM_THREADS=1``. If NumPy's BLAS is not an OpenBLAS whose
            thread count can be set, one thread is used and BLAS parallelises
            each product.
            Each thread keeps its scratch buffers between calls
            (:func:`release_buffers`).
        running_max: ``"auto"`` (default) or ``"always"``. The online softmax's
            running maximum only keeps ``exp`` from overflowing. With
            ``"auto"`` each block of queries is first computed without it (and
            without the rescaling), then checked: if a sum overflowed or a whole
            row underflowed (huge scores or values, a row with every key
            masked), that block is redone with it. ``"always"`` uses it
            everywhere (classic FlashAttention). Additive float masks always
            use it.

    Returns:
        ``(..., n_q, d_v)`` in the inputs' dtype. Computation is in float32 for
        float16/float32 inputs and float64 for float64 inputs. A query whose keys
        are all masked gets output 0, as in the reference.
    """
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be True or False, got {describe(causal)}")
    block_q = positive_int(block_q, "block_q")
    block_k = positive_int(block_k, "block_k")
    if threads is not None:
        threads = positive_int(threads, "threads")
    if running_max not in ("auto", "always"):
        raise ValueError(f'running_max must be "auto" or "always", got {describe(running_max)}')
    auto, threads = threads is None, _effective_threads(threads)
    with _blas_pinned(threads):
        Q, K, V = check_qkv(Q, K, V, finite=False)      # finiteness: checked by the core
        score_shape = Q.shape[:-1] + (K.shape[-2],)           # (..., n_q, n_k)
        if mask is not None:
            mask = _check_mask(mask, score_shape)
        out_dtype = np.result_type(Q, K, V)
        dtype = np.promote_types(out_dtype, np.float32)       # float16 -> float32
        Q, K, V = (a.astype(dtype, copy=False) for a in (Q, K, V))
        safe = _surely_safe(Q, K, V)                           # three dot products, usually enough
        if not safe and (scores_may_overflow(Q, K) or _sums_may_overflow(V)):   # rare: the reference decides
            return _by_the_reference(Q, K, V, mask, causal, out_dtype)
        out = np.empty(Q.shape[:-1] + (V.shape[-1],), dtype)  # (..., n_q, d_v)
        if auto:
            threads = _auto_threads(threads, math.prod(score_shape))
        _flash_core(Q, K, V, out, mask, bool(causal), block_q, block_k, threads, running_max,
                    check_finite=True, known_finite=safe)
    if not _all_finite(out):           # finite inputs (checked by the core): the unnormalised sums overflowed,
        return _by_the_reference(Q, K, V, mask, causal, out_dtype)   # e.g. V near float32's max
    return out.astype(out_dtype, copy=False)


def _all_finite(a) -> bool:
    """``np.isfinite(a).all()``, by one dot product when ``a`` is contiguous and not huge (NaN and
    +-inf make ``a . a`` non-finite; if it overflows, the exact test decides)."""
    if a.flags.c_contiguous:
        with np.errstate(over="ignore", invalid="ignore"):
            if math.isfinite(float(np.dot(a.reshape(-1), a.reshape(-1)))):
                return True
    return bool(np.isfinite(a).all())


def _surely_safe(Q, K, V) -> bool:
    """Whether Q, K, V are finite and neither the scores nor the sums over V can overflow, from one
    pass over each (their sums of squares by BLAS), in place of the six min/max reductions of
    :func:`scores_may_overflow` and :func:`_sums_may_overflow` and K's finiteness pass.

    Every partial sum of ``q . k`` is at most ``|q| |k| <= sqrt(sum Q^2 sum K^2)`` (Cauchy-Schwarz),
    and ``|sum_j p_j v_j| <= sum_j |v_j| <= sqrt(n_k sum V^2)`` for ``0 <= p_j <= 1``. A NaN or inf
    makes its sum of squares non-finite. False only says "not sure": then the exact checks decide
    (also for arrays that are not contiguous, and when a sum of squares itself overflows)."""
    if not (Q.flags.c_contiguous and K.flags.c_contiguous and V.flags.c_contiguous) or K.size == 0:
        return False
    with np.errstate(over="ignore", invalid="ignore"):       # an overflow only answers "not sure"
        squares = [float(np.dot(a.reshape(-1), a.reshape(-1))) for a in (Q, K, V)]   # flat views
    if not all(math.isfinite(x) for x in squares):
        return False
    sQ, sK, sV = squares
    limit = float(np.finfo(Q.dtype).max) / 2
    return math.sqrt(sQ) * math.sqrt(sK) < limit and math.sqrt(K.shape[-2] * sV) < limit


def _sums_may_overflow(V) -> bool:
    """Whether ``acc = sum_j p_j v_j`` (each ``p_j <= 1``, up to ``n_k`` terms) can overflow."""
    if V.size == 0:
        return False
    return not float(max(V.max(), -V.min())) * V.shape[-2] < float(np.finfo(V.dtype).max) / 2


def _by_the_reference(Q, K, V, mask, causal, out_dtype):
    """``scaled_dot_product_attention(Q, K, V, mask)[0]`` with ``causal`` as a mask: where the tiles'
    sums would overflow, the readable reference gives the answer or its clear refusal."""
    if causal:
        allowed = np.tril(np.ones(Q.shape[-2:-1] + K.shape[-2:-1], dtype=bool))   # (n_q, n_k), j <= i
        if mask is None or mask.dtype == bool:
            mask = allowed if mask is None else mask & allowed
        else:
            mask = np.where(allowed, mask, -np.inf)
    return scaled_dot_product_attention(Q, K, V, mask)[0].astype(out_dtype, copy=False)


# ---------------------------------------------------------------------------
# Multi-head attention with one fused input projection
# ---------------------------------------------------------------------------
def _with_bias_row(W, b, dtype):
    """``[W; b]``: ``(d_in + 1, d_out)``, or a contiguous copy of ``W`` when there is no bias."""
    if b is None:
        return np.ascontiguousarray(W, dtype=dtype)
    return np.concatenate([W, np.asarray(b)[None, :]], axis=0).astype(dtype)


def _append_ones(x, name):
    """``[x 1]``: ``x`` ``(..., d)`` copied into a reused ``(..., d + 1)`` buffer whose last
    column is 1 (the multiplier of a bias row)."""
    rows, d = math.prod(x.shape[:-1]), x.shape[-1]
    buf = _buffer(name, rows * (d + 1), x.dtype).reshape(*x.shape[:-1], d + 1)   # (..., d + 1)
    buf[..., :d] = x
    buf[..., d] = 1
    return buf


class FastMultiHeadAttention:
    """The forward pass of a :class:`MultiHeadAttention`, with fused projections and the fast core.

    Args:
        mha: the :class:`~transformer_course.multihead.MultiHeadAttention` whose
            weights to use. They are packed at construction (a snapshot): after
            changing ``mha``'s weights, call :meth:`refresh`.
        dtype: floating dtype of the packed weights; default ``mha.W_Q.dtype``.
            Use ``np.float32`` for speed.
        block_q, block_k, threads: as for :func:`flash_attention`; the
            projections are shared among the same threads.

    Attributes:
        W_QKV: ``(d_model, 3 d_model)`` = ``[W_Q | W_K | W_V]`` (``X @ W``
            convention); columns ``i*d_head:(i+1)*d_head`` of each third are head i.
        b_QKV: ``(3 d_model,)`` or None.
        W_O: ``(d_model, d_model)``; b_O: ``(d_model,)`` or None.
    """

    def __init__(self, mha, *, dtype=None, block_q=DEFAULT_BLOCK_Q, block_k=DEFAULT_BLOCK_K,
                 threads=None):
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(f"mha must be a transformer_course.MultiHeadAttention, got {describe(mha)}")
        dtype = None if dtype is None else float_dtype(dtype)
        self.mha, self._dtype = mha, dtype
        self.block_q = positive_int(block_q, "block_q")
        self.block_k = positive_int(block_k, "block_k")
        self.threads = None if threads is None else positive_int(threads, "threads")
        self.refresh()

    def refresh(self):
        """Re-pack the weights from ``self.mha``."""
        mha = self.mha
        dtype = self._dtype or mha.W_Q.dtype
        self.d_model, self.n_heads, self.d_head = mha.d_model, mha.n_heads, mha.d_head
        W_QKV = np.concatenate([mha.W_Q, mha.W_K, mha.W_V], axis=1)                    # (d, 3d)
        b_QKV = None if mha.b_Q is None else np.concatenate([mha.b_Q, mha.b_K, mha.b_V])  # (3d,)
        # A bias is one more row of the weights, met by a column of ones in the input:
        # [x 1] @ [W; b] = x W + b in the product itself (a separate pass adding b to
        # every output row costs about a fifth of the product at n = 128).
        self._W_QKV_b = _with_bias_row(W_QKV, b_QKV, dtype)                             # (d [+1], 3d)
        self._W_O_b = _with_bias_row(mha.W_O, mha.b_O, dtype)                           # (d [+1], d)
        d = self.d_model
        self.W_QKV, self.W_O = self._W_QKV_b[:d], self._W_O_b[:d]                       # views
        self.b_QKV = self._W_QKV_b[d] if b_QKV is not None else None                    # (3d,) view
        self.b_O = self._W_O_b[d] if mha.b_O is not None else None                      # (d,) view
        return self

    def _project(self, x, cols, threads):
        """``x @ W_QKV[:, cols] (+ b)``: one GEMM for however many of Q, K, V ``cols`` covers."""
        if self.b_QKV is not None:
            x = _append_ones(x, f"x1_{cols.start}")                  # (..., n, d + 1), reused buffer
        return _linear(x, self._W_QKV_b[:, cols], threads, self.threads is None,
                       scratch=f"proj{cols.start}")                 # (..., n, width), reused buffer

    def __call__(self, query, key=None, value=None, *, mask=None, key_padding_mask=None,
                 causal=False):
        """Attend from ``query`` to ``key``/``value`` (self-attention when they are omitted).

        Args:
            query: ``(..., n_q, d_model)``.
            key, value: ``(..., n_k, d_model)``; default to ``query``.
            mask: optional boolean (True = may attend) or additive float mask
                broadcastable to ``(..., n_heads, n_q, n_k)``, e.g. ``(n_q, n_k)``.
            key_padding_mask: optional boolean ``(..., n_k)``, True for real tokens.
            causal: query i attends only to keys ``j <= i``.

        Returns:
            ``(..., n_q, d_model)``. No attention weights (that is the point).
        """
        # Shapes by the reference's check; finiteness by the cheaper pass below.
        query, key, value = check_attention_inputs(query, key, value, self.d_model, finite=False)
        d, h, dh = self.d_model, self.n_heads, self.d_head
        *lead, n_q, _ = query.shape
        n_k = key.shape[-2]
        if not isinstance(causal, (bool, np.bool_)):
            raise TypeError(f"causal must be True or False, got {describe(causal)}")
        combined = combine_with_key_padding(mask, key_padding_mask, key.shape)
        if combined is not None:
            combined = _check_mask(combined, (*lead, h, n_q, n_k))     # (..., h, n_q, n_k)

        threads = _effective_threads(self.threads)
        auto = self.threads is None
        # Big inputs: our threads do everything, projections included, with BLAS held
        # at one thread throughout (so its own threads never spin beside ours). Small
        # inputs: the core runs on one thread (see flash_attention); the projections
        # are then left to BLAS's own threads, which split small products better.
        ours = threads > 1 and not (auto and math.prod(lead) * h * n_q * n_k
                                    < _MIN_SCORES_PER_THREAD * threads)
        lin_threads = threads if ours else 1
        with _blas_pinned(threads if ours else 1):
            _check_finite_fast(query, "query")
            if key is not query:                                       # self-attention: one check
                _check_finite_fast(key, "key")
            if value is not key:
                _check_finite_fast(value, "value")
            if key is query and value is query:
                qkv = self._project(query, slice(0, 3 * d), lin_threads)   # (..., n, 3d): one GEMM
                qkv = qkv.reshape(*lead, n_q, 3, h, dh)                    # (..., n, 3, h, d_head)
                q, k, v = (qkv[..., i, :, :] for i in range(3))            # (..., n, h, d_head) views
            else:
                q = self._project(query, slice(0, d), lin_threads).reshape(*lead, n_q, h, dh)
                if value is key:
                    kv = self._project(key, slice(d, 3 * d), lin_threads)  # (..., n_k, 2d): one GEMM
                    kv = kv.reshape(*lead, n_k, 2, h, dh)                  # (..., n_k, 2, h, d_head)
                    k, v = kv[..., 0, :, :], kv[..., 1, :, :]              # (..., n_k, h, d_head)
                else:
                    k = self._project(key, slice(d, 2 * d), lin_threads).reshape(*lead, n_k, h, dh)
                    v = self._project(value, slice(2 * d, 3 * d), lin_threads).reshape(*lead, n_k, h, dh)
            # (..., n, h, d_head) -> (..., h, n, d_head): strided views, no copies.
            dtype = np.promote_types(q.dtype, np.float32)
            q, k, v = (np.swapaxes(a, -2, -3).astype(dtype, copy=False) for a in (q, k, v))
            if scores_may_overflow(q, k) or _sums_may_overflow(v):    # rare: the reference's rules decide
                return self._by_the_reference(query, key, value, mask, key_padding_mask, causal)
            # The heads are written side by side into one buffer, W_O's input; with a bias,
            # one more column of ones meets W_O's bias row (see _with_bias_row).
            width = d + (self.b_O is not None)
            concat = _buffer("concat", math.prod(lead) * n_q * width, dtype).reshape(*lead, n_q, width)
            if width > d:
                concat[..., d] = 1
            heads = concat[..., :d].reshape(*lead, n_q, h, dh)            # a view: rows keep their stride
            heads = np.swapaxes(heads, -2, -3)                             # (..., h, n_q, d_head) view
            with _blas_pinned(threads if not ours else 1):             # small: one thread, BLAS too
                _flash_core(q, k, v, heads, combined, bool(causal), self.block_q, self.block_k,
                            threads if ours else 1)
            out = _linear(concat, self._W_O_b, lin_threads)            # (..., n_q, d_model)
        if not np.isfinite(out).all():      # finite inputs: a tile's sums or the projection overflowed
            return self._by_the_reference(query, key, value, mask, key_padding_mask, causal)
        return out.astype(np.result_type(query, self.W_QKV), copy=False)

    def _by_the_reference(self, query, key, value, mask, key_padding_mask, causal):
        """The readable ``MultiHeadAttention`` (``causal`` as a mask): where scores or sums could
        overflow, it gives the answer or its clear refusal, never a silent NaN."""
        if causal:
            allowed = np.tril(np.ones((query.shape[-2], key.shape[-2]), dtype=bool))   # (n_q, n_k), j <= i
            if mask is None or np.asarray(mask).dtype == bool:
                mask = allowed if mask is None else np.asarray(mask) & allowed
            else:
                mask = np.where(allowed, mask, -np.inf)
        out = self.mha(query, key, value, mask=mask, key_padding_mask=key_padding_mask)[0]
        return out.astype(np.result_type(query, self.W_QKV), copy=False)
