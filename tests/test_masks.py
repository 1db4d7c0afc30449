"""causal_mask and padding_mask: values, use with attention, no leakage, bad inputs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from transformer_course import causal_mask, padding_mask, scaled_dot_product_attention

PROPS = settings(max_examples=30, deadline=None, database=None)
elems = st.floats(-3, 3, allow_nan=False, allow_infinity=False, width=64)


# -- causal_mask -------------------------------------------------------------------
def test_causal_mask_known_value():
    np.testing.assert_array_equal(
        causal_mask(3), [[True, False, False], [True, True, False], [True, True, True]])


@pytest.mark.parametrize("n", [1, 2, 7, np.int64(5)])
def test_causal_mask_is_lower_triangular_bool(n):
    m = causal_mask(n)
    assert m.dtype == bool and m.shape == (n, n)
    i, j = np.indices((n, n))
    np.testing.assert_array_equal(m, j <= i)


def test_causal_attention_first_query_sees_only_first_key(rng):
    X = rng.normal(size=(4, 3))
    out, w = scaled_dot_product_attention(X, X, X, mask=causal_mask(4))
    np.testing.assert_array_equal(w[0], [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(out[0], X[0], rtol=1e-15)
    assert (np.triu(w, k=1) == 0).all()


@PROPS
@given(data=st.data(), n=st.integers(2, 6), d=st.integers(1, 4), t=st.integers(1, 5))
def test_no_leakage_through_causal_mask(data, n, d, t):
    t = min(t, n - 1)                       # positions >= t are "the future" of positions < t
    Q = data.draw(arrays(np.float64, (n, d), elements=elems), label="Q")
    K = data.draw(arrays(np.float64, (n, d), elements=elems), label="K")
    V = data.draw(arrays(np.float64, (n, 2), elements=elems), label="V")
    K2, V2 = K.copy(), V.copy()
    K2[t:] = data.draw(arrays(np.float64, (n - t, d), elements=elems), label="new future K")
    V2[t:] = data.draw(arrays(np.float64, (n - t, 2), elements=elems), label="new future V")
    out, w = scaled_dot_product_attention(Q, K, V, mask=causal_mask(n))
    out2, w2 = scaled_dot_product_attention(Q, K2, V2, mask=causal_mask(n))
    np.testing.assert_allclose(out2[:t], out[:t], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w2[:t], w[:t], rtol=1e-12, atol=1e-14)


def test_without_mask_future_does_leak(rng):
    """Sanity check of the test above: without the mask, changing the future changes the past."""
    Q, K, V = rng.normal(size=(3, 4, 2))
    V2 = V.copy()
    V2[2] += 10.0
    out, _ = scaled_dot_product_attention(Q, K, V)
    out2, _ = scaled_dot_product_attention(Q, K, V2)
    assert not np.allclose(out[0], out2[0])


# -- padding_mask -------------------------------------------------------------------
def test_padding_mask_known_value():
    np.testing.assert_array_equal(
        padding_mask([3, 1, 4], 4),
        [[True, True, True, False], [True, False, False, False], [True, True, True, True]])


def test_padding_mask_shape_and_dtype():
    m = padding_mask(np.array([2, 5], dtype=np.int32), 5)
    assert m.shape == (2, 5) and m.dtype == bool
    np.testing.assert_array_equal(m.sum(axis=1), [2, 5])


def test_padding_mask_blocks_padded_keys_in_batched_attention(rng):
    lengths, n = [2, 4], 4
    Q, K, V = rng.normal(size=(3, 2, n, 3))
    m = padding_mask(lengths, n)
    out, w = scaled_dot_product_attention(Q, K, V, mask=m[:, None, :])
    assert (w[0, :, 2:] == 0).all()
    # The short sequence attends exactly as if the padding were not there.
    out_short, _ = scaled_dot_product_attention(Q[0], K[0, :2], V[0, :2])
    np.testing.assert_allclose(out[0], out_short, rtol=1e-13)
    out_full, _ = scaled_dot_product_attention(Q[1], K[1], V[1])
    np.testing.assert_allclose(out[1], out_full, rtol=1e-13)


def test_padding_mask_per_head_indexing(rng):
    Q, K, V = rng.normal(size=(3, 2, 3, 4, 5))          # (batch=2, heads=3, n=4, d=5)
    m = padding_mask([1, 3], 4)
    _, w = scaled_dot_product_attention(Q, K, V, mask=m[:, None, None, :])
    assert (w[0, ..., 1:] == 0).all() and (w[1, ..., 3:] == 0).all()
    np.testing.assert_allclose(w[0, ..., 0], 1.0)


# -- bad inputs ----------------------------------------------------------------------
@pytest.mark.parametrize("n", [3.0, "3", None, True, [3]])
def test_causal_mask_non_int_n(n):
    with pytest.raises(TypeError, match=r"n must be a positive integer, got"):
        causal_mask(n)


@pytest.mark.parametrize("n", [0, -2])
def test_causal_mask_non_positive_n(n):
    with pytest.raises(ValueError, match=rf"n must be a positive integer, got {n}"):
        causal_mask(n)


@pytest.mark.parametrize("n", [4.0, "4", None, False])
def test_padding_mask_non_int_n(n):
    with pytest.raises(TypeError, match=r"n must be a positive integer, got"):
        padding_mask([1, 2], n)


def test_padding_mask_non_positive_n():
    with pytest.raises(ValueError, match=r"n must be a positive integer, got 0"):
        padding_mask([1], 0)


@pytest.mark.parametrize("lengths", [[0, 2], [2, 5], [-1], [4, 4, 6]])
def test_padding_mask_lengths_out_of_range(lengths):
    with pytest.raises(ValueError, match=r"every length must be between 1 and n=4, got " + re_list(lengths)):
        padding_mask(lengths, 4)


def re_list(values):
    return r"\[" + r", ".join(str(v) for v in values) + r"\]"


@pytest.mark.parametrize("lengths", [[1.0, 2.0], [True, False], np.array([1.5])])
def test_padding_mask_non_integer_lengths(lengths):
    with pytest.raises(TypeError, match=r"lengths must hold integers, got dtype"):
        padding_mask(lengths, 4)


@pytest.mark.parametrize("lengths", [[], [[1, 2]], 3, None])
def test_padding_mask_lengths_not_a_1d_sequence(lengths):
    with pytest.raises(ValueError, match=r"lengths must be a non-empty 1-D sequence of integers, got"):
        padding_mask(lengths, 4)


# -- notebook 06's leaked_weight -------------------------------------------------------------------
def test_leaked_weight_by_hand_and_zero_for_minus_inf():
    from transformer_course import leaked_weight

    scores = np.array([[0.0, 0.0], [2.0, 0.0]])
    allowed = np.array([[True, False], [False, True]])
    # row 0: e^-m / (1 + e^-m); row 1: blocked score 2 - m against 0
    m = 3.0
    expected = [np.exp(-m) / (1 + np.exp(-m)), np.exp(2 - m) / (np.exp(2 - m) + 1)]
    np.testing.assert_allclose(leaked_weight(scores, allowed, -m), expected, rtol=1e-14)
    np.testing.assert_array_equal(leaked_weight(scores, allowed, -np.inf), [0.0, 0.0])


@pytest.mark.parametrize("mask_value", [0.0, 1.0, "big", True, np.nan])
def test_leaked_weight_rejects_a_mask_value_that_is_no_penalty(mask_value):
    from transformer_course import leaked_weight

    with pytest.raises(ValueError, match="mask_value must be a negative number or -inf"):
        leaked_weight(np.zeros((2, 2)), np.eye(2, dtype=bool), mask_value)


def test_leaked_weight_needs_a_boolean_mask_of_the_scores_shape():
    from transformer_course import leaked_weight

    with pytest.raises(ValueError, match=r"allowed must be a boolean array of the shape of scores \(2, 2\)"):
        leaked_weight(np.zeros((2, 2)), np.ones(2, dtype=bool), -1e4)
