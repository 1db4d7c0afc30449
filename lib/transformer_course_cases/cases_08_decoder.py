"""Hidden-test cases of notebook 08 (the decoder: LM loss, cached causal attention, cross-attention,
decoder block, sampling, generation)."""

from __future__ import annotations

import numpy as np

from transformer_course.decoder import KVCache, TransformerDecoderBlock, causal_self_attention
from transformer_course.generation import generate, sampling_probabilities
from transformer_course.multihead import MultiHeadAttention
from transformer_course.softmax import softmax
from . import CASES, Case
from ._precision import FLOAT32_TOL, FLOAT64_TOL, as_dtype, float64_reference, row_offsets

# Every float64 case below holds a correct float64 implementation to FLOAT64_TOL of each output's scale,
# every float32 case holds the float32 result to FLOAT32_TOL of the float64 one (_precision.py says why).
F64 = {"tol": FLOAT64_TOL, "floor": 1.0}
F32 = {"tol": FLOAT32_TOL, "floor": 1.0}

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


def _lm_loss_offset_inputs(rng):
    """Two leading axes, every row of logits shifted by 750..1000 either way: exp overflows (or gives 0
    everywhere) unless the row maximum is subtracted first; the loss itself is unchanged by the shift."""
    n = int(rng.integers(3, 7))
    V = int(rng.integers(n + 2, n + 9))
    lead = (int(rng.integers(2, 4)), int(rng.integers(2, 4)))
    logits = 2.0 * rng.normal(size=lead + (n, V)) + row_offsets(rng, lead + (n,))
    return {"logits": logits, "ids": rng.integers(0, V, size=lead + (n,))}


def _lm_loss_two_tokens_inputs(rng):
    """n = 2: one scored position (row 0 against token 1), V 2..4."""
    V = int(rng.integers(2, 5))
    return {"logits": 2.0 * rng.normal(size=(2, V)), "ids": rng.integers(0, V, size=2)}


_LOSS = {"dtypes": ("float64",), **F64}     # "returns: float": a Python float is float64
CASES["decoder.lm_loss"] = Case(lambda rng: _lm_loss_inputs(rng, True), _lm_loss_ref, ("loss",), **_LOSS,
                                description="(b, n, V) logits, (b, n) ids; V > n")
CASES["decoder.lm_loss_1d"] = Case(lambda rng: _lm_loss_inputs(rng, False), _lm_loss_ref, ("loss",), **_LOSS,
                                   description="(n, V) logits, (n,) ids")
CASES["decoder.lm_loss_offset"] = Case(_lm_loss_offset_inputs, _lm_loss_ref, ("loss",), **_LOSS,
                                       description="(a, b, n, V): two leading axes, rows offset by +-750..1000")
CASES["decoder.lm_loss_two_tokens"] = Case(_lm_loss_two_tokens_inputs, _lm_loss_ref, ("loss",), **_LOSS,
                                           description="(2, V) logits, 2 ids: a single scored position")


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


def _causal_large_inputs(rng):
    """Sequence 0 of the batch scaled by 40: its scores reach the thousands (exp overflows without the
    max shift) and its causal rows saturate; the other sequences are ordinary."""
    inputs = _causal_inputs(rng, _batch(rng), int(rng.integers(2, 5)), int(rng.integers(2, 5)))
    inputs["x"][0] *= 40.0
    inputs["cache"][0][0] *= 40.0
    return inputs


def _causal_float32_inputs(rng, cached):
    n_past = int(rng.integers(2, 5)) if cached else 0
    return as_dtype(_causal_inputs(rng, _batch(rng), n_past, int(rng.integers(2, 5))), np.float32)


def _causal_one_head_inputs(rng):
    """One head (d_head = d_model) and a single token without a cache: weights (1, 1, 1), output (1, d)."""
    d_model = int(rng.integers(2, 7))
    return {"x": 1.5 * rng.normal(size=(1, d_model)), "params": _mha_params(rng, d_model), "n_heads": 1}


_ATTN4 = ("output", "weights", "keys", "values")
CASES["decoder.causal_self_attention"] = Case(
    lambda rng: _causal_inputs(rng, _batch(rng), 0, int(rng.integers(4, 8))), _causal_ref, _ATTN4,
    dtypes=("float64",) * 4, **F64, description="batched, no cache: a whole sequence at once")
