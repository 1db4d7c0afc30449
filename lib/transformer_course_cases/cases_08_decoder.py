"""Hidden-test cases of notebook 08 (the decoder: LM loss, cached causal attention, cross-attention,
decoder block, sampling, generation)."""

from __future__ import annotations

import numpy as np

from transformer_course.decoder import KVCache, TransformerDecoderBlock, causal_self_attention
from transformer_course.generation import generate, sampling_probabilities
from transformer_course.multihead import MultiHeadAttention
from transformer_course.softmax import softmax
from . import CASES, Case

# The references run the package's decoder (decoder.py) and attention (multihead.py) with the
# case's weights: the exercises take those weights as a params dict.

_MHA_KEYS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")


# ---------------------------------------------------------------------------
# language_model_loss(logits, ids): mean of -log p(ids[t+1] | logits[t]) over t = 0..n-2.
# The targets are drawn independently of the logits and V differs from n, so an
# unshifted loss, a shift the wrong way and a mean that includes the last row all show.
# ---------------------------------------------------------------------------
def _lm_loss_inputs(rng, batched):
    n = int(rng.integers(4, 10))
    V = int(rng.integers(n + 2, n + 12))
    shape = (int(rng.integers(2, 4)), n) if batched else (n,)
    return {"logits": 2.0 * rng.normal(size=shape + (V,)), "ids": rng.integers(0, V, size=shape)}


def _lm_loss_ref(logits, ids):
    log_p = np.log(softmax(logits[..., :-1, :], axis=-1))              # (..., n-1, V): predictions 0..n-2
    targets = ids[..., 1:, None]                                       # (..., n-1, 1): tokens 1..n-1
    return float(-np.take_along_axis(log_p, targets, axis=-1).mean())


CASES["decoder.lm_loss"] = Case(lambda rng: _lm_loss_inputs(rng, True), _lm_loss_ref, ("loss",), tol=1e-9,
                                description="(b, n, V) logits, (b, n) ids; V > n")
CASES["decoder.lm_loss_1d"] = Case(lambda rng: _lm_loss_inputs(rng, False), _lm_loss_ref, ("loss",), tol=1e-9,
                                   description="(n, V) logits, (n,) ids")


# ---------------------------------------------------------------------------
# causal_self_attention(x, params, n_heads, cache=None) -> (output, weights, (keys, values)).
# Non-zero biases; n_past >= 2 and n_new >= 2 in the cached case, so a mask that
# ignores the cache offset, a cache that drops or repeats a position, or new keys put
# before the old ones show in the outputs or in the returned cache.
# ---------------------------------------------------------------------------
def _mha_params(rng, d_model):
    a = np.sqrt(6.0 / (2 * d_model))
    params = {k: rng.uniform(-a, a, (d_model, d_model)) for k in _MHA_KEYS[:4]}
    params.update({k: rng.normal(0.0, 0.3, size=d_model) for k in _MHA_KEYS[4:]})
    return params


def _attention(p, n_heads):
    """The package's MultiHeadAttention with the weights and biases of the params dict ``p``."""
    attention = MultiHeadAttention(p["W_Q"].shape[0], n_heads, rng=np.random.default_rng(0))
    return attention.set_weights(*(p[k] for k in _MHA_KEYS))


def _causal_inputs(rng, lead, n_past, n_new):
    n_heads = int(rng.integers(2, 4))
    d_head = int(rng.integers(2, 5))
    d_model = n_heads * d_head
    inputs = {"x": 1.5 * rng.normal(size=lead + (n_new, d_model)), "params": _mha_params(rng, d_model),
              "n_heads": n_heads}
    if n_past:
        inputs["cache"] = (rng.normal(size=lead + (n_heads, n_past, d_head)),
                           rng.normal(size=lead + (n_heads, n_past, d_head)))
    return inputs


def _causal_ref(x, params, n_heads, cache=None):
    past = None if cache is None else KVCache(*cache)                    # (..., h, n_past, d_head) each
    output, weights, new = causal_self_attention(x, params, n_heads, past)
    return output, weights, new.keys, new.values                         # keys, values (..., h, n_past + n_new, d_head)


def _batch(rng):
    return (int(rng.integers(2, 4)),)


