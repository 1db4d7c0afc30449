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
    b, n, m, _, _ = _shapes(rng)
    x = rng.normal(0, 2, (b, n, m))
    blocked = rng.random((b, n, m)) < 0.3
    x[blocked] = -np.inf
    x[0, 0, :] = -np.inf                                        # one row entirely masked
    return {"x": x, "axis": -1}


CASES["attention.softmax_masked"] = Case(_softmax_masked_inputs, _softmax_ref, ("weights",),
                                          description="-inf entries get 0; an all -inf row gives zeros")


def _sdpa_inputs(rng, mask_kind=None):
    b, n_q, n_k, d_k, d_v = _shapes(rng)
    inputs = {
        "Q": rng.normal(0, 1.5, (b, n_q, d_k)),
        "K": rng.normal(0, 1.5, (b, n_k, d_k)),
        "V": rng.normal(0, 1, (b, n_k, d_v)),
    }
    if mask_kind is not None:
        allowed = rng.random((n_q, n_k)) < 0.6
        allowed[np.arange(n_q), rng.integers(0, n_k, n_q)] = True  # every query sees a key
        if mask_kind == "bool":
            inputs["mask"] = allowed
        else:
            inputs["mask"] = np.where(allowed, rng.normal(0, 0.5, (n_q, n_k)), -np.inf)
    return inputs


def _sdpa_ref(Q, K, V, mask=None):
    return scaled_dot_product_attention(Q, K, V, mask=mask)


CASES["attention.sdpa"] = Case(lambda rng: _sdpa_inputs(rng), _sdpa_ref, ("output", "weights"),
                               description="batched, unmasked, n_q != n_k, d_k != d_v")
CASES["attention.sdpa_bool_mask"] = Case(lambda rng: _sdpa_inputs(rng, "bool"), _sdpa_ref,
                                         ("output", "weights"), description="boolean mask, True = may attend")
CASES["attention.sdpa_additive_mask"] = Case(lambda rng: _sdpa_inputs(rng, "additive"), _sdpa_ref,
                                             ("output", "weights"), description="additive float mask with -inf")
