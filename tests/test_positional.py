"""Sinusoidal positional encoding, its frequencies, the relative-shift rotation and reading a position back."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from transformer_course import decode_position, frequencies, positional_encoding, relative_shift_matrix
from transformer_course.positional import rope_frequencies
from transformer_course.positional import decodable_range

PROPS = settings(max_examples=30, deadline=None, database=None)


def test_position_zero_is_sin0_cos0_alternating():
    np.testing.assert_array_equal(positional_encoding(5, 8)[0], [0, 1, 0, 1, 0, 1, 0, 1])


def test_shape_dtype_and_range():
    pe = positional_encoding(50, 16)
    assert pe.shape == (50, 16) and pe.dtype == np.float64
    assert np.abs(pe).max() <= 1.0
    assert not np.allclose(pe[1], pe[2])


def test_first_pair_has_frequency_one():
    pe = positional_encoding(10, 6)
    pos = np.arange(10)
    np.testing.assert_allclose(pe[:, 0], np.sin(pos), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(pe[:, 1], np.cos(pos), rtol=1e-14, atol=1e-15)


def test_entries_follow_the_paper_formula():
    d = 10
    pe = positional_encoding(7, d)
    for pos in (0, 3, 6):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-14)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-14)


def test_odd_width_drops_the_last_cosine():
    pe7 = positional_encoding(9, 7)
    assert pe7.shape == (9, 7)
    assert np.isfinite(pe7).all()
    # Column 6 is a sine with the frequency of pair 3 of d=7.
    np.testing.assert_allclose(pe7[:, 6], np.sin(np.arange(9) * 10000 ** (-6 / 7)), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(pe7[:, :6], np.stack(
        [f(np.arange(9)[:, None] * frequencies(7)[None, :3]) for f in (np.sin, np.cos)], axis=-1
    ).reshape(9, 6), rtol=1e-14, atol=1e-15)


def test_frequencies_known_values():
    w = frequencies(8)
    np.testing.assert_allclose(w, [1.0, 10000 ** -0.25, 10000 ** -0.5, 10000 ** -0.75], rtol=1e-14)
    assert frequencies(7).shape == (4,)
    assert frequencies(1).tolist() == [1.0]
    w512 = frequencies(512)
    assert w512.shape == (256,)
    assert (np.diff(w512) < 0).all()
    assert 1e-4 < w512[-1] < 1.1e-4


def test_every_pair_lies_on_the_unit_circle():
    pe = positional_encoding(20, 12)
    np.testing.assert_allclose(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, 1.0, rtol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(pe, axis=1), np.sqrt(6), rtol=1e-14)


def test_relative_shift_matrix_rotates_pe_rows():
    pe = positional_encoding(40, 16)
    for k in (1, 3, 10):
        M = relative_shift_matrix(k, 16)
        np.testing.assert_allclose(pe[:-k] @ M, pe[k:], atol=1e-12)


def test_relative_shift_matrix_structure():
    np.testing.assert_allclose(relative_shift_matrix(0, 8), np.eye(8), atol=1e-15)
    M = relative_shift_matrix(5, 8)
    np.testing.assert_allclose(M @ M.T, np.eye(8), atol=1e-14)          # a rotation: orthogonal
    assert np.linalg.det(M) == pytest.approx(1.0)
    # Block diagonal: nothing outside the 2x2 blocks.
    blocks = np.kron(np.eye(4), np.ones((2, 2))).astype(bool)
    assert (M[~blocks] == 0).all()
    # First block rotates by exactly k * 1 radian.
    np.testing.assert_allclose(M[:2, :2], [[math.cos(5), -math.sin(5)], [math.sin(5), math.cos(5)]], rtol=1e-14)


@PROPS
@given(a=st.integers(-30, 30), b=st.integers(-30, 30), half_d=st.integers(1, 8))
def test_shifts_compose_and_invert(a, b, half_d):
    d = 2 * half_d
    Ma, Mb = relative_shift_matrix(a, d), relative_shift_matrix(b, d)
    np.testing.assert_allclose(Ma @ Mb, relative_shift_matrix(a + b, d), atol=1e-12)
    np.testing.assert_allclose(relative_shift_matrix(-a, d), Ma.T, atol=1e-14)


@PROPS
@given(pos=st.integers(0, 60), k=st.integers(-20, 20), half_d=st.integers(1, 10))
def test_shift_holds_for_every_position_including_negative_offsets(pos, k, half_d):
    d = 2 * half_d
    pe = positional_encoding(100, d)
    assume(0 <= pos + k < 100)
    np.testing.assert_allclose(pe[pos] @ relative_shift_matrix(k, d), pe[pos + k], atol=1e-12)


@PROPS
@given(p=st.integers(0, 40), q=st.integers(0, 40), k=st.integers(0, 20))
def test_dot_product_depends_only_on_the_offset(p, q, k):
    pe = positional_encoding(64, 16)
    assert pe[p] @ pe[p + k] == pytest.approx(pe[q] @ pe[q + k], abs=1e-12)


def test_numpy_integer_offset_is_accepted():
    np.testing.assert_array_equal(relative_shift_matrix(np.int64(3), 4), relative_shift_matrix(3, 4))


# -- bad inputs ----------------------------------------------------------------------
@pytest.mark.parametrize(("args", "exc", "match"), [
    ((0, 8), ValueError, r"n_positions must be a positive integer, got 0"),
    ((5.0, 8), TypeError, r"n_positions must be a positive integer, got float 5.0"),
    ((5, -2), ValueError, r"d_model must be a positive integer, got -2"),
    ((5, "8"), TypeError, r"d_model must be a positive integer, got str '8'"),
    ((None, 8), TypeError, r"n_positions must be a positive integer, got NoneType None"),
])
def test_positional_encoding_bad_sizes(args, exc, match):
    with pytest.raises(exc, match=match):
        positional_encoding(*args)


@pytest.mark.parametrize(("d", "exc"), [(0, ValueError), (2.5, TypeError), (True, TypeError)])
def test_frequencies_bad_d_model(d, exc):
    with pytest.raises(exc, match=r"d_model must be a positive integer, got"):
        frequencies(d)


def test_ropes_ladder_is_the_sinusoids_ladder():
    """One ladder of frequencies, base ** (-2i / d): the sinusoids' (base 10000) and RoPE's (any base) --
    bit for bit the formula Llama and FastLlama always used."""
    for d, base in ((8, 10000.0), (64, 1e5), (64, 10000), (2, 500000.0)):
        w = rope_frequencies(d, base)
        np.testing.assert_array_equal(w, frequencies(d, base))
        np.testing.assert_array_equal(w, base ** (-np.arange(0, d, 2) / d))
    np.testing.assert_array_equal(frequencies(64), rope_frequencies(64))     # the default base: 10000 for both
    with pytest.raises(ValueError, match="d_head must be even"):
        rope_frequencies(7)


@pytest.mark.parametrize("base", [1.0, 0.5, -3.0, float("inf"), float("nan"), "10000", True])
def test_frequencies_bad_base(base):
    with pytest.raises(ValueError, match=r"base must be a finite number > 1, got"):
        frequencies(8, base)


def test_relative_shift_matrix_needs_even_width():
    with pytest.raises(ValueError, match=r"d_model must be even for the pairwise rotation, got 7"):
        relative_shift_matrix(1, 7)


@pytest.mark.parametrize(("k", "kind"), [(1.0, "float"), ("1", "str"), (True, "bool"), (None, "NoneType")])
def test_relative_shift_matrix_needs_integer_offset(k, kind):
    with pytest.raises(TypeError, match=rf"k must be an integer offset, got {kind}"):
        relative_shift_matrix(k, 8)


# -- decode_position: the clock read coarse to fine -----------------------------------
def _encode(positions, d):
    """PE rows of integer positions, written out independently of positional_encoding: (n,) -> (n, d)."""
    angles = np.asarray(positions)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(len(positions), d)


def test_decodable_range_is_045_of_the_slowest_period():
    assert decodable_range(2) == pytest.approx(0.45 * 2 * math.pi)
    assert decodable_range(64) == pytest.approx(0.45 * 2 * math.pi * 10000 ** (62 / 64))
    assert 21_202 < decodable_range(64) < 21_203


@pytest.mark.parametrize("d", [2, 4, 6, 16, 64, 128])
def test_decode_reads_back_every_position_of_a_table(d):
    top = int(decodable_range(d))
    pe = positional_encoding(top, d)                        # (top, d): every promised position
    got = decode_position(pe)
    assert got.dtype == np.int64 and got.shape == (top,)
    np.testing.assert_array_equal(got, np.arange(top))


def test_decode_one_vector_gives_a_0d_integer():
    got = decode_position(positional_encoding(40, 8)[37])
    assert got.shape == () and got.dtype == np.int64 and int(got) == 37


def test_decode_fastest_pair_alone_would_be_ambiguous():
    # Positions 3 and 9 differ by 6, nearly 2 pi: the fast pair is almost the same, the decoder tells them apart.
    pe = positional_encoding(10, 16)
    assert np.abs(pe[3, :2] - pe[9, :2]).max() < 0.3
    np.testing.assert_array_equal(decode_position(pe[[3, 9]]), [3, 9])


def test_decode_survives_the_documented_worst_case_noise():
    # Noise 0.01 on every entry, with the sign that turns every angle the same way (worst case for unwrapping).
    d = 4                                                   # neighbouring pairs 100x apart: the tightest step
    pos = np.arange(0, int(decodable_range(d)))
    pe = _encode(pos, d)
    tangent = np.stack([pe[:, 1::2], -pe[:, 0::2]], axis=-1).reshape(pe.shape)   # d(sin, cos)/dtheta
    for sign in (1.0, -1.0):
        noisy = pe + sign * 0.01 * np.sign(tangent)
        np.testing.assert_array_equal(decode_position(noisy), pos)


@PROPS
@given(half_d=st.integers(1, 64), u=st.floats(0, 1, exclude_max=True), seed=st.integers(0, 2**32 - 1),
       noise=st.floats(0, 0.01))
def test_decode_inverts_the_encoding_under_noise(half_d, u, seed, noise):
    d = 2 * half_d
    p = int(u * decodable_range(d))
    rng = np.random.default_rng(seed)
    pe = _encode([p], d)[0] + rng.uniform(-noise, noise, size=d)
    assert int(decode_position(pe)) == p


def test_decode_memory_does_not_grow_with_the_range():
    import tracemalloc

    pe = _encode(np.arange(0, 21_000, 97), 64)             # (217, 64)
    tracemalloc.start()
    try:
        decode_position(pe)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * pe.nbytes + 2**16                      # a table of 21 202 candidates would be 10.9 MB


@pytest.mark.parametrize(("pe", "exc", "match"), [
    (np.ones((3, 7)), ValueError, r"pe must have an even last dimension d_model .*got shape \(3, 7\)"),
    (np.ones((2, 3, 8)), ValueError, r"pe must have shape \(d_model,\) or \(n, d_model\), got shape \(2, 3, 8\)"),
    (np.ones((3, 0)), ValueError, r"pe must not be empty along axis -1"),
    (np.full(4, np.nan), ValueError, r"pe contains NaN"),
    ("0.5", TypeError, r"pe must be a real-valued array"),
])
def test_decode_bad_input(pe, exc, match):
    with pytest.raises(exc, match=match):
        decode_position(pe)



def test_shift_matrix_is_notebook_04s_name_of_the_rotation():
    from transformer_course import shift_matrix

    np.testing.assert_array_equal(shift_matrix(3, 8), relative_shift_matrix(3, 8))
    pe = positional_encoding(20, 8)
    np.testing.assert_allclose(pe[4] @ shift_matrix(-3, 8), pe[1], atol=1e-12)


def test_slowest_pair_position_is_exact_without_noise_and_coarse_with_it():
    # Notebook 04's baseline for decode_position (cell after Exercise 3): the slowest pair alone.
    from transformer_course.positional import slowest_pair_position
    top = int(decodable_range(32))
    pos = np.random.default_rng(0).integers(0, top, 500)
    pe = positional_encoding(top, 32)[pos]
    np.testing.assert_array_equal(slowest_pair_position(pe), pos)
    assert slowest_pair_position(pe[7]).shape == ()
    noisy = pe + np.random.default_rng(1).uniform(-0.01, 0.01, pe.shape)
    assert np.mean(slowest_pair_position(noisy) == pos) < 0.05          # 0.01 of a radian is dozens of positions
    np.testing.assert_array_equal(decode_position(noisy), pos)
    with pytest.raises(ValueError, match="d_model even"):
        slowest_pair_position(np.zeros((2, 3)))