CASES["decoder.causal_self_attention"] = Case(
    lambda rng: _causal_inputs(rng, _batch(rng), 0, int(rng.integers(4, 8))), _causal_ref,
    ("output", "weights", "keys", "values"), description="batched, no cache: a whole sequence at once")
CASES["decoder.causal_self_attention_cached"] = Case(
    lambda rng: _causal_inputs(rng, _batch(rng), int(rng.integers(2, 6)), int(rng.integers(2, 5))), _causal_ref,
    ("output", "weights", "keys", "values"), description="batched, n_past 2..5 cached positions, n_new 2..4 new tokens")
CASES["decoder.causal_self_attention_one_step"] = Case(
    lambda rng: _causal_inputs(rng, (), int(rng.integers(3, 7)), 1), _causal_ref,
    ("output", "weights", "keys", "values"), description="2-D x (1, d_model), cache (h, n_past, d_head): one generation step")


# ---------------------------------------------------------------------------
# cross_attention(x, memory, params, n_heads, memory_mask=None) -> (output, weights).
# n_dec != n_enc, every bias non-zero; a padding mask that hides 1..n_enc-1 source tokens.
# ---------------------------------------------------------------------------
def _cross_inputs(rng, batched):
    n_heads = int(rng.integers(2, 4))
    d_model = n_heads * int(rng.integers(2, 5))
    n_dec = int(rng.integers(3, 7))
    n_enc = n_dec + int(rng.integers(1, 5))
    lead = _batch(rng) if batched else ()
    inputs = {"x": rng.normal(size=lead + (n_dec, d_model)), "memory": 2.0 * rng.normal(size=lead + (n_enc, d_model)),
              "params": _mha_params(rng, d_model), "n_heads": n_heads}
    if batched:
        lengths = rng.integers(1, n_enc, size=lead)                       # every sequence has padding
        inputs["memory_mask"] = np.arange(n_enc)[None, :] < lengths[:, None]
    return inputs


def _cross_ref(x, memory, params, n_heads, memory_mask=None):
    return _attention(params, n_heads)(x, memory, memory, key_padding_mask=memory_mask)   # mask (..., n_enc)


CASES["decoder.cross_attention"] = Case(
    lambda rng: _cross_inputs(rng, True), _cross_ref, ("output", "weights"),
    description="batched, n_enc > n_dec, padded source (memory_mask)")
CASES["decoder.cross_attention_2d"] = Case(
    lambda rng: _cross_inputs(rng, False), _cross_ref, ("output", "weights"),
    description="(n_dec, d_model) and (n_enc, d_model), no mask")


# ---------------------------------------------------------------------------
# decoder_block(x, memory, params, n_heads, norm_first=False) -> (output, self_weights, cross_weights).
# params: {"self_attn": {...}, "cross_attn": {...}, "W_1", "b_1", "W_2", "b_2",
#          "ln1_gamma", "ln1_beta", "ln2_gamma", "ln2_beta", "ln3_gamma", "ln3_beta"}.
# ---------------------------------------------------------------------------
def _block_inputs(rng, norm_first):
    n_heads = int(rng.integers(2, 4))
    d_model = n_heads * int(rng.integers(2, 5))
    d_ff = d_model + int(rng.integers(3, 3 * d_model))
    b, n_dec = int(rng.integers(2, 4)), int(rng.integers(3, 7))
    n_enc = n_dec + int(rng.integers(1, 4))
    params = {"self_attn": _mha_params(rng, d_model), "cross_attn": _mha_params(rng, d_model),
              "W_1": rng.normal(size=(d_model, d_ff)) / np.sqrt(d_model), "b_1": rng.normal(0.0, 0.5, size=d_ff),
              "W_2": rng.normal(size=(d_ff, d_model)) / np.sqrt(d_ff), "b_2": rng.normal(0.0, 0.5, size=d_model)}
    for i in (1, 2, 3):
        params[f"ln{i}_gamma"] = 1.0 + 0.3 * rng.normal(size=d_model)
        params[f"ln{i}_beta"] = 0.3 * rng.normal(size=d_model)
    return {"x": 1.5 * rng.normal(size=(b, n_dec, d_model)), "memory": rng.normal(size=(b, n_enc, d_model)),
            "params": params, "n_heads": n_heads, "norm_first": norm_first}


