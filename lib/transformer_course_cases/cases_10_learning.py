"""Hidden-test cases of notebook 10 (backward passes).

The references are the package's backward passes (transformer_course.backward), themselves checked
against finite differences and PyTorch's autograd (tests/test_backward.py). The inputs are chosen so
that the classic bugs show:

* softmax: (batch, rows, keys) all different, so a sum over the wrong axis fails; rows with exact
  zeros (masked keys) and saturated rows;
* attention: n_q != n_k and d_k != d_v (a transposed dK or a 1/sqrt(d_v) fails), d_k != 1 (a missing
  1/sqrt(d_k) fails), boolean and additive masks incl. a fully masked row (gradient through a blocked
  key fails);
* layer norm: inputs with a large mean and rows of small variance (a missing mean term, a forgotten
  eps or the unbiased variance fail), gamma far from 1, two leading axes (dgamma summed over one only);
* feed-forward: pre-activations of both signs up to |u| ~ 3 (tanh-GELU's derivative is off by ~1e-3
  there, a ReLU-style or Phi-only derivative by more);
* cross-entropy: N > 1 positions (a missing 1/N fails); embeddings: repeated tokens (dE[ids] += g
  keeps only one of them).

* rows of logits or scores offset by 750..1000 either way (cross-entropy; an additive attention mask): a softmax
  without its max shift overflows or gives 0/0;
* eps passed explicitly is never the default 1e-5 (an argument ignored shows), and one case calls without it.

All arithmetic is float64, so a correct implementation agrees with the reference to round-off: every case holds
each output to FLOAT64_TOL = 1e-10 of its scale (_precision.py: round-off here stays below ~1e-13 of the scale
in any order of the sums; computing in float32 anywhere errs by ~1e-8 and fails, as the visible tests' 1e-15
row sums of notebook 10 already ask).
"""

from __future__ import annotations

import numpy as np

from transformer_course.backward import (
    attention_backward,
    cross_entropy_backward,
    embedding_backward,
    feed_forward_backward,
    layer_norm_backward,
    softmax_backward,
)
from transformer_course.softmax import softmax
from . import CASES, Case
from ._precision import FLOAT64_TOL, row_offsets

F64 = {"tol": FLOAT64_TOL, "floor": 1.0}


def _distinct(rng, low, high, k):
    """k different integers in low..high-1."""
    return [int(v) for v in rng.choice(np.arange(low, high), size=k, replace=False)]


# -- softmax -------------------------------------------------------------------------------------------

def _softmax_inputs(rng):
    b, m, n = _distinct(rng, 3, 10, 3)
    scores = rng.normal(0, 2.0, (b, m, n))
    blocked = rng.random((b, m, n)) < 0.3
    blocked[..., int(rng.integers(0, n))] = False           # every row keeps a key
    scores[blocked] = -np.inf
    scores[0, 0] = rng.normal(0, 1, n) + 40.0 * (np.arange(n) == int(rng.integers(0, n)))   # saturated
    return {"p": softmax(scores), "g": rng.normal(0, 1, (b, m, n))}


def _softmax_ref(p, g):
    return softmax_backward(p, g)


CASES["learning.softmax_backward"] = Case(
    _softmax_inputs, _softmax_ref, ("grad_scores",), **F64,
    description="(batch, rows, keys) all different; masked zeros and a saturated row; last axis")


def _softmax_2d_inputs(rng):
    """Unbatched (rows, keys): a fully masked row (p all 0: its gradient is 0, not NaN) and a saturated one."""
    m, n = _distinct(rng, 3, 10, 2)
    scores = rng.normal(0, 2.0, (m, n))
    scores[0] = -np.inf                                     # a query that sees no key: softmax gives zeros
    scores[1] += 40.0 * (np.arange(n) == int(rng.integers(0, n)))
    return {"p": softmax(scores), "g": rng.normal(0, 1, (m, n))}


CASES["learning.softmax_backward_2d"] = Case(
    _softmax_2d_inputs, _softmax_ref, ("grad_scores",), **F64,
    description="(rows, keys): a fully masked row of zeros and a saturated row")


# -- attention -----------------------------------------------------------------------------------------

def _attention_inputs(rng):
    b, h = _distinct(rng, 2, 5, 2)
    n_q, n_k = _distinct(rng, 3, 9, 2)
    d_k, d_v = _distinct(rng, 2, 9, 2)
    return {"grad_output": rng.normal(0, 1, (b, h, n_q, d_v)),
            "Q": rng.normal(0, 1, (b, h, n_q, d_k)), "K": rng.normal(0, 1, (b, h, n_k, d_k)),
            "V": rng.normal(0, 1, (b, h, n_k, d_v))}


