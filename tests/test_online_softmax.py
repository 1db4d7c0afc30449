"""One online softmax: ``transformer_course.online_softmax_attention`` is the reference that both
notebook 06's solution and the fast path (``transformer_course_fast.flash_attention``) are tested
against here. Tolerances: float64 results of O(n_k) terms of size ~1, 1e-12 absolute (a few
thousand float64 eps)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from transformer_course import online_softmax_attention, scaled_dot_product_attention
from transformer_course_fast import flash_attention

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_06 = ROOT / "notebooks" / "06_failures" / "06_failures.ipynb"
ATOL = 1e-12


def notebook_solution(name: str):
    """The function ``name`` as notebook 06's solution cell defines it (executed on its own)."""
    cells = json.loads(NOTEBOOK_06.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    source = next(s for s in sources if f"def {name}(" in s)
    namespace = {"np": np}
    exec(compile(source, f"{NOTEBOOK_06.name}:{name}", "exec"), namespace)
    return namespace[name]


CASES = [  # lead shape, n_q, n_k, d_k, d_v, block_size
    ((), 5, 1, 3, 2, 1),
    ((), 7, 12, 4, 3, 5),          # two full blocks and a partial one
    ((2,), 6, 13, 8, 8, 4),
    ((2, 3), 9, 17, 5, 6, 6),
    ((1, 2), 4, 8, 4, 4, 8),       # one block exactly
    ((3,), 3, 10, 4, 2, 64),       # one block larger than n_k
]


@pytest.mark.parametrize(("lead", "n_q", "n_k", "d_k", "d_v", "block"), CASES)
def test_reference_equals_the_naive_attention(rng, lead, n_q, n_k, d_k, d_v, block):
    Q, K, V = (rng.normal(size=(*lead, n, d)) for n, d in ((n_q, d_k), (n_k, d_k), (n_k, d_v)))
    ours = online_softmax_attention(Q, K, V, block)
    assert ours.shape == (*lead, n_q, d_v)
    np.testing.assert_allclose(ours, scaled_dot_product_attention(Q, K, V)[0], rtol=0, atol=ATOL)


def test_reference_survives_scores_that_overflow_exp(rng):
    """Scores of ~3600 (exp overflows above 709) whose maximum moves from block to block."""
    Q, K, V = rng.normal(size=(6, 8)), rng.normal(size=(20, 8)), rng.normal(size=(20, 3))
    Q[:, 0] = 60.0
    K[:, 0] = 60 + np.linspace(0, 0.5, 20)
    out = online_softmax_attention(Q, K, V, 3)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, scaled_dot_product_attention(Q, K, V)[0], rtol=0, atol=ATOL)


@pytest.mark.parametrize(("lead", "n_q", "n_k", "d_k", "d_v", "block"), CASES)
def test_fast_path_equals_the_reference(rng, lead, n_q, n_k, d_k, d_v, block):
    Q, K, V = (rng.normal(size=(*lead, n, d)) for n, d in ((n_q, d_k), (n_k, d_k), (n_k, d_v)))
    for running_max in ("auto", "always"):
        fast = flash_attention(Q, K, V, block_q=4, block_k=block, running_max=running_max)
        np.testing.assert_allclose(fast, online_softmax_attention(Q, K, V, block), rtol=0, atol=ATOL)


@pytest.mark.parametrize(("lead", "n_q", "n_k", "d_k", "d_v", "block"), CASES)
def test_notebook_06_solution_equals_the_reference(rng, lead, n_q, n_k, d_k, d_v, block):
    solution = notebook_solution("online_softmax_attention")
    Q, K, V = (rng.normal(size=(*lead, n, d)) for n, d in ((n_q, d_k), (n_k, d_k), (n_k, d_v)))
    np.testing.assert_allclose(solution(Q, K, V, block), online_softmax_attention(Q, K, V, block),
                               rtol=0, atol=ATOL)


@pytest.mark.parametrize(("args", "exc", "match"), [
    ((np.ones((2, 3)), np.ones((0, 3)), np.ones((0, 2)), 2), ValueError, r"at least one key \(n_k >= 1\)"),
    ((np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2)), 0), ValueError, "block_size must be a positive integer"),
    ((np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2)), 2.0), TypeError, "block_size must be a positive integer"),
    ((np.full((2, 3), np.nan), np.ones((4, 3)), np.ones((4, 2)), 2), ValueError, "Q contains NaN"),
])
def test_bad_inputs(args, exc, match):
    with pytest.raises(exc, match=match):
        online_softmax_attention(*args)
