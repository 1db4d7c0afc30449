"""Speculative decoding: several tokens per pass over the weights, and still exactly the model's tokens.

At batch 1 a decode step reads every weight of the model to produce one token (notebook 09's Coda: the
step is bound by the memory, not by the arithmetic). A forward pass over ``m`` tokens reads the weights
once too. So let a cheap **drafter** guess the next ``k`` tokens, run the model once over
``[last token, guess_1 .. guess_k]`` (``k + 1`` rows of logits, one pass), and keep what the model agrees
with (Leviathan et al. 2023, Chen et al. 2023)::

    greedy     keep guess i while it is the model's argmax after the guesses before it; at the first
               disagreement (or after the last guess) add the model's own argmax: 1 .. k + 1 tokens per
               pass, exactly the tokens of plain greedy decoding.
    sampling   with p_i the model's sampling distribution at guess i and q_i the drafter's: keep guess x_i
               with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection draw the token from
               norm(max(0, p_i - q_i)); after the last guess draw from p_{k+1}. Every token is then
               distributed as p: P(x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(q(y), p(y))) r(x) = p(x).
               A drafter that guesses deterministically has q_i one-hot at its guess: keep it with
               probability p_i(x_i), else draw from p_i with x_i removed.

The model's cache then holds the rejected guesses too: it is cut back to the kept tokens
(``cache.truncate``, kv_cache.py). Whether a pass pays depends on the guesses: a pass over k + 1 tokens
costs a little more than a one-token step, so on text that repeats its context (a summary, edited code,
a list continued) it gains several tokens a pass, on free text with nothing to copy it has nothing to gain.

A drafter is anything with one method::

    draft = drafter.propose(ids, k, rng)   # ids (n,): the text so far; at most k guesses -> Draft
                                           # rng None: decoding is greedy (guess deterministically)

Two here: :class:`PromptLookup` copies what followed the last few tokens where they appeared before in
the text (no model at all), :class:`ModelDrafter` asks a smaller model of the same vocabulary (e.g. the
first layers of the model itself, ``Llama.truncated``). :func:`speculative_generate` drives any model of
the step protocol (generation.py: ``new_cache(capacity)``, ``forward(ids, cache)``) whose cache has
``truncate``; notebook 08's ``generate`` is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import check_rng, describe, positive_int
from .generation import _check_temperature, check_n_new, check_prompt_ids, sampling_probabilities


# -- what a drafter returns -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Draft:
    """A drafter's guesses for the next tokens.

    Attributes:
        tokens: ``(m,)`` int64 token ids, ``0 <= m <= k`` (none: no guess, the pass is a plain step).
        probs: ``(m, V)``, the distribution each guess was drawn from; None when the guesses were chosen
            deterministically (then q is one-hot at each guess).
    """

    tokens: np.ndarray
    probs: np.ndarray | None = None


def no_draft() -> Draft:
    return Draft(np.zeros(0, dtype=np.int64))


def check_draft(draft, k: int, vocab_size: int) -> Draft:
    """A drafter's answer checked: a :class:`Draft` of at most ``k`` ids in ``0..V-1`` and, if given, one
    probability row ``(V,)`` per guess that gives its guess a positive probability."""
    if not isinstance(draft, Draft):
        raise TypeError(f"drafter.propose must return a Draft, got {describe(draft)}")
    tokens = np.asarray(draft.tokens)
    if tokens.ndim != 1 or tokens.size > k or (tokens.size and not np.issubdtype(tokens.dtype, np.integer)):
        raise ValueError(f"drafter.propose must return at most k={k} integer token ids (m,), got {describe(tokens)}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"drafter's guesses must be token ids in 0..{vocab_size - 1} (the model's vocabulary), "
                         f"got {tokens.min()}..{tokens.max()}")
    if draft.probs is not None:
        probs = np.asarray(draft.probs)
        if probs.shape != (tokens.size, vocab_size):
            raise ValueError(f"drafter's probs must have shape (m, V) = {(tokens.size, vocab_size)}, got {describe(probs)}")
        if tokens.size and not (np.isfinite(probs).all() and (probs >= 0).all()
                                and np.allclose(probs.sum(axis=1, dtype=np.float64), 1.0, rtol=0, atol=1e-4)):
            sums = probs.sum(axis=1, dtype=np.float64)
            raise ValueError(f"drafter's probs must be distributions: finite, >= 0, each row summing to 1; got rows "
                             f"summing to {sums.min():.6g}..{sums.max():.6g}, min {probs.min():.3g}")
        if tokens.size and (probs[np.arange(tokens.size), tokens] <= 0).any():
            raise ValueError("drafter's probs must give each guess a positive probability (it was drawn from them)")
    return Draft(tokens.astype(np.int64), draft.probs)


# -- drafters ---------------------------------------------------------------------------------------------

class PromptLookup:
    """Guess by copying from the text so far: where the last tokens appeared before, propose what followed.

    The match is the earlier position whose preceding tokens agree longest with the end of the text (at
    least ``min_ngram`` tokens, counted up to ``max_match``; the most recent of the longest). What followed it
    is copied on, past the end of the text if need be (a text repeating with period P is proposed as that
    period again), as many tokens as the match is long, at most ``k``: a long match is a copy under way.

    It backs off on its own: after a proposal of which the model kept nothing, it asks for twice as long a
    match before proposing again (at most ``max_match``); after one whose first guess was kept, half as long
    (at least ``min_ngram``). It reads what was kept from the ``ids`` of the next call. On free text, short
    matches are chance ("of the"), rejected, and soon no longer proposed; copying builds long ones.

    Args:
        min_ngram: the shortest match that is proposed (>= 1).
        max_match: how far back agreement is counted, and the longest match ever asked for.
    """

    def __init__(self, min_ngram: int = 2, max_match: int = 32):
        self.min_ngram = positive_int(min_ngram, "min_ngram")
        self.max_match = positive_int(max_match, "max_match")
        if self.max_match < self.min_ngram:
            raise ValueError(f"max_match must be >= min_ngram={self.min_ngram}, got {self.max_match}")
        self.need = self.min_ngram            # the match length asked for now
        self._last = None                     # (ids of the last call, its guesses)

    def propose(self, ids, k: int, rng=None) -> Draft:
        ids, k = check_prompt_ids(ids, "ids"), positive_int(k, "k")
        self._back_off(ids)
        start, length = self.longest_match(ids)
        if length < self.need:
            return no_draft()
        period = ids.size - start                              # copy on cyclically past the end of the text
        guesses = ids[start + np.arange(min(k, length)) % period]
        self._last = (ids, guesses)
        return Draft(guesses)

    def longest_match(self, ids: np.ndarray) -> tuple[int, int]:
        """``(start, length)``: the earlier position ``start`` whose ``length`` preceding tokens equal the text's
        last ``length`` tokens, longest first (up to ``max_match``), most recent among equals; ``(0, 0)`` if
        not even the last ``min_ngram`` tokens appeared before."""
        n = ids.size
        starts = np.flatnonzero(ids[:-1] == ids[-1]) + 1       # after an earlier copy of the last token
        agree = np.ones(starts.size, dtype=np.int64)           # tokens before each start that match the end
        for back in range(2, min(self.max_match, n - 1) + 1):  # compare ids[start - back] with ids[n - back]
            alive = (agree == back - 1) & (starts >= back)
            if not alive.any():
                break
            agree = agree + (alive & (ids[np.maximum(starts - back, 0)] == ids[n - back]))
        if starts.size == 0 or agree.max() < self.min_ngram:
            return 0, 0
        best = agree.max()
        return int(starts[np.flatnonzero(agree == best)[-1]]), int(best)

    def _back_off(self, ids: np.ndarray) -> None:
        """Settle the last proposal: how many of its guesses the model kept, read from ``ids``."""
        if self._last is None:
            return
        before, guesses = self._last
        self._last = None
        if ids.size <= before.size or not np.array_equal(ids[:before.size], before):
            return                                             # another text: nothing to learn
        after = ids[before.size:before.size + guesses.size]
        kept = int(np.argmin(np.append(after == guesses[:after.size], False)))
        if kept == 0:
            self.need = min(self.max_match, 2 * self.need)
        else:
            self.need = max(self.min_ngram, self.need // 2)


class ModelDrafter:
    """Guess with a smaller model of the same vocabulary: ``k`` steps of its own decoding.

    ``model``: any model of the step protocol whose cache has ``truncate`` (e.g. ``Llama.truncated(n)``, the
    model's first ``n`` layers and its head). Greedy guesses when ``rng`` is None; otherwise each guess is
    drawn from the small model's ``sampling_probabilities(logits, temperature=..., top_k=..., top_p=...)``,
    returned as ``Draft.probs`` (the q of the acceptance rule). Its cache follows the text: on each call the
    positions that still agree with ``ids`` are kept and the rest is fed.
    """

    def __init__(self, model, *, temperature=1.0, top_k=None, top_p=None):
        for name in ("forward", "new_cache"):
            if not callable(getattr(model, name, None)):
                raise TypeError(f"model must have forward(ids, cache) and new_cache(capacity), got {describe(model)}")
        self.model = model
        self.temperature = _check_temperature(temperature)
        self.warp = dict(top_k=top_k, top_p=top_p)
        sampling_probabilities(np.zeros(2), temperature=self.temperature, **self.warp)   # check the options now
        self.cache, self.fed = None, np.zeros(0, dtype=np.int64)

    def propose(self, ids, k: int, rng=None) -> Draft:
        ids, k = check_prompt_ids(ids, "ids"), positive_int(k, "k")
        if rng is not None:
            rng = check_rng(rng)
        logits = self._follow(ids, room=k)                     # (V,): the small model's next-token scores
        tokens, probs = [], []
        for i in range(k):
            if rng is None:
                token = int(np.argmax(logits))
            else:
                q = sampling_probabilities(logits, temperature=self.temperature, **self.warp)
                token = int(rng.choice(q.size, p=q))
                probs.append(q)
            tokens.append(token)
            if i + 1 < k:
                logits = self.model.forward(np.array([token]), self.cache)[-1]
                self.fed = np.append(self.fed, token)
        return Draft(np.array(tokens, dtype=np.int64), np.stack(probs) if probs else None)

    def _follow(self, ids: np.ndarray, room: int) -> np.ndarray:
        """Bring the cache to ``ids`` (keep the agreeing positions, feed the rest) and return the next logits."""
        capacity = getattr(self.cache, "capacity", None)
        if self.cache is None or (capacity is not None and ids.size + room > capacity):
            self.cache, self.fed = self.model.new_cache(2 * (ids.size + room)), np.zeros(0, dtype=np.int64)
        same = min(self.fed.size, ids.size - 1)                # feed at least the last token: its logits
        differ = np.flatnonzero(self.fed[:same] != ids[:same])
        keep = int(differ[0]) if differ.size else same
        self.cache = self.cache.truncate(keep)
        logits = self.model.forward(ids[keep:], self.cache)[-1]
        self.fed = ids.copy()
        return logits


# -- the loop ----------------------------------------------------------------------------------------------

@dataclass
class SpeculationStats:
    """What a run of :func:`speculative_generate` did (pass one in to have it filled).

    ``passes``: verify passes, each giving its kept guesses and one token of the model's own, plain steps
    included: each reads the weights once (the first reuses the prompt's pass for its first row, as plain
    decoding's first token does); ``drafted``/``accepted``: guesses proposed / kept; ``generated``: new tokens.
    """

    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Kept guesses / proposed guesses (NaN when nothing was proposed)."""
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_pass(self) -> float:
        """New tokens per forward pass over the weights (1 for plain decoding)."""
        return self.generated / self.passes if self.passes else float("nan")


def _check_speculative_model(model):
    for name in ("forward", "new_cache"):
        if not callable(getattr(model, name, None)):
            raise TypeError(f"model must have the methods forward(ids, cache) -> logits (n, V) and "
                            f"new_cache(capacity) (the step protocol, generation.py); {describe(model)} has no {name}")
    return model


def accept_guesses(p_rows: np.ndarray, guesses: np.ndarray, q_rows, rng) -> tuple[int, int]:
    """The acceptance rule over one pass: ``(kept, token)``, the number of guesses kept and the token after them.

    Args:
        p_rows: ``(m + 1, V)``: the model's sampling distribution after each of the ``m`` guesses' predecessors
            (row i judges guess i; row m follows the last guess).
        guesses: ``(m,)`` the drafter's tokens.
        q_rows: ``(m, V)`` the distributions the guesses were drawn from, or None (one-hot: chosen deterministically).
        rng: a Generator, or None for greedy decoding (``p_rows`` one-hot: keep a guess iff it is the argmax).

    Greedy: the kept guesses are the model's argmax tokens and the token is the argmax at the first
    disagreement. Sampling: guess i is kept with probability ``min(1, p_i(x) / q_i(x))``; at the first rejection
    the token is drawn from ``norm(max(0, p_i - q_i))``; if all are kept, from ``p_m``.
    """
    for i, x in enumerate(guesses):
        p = p_rows[i].astype(np.float64)
        q = np.zeros_like(p) if q_rows is None else np.asarray(q_rows[i], dtype=np.float64)
        if q_rows is None:
            q[x] = 1.0                                             # a deterministic guess: q one-hot at x
        ratio = p[x] / q[x]
        if ratio >= 1.0 or (rng is not None and ratio > 0.0 and rng.random() < ratio):
            continue                                               # guess i kept
        residual = np.maximum(p - q, 0.0)                          # where p exceeds q: norm(max(0, p - q))
        if residual.sum() <= 0.0:                                  # p = q up to rounding: then p itself
            residual = p
        return i, _draw(residual / residual.sum(), rng)
    return len(guesses), _draw(p_rows[len(guesses)].astype(np.float64), rng)


def _draw(probs: np.ndarray, rng) -> int:
    """A token from ``probs``: the argmax when decoding is greedy (``rng`` None; then ``probs`` is one-hot)."""
    if rng is None:
        return int(np.argmax(probs))
    return int(rng.choice(probs.size, p=probs / probs.sum()))


def speculative_generate(model, prompt_ids, n_new: int, drafter, *, k: int = 8, rng=None,
                         temperature=1.0, top_k=None, top_p=None, stats: SpeculationStats | None = None) -> np.ndarray:
    """``generate``'s result (the prompt then ``n_new`` tokens), with several tokens per pass when guesses are kept.

    Args:
        model: any model of the step protocol (``new_cache(capacity)``, ``forward(ids, cache)`` -> ``(n, V)``)
            whose cache has ``truncate(length)``: ``DecoderLM``, ``Llama``, ``FastLlama``.
        prompt_ids: 1-D sequence of at least one token id. n_new: tokens to add (>= 0).
        drafter: an object with ``propose(ids, k, rng) -> Draft`` (:class:`PromptLookup`, :class:`ModelDrafter`).
        k: the most guesses verified in one pass (>= 1).
        rng, temperature, top_k, top_p: as for ``generation.generate``; ``temperature=0`` is greedy: the
            tokens are exactly ``generate``'s greedy tokens. Otherwise each token is distributed as
            ``generate``'s (the acceptance rule, :func:`accept_guesses`).
        stats: a :class:`SpeculationStats` to fill (passes, guesses proposed and kept), or None.

    Returns:
        int64 array ``(len(prompt_ids) + n_new,)``.
    """
    model = _check_speculative_model(model)
    if not callable(getattr(drafter, "propose", None)):
        raise TypeError(f"drafter must have a method propose(ids, k, rng) -> Draft, got {describe(drafter)}")
    ids, n_new, k = check_prompt_ids(prompt_ids), check_n_new(n_new), positive_int(k, "k")
    temperature = _check_temperature(temperature)
    sampling_probabilities(np.zeros(1), temperature=temperature, top_k=top_k, top_p=top_p)   # top_k, top_p checked now
    rng = check_rng(rng) if temperature > 0 else None
    if stats is not None and not isinstance(stats, SpeculationStats):
        raise TypeError(f"stats must be None or a SpeculationStats, got {describe(stats)}")
    stats = SpeculationStats() if stats is None else stats
    total = ids.size + n_new
    if n_new == 0:
        return ids
    V = _vocab_size(model)
    cache = model.new_cache(total - 1)                         # the last token is never fed
    if not callable(getattr(cache, "truncate", None)):
        raise TypeError(f"model.new_cache() must give a cache with truncate(length) (kv_cache.py), got {describe(cache)}")
    # The prompt's pass, as plain decoding's first step: its last row judges the first pass's first guess.
    # After it, the cache holds every token but the last, which each later pass feeds before its guesses.
    pending = _rows(model, ids, cache, V)[-1:]                 # (1, V)
    while ids.size < total:
        want = min(k, total - ids.size - 1)                    # guesses beyond the last token are never needed
        draft = check_draft(drafter.propose(ids, want, rng), want, V) if want else no_draft()
        guesses, q_rows = draft.tokens, draft.probs
        if pending is not None:                                # the first pass: the prompt's row, then the guesses
            kept_before = cache.length
            logits = np.concatenate([pending, _rows(model, guesses, cache, V)]) if guesses.size else pending
            pending = None
        else:                                                  # the last token and the guesses: one pass
            kept_before = cache.length + 1
            logits = _rows(model, np.append(ids[-1:], guesses), cache, V)          # (m + 1, V)
        p_rows = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
        kept, token = accept_guesses(p_rows, guesses, q_rows, rng)
        cache = cache.truncate(kept_before + kept)             # drop the rejected guesses' positions
        ids = np.concatenate([ids, guesses[:kept], [token]])
        stats.passes, stats.drafted, stats.accepted = stats.passes + 1, stats.drafted + guesses.size, stats.accepted + kept
        stats.generated = stats.generated + kept + 1
    return ids


def _rows(model, ids: np.ndarray, cache, vocab_size: int) -> np.ndarray:
    """``model.forward(ids, cache)``, checked to be one row of logits per fed token, ``(len(ids), V)``."""
    logits = model.forward(ids, cache)
    if getattr(logits, "shape", None) != (ids.size, vocab_size):
        raise ValueError(f"model.forward(ids, cache) must return logits (len(ids), V) = {(ids.size, vocab_size)} "
                         f"(the step protocol, generation.py), got {describe(logits)}")
    return logits


def _vocab_size(model) -> int:
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "vocab_size"):
        return int(config.vocab_size)
    return int(model.vocab_size)
