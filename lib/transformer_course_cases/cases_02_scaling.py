"""Hidden-test cases of notebook 02 (attention entropy, softmax Jacobian).

The references are the package's attention_entropy and softmax_jacobian.
Shapes are chosen so that a wrong axis shows (batch != rows != keys), rows
hold exact zeros (masked keys) so that log(0) shows, and some rows are
saturated (entropy ~1e-12 or exactly one-hot) so that a "+1e-12" inside the
logarithm shows. assert_close's relative error has a floor of 1e-8 in its
denominator, so on near-zero entropies an absolute error of ~1e-12 fails.
"""

from __future__ import annotations

import numpy as np

from transformer_course.softmax import attention_entropy, softmax, softmax_jacobian
from . import CASES, Case


def _entropy_ref(weights):
    return attention_entropy(np.asarray(weights, dtype=np.float64))


def _jacobian_ref(p):
    return softmax_jacobian(np.asarray(p, dtype=np.float64))


def _shape(rng):
    """(batch, rows, keys), all different, each >= 3."""
    b, m, n = rng.choice(np.arange(3, 10), size=3, replace=False)
    return int(b), int(m), int(n)


def _rows(rng, b, m, n, *, masked=0.0, spread=1.5):
    """Softmax rows of random scores; a fraction `masked` of the keys gets weight exactly 0."""
    scores = rng.normal(0, spread, (b, m, n))
    if masked:
        blocked = rng.random((b, m, n)) < masked
        blocked[..., int(rng.integers(0, n))] = False    # every row keeps a key
        scores[blocked] = -np.inf
    return softmax(scores)


def _entropy_inputs(rng):
    b, m, n = _shape(rng)
    w = _rows(rng, b, m, n)
    # Saturated rows (entropy ~1e-12): the other weights between 1e-14 and 1e-13, which a clip or a
    # "+1e-12" in the logarithm gets wrong; a softmax row with one score 32 above the rest; a one-hot row.
    tiny = rng.uniform(1e-14, 1e-13, n)
    top = int(rng.integers(0, n))
    tiny[top] = 0.0
    tiny[top] = 1.0 - tiny.sum()
    w[0, 0] = tiny
    w[0, 1] = softmax(rng.normal(0, 1, n) + np.where(np.arange(n) == top, 32.0, 0.0))
    w[-1, -1] = np.eye(n)[int(rng.integers(0, n))]
    return {"weights": w}


def _entropy_masked_inputs(rng):
    b, m, n = _shape(rng)
    w = _rows(rng, b, m, n, masked=0.4, spread=3.0)
    return {"weights": w[0]}                                    # (rows, keys): 2-D, as the docstring allows


def _entropy_tiny_inputs(rng):
    """(rows, keys): each row one weight 1 and a few weights within one decade, 1e-307 to 1e-290.

    A fudge c inside or under the logarithm (+1e-300, a clip at 1e-300) is wrong by a factor of order
    ln 2 / |ln t| ~ 1e-3 on the rows whose small weights t are within a few decades of c; the rows at
    1e-307 and at 1e-300 are always there. The hidden test divides H by each row's largest small weight,
    so the check is relative at every scale (assert_close's floor of 1e-8 would let 1e-298 pass as 0).
    """
    m, n = int(rng.integers(6, 10)), int(rng.integers(4, 8))
    decades = np.concatenate([[-307, -300], rng.integers(-306, -290, m - 2)])
    w = np.zeros((m, n))
    for r, decade in enumerate(decades):
        small = 10.0 ** (decade + rng.uniform(0, 1, n))
        small[rng.random(n) < 0.25] = 0.0                 # exact zeros among them
        small[int(rng.integers(0, n))] = 10.0 ** (decade + 0.5)   # at least one small weight
        top = int(rng.integers(0, n))
        small[top] = 1.0                                   # 1 + any of them rounds to 1: rows sum to 1
        w[r] = small
    return {"weights": w}


def _entropy_tiny_ref(weights):
    w = np.asarray(weights, dtype=np.float64)
    small = np.where(w < 0.5, w, 0.0).max(axis=-1)
    return _entropy_ref(w) / small


CASES["scaling.attention_entropy"] = Case(
    _entropy_inputs, _entropy_ref, ("entropy",),
    description="(batch, rows, keys) distributions incl. a saturated and a one-hot row; nats, last axis")