CASES["decoder.causal_self_attention_cached"] = Case(
    lambda rng: _causal_inputs(rng, _batch(rng), int(rng.integers(2, 6)), int(rng.integers(2, 5))), _causal_ref,
    _ATTN4, dtypes=("float64",) * 4, **F64,
    description="batched, n_past 2..5 cached positions, n_new 2..4 new tokens")
CASES["decoder.causal_self_attention_one_step"] = Case(
    lambda rng: _causal_inputs(rng, (), int(rng.integers(3, 7)), 1), _causal_ref, _ATTN4,
    dtypes=("float64",) * 4, **F64,
    description="2-D x (1, d_model), cache (h, n_past, d_head): one generation step")
CASES["decoder.causal_self_attention_large"] = Case(
    _causal_large_inputs, _causal_ref, _ATTN4, dtypes=("float64",) * 4, **F64,
    description="batched with a cache; sequence 0 (x and its cached keys) scaled by 40: scores in the thousands")
CASES["decoder.causal_self_attention_one_head"] = Case(
    _causal_one_head_inputs, _causal_ref, _ATTN4, dtypes=("float64",) * 4, **F64,
    description="n_heads 1, one token (1, d_model), no cache")
CASES["decoder.causal_self_attention_float32"] = Case(
    lambda rng: _causal_float32_inputs(rng, False), float64_reference(_causal_ref), _ATTN4,
    dtypes=("float32",) * 4, **F32, description="float32 x and params, no cache: float32 output, weights, keys, values")
CASES["decoder.causal_self_attention_float32_cached"] = Case(
    lambda rng: _causal_float32_inputs(rng, True), float64_reference(_causal_ref), _ATTN4,
    dtypes=("float32",) * 4, **F32, description="float32 x, params and cache (batched): float32 throughout")


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


def _cross_fully_padded_inputs(rng):
    """Batched; one source sequence is padding from end to end (memory_mask all False): its queries see no
    key, so their weights are 0 (notebook 01's rule for a fully masked row) and their output is b_O."""
    inputs = _cross_inputs(rng, True)
    inputs["memory_mask"][int(rng.integers(0, inputs["memory_mask"].shape[0]))] = False
    return inputs


def _cross_one_token_inputs(rng):
    """One head, one decoder token, one source token: weights (1, 1, 1) = 1."""
    d_model = int(rng.integers(2, 7))
    return {"x": rng.normal(size=(1, d_model)), "memory": 2.0 * rng.normal(size=(1, d_model)),
            "params": _mha_params(rng, d_model), "n_heads": 1}


CASES["decoder.cross_attention"] = Case(
    lambda rng: _cross_inputs(rng, True), _cross_ref, ("output", "weights"), dtypes=("float64",) * 2, **F64,
    description="batched, n_enc > n_dec, padded source (memory_mask)")
CASES["decoder.cross_attention_2d"] = Case(
    lambda rng: _cross_inputs(rng, False), _cross_ref, ("output", "weights"), dtypes=("float64",) * 2, **F64,
    description="(n_dec, d_model) and (n_enc, d_model), no mask")
CASES["decoder.cross_attention_fully_padded"] = Case(
    _cross_fully_padded_inputs, _cross_ref, ("output", "weights"), dtypes=("float64",) * 2, **F64,
    description="batched, padded source, one source sequence entirely padding (memory_mask row all False)")
CASES["decoder.cross_attention_one_token"] = Case(
    _cross_one_token_inputs, _cross_ref, ("output", "weights"), dtypes=("float64",) * 2, **F64,
    description="n_heads 1, x (1, d_model), memory (1, d_model)")
CASES["decoder.cross_attention_float32"] = Case(
    lambda rng: as_dtype(_cross_inputs(rng, True), np.float32), float64_reference(_cross_ref), ("output", "weights"),
    dtypes=("float32",) * 2, **F32, description="float32 x, memory and params, batched with padding")


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


_BLOCK3 = ("output", "self_weights", "cross_weights")
CASES["decoder.block_post_ln"] = Case(
    lambda rng: _block_inputs(rng, False), _block_ref, _BLOCK3, dtypes=("float64",) * 3, **F64,
    description="post-LN decoder block, batched, n_enc > n_dec, all biases and LN parameters random")