def _attention_masked_inputs(rng):
    """n_q = n_k (a transposed dK has the right shape here), a causal or random mask, a fully masked row."""
    b = int(rng.integers(2, 5))
    n = int(rng.integers(4, 9))
    d_k, d_v = _distinct(rng, 2, 9, 2)
    mask = np.tril(np.ones((n, n), dtype=bool)) & (rng.random((b, n, n)) < 0.8)
    mask[:, :, 0] = True                                    # every row may attend to key 0 ...
    mask[0, -1] = False                                     # ... except one, fully masked
    if rng.random() < 0.5:                                  # the additive form: 0 or -inf
        mask = np.where(mask, 0.0, -np.inf)
    return {"grad_output": rng.normal(0, 1, (b, n, d_v)), "Q": rng.normal(0, 1.5, (b, n, d_k)),
            "K": rng.normal(0, 1.5, (b, n, d_k)), "V": rng.normal(0, 1, (b, n, d_v)), "mask": mask}


def _attention_ref(grad_output, Q, K, V, mask=None):
    return attention_backward(grad_output, Q, K, V, mask)


CASES["learning.attention_backward"] = Case(
    _attention_inputs, _attention_ref, ("dQ", "dK", "dV"), **F64,
    description="(batch, heads, n, d) with n_q != n_k and d_k != d_v, no mask")
def _attention_2d_inputs(rng):
    """Unbatched cross-attention (n_q, d) against (n_k, d), n_q != n_k, no mask."""
    n_q, n_k = _distinct(rng, 3, 9, 2)
    d_k, d_v = _distinct(rng, 2, 9, 2)
    return {"grad_output": rng.normal(0, 1, (n_q, d_v)), "Q": rng.normal(0, 1, (n_q, d_k)),
            "K": rng.normal(0, 1, (n_k, d_k)), "V": rng.normal(0, 1, (n_k, d_v))}


CASES["learning.attention_backward_2d"] = Case(
    _attention_2d_inputs, _attention_ref, ("dQ", "dK", "dV"), **F64,
    description="(n, d) without batch axes, n_q != n_k, no mask")
CASES["learning.attention_backward_masked"] = Case(
    _attention_masked_inputs, _attention_ref, ("dQ", "dK", "dV"), **F64,
    description="(batch, n, d), n_q = n_k, boolean or additive mask with a fully masked row")


def _attention_offset_inputs(rng):
    """An additive float mask: -inf above the diagonal (causal) and, on every query row, one constant of
    750..1000 either way (a softmax is blind to it: ALiBi-like biases reach such sizes on long sequences).
    Weights recomputed without subtracting the row maximum overflow or become 0/0."""
    b, n = int(rng.integers(2, 4)), int(rng.integers(3, 7))
    d_k, d_v = _distinct(rng, 2, 9, 2)
    mask = np.where(np.tril(np.ones((n, n), dtype=bool)), 0.0, -np.inf) + row_offsets(rng, (b, n))
    return {"grad_output": rng.normal(0, 1, (b, n, d_v)), "Q": rng.normal(0, 1.5, (b, n, d_k)),
            "K": rng.normal(0, 1.5, (b, n, d_k)), "V": rng.normal(0, 1, (b, n, d_v)), "mask": mask}


CASES["learning.attention_backward_offset"] = Case(
    _attention_offset_inputs, _attention_ref, ("dQ", "dK", "dV"), **F64,
    description="(batch, n, d), additive causal mask with each row offset by +-750..1000")


# -- layer norm ----------------------------------------------------------------------------------------

def _layer_norm_inputs(rng):
    b, n, d = _distinct(rng, 3, 10, 3)
    x = rng.normal(3.0, 2.0, (b, n, d))                     # far from mean 0 and variance 1
    # a row of variance ~1e-4: eps matters. Its mean (0.5, 50 std) keeps the mean term large without making the
    # variance ill-conditioned: E[x^2] - E[x]^2 (a correct one-pass formula) loses mean^2 / var = 2.5e3 ulps
    # there, ~3e-13; with a mean of 5 it lost 2.5e5 ulps (measured 1.7e-11 of dx's scale, too near 1e-10)
    x[0, 0] = 0.5 + rng.normal(0, 0.01, d)
    return {"grad_output": rng.normal(0, 1, (b, n, d)), "x": x,
            "gamma": rng.uniform(0.5, 2.0, d) * rng.choice([-1, 1], d), "eps": _eps(rng)}