def _block_ref(x, memory, params, n_heads, norm_first=False):
    d_model, d_ff = params["W_1"].shape
    block = TransformerDecoderBlock(d_model, n_heads, d_ff, rng=np.random.default_rng(0), norm_first=norm_first)
    block.self_attention = _attention(params["self_attn"], n_heads)
    block.cross_attention = _attention(params["cross_attn"], n_heads)
    block.feed_forward.set_weights(params["W_1"], params["b_1"], params["W_2"], params["b_2"])
    for i in (1, 2, 3):
        setattr(block, f"ln{i}_gamma", params[f"ln{i}_gamma"])
        setattr(block, f"ln{i}_beta", params[f"ln{i}_beta"])
    output, self_weights, cross_weights, _ = block(x, memory)
    return output, self_weights, cross_weights


CASES["decoder.block_post_ln"] = Case(
    lambda rng: _block_inputs(rng, False), _block_ref, ("output", "self_weights", "cross_weights"),
    description="post-LN decoder block, batched, n_enc > n_dec, all biases and LN parameters random")
CASES["decoder.block_pre_ln"] = Case(
    lambda rng: _block_inputs(rng, True), _block_ref, ("output", "self_weights", "cross_weights"),
    description="pre-LN decoder block, batched, n_enc > n_dec, all biases and LN parameters random")


# ---------------------------------------------------------------------------
# sampling_probabilities(logits, *, temperature, top_k, top_p) -> probs.
# Temperatures far from 1 (0.4..0.7 or 1.6..3), so a temperature applied after the
# softmax (which renormalisation undoes) or multiplied instead of divided shows. top_p
# is put in the middle of a gap between two cumulative sums of every row, more than
# 0.02 from each, so the nucleus is unambiguous and one token too few or too many shows.
# ---------------------------------------------------------------------------
def _temperature(rng):
    return float(rng.uniform(0.4, 0.7) if rng.random() < 0.5 else rng.uniform(1.6, 3.0))


def _safe_top_p(rng, probs, n_kept, margin=0.02):
    """A top_p at least ``margin`` away from every cumulative sum of every row's sorted probs,
    that keeps at least 2 and drops at least 1 of the first row's ``n_kept`` tokens with p > 0."""
    sums = np.cumsum(-np.sort(-probs, axis=-1), axis=-1)                      # (..., V)
    first = sums.reshape(-1, sums.shape[-1])[0]
    low, high = first[0] + margin, first[n_kept - 2] - margin
    if high <= low:
        return None
    for _ in range(1000):
        p = float(rng.uniform(low, high))
        if np.abs(sums - p).min() > margin:
            return p
    return None


def _sampling_inputs(rng, kind):
    for _ in range(1000):
        V = int(rng.integers(6, 13))
        lead = () if kind in ("top_k", "sample_k", "sample_p") else _batch(rng)
        logits = 1.5 * rng.normal(size=lead + (V,))
        inputs = {"logits": logits, "temperature": _temperature(rng)}
        if kind == "greedy":
            inputs["temperature"] = 0.0
        if kind == "saturated":                                          # huge logits and forbidden tokens
            inputs["logits"] = logits * 300.0
            inputs["logits"][..., 0] = -np.inf
            inputs["top_p"] = 0.9
            return inputs
        if kind in ("top_k", "top_k_p", "sample_k"):
            inputs["top_k"] = int(rng.integers(2, V - 1))
        if kind in ("top_p", "top_k_p", "sample_p"):
            base = sampling_probabilities(logits, temperature=inputs["temperature"], top_k=inputs.get("top_k"))
            top_p = _safe_top_p(rng, base, inputs.get("top_k", V))
            if top_p is None:
                continue
            inputs["top_p"] = top_p
            if kind == "top_k_p":                     # top-p must act on the renormalised top-k distribution:
                full = sampling_probabilities(logits, temperature=inputs["temperature"], top_p=top_p)
                if np.array_equal(sampling_probabilities(**inputs) > 0, (full > 0) & (base > 0)):
                    continue                          # ... draw again until the order of the two matters
        if kind.startswith("sample"):
            probs = sampling_probabilities(**inputs)
            if probs[probs > 0].min() < 0.05:                             # every kept token drawn often
                continue
            inputs["seed"] = int(rng.integers(2**31))
        return inputs
    raise RuntimeError(f"could not draw a {kind} sampling case")


