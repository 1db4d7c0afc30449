"""Hidden-test cases of notebook 03 (split_heads, merge_heads, multi_head_attention).

Shapes are drawn so that the plausible mistakes show: several heads (h >= 2),
d_head >= 2 and n, h, d_head all different, so a reshape without the
transpose, a merge in the wrong order, or a scale by sqrt(d_model) instead of
sqrt(d_head) changes the values (and not only the shape). The weights are
passed in as inputs; nothing depends on the student's random draws.
"""

from __future__ import annotations

import numpy as np

from transformer_course.multihead import MultiHeadAttention, head_bilinear_forms, merge_heads, split_heads
from . import CASES, Case


def _dims(rng):
    """batch, n, n_heads, d_head: n, h, d_head pairwise different, h >= 2, d_head >= 2."""
    n, h, d_head = rng.choice(np.arange(2, 8), size=3, replace=False)
    n = int(n) + 1                                   # n >= 3
    if n in (h, d_head):
        n = int(max(h, d_head)) + 1
    return int(rng.integers(2, 4)), n, int(h), int(d_head)


def _split_inputs(rng, batched=True):
    b, n, h, d_head = _dims(rng)
    shape = (b, n, h * d_head) if batched else (n, h * d_head)
    return {"x": rng.normal(0, 1, shape), "n_heads": h}


def _split_ref(x, n_heads):
    return split_heads(x, n_heads)


CASES["multihead.split_heads"] = Case(lambda rng: _split_inputs(rng), _split_ref, ("heads",),
                                      description="(batch, n, d_model) -> (batch, h, n, d_head), column blocks")
CASES["multihead.split_heads_2d"] = Case(lambda rng: _split_inputs(rng, batched=False), _split_ref, ("heads",),
                                         description="(n, d_model) without a batch axis -> (h, n, d_head)")


def _merge_inputs(rng, batched=True):
    b, n, h, d_head = _dims(rng)
    return {"x": rng.normal(0, 1, ((b,) if batched else ()) + (h, n, d_head))}


def _merge_ref(x):
    return merge_heads(x)


CASES["multihead.merge_heads"] = Case(_merge_inputs, _merge_ref, ("merged",),
                                      description="(batch, h, n, d_head) -> (batch, n, h * d_head), head 0 first")
CASES["multihead.merge_heads_3d"] = Case(lambda rng: _merge_inputs(rng, batched=False), _merge_ref, ("merged",),
                                         description="(h, n, d_head) without a batch axis -> (n, h * d_head)")


def _mha_inputs(rng, masked=False):
    b, n, h, d_head = _dims(rng)
    d_model = h * d_head
    # Projections of scale ~1 so scores are O(1): softmax neither uniform nor saturated,
    # and a wrong scale (sqrt(d_model) vs sqrt(d_head)) changes the weights clearly.
    W = rng.normal(0, 1.0 / np.sqrt(d_model), (4, d_model, d_model)) * 1.5
    # The masked case is unbatched (n, d_model): the docstring allows any leading shape.
    inputs = {"X": rng.normal(0, 1, ((n,) if masked else (b, n)) + (d_model,)),
              "W_Q": W[0], "W_K": W[1], "W_V": W[2], "W_O": W[3], "n_heads": h}
    if masked:
        rows = np.arange(n)
        keep = rng.integers(0, n, n)                             # every query sees at least one key ...
        block = (keep + rng.integers(1, n, n)) % n               # ... and is denied at least one other
        allowed = rng.random((n, n)) < 0.6
        allowed[rows, keep] = True
        allowed[rows, block] = False
        allowed[int(rng.integers(0, n))] = False                 # one query sees nothing: zeros, not nan
        inputs["mask"] = allowed
    return inputs


def _mha_ref(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):
    attention = MultiHeadAttention(X.shape[-1], n_heads, rng=np.random.default_rng(0), bias=False)
    return attention.set_weights(W_Q, W_K, W_V, W_O)(X, mask=mask)   # (b, n, d_model), (b, h, n, n)


CASES["multihead.mha"] = Case(lambda rng: _mha_inputs(rng), _mha_ref, ("output", "weights"),
                              description="batched, several heads, no mask")
CASES["multihead.mha_masked"] = Case(lambda rng: _mha_inputs(rng, masked=True), _mha_ref, ("output", "weights"),
                                     description="unbatched (n, d_model), boolean (n, n) mask shared by the heads, a fully masked row")


# ---------------------------------------------------------------------------
# head_bilinear_forms(W_Q, W_K, n_heads): A_i = W_Q^(i) W_K^(i)^T / sqrt(d_head). Random, non-symmetric
# weights (A_i^T != A_i shows), h >= 2 and d_head >= 2 all different (column blocks vs a plain reshape,
# sqrt(d_head) vs sqrt(d_model) vs no scale); the edge case has h = 1 or d_head = 1.
# ---------------------------------------------------------------------------
def _forms_inputs(rng, edge=False):
    _, _, h, d_head = _dims(rng)
    if edge:
        h, d_head = (1, h * d_head) if rng.random() < 0.5 else (h * d_head, 1)
    d_model = h * d_head
    W_Q, W_K = rng.normal(0, 1.0 / np.sqrt(d_model), (2, d_model, d_model))
    return {"W_Q": W_Q, "W_K": W_K, "n_heads": h}


def _forms_ref(W_Q, W_K, n_heads):
    return head_bilinear_forms(W_Q, W_K, n_heads)


CASES["multihead.bilinear_forms"] = Case(lambda rng: _forms_inputs(rng), _forms_ref, ("forms",),
                                         description="h >= 2 heads of width d_head >= 2, random W_Q, W_K")
CASES["multihead.bilinear_forms_edge"] = Case(lambda rng: _forms_inputs(rng, edge=True), _forms_ref, ("forms",),
                                              description="one head of width d_model, or d_model heads of width 1")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
COVERAGE = {
    "split_heads": {"cases": ("multihead.split_heads", "multihead.split_heads_2d"), "requires": {"rank2", "rank3"}},
    "merge_heads": {"cases": ("multihead.merge_heads", "multihead.merge_heads_3d"), "requires": {"rank3", "rank4"}},
    "multi_head_attention": {"cases": ("multihead.mha", "multihead.mha_masked"),
                             "requires": {"rank2", "rank3", "self", "fully_masked"}},
    # W_Q, W_K are always (d_model, d_model): no rank or mask situations to cover.
    "head_bilinear_forms": {"cases": ("multihead.bilinear_forms", "multihead.bilinear_forms_edge"),
                            "requires": set()},
}

# The package's twin of multi_head_attention under another name: the class the reference runs.
TWINS = {"multi_head_attention": ("MultiHeadAttention",)}