def _eps(rng):
    """An eps other than the default 1e-5 (learning.layer_norm_backward_default_eps calls without it): an eps
    argument that is ignored shows on the row of variance ~1e-4."""
    return float(rng.choice([1e-4, 1e-3, 1e-2]))


def _layer_norm_ref(grad_output, x, gamma, eps):
    return layer_norm_backward(grad_output, x, gamma, eps)


CASES["learning.layer_norm_backward"] = Case(
    _layer_norm_inputs, _layer_norm_ref, ("dx", "dgamma", "dbeta"), **F64,
    description="(batch, n, d) with mean ~3, a low-variance row, gamma of both signs")


def _layer_norm_1d_inputs(rng):
    """One vector (d,): dgamma and dbeta sum over no leading axis at all."""
    d = int(rng.integers(3, 10))
    return {"grad_output": rng.normal(0, 1, d), "x": rng.normal(-0.5, 0.02, d),
            "gamma": rng.uniform(0.5, 2.0, d) * rng.choice([-1, 1], d), "eps": _eps(rng)}


CASES["learning.layer_norm_backward_1d"] = Case(
    _layer_norm_1d_inputs, _layer_norm_ref, ("dx", "dgamma", "dbeta"), **F64,
    description="one vector (d,), mean ~-0.5, variance ~4e-4, gamma of both signs")


def _layer_norm_default_eps_inputs(rng):
    """eps left to its default 1e-5: rows of variance 1e-6..1e-4, where 1e-5 against 1e-6 or 1e-12 shows."""
    inputs = _layer_norm_inputs(rng)
    x = inputs["x"]
    centred = x - x.mean(axis=-1, keepdims=True)
    std = 10.0 ** rng.uniform(-3.0, -2.0, size=x.shape[:-1] + (1,))
    # means within a few std of 0: the variance stays well-conditioned (E[x^2] - E[x]^2 is still exact enough)
    inputs["x"] = std * (centred / centred.std(axis=-1, keepdims=True) + rng.uniform(-3.0, 3.0, size=std.shape))
    del inputs["eps"]
    return inputs


CASES["learning.layer_norm_backward_default_eps"] = Case(
    _layer_norm_default_eps_inputs, layer_norm_backward, ("dx", "dgamma", "dbeta"), **F64,
    description="(batch, n, d) rows of std 1e-3..1e-2, called without eps (the default 1e-5)")


# -- feed-forward --------------------------------------------------------------------------------------

def _ffn_inputs(rng, batched=True):
    b, n, d = _distinct(rng, 2, 8, 3)
    d_ff = 2 * d + 1
    lead = (b, n) if batched else (n,)
    return {"grad_output": rng.normal(0, 1, lead + (d,)), "x": rng.normal(0, 1, lead + (d,)),
            "W_1": rng.normal(0, 1.5 / np.sqrt(d), (d, d_ff)), "b_1": rng.normal(0, 0.5, d_ff),
            "W_2": rng.normal(0, 1 / np.sqrt(d_ff), (d_ff, d)), "b_2": rng.normal(0, 0.5, d)}


def _ffn_ref(grad_output, x, W_1, b_1, W_2, b_2):
    return feed_forward_backward(grad_output, x, W_1, b_1, W_2, b_2)


CASES["learning.feed_forward_backward"] = Case(
    _ffn_inputs, _ffn_ref, ("dx", "dW_1", "db_1", "dW_2", "db_2"), **F64,
    description="(batch, n, d) tokens, exact (erf) GELU, pre-activations up to |u| ~ 3")
CASES["learning.feed_forward_backward_2d"] = Case(
    lambda rng: _ffn_inputs(rng, batched=False), _ffn_ref, ("dx", "dW_1", "db_1", "dW_2", "db_2"), **F64,
    description="(n, d) tokens without a batch axis")


# -- cross-entropy and embeddings ----------------------------------------------------------------------

def _ce_inputs(rng, batched=True):
    b, n, v = _distinct(rng, 2, 12, 3)
    lead = (b, n) if batched else (n,)
    logits = rng.normal(0, 3.0, lead + (v,))
    logits[(0,) * len(lead) + (0,)] += 60.0                 # a confident row: softmax must be max-shifted
    return {"logits": logits, "targets": rng.integers(0, v, lead)}