def _sampling_ref(logits, temperature=1.0, top_k=None, top_p=None):
    return sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)


for _kind, _desc in [
        ("temperature", "(b, V), temperature 0.4..0.7 or 1.6..3, no truncation"),
        ("top_k", "(V,), top_k 2..V-2 after a temperature"),
        ("top_p", "(b, V), top_p in a gap of every row's cumulative sums (margin 0.02)"),
        ("top_k_p", "(b, V), top_k then top_p on the renormalised top-k distribution"),
        ("greedy", "(b, V), temperature 0: one-hot at the argmax"),
        ("saturated", "(b, V), logits of size ~500 (a saturated softmax), token 0 forbidden (-inf), top_p 0.9")]:
    CASES[f"decoder.sampling_{_kind}"] = Case(
        (lambda kind: lambda rng: _sampling_inputs(rng, kind))(_kind), _sampling_ref, ("probs",), tol=1e-9,
        description=_desc)


# top_p exactly at a running sum. Each row holds 2, 4 or 8 equal logits (the others -inf), so every
# probability is exactly 1/k and every running sum exact, whatever order a correct implementation sums
# in; top_p in {0.25, 0.5, 0.75} is then a multiple of 1/4 and 1/8: the smallest set that reaches it
# ends at that token, and "mass before <= p" (or searchsorted on the right) keeps one token too many.
# Which of the tied tokens are kept is not specified: the hidden test compares each row sorted.
def _top_p_boundary_inputs(rng):
    b, V = int(rng.integers(3, 6)), int(rng.integers(9, 14))
    logits = np.full((b, V), -np.inf)
    for row, k in enumerate(rng.permutation([2, 4, 8] + [int(rng.choice([4, 8])) for _ in range(b - 3)])):
        logits[row, rng.choice(V, size=k, replace=False)] = rng.uniform(-3.0, 3.0)
    return {"logits": logits, "temperature": _temperature(rng), "top_p": float(rng.choice([0.25, 0.5, 0.75]))}


def _top_p_boundary_ref(logits, temperature, top_p):
    return np.sort(sampling_probabilities(logits, temperature=temperature, top_p=top_p), axis=-1)


CASES["decoder.sampling_top_p_boundary"] = Case(
    _top_p_boundary_inputs, _top_p_boundary_ref, ("sorted_probs",), tol=1e-9,
    description="(b, V), rows of 2/4/8 equal logits (-inf elsewhere), top_p 0.25/0.5/0.75 exactly at a running sum")


# ---------------------------------------------------------------------------
# sample_next_token(logits, *, rng, temperature, top_k, top_p): the hidden test draws
# N_DRAWS tokens with np.random.default_rng(seed) and reports (drawn at least once,
# frequencies). Every kept token has p >= 0.05, so it is missed in 5000 draws with
# probability (0.95)^5000 < 1e-100, and a dropped token is never drawn: the support
# must match exactly. Frequencies: |f - p| <= 5 sigma, sigma = sqrt(p (1 - p) / N), fails
# with probability < 1e-6 per token; as a relative error |f - p| / (f + p) that is at most
# 5 sqrt((1 - p) / (p N)) / (2 - 5 sqrt((1 - p) / (p N))) = 0.18 for p = 0.05, N = 5000,
# so tol = 0.25.
# ---------------------------------------------------------------------------
N_DRAWS = 5000   # the hidden test cell of notebook 08 draws this many


def _sample_ref(logits, seed, temperature=1.0, top_k=None, top_p=None):
    probs = sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return (probs > 0).astype(float), probs


CASES["decoder.sample_next_token_top_k"] = Case(
    lambda rng: _sampling_inputs(rng, "sample_k"), _sample_ref, ("support", "frequencies"), tol=0.25,
    description=f"{N_DRAWS} draws, temperature far from 1, top_k; every kept p >= 0.05")