CASES["decoder.block_pre_ln"] = Case(
    lambda rng: _block_inputs(rng, True), _block_ref, _BLOCK3, dtypes=("float64",) * 3, **F64,
    description="pre-LN decoder block, batched, n_enc > n_dec, all biases and LN parameters random")
CASES["decoder.block_float32"] = Case(
    lambda rng: as_dtype(_block_inputs(rng, bool(rng.integers(0, 2))), np.float32), float64_reference(_block_ref),
    _BLOCK3, dtypes=("float32",) * 3, **F32, description="float32 inputs and params, post- or pre-LN")


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
        (lambda kind: lambda rng: _sampling_inputs(rng, kind))(_kind), _sampling_ref, ("probs",), **F64,
        description=_desc)


def _sampling_defaults_inputs(rng):
    """Logits alone: temperature 1, no top-k, no top-p -- the defaults -- must be the plain softmax."""
    return {"logits": 1.5 * rng.normal(size=_batch(rng) + (int(rng.integers(5, 13)),))}


def _sampling_offset_inputs(rng):
    """Every row shifted by 750..1000 either way (after the temperature still beyond exp's range)."""
    b, V = _batch(rng)[0], int(rng.integers(5, 13))
    return {"logits": 1.5 * rng.normal(size=(b, V)) + 3.0 * row_offsets(rng, (b,)),
            "temperature": float(rng.uniform(1.6, 3.0))}


def _sampling_cold_inputs(rng):
    """A temperature near 0 (max |logit| / T = 800..1500: exp overflows without the max shift) that is
    not 0: row 0's runner-up sits 3 T below its best, so its probability e^-3 / (1 + e^-3) is no rounding."""
    b, V = _batch(rng)[0], int(rng.integers(5, 13))
    logits = 1.5 * rng.normal(size=(b, V))
    best, second = rng.choice(V, size=2, replace=False)
    logits[0, best] = logits[0].max() + 0.1                    # the others at least 0.1 = 80+ T below
    temperature = float(np.abs(logits).max() / rng.uniform(800.0, 1500.0))
    logits[0, second] = logits[0, best] - 3.0 * temperature
    return {"logits": logits, "temperature": temperature}


def _greedy_ties_inputs(rng):
    """Temperature 0 where every row's maximum is shared by 2 or 3 tokens: the lowest index wins."""
    b, V = _batch(rng)[0], int(rng.integers(5, 13))
    logits = 1.5 * rng.normal(size=(b, V))
    for row in logits:
        row[rng.choice(V, size=int(rng.integers(2, 4)), replace=False)] = row.max() + float(rng.uniform(0.1, 1.0))
    return {"logits": logits, "temperature": 0.0}


def _top_k_ties_inputs(rng):
    """Rows whose k-th largest logit is tied with the (k+1)-th: exactly k tokens must stay. Which of the
    tied ones stay is free, so the hidden test compares each row sorted."""
    b, V = _batch(rng)[0], int(rng.integers(8, 13))
    top_k = int(rng.integers(2, V - 3))
    logits = np.empty((b, V))
    for row in logits:
        above = int(rng.integers(0, top_k))                   # tokens strictly above the tie
        tied = int(rng.integers(top_k - above + 1, V - above + 1))
        values = np.concatenate([rng.uniform(1.5, 3.0, above), np.full(tied, 1.0),
                                 rng.uniform(-2.0, 0.5, V - above - tied)])
        row[:] = values[rng.permutation(V)]
    return {"logits": logits, "temperature": _temperature(rng), "top_k": top_k}


def _sampling_no_cut_inputs(rng):
    """top_k above V and top_p = 1: nothing is cut, the result is softmax(logits / T)."""
    b, V = _batch(rng)[0], int(rng.integers(5, 13))
    return {"logits": 1.5 * rng.normal(size=(b, V)), "temperature": _temperature(rng),
            "top_k": V + int(rng.integers(1, 5)), "top_p": 1.0}


def _sampling_one_token_inputs(rng):
    """top_p below every row's largest probability: the nucleus is that token alone."""
    b, V = _batch(rng)[0], int(rng.integers(5, 13))
    logits = 1.5 * rng.normal(size=(b, V))
    temperature = _temperature(rng)
    largest = sampling_probabilities(logits, temperature=temperature).max(axis=-1).min()
    return {"logits": logits, "temperature": temperature, "top_p": float(largest * rng.uniform(0.2, 0.9))}


