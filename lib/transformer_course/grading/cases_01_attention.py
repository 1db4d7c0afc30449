"""Hidden-test cases of notebook 01 (softmax, scaled dot-product attention)."""

from __future__ import annotations

import numpy as np

from ..attention import scaled_dot_product_attention
from ..softmax import softmax
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


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
COVERAGE = {
    "softmax": {"cases": ("attention.softmax", "attention.softmax_masked"),
                "requires": {"rank2", "rank3", "fully_masked", "saturated"}},
    "scaled_dot_product_attention": {
        "cases": ("attention.sdpa", "attention.sdpa_bool_mask", "attention.sdpa_additive_mask"),
        "requires": {"rank2", "rank3", "rank4", "self", "cross", "fully_masked", "saturated"}},
}
