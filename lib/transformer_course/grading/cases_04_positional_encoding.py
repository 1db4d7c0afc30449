"""Hidden-test cases of notebook 04 (sinusoidal positional encoding, the shift matrix)."""

from __future__ import annotations

import numpy as np

from ..positional import positional_encoding, relative_shift_matrix
from . import CASES, Case


# ---------------------------------------------------------------------------
# Notebook 04: positional_encoding(n_positions, d_model), shift_matrix(k, d_model).
# d_model >= 6 so that pair 1 exists and 10000^(i/d) != 10000^(2i/d); the
# number of positions differs from d_model so a transposed table shows; the
# offset k is never 0 so a rotation with the wrong sign (the transpose) shows.
# ---------------------------------------------------------------------------
def _even(rng, low, high):
    """An even integer in [low, high]."""
    return 2 * int(rng.integers(low // 2, high // 2 + 1))


def _encoding_inputs(rng, n_range, d_range):
    d_model = _even(rng, *d_range)
    n_positions = int(rng.integers(*n_range))
    if n_positions == d_model:
        n_positions += 1
    return {"n_positions": n_positions, "d_model": d_model}


def _encoding_ref(n_positions, d_model):
    return positional_encoding(n_positions, d_model)


CASES["positional.encoding"] = Case(
    lambda rng: _encoding_inputs(rng, (5, 41), (6, 32)), _encoding_ref, ("pe",),
    description="short table: even d_model 6..32, 5..40 positions from 0")
CASES["positional.encoding_long"] = Case(
    lambda rng: _encoding_inputs(rng, (60, 201), (34, 128)), _encoding_ref, ("pe",),
    description="long table: even d_model 34..128, 60..200 positions (large angles)")


def _shift_inputs(rng, negative):
    d_model = _even(rng, 6, 24)
    k = int(rng.integers(1, 40))
    return {"k": -k if negative else k, "d_model": d_model}


def _shift_ref(k, d_model):
    return relative_shift_matrix(k, d_model)


CASES["positional.shift_matrix"] = Case(
    lambda rng: _shift_inputs(rng, False), _shift_ref, ("M",),
    description="M_k for k in 1..39, even d_model 6..24")
CASES["positional.shift_matrix_negative"] = Case(
    lambda rng: _shift_inputs(rng, True), _shift_ref, ("M",),
    description="M_k for k in -39..-1 (a shift backwards)")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
# Integer arguments only: no ranks or masks to cover (the long table and the negative k are the edge cases).
COVERAGE = {
    "positional_encoding": {"cases": ("positional.encoding", "positional.encoding_long"), "requires": set()},
    "shift_matrix": {"cases": ("positional.shift_matrix", "positional.shift_matrix_negative"), "requires": set()},
}