def _sorted_sampling_ref(logits, temperature=1.0, top_k=None, top_p=None):
    return np.sort(sampling_probabilities(logits, temperature=temperature, top_k=top_k, top_p=top_p), axis=-1)


for _kind, _make, _desc in [
        ("defaults", _sampling_defaults_inputs, "(b, V) logits only: temperature 1, no truncation by default"),
        ("offset", _sampling_offset_inputs, "(b, V), rows offset by +-2250..3000, temperature 1.6..3"),
        ("cold", _sampling_cold_inputs, "(b, V), temperature max|logit| / (800..1500), a runner-up 3 T below"),
        ("greedy_ties", _greedy_ties_inputs, "(b, V), temperature 0, each row's maximum shared by 2 or 3 tokens"),
        ("no_cut", _sampling_no_cut_inputs, "(b, V), top_k = V + 1..4 and top_p = 1: nothing is cut"),
        ("one_token", _sampling_one_token_inputs, "(b, V), top_p below every row's largest probability")]:
    CASES[f"decoder.sampling_{_kind}"] = Case(_make, _sampling_ref, ("probs",), **F64, description=_desc)
CASES["decoder.sampling_top_k_ties"] = Case(
    _top_k_ties_inputs, _sorted_sampling_ref, ("sorted_probs",), **F64,
    description="(b, V), the k-th and (k+1)-th largest logits tied: k tokens kept (compared sorted)")


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
    _top_p_boundary_inputs, _top_p_boundary_ref, ("sorted_probs",), **F64,
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


# The draw at the boundaries. The docstring's one u = rng.random() per draw makes P(token j) = p_j exactly
# when token j owns [c_(j-1), c_j) of [0, 1) (c the running sums; any order of the tokens will do). The
# hidden test hands sample_next_token real numpy Generators whose next random() is known: u = k/16 for
# k = 0..15, then the largest u random() returns, 1 - 2**-53. The logits are 2, 4 or 8 equal values and
# -inf (token 0 and the last token among them), so every p_j and every running sum is exact: each kept
# token must be drawn for exactly 16 p_j of the 16 grid values (u = 0 and u on a boundary included: a
# search that puts u = c_j into token j's interval, or draws a token of probability 0 at u = 0, miscounts),
# and the largest u must draw a token of probability > 0. rng.choice(V, p=probs) is numpy's inverse CDF
# of one random() with that convention, so it counts the same.
_PCG64_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645            # numpy's PCG64 (pcg64.h)
_M64, _M128 = (1 << 64) - 1, (1 << 128) - 1
BOUNDARY_DRAWS = [k / 16 for k in range(16)] + [1 - 2**-53]


def _pcg64_state_before(u, inc, rng) -> int:
    """A PCG64 state whose next 64-bit output is one that ``random()`` turns into ``u`` (a multiple of 2**-53).

    numpy's PCG64 steps its 128-bit LCG state (state * multiplier + inc) and outputs the XSL-RR of the new
    state: rotr64(high ^ low, high >> 122); random() is (output >> 11) * 2**-53. So pick the new state's
    high half freely, solve for its low half, and step the LCG back once.
    """
    k = int(round(u * 2**53))
    output = (k << 11) | int(rng.integers(0, 1 << 11))
    high = int(rng.integers(0, 1 << 62)) << 2 | int(rng.integers(0, 4))
    rot = high >> 58
    low = high ^ (((output << rot) | (output >> (64 - rot))) & _M64 if rot else output)
    after = (high << 64) | low
    return ((after - inc) * pow(_PCG64_MULTIPLIER, -1, 1 << 128)) & _M128


def _boundary_inputs(rng):
    V = int(rng.integers(6, 13))
    k = int(rng.choice([2, 4, 8][:1 + int(V >= 6) + int(V >= 10)]))
    logits = np.full(V, -np.inf)
    logits[1 + rng.choice(V - 2, size=k, replace=False)] = float(rng.uniform(-3.0, 3.0))
    inc = (int(rng.integers(0, 1 << 63)) << 65 | int(rng.integers(0, 1 << 63)) << 1 | 1) & _M128
    return {"logits": logits, "temperature": _temperature(rng), "inc": inc,
            "states": [_pcg64_state_before(u, inc, rng) for u in BOUNDARY_DRAWS]}


