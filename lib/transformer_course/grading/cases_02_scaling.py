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

from ..softmax import attention_entropy, softmax, softmax_jacobian
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


CASES["scaling.attention_entropy"] = Case(
    _entropy_inputs, _entropy_ref, ("entropy",),
    description="(batch, rows, keys) distributions incl. a saturated and a one-hot row; nats, last axis")
CASES["scaling.attention_entropy_masked"] = Case(
    _entropy_masked_inputs, _entropy_ref, ("entropy",),
    description="(rows, keys) with exact zeros (masked keys): 0 ln 0 = 0, no nan")


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
    "attention_entropy": {"cases": ("scaling.attention_entropy", "scaling.attention_entropy_masked"),
                          "requires": {"rank2", "rank3", "saturated"}},
    "softmax_jacobian": {"cases": ("scaling.softmax_jacobian", "scaling.softmax_jacobian_saturated"),
                         "requires": {"rank2", "rank3", "saturated"}},
}
