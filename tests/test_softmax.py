"""softmax: known values, stability, masking (-inf), dtypes, properties, bad inputs."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from transformer_course import softmax

PROPS = settings(max_examples=40, deadline=None, database=None)
finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False, width=64)


# -- known values ------------------------------------------------------------
def test_known_value_zero_ln2():
    np.testing.assert_allclose(softmax(np.array([0.0, math.log(2.0)])), [1 / 3, 2 / 3], rtol=1e-14)


def test_uniform_row_gives_uniform_weights():
    np.testing.assert_allclose(softmax(np.zeros((2, 4))), np.full((2, 4), 0.25), rtol=1e-15)


def test_matches_naive_formula_on_small_inputs(rng):
    x = rng.normal(size=(3, 5))
    naive = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(softmax(x), naive, rtol=1e-12)


def test_axis_zero_normalises_columns(rng):
    x = rng.normal(size=(4, 3))
    out = softmax(x, axis=0)
    np.testing.assert_allclose(out.sum(axis=0), np.ones(3), rtol=1e-12)
    np.testing.assert_allclose(out, softmax(x.T, axis=-1).T, rtol=1e-12)
    assert not np.allclose(out.sum(axis=1), 1.0)


def test_list_and_integer_input_are_promoted_to_float64():
    out = softmax([1, 2, 3])
    assert out.dtype == np.float64
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(out, e / e.sum(), rtol=1e-14)


# -- numerical stability -------------------------------------------------------
def test_row_of_1000s_does_not_overflow():
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # overflow or 0/0 would raise
        out = softmax(np.array([[1000.0, 1000.0, 1000.0], [1000.0, 999.0, -1000.0]]))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[0], np.full(3, 1 / 3), rtol=1e-14)
    e = 1 / (1 + math.exp(-1))
    np.testing.assert_allclose(out[1, :2], [e, 1 - e], rtol=1e-12)


def test_large_negative_row_does_not_underflow_to_nan():
    out = softmax(np.array([-1000.0, -1001.0]))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(), 1.0)


def test_float32_1000s_stay_finite_and_float32():
    out = softmax(np.full((2, 3), 1000.0, dtype=np.float32))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.full((2, 3), 1 / 3), rtol=1e-6)


# -- masking with -inf ---------------------------------------------------------
def test_neg_inf_entries_get_exactly_zero_weight():
    out = softmax(np.array([0.0, -np.inf, 0.0]))
    assert out[1] == 0.0
    np.testing.assert_allclose(out, [0.5, 0.0, 0.5])


def test_fully_masked_row_gives_zeros_not_nan():
    x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, 0.0, -np.inf]])
    out = softmax(x)
    assert not np.isnan(out).any()
    np.testing.assert_array_equal(out[0], np.zeros(3))
    np.testing.assert_allclose(out[1], [0.5, 0.5, 0.0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_dtype_is_preserved(dtype, rng):
    x = rng.normal(size=(2, 3)).astype(dtype)
    out = softmax(x)
    assert out.dtype == dtype
    assert out.shape == (2, 3)


def test_float32_fully_masked_row_stays_float32():
    x = np.array([[-np.inf, -np.inf], [1.0, 2.0]], dtype=np.float32)
    out = softmax(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[0], [0.0, 0.0])


def test_input_is_not_modified(rng):
    x = rng.normal(size=(3, 4))
    before = x.copy()
    softmax(x)
    np.testing.assert_array_equal(x, before)


# -- properties ------------------------------------------------------------------
@PROPS
@given(data=st.data(), x=arrays(np.float64, array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
                                elements=finite))
def test_slices_along_any_axis_are_distributions(data, x):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1), label="axis")
    out = softmax(x, axis=axis)
    assert out.shape == x.shape
    assert (out >= 0).all()
    assert (out <= 1).all()
    np.testing.assert_allclose(out.sum(axis=axis), 1.0, rtol=1e-12)


@PROPS
@given(x=arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 6)), elements=finite),
       shift=arrays(np.float64, st.just((4, 1)), elements=finite))
def test_invariant_to_adding_a_constant_per_row(x, shift):
    shift = shift[: x.shape[0]]                       # one constant per row
    np.testing.assert_allclose(softmax(x + shift), softmax(x), rtol=1e-9, atol=1e-12)


@PROPS
@given(x=arrays(np.float64, st.integers(2, 6), elements=finite), perm_seed=st.integers(0, 2**16))
def test_permuting_a_row_permutes_the_weights(x, perm_seed):
    perm = np.random.default_rng(perm_seed).permutation(x.shape[0])
    np.testing.assert_allclose(softmax(x[perm]), softmax(x)[perm], rtol=1e-12, atol=1e-15)


@PROPS
@given(x=arrays(np.float64, st.integers(2, 6), elements=finite))
def test_larger_score_never_gets_smaller_weight(x):
    out = softmax(x)
    order = np.argsort(x, kind="stable")
    assert (np.diff(out[order]) >= -1e-15).all()


# -- bad inputs --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "exc", "match"),
    [
        ("abc", TypeError, r"x must be a real-valued array, got str 'abc'"),
        (b"ab", TypeError, r"x must be a real-valued array, got bytes"),
        (None, TypeError, r"x must be a real-valued array, got NoneType None"),
        (np.array([object(), object()]), TypeError, r"x must be a real-valued numeric array, got array of shape \(2,\) and dtype object"),
        (np.array([1 + 2j]), TypeError, r"x must be .*numeric array, got array of shape \(1,\) and dtype complex128"),
        (np.float64(3.0), ValueError, r"x must have at least 1 dimension\(s\).*got shape \(\)"),
        (np.array([1.0, np.nan]), ValueError, r"x contains NaN"),
        (np.array([1.0, np.inf]), ValueError, r"x contains \+inf"),
    ],
)
def test_bad_x_is_refused(bad, exc, match):
    with pytest.raises(exc, match=match):
        softmax(bad)


@pytest.mark.parametrize("axis", [2, -3, 5])
def test_axis_out_of_range(axis):
    with pytest.raises(ValueError, match=rf"axis={axis} is out of range for an array with 2 dimension\(s\)"):
        softmax(np.zeros((2, 3)), axis=axis)


@pytest.mark.parametrize("axis", [1.0, "1", None, True])
def test_axis_must_be_an_integer(axis):
    with pytest.raises(TypeError, match=r"axis must be an integer, got"):
        softmax(np.zeros((2, 3)), axis=axis)


# -- softmax_jacobian and attention_entropy (notebook 02) ------------------------------------
from transformer_course import attention_entropy, softmax_backward, softmax_jacobian  # noqa: E402


def test_softmax_jacobian_matches_finite_differences():
    rng = np.random.default_rng(0)
    x = rng.normal(size=5)
    p = softmax(x)
    eps = 1e-6
    numeric = np.stack([(softmax(x + eps * e) - softmax(x - eps * e)) / (2 * eps) for e in np.eye(5)], axis=1)
    np.testing.assert_allclose(softmax_jacobian(p), numeric, atol=1e-9)


def test_softmax_jacobian_is_batched_symmetric_and_rows_sum_to_zero():
    p = softmax(np.random.default_rng(1).normal(size=(2, 3, 4)))
    J = softmax_jacobian(p)
    assert J.shape == (2, 3, 4, 4)
    np.testing.assert_allclose(J, np.swapaxes(J, -1, -2))
    np.testing.assert_allclose(J.sum(axis=-1), 0, atol=1e-15)


def test_softmax_jacobian_vanishes_when_saturated():
    assert np.abs(softmax_jacobian(np.array([1.0, 0.0, 0.0]))).max() == 0.0


def test_attention_entropy_known_values():
    np.testing.assert_allclose(attention_entropy(np.full((2, 4), 0.25)), [np.log(4)] * 2)
    assert attention_entropy(np.array([0.0, 1.0, 0.0])) == 0.0
    np.testing.assert_allclose(attention_entropy(np.array([[0.9, 0.1, 0.0], [0.5, 0.5, 0.0]])),
                               [-0.9 * np.log(0.9) - 0.1 * np.log(0.1), np.log(2)], rtol=1e-14)


def test_softmax_backward_is_the_jacobian_product(rng):
    p = softmax(rng.normal(0, 2, (3, 4, 6)))
    p[0, 0] = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]                   # saturated: the gradient is exactly 0
    g = rng.normal(2.0, 1.0, p.shape)
    expected = np.einsum("...ij,...i->...j", softmax_jacobian(p), g)
    np.testing.assert_allclose(softmax_backward(p, g), expected, rtol=1e-12, atol=1e-15)
    assert not softmax_backward(p, g)[0, 0].any(), "a one-hot row passes no gradient"
    with pytest.raises(ValueError, match=r"g must have the shape of p \(3, 4, 6\), got shape \(4, 6\)"):
        softmax_backward(p, g[0])


def test_attention_entropy_and_jacobian_reject_bad_input():
    with pytest.raises(ValueError, match="weights must be non-negative"):
        attention_entropy(np.array([-0.1, 1.1]))
    with pytest.raises(ValueError, match="weights contains NaN"):
        attention_entropy(np.array([np.nan, 1.0]))
    with pytest.raises(TypeError, match="p must be a real-valued"):
        softmax_jacobian("0.5 0.5")