def _boundary_ref(logits, temperature, inc, states):
    probs = sampling_probabilities(logits, temperature=temperature)
    return probs * (len(states) - 1), 1.0


CASES["decoder.sample_next_token_boundaries"] = Case(
    _boundary_inputs, _boundary_ref, ("counts", "last_token_allowed"), **F64,
    description="u = k/16 and 1 - 2**-53 from Generators set to those draws; 2/4/8 equal logits, first and "
                "last token forbidden: counts 16 p_j exactly")


# Reproducibility: the same Generator state gives the same draws. 200 draws twice, each run from
# np.random.default_rng(seed); every kept p >= 0.05 and at least two kept, so two independent runs (the global
# np.random, or a fresh unseeded Generator per call) agree with probability <= 0.905^200 < 1e-8.
N_REPRODUCE = 200


def _reproduce_ref(logits, seed, temperature=1.0, top_k=None, top_p=None):
    return 1.0


CASES["decoder.sample_next_token_reproducible"] = Case(
    lambda rng: _sampling_inputs(rng, "sample_k"), _reproduce_ref, ("same",), **F64,
    description=f"{N_REPRODUCE} draws twice from default_rng(seed): the same tokens")


def _sample_greedy_inputs(rng):
    inputs = _greedy_ties_inputs(rng)
    return {"logits": inputs["logits"][0], "temperature": 0.0}


def _sample_greedy_ref(logits, temperature):
    return np.int64(np.argmax(logits))


CASES["decoder.sample_next_token_greedy"] = Case(
    _sample_greedy_inputs, _sample_greedy_ref, ("token",), dtypes=("integer",), **F64,
    description="temperature 0 with rng=None, the maximum shared by 2 or 3 tokens: the lowest index")


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
    return generate(step, prompt_ids, n_new, temperature=0.0)


def _generate_nothing_new_inputs(rng):
    inputs = _generate_inputs(rng, False)
    inputs["n_new"] = 0
    return inputs


_IDS = {"dtypes": ("integer",), "tol": 1e-12}       # "returns: 1-D int array"; ids compare exactly
CASES["decoder.generate_greedy"] = Case(
    lambda rng: _generate_inputs(rng, False), _generate_ref, ("ids",), **_IDS,
    description="temperature 0; logits depend on the last token, the length and the counts of all tokens")
CASES["decoder.generate_top_k1"] = Case(
    lambda rng: _generate_inputs(rng, True), _generate_ref, ("ids",), **_IDS,
    description="temperature 3..6 with top_k=1 and a seeded rng: must equal greedy")
CASES["decoder.generate_nothing_new"] = Case(
    _generate_nothing_new_inputs, _generate_ref, ("ids",), **_IDS,
    description="n_new = 0: the prompt itself, as an int array")


# Reproducibility: the hidden test generates 30 tokens twice, each time from np.random.default_rng(seed), with
# step_fn(ids) = A[ids[-1]] + B[len(ids) - 1] at temperature 3..6: every step's distribution is flat enough
# (V >= 8, logits ~ N(0, 2) / 3) that two independent generations (the global np.random, a fresh unseeded
# Generator per step) agree in all 30 tokens with probability far below 1e-10.
def _generate_reproducible_inputs(rng):
    V, n_prompt = int(rng.integers(8, 20)), int(rng.integers(1, 5))
    return {"A": rng.normal(size=(V, V)), "B": rng.normal(size=(n_prompt + 30, V)),
            "prompt_ids": rng.integers(0, V, size=n_prompt), "n_new": 30, "seed": int(rng.integers(2**31)),
            "temperature": float(rng.uniform(3.0, 6.0))}


CASES["decoder.generate_reproducible"] = Case(
    _generate_reproducible_inputs, lambda **inputs: 1.0, ("same",), **F64,
    description="30 sampled tokens (temperature 3..6) twice from default_rng(seed): the same ids")


