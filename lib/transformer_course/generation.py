"""Generation: turn next-token logits into tokens, one step at a time.

A language model gives, for the last position, one score (logit) per word of
the vocabulary. Generating text is a loop: pick a token from those scores,
append it, ask again. How the token is picked is the *sampling rule*:

    greedy        token = argmax_j logits_j                      (temperature 0)
    temperature   p = softmax(logits / T)      T < 1 sharpens, T > 1 flattens
    top-k         keep the k largest p_j, renormalise
    top-p         keep the smallest set of largest p_j whose mass is >= p, renormalise

The rules compose in that order (temperature, then top-k, then top-p on the
renormalised top-k distribution), the order Hugging Face ``generate`` uses.
Temperature divides the logits *before* the softmax: dividing probabilities
after it would change nothing once they are renormalised (theory.md §9.2).

The loop asks a *step function* ``step(ids) -> logits (V,)`` for the scores of the next token.
Every generating model of the course (``decoder.DecoderLM``, ``llama.Llama``, and
``transformer_course_fast.FastLlama``) answers one protocol::

    cache = model.new_cache(capacity)       # kv_cache.LayerCaches: growing (None) or preallocated
                                            # (FastLlama: its own FastKVCache, preallocated only)
    logits = model.forward(ids, cache)      # (n, V) for ids at positions cache.length..; the cache
                                            # is extended in place (no cache: positions 0..n-1)

and the two step functions below run on any such model: :class:`UncachedStep` reruns the whole
sequence every step, :class:`CachedStep` feeds only the tokens its cache has not seen. They read
nothing else of the model, so this module imports none.
"""

from __future__ import annotations

import numbers
from typing import Callable

import numpy as np

from ._checks import as_float_array, check_finite, check_rng, describe, positive_int
from .softmax import softmax


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(f"temperature must be a real number >= 0, got {describe(temperature)}")
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    return float(temperature)


