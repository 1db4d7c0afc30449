"""Hidden-test cases of notebook 01 (softmax, scaled dot-product attention)."""

from __future__ import annotations

import numpy as np

from transformer_course.attention import lookup_query, scaled_dot_product_attention
from transformer_course.softmax import softmax
from . import CASES, Case


# ---------------------------------------------------------------------------
# Notebook 01: softmax and scaled dot-product attention.
# Shapes are all different (n_q != n_k != d_k != d_v) so a transposed product,
# a wrong axis or a wrong scale shows; d_k > 1 so sqrt(d_k) != d_k.
# ---------------------------------------------------------------------------
def _shapes(rng):
    b = int(rng.integers(2, 4))
    n_q, n_k = rng.choice(np.arange(3, 9), size=2, replace=False)
    d_k, d_v = rng.choice(np.arange(5, 17), size=2, replace=False)
    return b, int(n_q), int(n_k), int(d_k), int(d_v)


def _softmax_inputs(rng):
    b, n, m, _, _ = _shapes(rng)
    x = rng.normal(0, 3, (b, n, m)) + rng.uniform(720, 900)   # exp overflows (above ~709.8) without the max-shift
    # Not the last axis: an implementation that ignores `axis` must fail every time.
    return {"x": x, "axis": int(rng.choice([0, 1]))}


def _softmax_ref(x, axis):
    return softmax(x, axis=axis)


CASES["attention.softmax"] = Case(_softmax_inputs, _softmax_ref, ("weights",),
                                  description="large-offset scores (overflow without the max-shift), axis 0 or 1")


def _softmax_masked_inputs(rng):
    _, n, m, _, _ = _shapes(rng)
    x = rng.normal(0, 2, (n, m))                                # 2-D: the docstring allows any shape
    blocked = rng.random((n, m)) < 0.3
    blocked[1:, 0] = False                                      # rows 1.. keep key 0 ...
    x[1, 0] = x[1, 1:].max() + 20.0                             # ... row 1 saturated: weight > 0.999 on key 0
    x[blocked] = -np.inf
    x[0, :] = -np.inf                                           # one row entirely masked
    return {"x": x, "axis": -1}


CASES["attention.softmax_masked"] = Case(_softmax_masked_inputs, _softmax_ref, ("weights",),
                                          description="-inf entries get 0; an all -inf row gives zeros")


def _sdpa_inputs(rng, mask_kind=None):
    # Every rank the docstring allows: unmasked (b, n, d) cross-attention; boolean mask on
    # unbatched (n, d) self-attention (n_q = n_k); additive mask on (b, h, n, d).
    b, n_q, n_k, d_k, d_v = _shapes(rng)
    lead = {None: (b,), "bool": (), "additive": (b, int(rng.integers(2, 4)))}[mask_kind]
    if mask_kind == "bool":
        n_k = n_q
    inputs = {
        "Q": rng.normal(0, 1.5, lead + (n_q, d_k)),
        "K": rng.normal(0, 1.5, lead + (n_k, d_k)),
        "V": rng.normal(0, 1, lead + (n_k, d_v)),
    }
    # A saturated row: query 1 points along key 0's large first coordinate, score gap >= ~15,
    # weight > 0.999 on key 0.
    inputs["K"][..., 0, 0] = 12.0
    inputs["Q"][..., 1, :] = 0.0
    inputs["Q"][..., 1, 0] = 2.0 * np.sqrt(d_k)
    if mask_kind is not None:
        allowed = rng.random((n_q, n_k)) < 0.6
        allowed[np.arange(n_q), rng.integers(0, n_k, n_q)] = True  # every query sees a key ...
        allowed[1, 0] = True
        allowed[-1, :] = False                                     # ... but the last: a fully masked row (zeros)
        # Row 0 sees every key but its strongest (in the first batch element): masking after
        # the softmax without renormalising then loses at least 1/n_k of that row's weight.
        Q0 = inputs["Q"].reshape(-1, n_q, d_k)[0]                  # (n_q, d_k)
        K0 = inputs["K"].reshape(-1, n_k, d_k)[0]                  # (n_k, d_k)
        allowed[0, :] = True
        allowed[0, int(np.argmax(K0 @ Q0[0]))] = False
        if mask_kind == "bool":
            inputs["mask"] = allowed
        else:
            inputs["mask"] = np.where(allowed, rng.normal(0, 0.5, (n_q, n_k)), -np.inf)
    return inputs


