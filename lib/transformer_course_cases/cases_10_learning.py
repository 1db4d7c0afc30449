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

All arithmetic is float64, so a correct implementation agrees with the reference to ~1e-13; the
tolerance 1e-6 (assert_close's relative error, floor 1e-8) leaves room for any correct ordering.
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
    _softmax_inputs, _softmax_ref, ("grad_scores",),
    description="(batch, rows, keys) all different; masked zeros and a saturated row; last axis")


def _softmax_2d_inputs(rng):
    """Unbatched (rows, keys): a fully masked row (p all 0: its gradient is 0, not NaN) and a saturated one."""
    m, n = _distinct(rng, 3, 10, 2)
    scores = rng.normal(0, 2.0, (m, n))
    scores[0] = -np.inf                                     # a query that sees no key: softmax gives zeros
    scores[1] += 40.0 * (np.arange(n) == int(rng.integers(0, n)))
    return {"p": softmax(scores), "g": rng.normal(0, 1, (m, n))}


CASES["learning.softmax_backward_2d"] = Case(
    _softmax_2d_inputs, _softmax_ref, ("grad_scores",),
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
    _attention_inputs, _attention_ref, ("dQ", "dK", "dV"),
    description="(batch, heads, n, d) with n_q != n_k and d_k != d_v, no mask")
def _attention_2d_inputs(rng):
    """Unbatched cross-attention (n_q, d) against (n_k, d), n_q != n_k, no mask."""
    n_q, n_k = _distinct(rng, 3, 9, 2)
    d_k, d_v = _distinct(rng, 2, 9, 2)
    return {"grad_output": rng.normal(0, 1, (n_q, d_v)), "Q": rng.normal(0, 1, (n_q, d_k)),
            "K": rng.normal(0, 1, (n_k, d_k)), "V": rng.normal(0, 1, (n_k, d_v))}


CASES["learning.attention_backward_2d"] = Case(
    _attention_2d_inputs, _attention_ref, ("dQ", "dK", "dV"),
    description="(n, d) without batch axes, n_q != n_k, no mask")
CASES["learning.attention_backward_masked"] = Case(
    _attention_masked_inputs, _attention_ref, ("dQ", "dK", "dV"),
    description="(batch, n, d), n_q = n_k, boolean or additive mask with a fully masked row")


# -- layer norm ----------------------------------------------------------------------------------------

def _layer_norm_inputs(rng):
    b, n, d = _distinct(rng, 3, 10, 3)
    x = rng.normal(3.0, 2.0, (b, n, d))                     # far from mean 0 and variance 1
    x[0, 0] = 5.0 + rng.normal(0, 0.01, d)                  # a row of variance ~1e-4: eps matters
    return {"grad_output": rng.normal(0, 1, (b, n, d)), "x": x,
            "gamma": rng.uniform(0.5, 2.0, d) * rng.choice([-1, 1], d), "eps": 1e-5}


def _layer_norm_ref(grad_output, x, gamma, eps):
    return layer_norm_backward(grad_output, x, gamma, eps)


CASES["learning.layer_norm_backward"] = Case(
    _layer_norm_inputs, _layer_norm_ref, ("dx", "dgamma", "dbeta"),
    description="(batch, n, d) with mean ~3, a low-variance row, gamma of both signs")


def _layer_norm_1d_inputs(rng):
    """One vector (d,): dgamma and dbeta sum over no leading axis at all."""
    d = int(rng.integers(3, 10))
    return {"grad_output": rng.normal(0, 1, d), "x": rng.normal(-2.0, 3.0, d),
            "gamma": rng.uniform(0.5, 2.0, d) * rng.choice([-1, 1], d), "eps": 1e-5}


CASES["learning.layer_norm_backward_1d"] = Case(
    _layer_norm_1d_inputs, _layer_norm_ref, ("dx", "dgamma", "dbeta"),
    description="one vector (d,), mean ~-2, gamma of both signs")


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
    _ffn_inputs, _ffn_ref, ("dx", "dW_1", "db_1", "dW_2", "db_2"),
    description="(batch, n, d) tokens, exact (erf) GELU, pre-activations up to |u| ~ 3")
CASES["learning.feed_forward_backward_2d"] = Case(
    lambda rng: _ffn_inputs(rng, batched=False), _ffn_ref, ("dx", "dW_1", "db_1", "dW_2", "db_2"),
    description="(n, d) tokens without a batch axis")


# -- cross-entropy and embeddings ----------------------------------------------------------------------

def _ce_inputs(rng, batched=True):
    b, n, v = _distinct(rng, 2, 12, 3)
    lead = (b, n) if batched else (n,)
    logits = rng.normal(0, 3.0, lead + (v,))
    logits[(0,) * len(lead) + (0,)] += 60.0                 # a confident row: softmax must be max-shifted
    return {"logits": logits, "targets": rng.integers(0, v, lead)}


CASES["learning.cross_entropy_backward"] = Case(
    _ce_inputs, cross_entropy_backward, ("dlogits",),
    description="(batch, n, V) logits, mean over batch * n positions, one confident row")
CASES["learning.cross_entropy_backward_2d"] = Case(
    lambda rng: _ce_inputs(rng, batched=False), cross_entropy_backward, ("dlogits",),
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
    _embedding_inputs, embedding_backward, ("dE",),
    description="(batch, n) ids with repeats and an unused token; dE (V, d)")
CASES["learning.embedding_backward_1d"] = Case(
    lambda rng: _embedding_inputs(rng, batched=False), embedding_backward, ("dE",),
    description="one sequence (n,) of ids with a repeat; dE (V, d)")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py:
# every leading shape ("...") from none to two axes where the stub allows it, fully masked and
# saturated rows for the softmax-shaped gradients, n_q = n_k and n_q != n_k for attention.
COVERAGE = {
    "softmax_backward": {"cases": ("learning.softmax_backward", "learning.softmax_backward_2d"),
                         "requires": {"rank2", "rank3", "fully_masked", "saturated"}},
    "attention_backward": {"cases": ("learning.attention_backward", "learning.attention_backward_2d",
                                     "learning.attention_backward_masked"),
                           "requires": {"rank2", "rank3", "rank4", "self", "cross", "fully_masked"}},
    "layer_norm_backward": {"cases": ("learning.layer_norm_backward", "learning.layer_norm_backward_1d"),
                            "requires": {"rank1", "rank3"}},
    "feed_forward_backward": {"cases": ("learning.feed_forward_backward", "learning.feed_forward_backward_2d"),
                              "requires": {"rank2", "rank3"}},
    "cross_entropy_backward": {"cases": ("learning.cross_entropy_backward", "learning.cross_entropy_backward_2d"),
                               "requires": {"rank2", "rank3", "saturated"}},
    "embedding_backward": {"cases": ("learning.embedding_backward", "learning.embedding_backward_1d"),
                           "requires": {"rank1", "rank2"}},
}


# Exercises computed by a package function of another name (the grader blocks these too):
# grouped-query attention's backward (attention.py) is attention_backward with n_kv_heads = n_heads.
TWINS = {"attention_backward": ("grouped_query_attention_backward",)}