def _ce_offset_inputs(rng):
    """Every row of logits shifted by 750..1000 either way: exp overflows (or is 0 for the whole row) unless the
    row maximum is subtracted first; the gradient is unchanged by the shift."""
    inputs = _ce_inputs(rng)
    inputs["logits"] = inputs["logits"] + row_offsets(rng, inputs["targets"].shape)
    return inputs


def _ce_one_position_inputs(rng):
    """The docstring's empty leading axes: logits (V,) and a 0-d target, N = 1."""
    v = int(rng.integers(3, 12))
    return {"logits": rng.normal(0, 3.0, v), "targets": np.array(int(rng.integers(0, v)))}


CASES["learning.cross_entropy_backward_offset"] = Case(
    _ce_offset_inputs, cross_entropy_backward, ("dlogits",), **F64,
    description="(batch, n, V) logits, every row offset by +-750..1000")
CASES["learning.cross_entropy_backward_one_position"] = Case(
    _ce_one_position_inputs, cross_entropy_backward, ("dlogits",), **F64,
    description="logits (V,) with a 0-d target: one position")
CASES["learning.cross_entropy_backward"] = Case(
    _ce_inputs, cross_entropy_backward, ("dlogits",), **F64,
    description="(batch, n, V) logits, mean over batch * n positions, one confident row")
CASES["learning.cross_entropy_backward_2d"] = Case(
    lambda rng: _ce_inputs(rng, batched=False), cross_entropy_backward, ("dlogits",), **F64,
    description="(n, V) logits, mean over n positions, one confident row")


def _embedding_inputs(rng, batched=True):
    v = int(rng.integers(5, 12))
    b, n = _distinct(rng, 2, 9, 2)
    ids = rng.integers(0, v - 1, (b, n))                    # token v - 1 never occurs: its row is 0
    ids[0, :2] = ids[-1, -1]                                # a token that repeats for sure
    if not batched:
        ids = ids[0]                                        # (n,): one sequence, still with a repeat
    return {"grad_output": rng.normal(0, 1, ids.shape + (3,)), "token_ids": ids, "vocab_size": v}


CASES["learning.embedding_backward"] = Case(
    _embedding_inputs, embedding_backward, ("dE",), **F64,
    description="(batch, n) ids with repeats and an unused token; dE (V, d)")
CASES["learning.embedding_backward_1d"] = Case(
    lambda rng: _embedding_inputs(rng, batched=False), embedding_backward, ("dE",), **F64,
    description="one sequence (n,) of ids with a repeat; dE (V, d)")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py:
# every leading shape ("...") from none to two axes where the stub allows it, fully masked and
# saturated rows for the softmax-shaped gradients, n_q = n_k and n_q != n_k for attention.
COVERAGE = {
    "softmax_backward": {"cases": ("learning.softmax_backward", "learning.softmax_backward_2d"),
                         "requires": {"rank2", "rank3", "fully_masked", "saturated"}},
    "attention_backward": {"cases": ("learning.attention_backward", "learning.attention_backward_2d",
                                     "learning.attention_backward_masked", "learning.attention_backward_offset"),
                           "requires": {"rank2", "rank3", "rank4", "self", "cross", "fully_masked", "overflow_range"}},
    "layer_norm_backward": {"cases": ("learning.layer_norm_backward", "learning.layer_norm_backward_1d",
                                      "learning.layer_norm_backward_default_eps"),
                            "requires": {"rank1", "rank3"}},
    "feed_forward_backward": {"cases": ("learning.feed_forward_backward", "learning.feed_forward_backward_2d"),
                              "requires": {"rank2", "rank3"}},
    "cross_entropy_backward": {"cases": ("learning.cross_entropy_backward", "learning.cross_entropy_backward_2d",
                                         "learning.cross_entropy_backward_offset",
                                         "learning.cross_entropy_backward_one_position"),
                               "requires": {"rank1", "rank2", "rank3", "saturated", "overflow_range"}},
    "embedding_backward": {"cases": ("learning.embedding_backward", "learning.embedding_backward_1d"),
                           "requires": {"rank1", "rank2"}},
}


# Exercises computed by a package function of another name (the grader blocks these too):
# grouped-query attention's backward (attention.py) is attention_backward with n_kv_heads = n_heads.
TWINS = {"attention_backward": ("grouped_query_attention_backward",)}