def _sdpa_ref(Q, K, V, mask=None):
    return scaled_dot_product_attention(Q, K, V, mask=mask)


CASES["attention.sdpa"] = Case(lambda rng: _sdpa_inputs(rng), _sdpa_ref, ("output", "weights"),
                               description="(b, n, d), unmasked, n_q != n_k, d_k != d_v, a saturated row")
CASES["attention.sdpa_bool_mask"] = Case(lambda rng: _sdpa_inputs(rng, "bool"), _sdpa_ref,
                                         ("output", "weights"), description="unbatched self-attention (n_q = n_k), boolean mask, a fully masked row")
CASES["attention.sdpa_additive_mask"] = Case(lambda rng: _sdpa_inputs(rng, "additive"), _sdpa_ref,
                                             ("output", "weights"), description="(b, h, n, d), additive float mask with -inf, a fully masked row")


# ---------------------------------------------------------------------------
# lookup_query(K, j, confidence): the shortest query whose scaled scores are m on key j and 0
# elsewhere. Every draw has a trap for the plain q = c K[j]: another key is K[j] stretched by
# 1.3-2 plus a part orthogonal to K[j], so it scores higher than K[j] along K[j] for every c > 0.
# Key lengths differ (not unit norm); n - 1 >= 2 so a margin without the (n - 1) shows; d >= 4 so
# sqrt(d) != d != 1; n < d (the shortest of many solutions) and n == d (a unique solution).
# ---------------------------------------------------------------------------
def _lookup_inputs(rng, square=False):
    n = int(rng.integers(4, 7)) if square else int(rng.integers(3, 7))
    d = n if square else n + int(rng.integers(2, 6))
    j = int(rng.integers(0, n))
    other = int((j + rng.integers(1, n)) % n)
    while True:                                                          # redraw the rare ill-conditioned K
        K = rng.normal(0, 1, (n, d)) * rng.uniform(0.5, 2.0, (n, 1))    # rows of different lengths
        noise = rng.normal(0, 0.6 * np.linalg.norm(K[j]) / np.sqrt(d), d)
        noise = noise - (noise @ K[j]) / (K[j] @ K[j]) * K[j]             # orthogonal to K[j]
        K[other] = rng.uniform(1.3, 2.0) * K[j] + noise                  # longer, nearby: beats K[j] along K[j]
        if np.linalg.cond(K) < 1e3:                                      # solve(K K^T) vs lstsq agree to ~1e-10
            break
    return {"K": K, "j": j, "confidence": float(rng.choice([0.9, 0.99, 0.999]))}


def _lookup_ref(K, j, confidence):
    q = lookup_query(K, j, confidence)
    d = K.shape[-1]
    return q, softmax(K @ q / np.sqrt(d))


CASES["attention.lookup_query"] = Case(
    lambda rng: _lookup_inputs(rng), _lookup_ref, ("query", "weights"),
    description="n < d keys of different lengths, a longer key nearby K[j]; confidence 0.9, 0.99 or 0.999")
CASES["attention.lookup_query_square"] = Case(
    lambda rng: _lookup_inputs(rng, square=True), _lookup_ref, ("query", "weights"),
    description="n == d (one solution), a longer key nearby K[j]")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
COVERAGE = {
    "softmax": {"cases": ("attention.softmax", "attention.softmax_masked"),
                "requires": {"rank2", "rank3", "fully_masked", "saturated"}},
    "scaled_dot_product_attention": {
        "cases": ("attention.sdpa", "attention.sdpa_bool_mask", "attention.sdpa_additive_mask"),
        "requires": {"rank2", "rank3", "rank4", "self", "cross", "fully_masked", "saturated"}},
    # No rank or mask situations: K is always (n, d); the cases draw n < d and n == d.
    "lookup_query": {"cases": ("attention.lookup_query", "attention.lookup_query_square"), "requires": set()},
}