def _check_top_p(top_p) -> float | None:
    if top_p is None:
        return None
    if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real):
        raise TypeError(f"top_p must be None or a number in (0, 1], got {describe(top_p)}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    return float(top_p)


def _check_logits(logits) -> np.ndarray:
    logits = as_float_array(logits, "logits", min_ndim=1)
    check_finite(logits, "logits", allow_neg_inf=True)   # -inf = a token that is forbidden
    if logits.shape[-1] == 0:
        raise ValueError("logits must have at least one entry along the vocabulary axis")
    if np.isneginf(logits).all(axis=-1).any():
        raise ValueError("every row of logits needs at least one finite entry (all were -inf)")
    return logits


def check_prompt_ids(prompt_ids, name: str = "prompt_ids") -> np.ndarray:
    """A non-empty 1-D sequence of non-negative integer token ids, as int64 ``(n,)`` (errors say ``name``)."""
    ids = np.asarray(prompt_ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of ints, got {describe(prompt_ids)}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {ids.dtype}")
    if ids.min() < 0:
        raise ValueError(f"{name} must be token ids >= 0, got {ids.min()}")
    return ids.astype(np.int64)


def check_n_new(n_new) -> int:
    """The number of tokens to generate: an int >= 0."""
    if isinstance(n_new, bool) or not isinstance(n_new, numbers.Integral) or n_new < 0:
        raise ValueError(f"n_new must be an int >= 0, got {describe(n_new)}")
    return int(n_new)


def keep_top_k(probs: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask ``(..., V)``: True for the ``k`` largest entries of each row.

    Ties are broken towards the lower index (a stable sort), so exactly
    ``min(k, V)`` entries are kept.
    """
    vocab = probs.shape[-1]
    k = min(k, vocab)
    order = np.argsort(-probs, axis=-1, kind="stable")          # (..., V), largest first
    keep = np.zeros(probs.shape, dtype=bool)
    np.put_along_axis(keep, order[..., :k], True, axis=-1)
    return keep


def keep_top_p(probs: np.ndarray, p: float) -> np.ndarray:
    """Boolean mask ``(..., V)``: the nucleus of each row.

    The nucleus is the smallest prefix of the probabilities sorted in decreasing
    order whose total is ``>= p``: token number i (0-based, in sorted order) is
    kept when the mass *before* it is still ``< p``. The most likely token is
    therefore always kept, and ``p = 1`` keeps every token.

    The mass before token i is the running sum of tokens 0..i-1 itself (the cumulative
    sum shifted by one), so the nucleus ends exactly where that sum first reaches p;
    ``cumsum - p_i`` would round (0.7 - 0.2 = 0.49999999999999994 < 0.5) and keep one
    token too many at p = 0.5 for probabilities 0.5, 0.2, ...
    """
    if p >= 1.0:
        return np.ones(probs.shape, dtype=bool)
    order = np.argsort(-probs, axis=-1, kind="stable")          # (..., V), largest first
    sorted_probs = np.take_along_axis(probs, order, axis=-1)    # (..., V), decreasing
    running = np.cumsum(sorted_probs, axis=-1)                  # (..., V): mass of tokens 0..i
    mass_before = np.concatenate([np.zeros_like(running[..., :1]), running[..., :-1]], axis=-1)
    keep_sorted = mass_before < p                               # first entry: 0 < p, always kept
    keep = np.zeros(probs.shape, dtype=bool)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return keep


def sampling_probabilities(logits, *, temperature=1.0, top_k=None, top_p=None) -> np.ndarray:
    """The distribution a sampler draws the next token from.

    Args:
        logits: next-token scores, shape ``(..., V)``; ``-inf`` forbids a token.
        temperature: ``T >= 0``; the logits are divided by ``T`` before the
            softmax. ``T = 0`` means greedy: a one-hot row at the argmax
            (the lowest index among ties).
        top_k: None or a positive int; keep only the ``k`` most likely tokens.
        top_p: None or a number in ``(0, 1]``; keep the smallest set of most
            likely tokens whose mass is ``>= top_p`` (always at least one),
            computed after top-k.

    Returns:
        ``(..., V)`` float array; every row is non-negative and sums to 1.
    """
    logits = _check_logits(logits)
    temperature = _check_temperature(temperature)
    if top_k is not None:
        top_k = positive_int(top_k, "top_k")
    top_p = _check_top_p(top_p)

    if temperature == 0.0:                                       # greedy: all mass on the argmax
        probs = np.zeros(logits.shape, dtype=logits.dtype)
        np.put_along_axis(probs, np.argmax(logits, axis=-1)[..., None], 1.0, axis=-1)
        return probs

    try:
        with np.errstate(over="raise", divide="raise", invalid="raise"):   # float32(1e-50) is 0: divide
            scaled = logits / logits.dtype.type(temperature)
    except FloatingPointError:
        biggest = np.abs(logits[np.isfinite(logits)]).max()
        raise ValueError(f"temperature={temperature:.3g} is too small for these logits: logits / temperature "
                         f"overflows {logits.dtype} (max |logit| = {biggest:.3g}); use temperature=0 for greedy "
                         f"decoding, or a temperature >= {biggest / np.finfo(logits.dtype).max:.3g}") from None
    probs = softmax(scaled, axis=-1)                             # (..., V)
    if top_k is not None:
        probs = np.where(keep_top_k(probs, top_k), probs, 0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    if top_p is not None:
        probs = np.where(keep_top_p(probs, top_p), probs, 0)
        probs = probs / probs.sum(axis=-1, keepdims=True)
    return probs


def sample_next_token(logits, *, rng, temperature=1.0, top_k=None, top_p=None) -> int:
    """Draw one token id from ``sampling_probabilities(logits, ...)``.

    Args:
        logits: shape ``(V,)``, the scores for the next token.
        rng: a ``numpy.random.Generator``; the only source of randomness, so a
            fixed seed reproduces the draw. Not used when ``temperature == 0``.
        temperature, top_k, top_p: as in :func:`sampling_probabilities`.

    Returns:
        A Python ``int`` in ``0..V-1``.
    """
    logits = _check_logits(logits)
    if logits.ndim != 1:
        raise ValueError(f"logits must have shape (V,) for one next token, got shape {logits.shape}")
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return int(np.argmax(probs))
    rng = check_rng(rng)
    return int(rng.choice(probs.shape[-1], p=probs))


def generate(
    step_fn: Callable[[np.ndarray], np.ndarray],
    prompt_ids,
    n_new: int,
    *,
    rng=None,
    temperature=1.0,
    top_k=None,
    top_p=None,
) -> np.ndarray:
    """The autoregressive loop: ask for logits, pick a token, append, repeat.

    Args:
        step_fn: ``step_fn(ids) -> logits``: given every token so far, shape
            ``(n,)`` of ints, return the scores for token ``n``, shape ``(V,)``.
            A cached step (:class:`CachedStep`) keeps its own state and only
            processes the tokens it has not seen; the loop is the same.
        prompt_ids: 1-D sequence of at least one int token id.
        n_new: number of tokens to add (0 returns the prompt).
        rng: a ``numpy.random.Generator``; required unless ``temperature == 0``.
        temperature, top_k, top_p: as in :func:`sampling_probabilities`.

    Returns:
        int64 array of shape ``(len(prompt_ids) + n_new,)``: the prompt, then the
        generated tokens.
    """
    if not callable(step_fn):
        raise TypeError(f"step_fn must be callable ids -> logits, got {describe(step_fn)}")
    ids, n_new = check_prompt_ids(prompt_ids), check_n_new(n_new)
    temperature = _check_temperature(temperature)
    if temperature > 0:
        rng = check_rng(rng)

    for _ in range(n_new):
        logits = np.asarray(step_fn(ids))
        if logits.ndim != 1:
            raise ValueError(f"step_fn must return logits of shape (V,), got shape {logits.shape}")
        token = sample_next_token(logits, rng=rng, temperature=temperature, top_k=top_k, top_p=top_p)
        ids = np.append(ids, np.int64(token))                     # (n,) -> (n + 1,)
    return ids


# -- step functions over a model's forward(ids, cache) ---------------------------------------------------

def _check_model(model, needs_cache: bool):
    """``model`` must have ``forward(ids, cache=None) -> logits (n, V)`` (and ``new_cache`` for a cached step)."""
    wanted = ("forward", "new_cache") if needs_cache else ("forward",)
    lacking = [name for name in wanted if not callable(getattr(model, name, None))]
    if lacking:
        raise TypeError(f"model must have the methods forward(ids, cache=None) -> logits (n, V)"
                        f"{' and new_cache(capacity)' if needs_cache else ''}; {describe(model)} has no "
                        f"{' or '.join(lacking)}")
    return model


def _check_step_ids(ids) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a non-empty 1-D array of integer token ids, got {describe(ids)}")
    return ids


class UncachedStep:
    """``step(ids) -> logits (V,)`` that runs the whole sequence through ``model.forward(ids)`` every call.

    ``model``: any model with ``forward(ids, cache=None) -> logits (n, V)`` (see the module's docstring).
    """

    def __init__(self, model):
        self.model = _check_model(model, needs_cache=False)

    def __call__(self, ids) -> np.ndarray:
        return self.model.forward(_check_step_ids(ids))[-1]            # (V,)


class CachedStep:
    """``step(ids) -> logits (V,)`` that keeps a KV cache and only runs the tokens it has not seen.

    The first call processes the whole prompt; each later call one token. ``ids`` must extend the
    sequence of the previous call (make a new step for a new sequence).

    Args:
        model: any model with ``forward(ids, cache)`` and ``new_cache(capacity)`` (see the module's docstring).
        cache: an empty cache of that model to fill (e.g. ``model.new_cache(64)``, preallocated), or None
            for ``model.new_cache()``. It is extended in place: ``step.cache`` holds every token fed so far.
    """

    def __init__(self, model, cache=None):
        self.model = _check_model(model, needs_cache=cache is None)
        self.cache = model.new_cache() if cache is None else cache
        if getattr(self.cache, "length", None) != 0:
            raise ValueError(f"cache must be an empty cache of the model (length 0), got {describe(self.cache)} "
                             f"holding {getattr(self.cache, 'length', '?')} positions")
        self.seen = np.zeros(0, dtype=np.int64)

    def __call__(self, ids) -> np.ndarray:
        ids = _check_step_ids(ids)
        n_seen = self.seen.size
        if ids.size <= n_seen or not np.array_equal(ids[:n_seen], self.seen):
            raise ValueError(f"ids must extend the {n_seen} tokens of the previous call by at least one, "
                             f"got {ids.size} ids{'' if ids.size <= n_seen else ' that start differently'} "
                             f"(make a new CachedStep for a new sequence)")
        if self.cache.length != n_seen:
            raise ValueError(f"the cache holds {self.cache.length} positions but this step has fed {n_seen} tokens: "
                             f"it was changed outside the step (give each CachedStep its own cache)")
        logits = self.model.forward(ids[n_seen:], self.cache)       # (n_new, V); the cache grows in place
        self.seen = ids.copy()
        return logits[-1]                                           # (V,)

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by the cache of every layer."""
        return self.cache.nbytes
