"""Speculative decoding (speculative.py): the model's own tokens, several per pass (issue 42).

* **Greedy: the same tokens.** ``speculative_generate(..., temperature=0)`` equals the plain greedy loop
  (``generate(CachedStep(model))``) on every model of the step protocol -- notebook 08's ``DecoderLM`` (random,
  and the induction circuit), the readable ``Llama`` and ``FastLlama`` in float32 and float64 -- for
  k = 1..8 and every drafter: prompt lookup, a smaller model, an oracle that is always right (every guess
  kept, the bonus token after the last), and one that is always wrong (every pass rolls the cache back).
  float64: identical. float32: identical, or the first difference at a position where plain decoding's
  top-2 logit gap is below the float32 bound (2e-5 x max |logit|, test_fast_llama's bound between two
  summation orders); on these models none is.
* **The cache after a rejection** equals the cache of plain decoding of the kept tokens (every cache kind),
  and decoding on from it gives plain decoding's logits.
* **Sampling: the model's distribution.** The acceptance rule alone, on fixed p and q rows, and the whole loop
  on a tiny model (4 tokens, 3 new: all 64 continuations enumerated exactly from the model), by a chi-square
  test at a fixed seed; the same test rejects two plausible wrong rules (so it can fail).
* The drafters' interface, the back-off, ``truncate`` and ``truncated``, and bad input named by argument.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats as scipy_stats

from test_fast_llama import CONFIGS, random_weights
from test_generation_protocol import build, llama_weights
from transformer_course.decoder import DecoderLM
from transformer_course.generation import CachedStep, generate, sampling_probabilities
from transformer_course.kv_cache import GrowingKVCache, LayerCaches, PreallocatedKVCache
from transformer_course.llama import Llama
from transformer_course.speculative import (Draft, ModelDrafter, PromptLookup, SpeculationStats, accept_guesses,
                                            speculative_generate)
from transformer_course_fast.llama import FastKVCache, FastLlama

MODELS = ["decoder", "induction", "llama32", "llama64", "fast32", "fast64"]
FLOAT32_GAP = 2e-5            # x max |logit|: two summation orders of the same float32 model differ by less


def plain_greedy(model, prompt, n_new):
    return generate(CachedStep(model, model.new_cache(prompt.size + n_new)), prompt, n_new, temperature=0.0)


def assert_greedy_equal(model, got, expected, dtype, what):
    """Identical tokens; in float32 a difference is allowed only where plain decoding's top-2 gap is below the bound."""
    if np.array_equal(got, expected):
        return
    first = int(np.flatnonzero(got != expected)[0])
    logits = model.forward(expected[:first])[-1].astype(np.float64)
    top = np.sort(logits)[-2:]
    gap, bound = top[1] - top[0], FLOAT32_GAP * np.abs(logits).max()
    assert dtype == np.float32 and gap <= bound, \
        f"{what}: token {first} is {got[first]}, plain greedy gives {expected[first]} (top-2 gap {gap:.3g}, bound {bound:.3g})"