CASES["scaling.attention_entropy_masked"] = Case(
    _entropy_masked_inputs, _entropy_ref, ("entropy",),
    description="(rows, keys) with exact zeros (masked keys): 0 ln 0 = 0, no nan")
CASES["scaling.attention_entropy_tiny"] = Case(
    _entropy_tiny_inputs, _entropy_tiny_ref, ("entropy_over_largest_small_weight",),
    description="(rows, keys) with weights 1e-307 to 1e-290: no constant added to or clipped under the log")


def _jacobian_inputs(rng):
    b, m, n = _shape(rng)
    return {"p": _rows(rng, b, m, n, spread=1.0)}


def _jacobian_saturated_inputs(rng):
    b, m, n = _shape(rng)
    p = _rows(rng, b, m, n, masked=0.3, spread=4.0)
    p[0, 0] = np.eye(n)[int(rng.integers(0, n))]         # one-hot: J = 0
    return {"p": p[0]}                                   # a plain (rows, keys) batch


CASES["scaling.softmax_jacobian"] = Case(
    _jacobian_inputs, _jacobian_ref, ("jacobian",),
    description="(batch, rows, keys) -> (batch, rows, keys, keys), diag(p) - p p^T")
CASES["scaling.softmax_jacobian_saturated"] = Case(
    _jacobian_saturated_inputs, _jacobian_ref, ("jacobian",),
    description="2-D (rows, keys) input with peaked rows, exact zeros and a one-hot row")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
COVERAGE = {
    "attention_entropy": {"cases": ("scaling.attention_entropy", "scaling.attention_entropy_masked",
                                    "scaling.attention_entropy_tiny"),
                          "requires": {"rank2", "rank3", "saturated"}},
    "softmax_jacobian": {"cases": ("scaling.softmax_jacobian", "scaling.softmax_jacobian_saturated"),
                         "requires": {"rank2", "rank3", "saturated"}},
}


# ---------------------------------------------------------------------------
# softmax_backward(p, g) = J^T g without J. Rows are batched (3-D) and plain (2-D); a saturated
# row and rows with exact zeros; g is never constant (a constant g gives 0 and hides mistakes),
# and its mean is far from 0 (dropping the "- sum p g" term shows).
# ---------------------------------------------------------------------------
def _backward_ref(p, g):
    J = softmax_jacobian(np.asarray(p, dtype=np.float64))
    return np.einsum("...ij,...i->...j", J, np.asarray(g, dtype=np.float64))


def _backward_inputs(rng, batched=True):
    b, m, n = _shape(rng)
    p = _rows(rng, b, m, n, masked=0.2, spread=2.0)
    top = int(rng.integers(0, n))
    p[0, 0] = softmax(rng.normal(0, 1, n) + np.where(np.arange(n) == top, 12.0, 0.0))   # > 0.999 on one key
    g = rng.normal(2.0, 1.0, (b, m, n))
    return {"p": p, "g": g} if batched else {"p": p[0], "g": g[0]}


def _backward_long_inputs(rng):
    rows, n = int(rng.integers(2, 5)), int(rng.integers(2500, 3500))
    return {"p": softmax(rng.normal(0, 2, (rows, n))), "g": rng.normal(1.0, 1.0, (rows, n))}


def _backward_long_ref(p, g):
    # J of these rows is hundreds of MB: use the formula, checked against J on the small cases.
    return p * (g - (p * g).sum(axis=-1, keepdims=True)), 1.0


CASES["scaling.softmax_backward"] = Case(
    _backward_inputs, _backward_ref, ("grad_z",),
    description="(batch, rows, keys): J^T g against the Jacobian, a saturated row, exact zeros, g of mean 2")
CASES["scaling.softmax_backward_2d"] = Case(
    lambda rng: _backward_inputs(rng, batched=False), _backward_ref, ("grad_z",),
    description="(rows, keys) without a batch axis")
CASES["scaling.softmax_backward_long"] = Case(
    _backward_long_inputs, _backward_long_ref, ("grad_z", "within_memory_bound"),
    description="2-4 rows of 2500-3500 keys: the output, and the call's peak memory below 8 input-sized arrays")
COVERAGE["softmax_backward"] = {
    "cases": ("scaling.softmax_backward", "scaling.softmax_backward_2d", "scaling.softmax_backward_long"),
    "requires": {"rank2", "rank3", "saturated"}}