CASES["decoder.sample_next_token_top_p"] = Case(
    lambda rng: _sampling_inputs(rng, "sample_p"), _sample_ref, ("support", "frequencies"), tol=0.25,
    description=f"{N_DRAWS} draws, temperature far from 1, top_p in a gap; every kept p >= 0.05")


# ---------------------------------------------------------------------------
# generate(step_fn, prompt_ids, n_new, *, rng, temperature, top_k, top_p) -> ids.
# The hidden test builds step_fn(ids) = A[ids[-1]] + B[len(ids) - 1] + bincount(ids) @ C:
# the logits depend on the last token, on the length and on every token so far, so
# a loop that drops the prompt, passes a shorter prefix, or stops one step early shows.
# ---------------------------------------------------------------------------
def _generate_inputs(rng, sampled):
    V = int(rng.integers(8, 20))
    n_prompt, n_new = int(rng.integers(1, 5)), int(rng.integers(6, 12))
    inputs = {"A": rng.normal(size=(V, V)), "B": rng.normal(size=(n_prompt + n_new, V)),
              "C": rng.normal(size=(V, V)), "prompt_ids": rng.integers(0, V, size=n_prompt), "n_new": n_new}
    if sampled:
        # a high temperature: sampling without top_k=1 would leave the greedy path within a few steps
        inputs.update(seed=int(rng.integers(2**31)), temperature=float(rng.uniform(3.0, 6.0)))
    return inputs


def _generate_ref(A, B, C, prompt_ids, n_new, seed=None, temperature=0.0):
    V = A.shape[0]

    def step(ids):
        return A[ids[-1]] + B[len(ids) - 1] + np.bincount(ids, minlength=V) @ C

    # Sampled case: top_k = 1 leaves one token whatever the rng draws, so the result is the greedy one.
    return generate(step, prompt_ids, n_new, temperature=0.0).astype(float)


CASES["decoder.generate_greedy"] = Case(
    lambda rng: _generate_inputs(rng, False), _generate_ref, ("ids",), tol=1e-12,
    description="temperature 0; logits depend on the last token, the length and the counts of all tokens")
CASES["decoder.generate_top_k1"] = Case(
    lambda rng: _generate_inputs(rng, True), _generate_ref, ("ids",), tol=1e-12,
    description="temperature 3..6 with top_k=1 and a seeded rng: must equal greedy")


# The package computes language_model_loss as cross_entropy of the shifted pair, and sampling_probabilities
# from keep_top_k and keep_top_p (the truncations): with those the exercises are one line each, so they count
# as their twins.
TWINS = {"language_model_loss": ("cross_entropy",), "sampling_probabilities": ("keep_top_k", "keep_top_p")}

# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py
# (declared from the cases as they are; the notebook's author should extend it with what its
# docstrings promise beyond these, e.g. a fully masked memory row in cross-attention).
COVERAGE = {
    "lm_loss": {"cases": ("decoder.lm_loss", "decoder.lm_loss_1d"), "requires": {"rank2", "rank3"}},
    "causal_self_attention": {
        "cases": ("decoder.causal_self_attention", "decoder.causal_self_attention_cached",
                  "decoder.causal_self_attention_one_step"),
        "requires": {"rank2", "rank3"}},
    "cross_attention": {"cases": ("decoder.cross_attention", "decoder.cross_attention_2d"),
                        "requires": {"rank2", "rank3", "cross"}},
    "decoder_block": {"cases": ("decoder.block_post_ln", "decoder.block_pre_ln"), "requires": {"rank3", "cross"}},
    "sampling": {"cases": ("decoder.sampling_greedy", "decoder.sampling_temperature", "decoder.sampling_top_k",
                           "decoder.sampling_top_p", "decoder.sampling_top_k_p", "decoder.sampling_saturated",
                           "decoder.sampling_top_p_boundary"),
                 "requires": {"rank1", "rank2", "saturated", "top_p_at_running_sum"}},
    "sample_next_token": {"cases": ("decoder.sample_next_token_top_k", "decoder.sample_next_token_top_p"),
                          "requires": {"rank1"}},
    "generate": {"cases": ("decoder.generate_greedy", "decoder.generate_top_k1"), "requires": set()},
}