def repetitive_prompt(prompt):
    """The model's prompt, then its start again: something for prompt lookup to find."""
    return np.concatenate([prompt, prompt[: max(2, prompt.size // 2)]])


def n_new_for(model, prompt, wanted=24):
    return min(wanted, getattr(model, "max_len", 10**6) - prompt.size)


class Oracle:
    """Always right: proposes the plain greedy continuation (from a run done beforehand)."""

    def __init__(self, sequence):
        self.sequence = sequence

    def propose(self, ids, k, rng=None):
        return Draft(self.sequence[ids.size:ids.size + k])


class AlwaysWrong:
    """Always wrong: the plain greedy token plus one (mod V), k times."""

    def __init__(self, sequence, vocab):
        self.sequence, self.vocab = sequence, vocab

    def propose(self, ids, k, rng=None):
        return Draft((self.sequence[ids.size:ids.size + k] + 1) % self.vocab)


def vocab_of(model):
    return model.config.vocab_size if hasattr(model, "config") else model.vocab_size


def small_drafter_for(name):
    """A smaller model of the same vocabulary: the first layer of the LLaMA models, another random DecoderLM."""
    model, _, _ = build(name)
    if hasattr(model, "truncated"):
        return ModelDrafter(model.truncated(1))
    return ModelDrafter(DecoderLM.random(model.vocab_size, 16, 2, 1, model.max_len, rng=np.random.default_rng(9)))


# ------------------------------------------------------------------------------------------- greedy
@pytest.mark.parametrize("name", MODELS)
def test_greedy_speculation_gives_plain_greedy_tokens(name):
    model, prompt, dtype = build(name)
    prompt = repetitive_prompt(prompt)
    n_new = n_new_for(model, prompt)
    expected = plain_greedy(model, prompt, n_new)
    V = vocab_of(model)
    drafters = {"lookup": lambda: PromptLookup(), "lookup-1": lambda: PromptLookup(min_ngram=1),
                "small model": lambda: small_drafter_for(name), "oracle": lambda: Oracle(expected),
                "always wrong": lambda: AlwaysWrong(expected, V)}
    speculated = 0
    for label, make in drafters.items():
        for k in (1, 2, 3, 5, 8):
            st = SpeculationStats()
            got = speculative_generate(model, prompt, n_new, make(), k=k, temperature=0.0, stats=st)
            assert got.dtype == np.int64 and got.shape == expected.shape
            assert_greedy_equal(model, got, expected, dtype, f"{name}, {label}, k={k}")
            assert st.generated == n_new and st.passes + st.accepted == n_new, st
            if label == "oracle":          # every guess kept: k + 1 tokens a pass (the last pass may be shorter)
                assert st.accepted == st.drafted and st.passes == -(-n_new // (k + 1)), (label, k, st)
            if label == "always wrong":    # every guess rejected: one token a pass, the cache rolled back each time
                assert st.accepted == 0 and st.passes == n_new and st.drafted >= n_new - 1, (label, k, st)
            speculated += st.accepted
    assert speculated > 0


def test_prompt_lookup_speeds_up_a_copy_and_keeps_every_token():
    """The induction model copies its prompt: prompt lookup's guesses are kept, several tokens a pass."""
    model, prompt, _ = build("induction")
    prompt = np.concatenate([prompt, prompt[:3]])
    expected = plain_greedy(model, prompt, 20)
    st = SpeculationStats()
    got = speculative_generate(model, prompt, 20, PromptLookup(), k=8, temperature=0.0, stats=st)
    np.testing.assert_array_equal(got, expected)
    assert st.acceptance_rate > 0.75 and st.tokens_per_pass >= 4, st


@pytest.mark.parametrize("prompt_len, n_new", [(1, 5), (2, 1), (6, 0), (3, 2)])
def test_short_prompts_and_few_tokens(prompt_len, n_new):
    model, prompt, dtype = build("llama64")
    prompt = prompt[:prompt_len]
    expected = plain_greedy(model, prompt, n_new)
    for k in (1, 4):
        got = speculative_generate(model, prompt, n_new, Oracle(np.append(expected, 0)), k=k, temperature=0.0)
        np.testing.assert_array_equal(got, expected)


def test_many_random_prompts_float32_and_float64():
    """40 prompts x k in {2, 4, 7} on the LLaMA-shaped models, readable and fast, with prompt lookup."""
    rng = np.random.default_rng(3)
    for name in ("llama32", "llama64", "fast32", "fast64"):
        model, _, dtype = build(name)
        for i in range(10):
            base = rng.integers(0, 97, rng.integers(2, 8))
            prompt = np.concatenate([base, base, base[:rng.integers(1, base.size + 1)]])
            expected = plain_greedy(model, prompt, 12)
            for k in (2, 4, 7):
                got = speculative_generate(model, prompt, 12, PromptLookup(min_ngram=1), k=k, temperature=0.0)
                assert_greedy_equal(model, got, expected, dtype, f"{name}, prompt {i}, k={k}")


# ------------------------------------------------------------------------------------- cache rollback
def cache_contents(cache):
    """Keys and values of every filled position, per layer, in float64 (any cache kind)."""
    if isinstance(cache, FastKVCache):
        return [(cache.keys[L, :, :cache.length], cache.values[L, :, :cache.length]) for L in range(cache.keys.shape[0])]
    return [(c.keys, c.values) for c in cache]


@pytest.mark.parametrize("name, capacity", [("decoder", None), ("decoder", 40), ("llama32", None), ("llama64", 40),
                                            ("fast32", 40), ("fast64", 40)])
def test_a_rolled_back_cache_equals_the_plain_cache_of_the_kept_tokens(name, capacity):
    model, prompt, dtype = build(name)
    ids = np.concatenate([prompt, prompt])[:10]
    kept = 7
    cache = model.new_cache(capacity)
    model.forward(ids[:5], cache)                                          # a prompt
    model.forward(np.append(ids[5:kept], [3, 1, 4]), cache)                # a pass: 2 kept tokens, 3 rejected guesses
    assert cache.length == kept + 3
    cache = cache.truncate(kept)
    plain = model.new_cache(capacity)
    model.forward(ids[:5], plain)
    for t in ids[5:kept]:
        model.forward(np.array([t]), plain)                                # plain decoding, one token a pass
    assert cache.length == plain.length == kept
    tol = 1e-12 if dtype == np.float64 else 2e-6
    for L, ((k1, v1), (k2, v2)) in enumerate(zip(cache_contents(cache), cache_contents(plain))):
        assert k1.shape == k2.shape and v1.shape == v2.shape, (L, k1.shape, k2.shape)
        scale = max(1.0, np.abs(k2).max(), np.abs(v2).max())
        assert np.abs(k1 - k2).max() <= tol * scale and np.abs(v1 - v2).max() <= tol * scale, f"layer {L}"
    # and decoding on from the rolled-back cache gives what plain decoding gives
    after, expected = model.forward(ids[kept:], cache), model.forward(ids[kept:], plain)
    assert np.abs(after - expected).max() <= 100 * tol * max(1.0, np.abs(expected).max())


def test_truncate_on_every_cache_kind():
    keys = np.arange(24.0).reshape(2, 4, 3)
    growing = GrowingKVCache(keys, keys + 100)
    short = growing.truncate(2)
    assert short.length == 2 and growing.length == 4, "a growing cache is immutable: truncate returns a new one"
    np.testing.assert_array_equal(short.keys, keys[:, :2])
    np.testing.assert_array_equal(short.values, keys[:, :2] + 100)
    pre = PreallocatedKVCache(2, 6, 3, np.float64).append(keys, keys + 100)
    assert pre.truncate(1) is pre and pre.length == 1
    pre.append(keys[:, :2] * 0, keys[:, :2] * 0)                           # writes at position 1 again
    np.testing.assert_array_equal(pre.keys, np.concatenate([keys[:, :1], 0 * keys[:, :2]], axis=1))
    layers = LayerCaches.growing(3, 2, 3, np.float64)
    for L in range(3):
        layers.append(L, keys, keys)
    assert layers.truncate(3) is layers and layers.length == 3 and all(c.length == 3 for c in layers)
    assert layers.truncate(0).length == 0


@pytest.mark.parametrize("make", [lambda: GrowingKVCache(np.zeros((1, 4, 2)), np.zeros((1, 4, 2))),
                                  lambda: PreallocatedKVCache(1, 8, 2).append(np.zeros((1, 4, 2), np.float32),
                                                                              np.zeros((1, 4, 2), np.float32)),
                                  lambda: LayerCaches.preallocated(2, 1, 8, 2).truncate(0),
                                  lambda: FastLlama(CONFIGS["mha"], random_weights(CONFIGS["mha"])).new_cache(8)])
def test_truncate_names_a_bad_length(make):
    cache = make()
    held = cache.length
    with pytest.raises(ValueError, match=rf"length must be in 0..{held} \(the positions this cache holds\), got {held + 1}"):
        cache.truncate(held + 1)
    with pytest.raises(ValueError, match="length must be in 0.."):
        cache.truncate(-1)
    for bad in (1.0, True, "2", None):
        with pytest.raises(TypeError, match="length must be an int"):
            cache.truncate(bad)


# --------------------------------------------------------------------------------------------- drafters
def test_prompt_lookup_copies_what_followed_the_longest_most_recent_match():
    lookup = PromptLookup(min_ngram=2)
    ids = np.array([5, 1, 2, 3, 9, 1, 2, 4, 7, 8, 1, 2])
    # "1 2" appears at 1 and 5; preceded by 5 and 9 -- neither equals ids[-3] = 8: both matches have length 2,
    # the most recent (followed by 4 7 8 ...) wins
    assert lookup.longest_match(ids) == (7, 2)
    np.testing.assert_array_equal(lookup.propose(ids, 8).tokens, [4, 7])            # as many as the match is long
    longer = np.array([6, 1, 2, 3, 9, 1, 2, 4, 6, 1, 2])                              # "6 1 2" at 0: length 3
    assert PromptLookup().longest_match(longer) == (3, 3)
    np.testing.assert_array_equal(PromptLookup().propose(longer, 2).tokens, [3, 9])   # at most k
    assert PromptLookup().propose(np.array([1, 2, 3, 4]), 4).tokens.size == 0         # nothing repeats: no guess
    assert PromptLookup(min_ngram=1).propose(np.array([3, 1, 2, 3]), 4).tokens.tolist() == [1]


def test_prompt_lookup_copies_a_period_past_the_end_of_the_text():
    ids = np.array([7, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2])                            # period 3, match of 10
    np.testing.assert_array_equal(PromptLookup().propose(ids, 8).tokens, [3, 1, 2, 3, 1, 2, 3, 1])


def test_prompt_lookup_backs_off_after_rejections_and_comes_back_after_kept_guesses():
    lookup = PromptLookup(min_ngram=2, max_match=16)
    ids = np.array([1, 2, 3, 4, 1, 2])
    assert lookup.propose(ids, 4).tokens.tolist() == [3, 4]
    ids = np.append(ids, 9)                                                        # the model said 9: none kept
    assert lookup.need == 2 and lookup.propose(ids, 4).tokens.size == 0 and lookup.need == 4
    text = np.array([5, 6, 7, 8, 9, 5, 6, 7, 8])                                    # a match of 4: proposed at need 4
    lookup = PromptLookup()
    lookup.need = 4
    assert lookup.propose(text, 4).tokens.tolist() == [9, 5, 6, 7]
    lookup.propose(np.append(text, [9, 5]), 4)                                      # 2 of them kept
    assert lookup.need == 2
    capped = PromptLookup(min_ngram=2, max_match=8)
    capped.need = 8
    capped._last = (np.array([1, 2]), np.array([3]))
    capped.propose(np.array([1, 2, 4]), 2)
    assert capped.need == 8, "the match asked for never exceeds max_match"


def test_model_drafter_proposes_the_small_models_own_tokens_and_follows_rollbacks():
    small, prompt, _ = build("llama64")
    small = small.truncated(2)
    drafter = ModelDrafter(small)
    own = plain_greedy(small, prompt, 6)
    np.testing.assert_array_equal(drafter.propose(prompt, 6).tokens, own[prompt.size:])
    assert drafter.propose(prompt, 6).probs is None, "greedy guesses are deterministic: q is one-hot"
    other = np.append(prompt[:4], [7, 7, 7])                                        # another text after 4 tokens
    np.testing.assert_array_equal(drafter.propose(other, 3).tokens, plain_greedy(small, other, 3)[other.size:])
    np.testing.assert_array_equal(ModelDrafter(small).propose(other, 3).tokens, drafter.propose(other, 3).tokens)
    draft = ModelDrafter(small, temperature=0.8, top_k=20).propose(prompt, 3, np.random.default_rng(0))
    assert draft.probs.shape == (3, 97) and np.allclose(draft.probs.sum(axis=1), 1)
    expected_first = sampling_probabilities(small.forward(prompt)[-1], temperature=0.8, top_k=20)
    np.testing.assert_allclose(draft.probs[0], expected_first, rtol=1e-12, atol=1e-15)
    assert (draft.probs[np.arange(3), draft.tokens] > 0).all()


@pytest.mark.parametrize("kind", [Llama, FastLlama])
def test_truncated_is_the_first_layers_with_the_head(kind):
    cfg = CONFIGS["gqa"]
    w = random_weights(cfg)
    ids = np.arange(9) * 5 % cfg.vocab_size
    short = kind(cfg, w, np.float64).truncated(2)
    reference = Llama(dataclasses.replace(cfg, n_layers=2), w, np.float64).forward(ids)
    assert short.config.n_layers == 2
    assert np.abs(short.forward(ids) - reference).max() <= 1e-12 * np.abs(reference).max()
    with pytest.raises(ValueError, match=r"n_layers must be in 1..3 \(this model's layers\), got 4"):
        kind(cfg, w).truncated(4)
    with pytest.raises(TypeError, match="n_layers must be a positive integer"):
        kind(cfg, w).truncated(1.5)


# ---------------------------------------------------------------------------------------- sampling rule
P = np.array([[0.5, 0.3, 0.15, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
Q = np.array([[0.1, 0.6, 0.2, 0.1], [0.4, 0.4, 0.1, 0.1]])
N_RULE = 10_000
ALPHA = 1e-4          # false alarm rate of each chi-square test (with a fixed seed: the test is deterministic)


def chi_square_ok(counts, probs):
    """Pearson's chi-square goodness of fit: True if ``counts`` fit ``probs`` at level ALPHA; cells expected
    below 5 are pooled into one."""
    counts, probs = np.asarray(counts, float), np.asarray(probs, float)
    expected = probs * counts.sum()
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    if ((expected == 0) & (counts > 0)).any():
        return False
    keep = expected > 0
    statistic = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    return statistic <= scipy_stats.chi2.ppf(1 - ALPHA, keep.sum() - 1)


def rule_outputs(rule, deterministic, seed=0):
    """First and second output tokens of ``rule`` over N_RULE passes of two guesses, p rows fixed (independent of
    the prefix, so the tokens must be distributed as P[0] and P[1])."""
    rng = np.random.default_rng(seed)
    first, second = np.zeros(4, int), np.zeros(4, int)
    for _ in range(N_RULE):
        guesses = np.array([1, 3]) if deterministic else np.array([rng.choice(4, p=Q[0]), rng.choice(4, p=Q[1])])
        kept, token = rule(P, guesses, None if deterministic else Q, rng)
        out = np.append(guesses[:kept], token)
        first[out[0]] += 1
        if out.size > 1:
            second[out[1]] += 1
    return first, second


def wrong_rule_resample_from_p(p_rows, guesses, q_rows, rng):
    """A plausible mistake: on rejection draw from p, not from norm(max(0, p - q))."""
    kept, _ = accept_guesses(p_rows, guesses, q_rows, rng)
    return kept, int(rng.choice(4, p=p_rows[kept]))


def wrong_rule_keep_if_likely(p_rows, guesses, q_rows, rng):
    """Another: keep a guess when p gives it at least 1/V, without the ratio p/q."""
    for i, x in enumerate(guesses):
        if p_rows[i][x] < 0.25:
            return i, int(rng.choice(4, p=p_rows[i]))
    return len(guesses), int(rng.choice(4, p=p_rows[len(guesses)]))


@pytest.mark.parametrize("deterministic", [False, True], ids=["q from a drafter's distribution", "q one-hot"])
def test_the_acceptance_rule_gives_the_models_distribution(deterministic):
    first, second = rule_outputs(accept_guesses, deterministic)
    assert chi_square_ok(first, P[0]), (first / N_RULE, P[0])
    assert chi_square_ok(second, P[1]), (second / second.sum(), P[1])
    for wrong in (wrong_rule_resample_from_p, wrong_rule_keep_if_likely):           # the test can fail
        bad_first, _ = rule_outputs(wrong, deterministic)
        assert not chi_square_ok(bad_first, P[0]), f"{wrong.__name__} passed the test: it has no power"


def test_greedy_rule_needs_no_randomness():
    one_hot = np.eye(4)[[2, 0, 3]]
    assert accept_guesses(one_hot, np.array([2, 1]), None, None) == (1, 0)
    assert accept_guesses(one_hot, np.array([2, 0]), None, None) == (2, 3)
    assert accept_guesses(one_hot, np.array([1, 0]), None, None) == (0, 2)


class TokenCache:
    """The cache of :class:`TrigramModel`: the tokens fed so far."""

    def __init__(self):
        self.tokens = np.zeros(0, dtype=np.int64)

    @property
    def length(self):
        return self.tokens.size

    def truncate(self, length):
        assert 0 <= length <= self.length, (length, self.length)
        self.tokens = self.tokens[:length]
        return self


class TrigramModel:
    """A model of the step protocol whose next-token logits are a table of the last two tokens (a language model
    as small as one gets): thousands of sampled runs in a second. Its cache is the tokens it was fed."""

    def __init__(self, vocab_size, seed, scale=1.5):
        self.vocab_size = vocab_size
        self.table = scale * np.random.default_rng(seed).normal(size=(vocab_size + 1, vocab_size + 1, vocab_size))

    def new_cache(self, capacity=None):
        return TokenCache()

    def forward(self, ids, cache=None):
        cache = TokenCache() if cache is None else cache
        start = cache.length
        cache.tokens = np.concatenate([cache.tokens, np.asarray(ids, dtype=np.int64)])
        padded = np.concatenate([[self.vocab_size] * 2, cache.tokens])       # V = "no token yet"
        rows = np.arange(start, cache.length)
        return self.table[padded[rows], padded[rows + 1]]                     # (n, V): from the two tokens before


def exact_continuations(model, prompt, n_new, **warp):
    """Probability of each of the V**n_new continuations, from the model's conditionals."""
    V = model.vocab_size
    probs = np.ones(1)
    seqs = [prompt]
    for _ in range(n_new):
        rows = np.stack([sampling_probabilities(model.forward(s)[-1], **warp) for s in seqs])   # (len(seqs), V)
        probs = (probs[:, None] * rows).reshape(-1)
        seqs = [np.append(s, t) for s in seqs for t in range(V)]
    return probs                                                       # index = base-V number of the tokens


def sampled_continuations(model, drafter, runs, seed=11, **warp):
    prompt = np.array([1, 3, 1])
    rng = np.random.default_rng(seed)
    counts = np.zeros(64, int)
    st = SpeculationStats()
    for _ in range(runs):
        out = speculative_generate(model, prompt, 3, drafter(), k=2, rng=rng, stats=st, **warp)[prompt.size:]
        counts[out[0] * 16 + out[1] * 4 + out[2]] += 1
    assert st.drafted > runs / 2 and 0 < st.accepted < st.drafted, st   # guesses were made, kept and rejected
    return counts, exact_continuations(model, prompt, 3, **warp)


@pytest.mark.parametrize("drafter, warp", [
    ("small model", dict(temperature=1.0)),
    ("prompt lookup", dict(temperature=1.0)),
    ("small model", dict(temperature=0.7, top_k=3)),
    ("prompt lookup", dict(temperature=1.3, top_p=0.8)),
], ids=["small model, T=1", "prompt lookup (q one-hot), T=1", "small model, T=0.7 top-3", "prompt lookup, T=1.3 top-p 0.8"])
def test_speculative_sampling_gives_the_models_distribution(drafter, warp):
    """4 tokens, 3 new after a 3-token prompt: the 64 continuations' frequencies over 3,000 runs fit the exact ones."""
    small = TrigramModel(4, seed=5)
    make = (lambda: ModelDrafter(small, temperature=1.0)) if drafter == "small model" else (lambda: PromptLookup(min_ngram=1))
    counts, exact = sampled_continuations(TrigramModel(4, seed=4), make, 3000, **warp)
    assert chi_square_ok(counts, exact), np.abs(counts / 3000 - exact).max()


def test_speculative_sampling_on_a_course_model():
    """The same on notebook 08's DecoderLM (a real KV cache, rolled back after each rejection), 1,000 runs."""
    model = DecoderLM.random(4, 8, 2, 1, 16, rng=np.random.default_rng(4))
    counts, exact = sampled_continuations(model, lambda: ModelDrafter(TrigramModel(4, seed=5)), 1000)
    assert chi_square_ok(counts, exact), np.abs(counts / 1000 - exact).max()


# -------------------------------------------------------------------------------------------- bad input
class NotADraft:
    def propose(self, ids, k, rng=None):
        return [1, 2]


class TooMany:
    def propose(self, ids, k, rng=None):
        return Draft(np.zeros(k + 1, dtype=int))


class OutOfVocab:
    def propose(self, ids, k, rng=None):
        return Draft(np.array([10**6]))


class BadProbs:
    def propose(self, ids, k, rng=None):
        return Draft(np.array([1]), np.ones((1, 3)))


class CountsNotProbs:
    """Probabilities of the right shape that are not a distribution (counts, never normalised)."""

    def propose(self, ids, k, rng=None):
        return Draft(np.array([1]), np.ones((1, 97)))


class NaNProbs:
    def propose(self, ids, k, rng=None):
        probs = np.full((1, 97), 1 / 96)
        probs[0, 0] = np.nan
        return Draft(np.array([1]), probs)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(k=0), ValueError, "k must be a positive integer, got 0"),
    (dict(k=-2), ValueError, "k must be a positive integer, got -2"),
    (dict(k=2.0), TypeError, "k must be a positive integer, got float"),
    (dict(k=True), TypeError, "k must be a positive integer, got bool"),
    (dict(drafter=None), TypeError, r"drafter must have a method propose\(ids, k, rng\)"),
    (dict(drafter=NotADraft()), TypeError, "drafter.propose must return a Draft, got list"),
    (dict(drafter=TooMany()), ValueError, "drafter.propose must return at most k=3 integer token ids"),
    (dict(drafter=OutOfVocab()), ValueError, r"drafter's guesses must be token ids in 0..96"),
    (dict(drafter=BadProbs()), ValueError, r"drafter's probs must have shape \(m, V\) = \(1, 97\)"),
    (dict(drafter=CountsNotProbs(), temperature=1.0, rng=np.random.default_rng(0)), ValueError,
     r"drafter's probs must be distributions: finite, >= 0, each row summing to 1; got rows summing to 97..97"),
    (dict(drafter=NaNProbs(), temperature=1.0, rng=np.random.default_rng(0)), ValueError,
     "drafter's probs must be distributions"),
    (dict(top_k=0), ValueError, "top_k must be a positive integer, got 0"),
    (dict(top_p=1.5, n_new=0), ValueError, r"top_p must be in \(0, 1\], got 1.5"),
    (dict(model=object()), TypeError, r"model must have the methods forward\(ids, cache\)"),
    (dict(temperature=1.0), TypeError, "rng must be a numpy.random.Generator"),
    (dict(temperature=-1.0), ValueError, "temperature must be a finite number >= 0"),
    (dict(n_new=-1), ValueError, "n_new must be an int >= 0"),
    (dict(prompt_ids=[]), ValueError, "prompt_ids must be a non-empty 1-D sequence"),
    (dict(prompt_ids=[1.5, 2.0]), TypeError, "prompt_ids must hold integers"),
    (dict(stats={}), TypeError, "stats must be None or a SpeculationStats"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    model, prompt, _ = build("llama64")
    args = dict(model=model, prompt_ids=prompt, n_new=4, drafter=PromptLookup(min_ngram=1), k=3, temperature=0.0)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        speculative_generate(args.pop("model"), args.pop("prompt_ids"), args.pop("n_new"), args.pop("drafter"), **args)


def test_a_model_whose_forward_gives_other_than_one_row_per_token_is_refused():
    class OneRow:
        config = CONFIGS["gqa"]

        def new_cache(self, capacity=None):
            return GrowingKVCache(np.zeros((1, 0, 2)), np.zeros((1, 0, 2)))

        def forward(self, ids, cache=None):
            return np.zeros(97)                                    # (V,), not (len(ids), V)

    with pytest.raises(ValueError, match=r"model.forward\(ids, cache\) must return logits \(len\(ids\), V\) = "
                                         r"\(2, 97\) \(the step protocol, generation.py\), got"):
        speculative_generate(OneRow(), [1, 2], 3, PromptLookup(), temperature=0.0)


class CountingModel:
    """A model of the step protocol that records the length of every forward call."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def forward(self, ids, cache=None):
        self.calls.append(len(ids))
        return self.model.forward(ids, cache)


class NeverGuesses:
    def propose(self, ids, k, rng=None):
        return Draft(np.zeros(0, dtype=np.int64))


@pytest.mark.parametrize("name", ["decoder", "llama32", "fast64"])
def test_without_guesses_the_loop_does_plain_decodings_passes(name):
    """A drafter that never guesses costs nothing: the prompt's pass gives the first token, then one pass per token,
    exactly the calls of plain decoding (generate with CachedStep) -- and the same logits, so the same tokens."""
    model, prompt, _ = build(name)
    plain, spec = CountingModel(model), CountingModel(model)
    expected = plain_greedy(plain, prompt, 6)
    st = SpeculationStats()
    got = speculative_generate(spec, prompt, 6, NeverGuesses(), k=4, temperature=0.0, stats=st)
    np.testing.assert_array_equal(got, expected)
    assert spec.calls == plain.calls == [prompt.size] + [1] * 5, (spec.calls, plain.calls)
    assert st.passes == st.generated == 6 and st.drafted == 0, st


def test_a_model_whose_cache_cannot_roll_back_is_refused():
    class NoTruncate:
        length = 0

    class Model:
        config = CONFIGS["gqa"]

        def new_cache(self, capacity=None):
            return NoTruncate()

        def forward(self, ids, cache=None):
            return np.zeros((len(ids), 97))

    with pytest.raises(TypeError, match=r"must give a cache with truncate\(length\)"):
        speculative_generate(Model(), [1, 2], 3, PromptLookup(), temperature=0.0)


@pytest.mark.parametrize("call, error, match", [
    (lambda: PromptLookup(min_ngram=0), ValueError, "min_ngram must be a positive integer, got 0"),
    (lambda: PromptLookup(max_match=1.5), TypeError, "max_match must be a positive integer"),
    (lambda: PromptLookup(min_ngram=4, max_match=3), ValueError, "max_match must be >= min_ngram=4, got 3"),
    (lambda: PromptLookup().propose([1, 2, 1], 0), ValueError, "k must be a positive integer, got 0"),
    (lambda: PromptLookup().propose([[1, 2]], 2), ValueError, "^ids must be a non-empty 1-D"),
    (lambda: PromptLookup().propose([1.0, 2.0], 2), TypeError, "^ids must hold integers"),
    (lambda: ModelDrafter(build("llama64")[0]).propose([-1, 2], 2), ValueError, "^ids must be token ids >= 0, got -1"),
    (lambda: ModelDrafter("a model"), TypeError, r"model must have forward\(ids, cache\) and new_cache"),
    (lambda: ModelDrafter(build("llama64")[0], temperature=-1), ValueError, "temperature must be a finite number"),
    (lambda: ModelDrafter(build("llama64")[0], top_p=2.0), ValueError, r"top_p must be in \(0, 1\]"),
    (lambda: ModelDrafter(build("llama64")[0]).propose([1, 2], 2, rng=5), TypeError, "rng must be a numpy.random.Generator"),
])
def test_drafters_name_their_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_stats_report_rates():
    st = SpeculationStats()
    assert np.isnan(st.acceptance_rate) and np.isnan(st.tokens_per_pass)
    st = SpeculationStats(passes=4, drafted=10, accepted=6, generated=10)
    assert st.acceptance_rate == 0.6 and st.tokens_per_pass == 2.5
