"""Hidden-test cases of notebook 04 (sinusoidal positional encoding, the shift matrix, decoding a position)."""

from __future__ import annotations

import numpy as np

from transformer_course.positional import decodable_range, decode_position, frequencies, positional_encoding, relative_shift_matrix
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


# ---------------------------------------------------------------------------
# decode_position(pe): (d_model,) or (n, d_model) -> int positions, checked as
# (positions, is_integer, small_memory). Positions span the whole promised range
# 0 <= p < 0.45 P (the slowest pair's period P) so reading only the fastest pair
# (wraps every 2 pi) shows; the noisy case adds uniform noise of amplitude 0.01
# (the documented tolerance) with d_model >= 8, so that the slowest pair alone,
# off by up to 0.015 / w_last >= 15 positions, shows, and it holds ten positions
# 0..9, so that a slowest angle taken in [0, 2 pi) (p = 0 with a slightly negative
# angle read as p = P) shows. small_memory: the call's peak memory stays below 8
# input-sized arrays + 64 KB, which a table of all candidate encodings exceeds.
# ---------------------------------------------------------------------------
NOISE = 0.01


def _decode_inputs(rng, d_range, n, noise, small_first):
    d_model = _even(rng, *d_range)
    top = int(decodable_range(d_model))                   # positions 0 .. top - 1 are promised
    positions = rng.integers(0, top, size=n)
    positions[-1] = top - 1                                # the far end of the range
    if small_first:
        positions[:10] = rng.permutation(10)               # 0..9: where the slowest angle is near 0
    angles = positions[:, None] * frequencies(d_model)[None, :]       # (n, d_model/2)
    pe = np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(n, d_model)
    pe = pe + rng.uniform(-noise, noise, size=pe.shape) if noise else pe
    return {"pe": pe if n > 1 else pe[0]}


def _decode_ref(pe):
    return decode_position(pe), 1.0, 1.0


CASES["positional.decode"] = Case(
    lambda rng: _decode_inputs(rng, (4, 64), int(rng.integers(30, 80)), 0.0, False), _decode_ref,
    ("position", "integer_dtype", "small_memory"),
    description="(n, d_model) exact encodings, even d_model 4..64, positions across 0 <= p < 0.45 P")
CASES["positional.decode_noisy"] = Case(
    lambda rng: _decode_inputs(rng, (8, 64), int(rng.integers(60, 120)), NOISE, True), _decode_ref,
    ("position", "integer_dtype", "small_memory"),
    description="(n, d_model) encodings + uniform noise 0.01, d_model 8..64, positions 0..9 and across the range")
CASES["positional.decode_single"] = Case(
    lambda rng: _decode_inputs(rng, (8, 64), 1, NOISE, False), _decode_ref,
    ("position", "integer_dtype", "small_memory"),
    description="one vector (d_model,) with noise 0.01 -> one integer (shape ())")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
# Encoding and shift: integer arguments only (the long table and the negative k are the edge cases);
# decoding: one vector (rank 1) and a batch (rank 2).
COVERAGE = {
    "positional_encoding": {"cases": ("positional.encoding", "positional.encoding_long"), "requires": set()},
    "shift_matrix": {"cases": ("positional.shift_matrix", "positional.shift_matrix_negative"), "requires": set()},
    "decode_position": {"cases": ("positional.decode", "positional.decode_noisy", "positional.decode_single"),
                        "requires": {"rank1", "rank2"}},
}

# The package's twin of shift_matrix under another name.
# rope_tables and apply_rope (notebook 09, in positional.py) give cos/sin of position * frequency: the table.
TWINS = {"shift_matrix": ("relative_shift_matrix",), "positional_encoding": ("rope_tables", "apply_rope")}