# The defaults: generate(step_fn, prompt_ids, n_new, rng=rng) samples at temperature 1 without truncation.
# Two tokens with logits 0 and +-Delta, Delta in 1.2..1.5, the same every step: N_DEFAULT new tokens, each
# token's frequency within 6 sigma of its probability p >= sigmoid(-1.5) = 0.18 (sigma = sqrt(p (1 - p) / N):
# a correct generate fails with probability < 1e-8): as a relative error |f - p| / (f + p) ~ 6 sigma / 2p
# = 3 sqrt((1 - p) / (p N)) <= 0.101 at N = 4000, so tol = 0.11. A default temperature of 0.7 or less moves
# the smaller probability by a relative 0.20 or more (greedy, 0, by 1), one of 1.5 or more by 0.14 or more.
N_DEFAULT = 4000


def _generate_defaults_inputs(rng):
    delta = float(rng.uniform(1.2, 1.5)) * float(rng.choice([-1.0, 1.0]))
    return {"logits": np.array([0.0, delta]), "prompt_ids": rng.integers(0, 2, size=int(rng.integers(1, 4))),
            "seed": int(rng.integers(2**31))}


def _generate_defaults_ref(logits, prompt_ids, seed):
    return softmax(logits)


CASES["decoder.generate_defaults"] = Case(
    _generate_defaults_inputs, _generate_defaults_ref, ("frequencies",), tol=0.11,
    description=f"{N_DEFAULT} tokens without temperature, top_k, top_p: frequencies of softmax(logits) (2 tokens)")


# The package computes language_model_loss as cross_entropy of the shifted pair, and sampling_probabilities
# from keep_top_k and keep_top_p (the truncations): with those the exercises are one line each, so they count
# as their twins.
TWINS = {"language_model_loss": ("cross_entropy",), "sampling_probabilities": ("keep_top_k", "keep_top_p")}

# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py: every leading
# shape, scores or logits beyond exp's range, a fully padded source, greedy ties and the top-p boundary.
# (The defaults, the seeded draws and the dtypes are what the cases' calls and Case.dtypes check.)
COVERAGE = {
    "lm_loss": {"cases": ("decoder.lm_loss", "decoder.lm_loss_1d", "decoder.lm_loss_offset",
                          "decoder.lm_loss_two_tokens"),
                "requires": {"rank2", "rank3", "rank4", "overflow_range"}},
    "causal_self_attention": {
        "cases": ("decoder.causal_self_attention", "decoder.causal_self_attention_cached",
                  "decoder.causal_self_attention_one_step", "decoder.causal_self_attention_large",
                  "decoder.causal_self_attention_one_head", "decoder.causal_self_attention_float32",
                  "decoder.causal_self_attention_float32_cached"),
        "requires": {"rank2", "rank3", "float32"}},
    "cross_attention": {"cases": ("decoder.cross_attention", "decoder.cross_attention_2d",
                                  "decoder.cross_attention_fully_padded", "decoder.cross_attention_one_token",
                                  "decoder.cross_attention_float32"),
                        "requires": {"rank2", "rank3", "cross", "fully_masked", "float32"}},
    "decoder_block": {"cases": ("decoder.block_post_ln", "decoder.block_pre_ln", "decoder.block_float32"),
                      "requires": {"rank3", "cross", "float32"}},
    "sampling": {"cases": ("decoder.sampling_greedy", "decoder.sampling_temperature", "decoder.sampling_top_k",
                           "decoder.sampling_top_p", "decoder.sampling_top_k_p", "decoder.sampling_saturated",
                           "decoder.sampling_top_p_boundary", "decoder.sampling_defaults", "decoder.sampling_offset",
                           "decoder.sampling_cold", "decoder.sampling_greedy_ties", "decoder.sampling_no_cut",
                           "decoder.sampling_one_token", "decoder.sampling_top_k_ties"),
                 "requires": {"rank1", "rank2", "saturated", "top_p_at_running_sum", "overflow_range", "tied_max"}},
    "sample_next_token": {"cases": ("decoder.sample_next_token_top_k", "decoder.sample_next_token_top_p",
                                    "decoder.sample_next_token_boundaries", "decoder.sample_next_token_reproducible",
                                    "decoder.sample_next_token_greedy"),
                          "requires": {"rank1", "tied_max"}},
    "generate": {"cases": ("decoder.generate_greedy", "decoder.generate_top_k1", "decoder.generate_nothing_new",
                           "decoder.generate_reproducible", "decoder.generate_defaults"), "requires": set()},
}
