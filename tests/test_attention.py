"""Scaled dot-product attention: hand-computed values, masks, batching, dtypes, properties, bad inputs."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from transformer_course import attention_scores, causal_mask, scaled_dot_product_attention, softmax
from transformer_course.attention import lookup_query

PROPS = settings(max_examples=30, deadline=None, database=None)
elems = st.floats(-3, 3, allow_nan=False, allow_infinity=False, width=64)


def qkv(rng, lead=(), n_q=3, n_k=4, d_k=5, d_v=6, dtype=np.float64):
    return (rng.normal(size=(*lead, n_q, d_k)).astype(dtype),
            rng.normal(size=(*lead, n_k, d_k)).astype(dtype),
            rng.normal(size=(*lead, n_k, d_v)).astype(dtype))


# -- known values ----------------------------------------------------------------
def test_hand_computed_2x2_attention():
    # d_k = 4 so the scale is 1/2: query 0 scores [ln 2, 0] -> weights [2/3, 1/3];
    # query 1 is zero -> scores [0, 0] -> weights [1/2, 1/2].
    Q = np.array([[2 * math.log(2), 0, 0, 0], [0, 0, 0, 0]])
    K = np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]])
    V = np.array([[3.0, 0.0], [0.0, 3.0]])
    out, w = scaled_dot_product_attention(Q, K, V)
    np.testing.assert_allclose(w, [[2 / 3, 1 / 3], [0.5, 0.5]], rtol=1e-14)
    np.testing.assert_allclose(out, [[2.0, 1.0], [1.5, 1.5]], rtol=1e-14)


def test_scores_are_scaled_by_sqrt_dk_not_dk(rng):
    Q, K, _ = qkv(rng, d_k=9)
    s = attention_scores(Q, K)
    np.testing.assert_allclose(s, Q @ K.T / 3.0, rtol=1e-13)
    assert not np.allclose(s, Q @ K.T / 9.0)


def test_scores_entry_ij_is_query_i_dot_key_j(rng):
    Q, K, _ = qkv(rng, n_q=2, n_k=3, d_k=4)
    s = attention_scores(Q, K)
    assert s.shape == (2, 3)
    assert s[1, 2] == pytest.approx(Q[1] @ K[2] / 2.0, rel=1e-14)


def test_matches_formula_with_all_shapes_different(rng):
    Q, K, V = qkv(rng, n_q=3, n_k=4, d_k=5, d_v=6)
    out, w = scaled_dot_product_attention(Q, K, V)
    expected_w = softmax(Q @ K.T / np.sqrt(5))
    assert out.shape == (3, 6) and w.shape == (3, 4)
    np.testing.assert_allclose(w, expected_w, rtol=1e-13)
    np.testing.assert_allclose(out, expected_w @ V, rtol=1e-13)


def test_single_key_gets_all_the_weight(rng):
    Q, K, V = qkv(rng, n_q=3, n_k=1)
    out, w = scaled_dot_product_attention(Q, K, V)
    np.testing.assert_array_equal(w, np.ones((3, 1)))
    np.testing.assert_allclose(out, np.repeat(V, 3, axis=0))


def test_identical_keys_give_uniform_weights(rng):
    Q = rng.normal(size=(2, 3))
    K = np.tile(rng.normal(size=(1, 3)), (4, 1))
    V = rng.normal(size=(4, 2))
    out, w = scaled_dot_product_attention(Q, K, V)
    np.testing.assert_allclose(w, np.full((2, 4), 0.25), rtol=1e-14)
    np.testing.assert_allclose(out, np.tile(V.mean(axis=0), (2, 1)), rtol=1e-12)


# -- masks -----------------------------------------------------------------------
def test_boolean_mask_zeroes_blocked_keys_and_renormalises(rng):
    Q, K, V = qkv(rng, n_q=2, n_k=3)
    mask = np.array([[True, False, True], [False, True, True]])
    out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    assert (w[~mask] == 0).all()
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-14)
    # Same as attention over only the allowed keys, query by query.
    for i in range(2):
        o_i, w_i = scaled_dot_product_attention(Q[i:i + 1], K[mask[i]], V[mask[i]])
        np.testing.assert_allclose(out[i], o_i[0], rtol=1e-12)
        np.testing.assert_allclose(w[i, mask[i]], w_i[0], rtol=1e-12)


def test_boolean_mask_equals_additive_neg_inf_mask(rng):
    Q, K, V = qkv(rng, lead=(2,))
    mask = rng.random((3, 4)) < 0.6
    mask[:, 0] = True
    out_b, w_b = scaled_dot_product_attention(Q, K, V, mask=mask)
    out_f, w_f = scaled_dot_product_attention(Q, K, V, mask=np.where(mask, 0.0, -np.inf))
    np.testing.assert_allclose(out_b, out_f, rtol=1e-14)
    np.testing.assert_allclose(w_b, w_f, rtol=1e-14)


def test_additive_float_mask_is_added_to_the_scores(rng):
    Q, K, V = qkv(rng)
    bias = rng.normal(size=(3, 4))
    out, w = scaled_dot_product_attention(Q, K, V, mask=bias)
    expected = softmax(attention_scores(Q, K) + bias)
    np.testing.assert_allclose(w, expected, rtol=1e-13)
    np.testing.assert_allclose(out, expected @ V, rtol=1e-13)


def test_all_true_mask_and_scalar_mask_change_nothing(rng):
    Q, K, V = qkv(rng)
    ref = scaled_dot_product_attention(Q, K, V)
    for mask in (np.ones((3, 4), bool), np.True_, np.zeros((1, 4))):
        out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
        np.testing.assert_allclose(out, ref[0], rtol=1e-14)
        np.testing.assert_allclose(w, ref[1], rtol=1e-14)


def test_fully_masked_row_gives_zero_weights_and_output_without_warnings(rng):
    Q, K, V = qkv(rng)
    mask = np.ones((3, 4), bool)
    mask[1] = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # a 0/0 RuntimeWarning would fail the test
        out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    assert not np.isnan(out).any() and not np.isnan(w).any()
    np.testing.assert_array_equal(w[1], np.zeros(4))
    np.testing.assert_array_equal(out[1], np.zeros(6))
    np.testing.assert_allclose(w[[0, 2]].sum(-1), 1.0)


def test_fully_masked_row_with_additive_neg_inf_mask(rng):
    Q, K, V = qkv(rng)
    mask = np.zeros((3, 4))
    mask[2] = -np.inf
    out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    np.testing.assert_array_equal(w[2], np.zeros(4))
    np.testing.assert_array_equal(out[2], np.zeros(6))


def test_mask_shared_across_batch_and_heads(rng):
    Q, K, V = qkv(rng, lead=(2, 3), n_q=4, n_k=4)
    mask = causal_mask(4)
    out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    assert (w[..., ~mask] == 0).all()
    out_00, _ = scaled_dot_product_attention(Q[1, 2], K[1, 2], V[1, 2], mask=mask)
    np.testing.assert_allclose(out[1, 2], out_00, rtol=1e-13)


# -- batching and dtypes ------------------------------------------------------------
def test_leading_batch_dims_equal_a_loop(rng):
    Q, K, V = qkv(rng, lead=(2, 3))
    out, w = scaled_dot_product_attention(Q, K, V)
    assert out.shape == (2, 3, 3, 6) and w.shape == (2, 3, 3, 4)
    for b in range(2):
        for h in range(3):
            o, ww = scaled_dot_product_attention(Q[b, h], K[b, h], V[b, h])
            np.testing.assert_allclose(out[b, h], o, rtol=1e-13)
            np.testing.assert_allclose(w[b, h], ww, rtol=1e-13)


def test_float32_in_float32_out(rng):
    Q, K, V = qkv(rng, lead=(2,), dtype=np.float32)
    out, w = scaled_dot_product_attention(Q, K, V, mask=causal_mask(4)[:3])
    assert out.dtype == np.float32 and w.dtype == np.float32
    assert attention_scores(Q, K).dtype == np.float32
    ref, _ = scaled_dot_product_attention(Q.astype(np.float64), K.astype(np.float64), V.astype(np.float64),
                                          mask=causal_mask(4)[:3])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_float32_with_float_mask_stays_float32(rng):
    Q, K, V = qkv(rng, dtype=np.float32)
    out, w = scaled_dot_product_attention(Q, K, V, mask=np.zeros((3, 4), dtype=np.float64))
    assert out.dtype == np.float32 and w.dtype == np.float32


def test_integer_inputs_are_promoted(rng):
    Q = np.array([[1, 0], [0, 1]])
    out, w = scaled_dot_product_attention(Q, Q, Q)
    assert out.dtype == np.float64
    np.testing.assert_allclose(w.sum(-1), 1.0)


# -- properties -----------------------------------------------------------------------
shapes = st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4))


@PROPS
@given(data=st.data(), dims=shapes)
def test_weights_are_distributions_and_output_is_a_convex_combination(data, dims):
    n_q, n_k, d = dims
    Q = data.draw(arrays(np.float64, (n_q, d), elements=elems), label="Q")
    K = data.draw(arrays(np.float64, (n_k, d), elements=elems), label="K")
    V = data.draw(arrays(np.float64, (n_k, 2), elements=elems), label="V")
    out, w = scaled_dot_product_attention(Q, K, V)
    assert (w >= 0).all()
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=1e-12)
    tol = 1e-12
    assert (out >= V.min(axis=0) - tol).all() and (out <= V.max(axis=0) + tol).all()


@PROPS
@given(data=st.data(), dims=shapes)
def test_masked_weights_are_distributions_over_allowed_keys(data, dims):
    n_q, n_k, d = dims
    Q = data.draw(arrays(np.float64, (n_q, d), elements=elems), label="Q")
    K = data.draw(arrays(np.float64, (n_k, d), elements=elems), label="K")
    mask = data.draw(arrays(np.bool_, (n_q, n_k)), label="mask")
    _, w = scaled_dot_product_attention(Q, K, K, mask=mask)
    assert (w[~mask] == 0).all()
    sums = w.sum(axis=-1)
    np.testing.assert_allclose(sums[mask.any(-1)], 1.0, rtol=1e-12)
    np.testing.assert_array_equal(sums[~mask.any(-1)], 0.0)


@PROPS
@given(X=arrays(np.float64, st.tuples(st.integers(2, 6), st.integers(1, 4)), elements=elems),
       seed=st.integers(0, 2**16))
def test_self_attention_is_permutation_equivariant(X, seed):
    perm = np.random.default_rng(seed).permutation(X.shape[0])
    out, w = scaled_dot_product_attention(X, X, X)
    out_p, w_p = scaled_dot_product_attention(X[perm], X[perm], X[perm])
    np.testing.assert_allclose(out_p, out[perm], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w_p, w[perm][:, perm], rtol=1e-10, atol=1e-12)


@PROPS
@given(data=st.data(), lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
       dims=shapes)
def test_shapes_with_any_leading_dims(data, lead, dims):
    n_q, n_k, d = dims
    Q = data.draw(arrays(np.float64, (*lead, n_q, d), elements=elems), label="Q")
    K = data.draw(arrays(np.float64, (*lead, n_k, d), elements=elems), label="K")
    V = data.draw(arrays(np.float64, (*lead, n_k, 3), elements=elems), label="V")
    out, w = scaled_dot_product_attention(Q, K, V)
    assert out.shape == (*lead, n_q, 3)
    assert w.shape == (*lead, n_q, n_k)


# -- bad inputs -------------------------------------------------------------------------
def test_q_and_k_with_different_last_dims(rng):
    with pytest.raises(ValueError, match=r"Q and K must have the same last dimension d_k, got Q \(3, 5\) and K \(4, 2\)"):
        scaled_dot_product_attention(np.zeros((3, 5)), np.zeros((4, 2)), np.zeros((4, 6)))
    with pytest.raises(ValueError, match=r"Q and K must have the same last dimension d_k, got Q \(3, 5\) and K \(4, 2\)"):
        attention_scores(np.zeros((3, 5)), np.zeros((4, 2)))


def test_q_and_k_with_different_batch_dims():
    with pytest.raises(ValueError, match=r"Q and K must have the same leading \(batch\) dimensions, got Q \(2, 3, 5\) and K \(3, 4, 5\)"):
        attention_scores(np.zeros((2, 3, 5)), np.zeros((3, 4, 5)))


def test_k_and_v_with_different_lengths():
    with pytest.raises(ValueError, match=r"K and V must have the same number of positions n_k \(axis -2\), got K \(4, 5\) and V \(3, 5\)"):
        scaled_dot_product_attention(np.zeros((3, 5)), np.zeros((4, 5)), np.zeros((3, 5)))


def test_k_and_v_with_different_batch_dims():
    with pytest.raises(ValueError, match=r"K and V must have the same leading \(batch\) dimensions, got K \(2, 4, 5\) and V \(3, 4, 5\)"):
        scaled_dot_product_attention(np.zeros((2, 3, 5)), np.zeros((2, 4, 5)), np.zeros((3, 4, 5)))


@pytest.mark.parametrize("name", ["Q", "K", "V"])
def test_one_dimensional_input_is_refused(name):
    args = {"Q": np.zeros((3, 5)), "K": np.zeros((4, 5)), "V": np.zeros((4, 5))}
    args[name] = np.zeros(5)
    with pytest.raises(ValueError, match=rf"{name} must have at least 2 dimension\(s\) \(shape \(\.\.\., n, d\)\), got shape \(5,\)"):
        scaled_dot_product_attention(**args)


@pytest.mark.parametrize(
    ("name", "bad", "match"),
    [
        ("Q", "queries", r"Q must be a real-valued array, got str 'queries'"),
        ("K", None, r"K must be a real-valued array, got NoneType None"),
        ("V", np.array([[object()]]), r"V must be a real-valued numeric array, got array of shape \(1, 1\) and dtype object"),
        ("Q", np.ones((3, 5), dtype=complex), r"Q must be a real-valued numeric array, got array of shape \(3, 5\) and dtype complex128"),
    ],
)
def test_non_numeric_inputs_raise_type_error(name, bad, match):
    args = {"Q": np.zeros((3, 5)), "K": np.zeros((4, 5)), "V": np.zeros((4, 5))}
    args[name] = bad
    with pytest.raises(TypeError, match=match):
        scaled_dot_product_attention(**args)


@pytest.mark.parametrize("name", ["Q", "K", "V"])
@pytest.mark.parametrize(("value", "what"), [(np.nan, "NaN"), (np.inf, r"\+inf"), (-np.inf, "-inf")])
def test_non_finite_inputs_are_refused(name, value, what):
    args = {"Q": np.zeros((3, 5)), "K": np.zeros((4, 5)), "V": np.zeros((4, 5))}
    args[name] = args[name].copy()
    args[name][0, 1] = value
    with pytest.raises(ValueError, match=rf"{name} contains {what}; expected finite values"):
        scaled_dot_product_attention(**args)


def test_mask_that_does_not_broadcast(rng):
    Q, K, V = qkv(rng)                                     # scores (3, 4)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 3\) does not broadcast to the score shape \(3, 4\)"):
        scaled_dot_product_attention(Q, K, V, mask=np.ones((4, 3), bool))


def test_mask_that_would_enlarge_the_scores(rng):
    Q, K, V = qkv(rng)                                     # scores (3, 4)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 4\) does not broadcast to the score shape \(3, 4\)"):
        scaled_dot_product_attention(Q, K, V, mask=np.ones((2, 3, 4), bool))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 1, 4\) does not broadcast to the score shape \(3, 4\)"):
        scaled_dot_product_attention(Q, K, V, mask=np.zeros((3, 1, 4)))


@pytest.mark.parametrize("mask", [np.ones((3, 4), dtype=int), np.array([["a"] * 4] * 3), np.full((3, 4), None)])
def test_mask_of_wrong_dtype(rng, mask):
    Q, K, V = qkv(rng)
    with pytest.raises(TypeError, match=r"mask must be boolean \(True = may attend\) or floating .* got array of shape \(3, 4\)"):
        scaled_dot_product_attention(Q, K, V, mask=mask)


@pytest.mark.parametrize(("value", "what"), [(np.nan, "NaN"), (np.inf, r"\+inf")])
def test_float_mask_with_nan_or_plus_inf(rng, value, what):
    Q, K, V = qkv(rng)
    mask = np.zeros((3, 4))
    mask[1, 1] = value
    with pytest.raises(ValueError, match=rf"mask contains {what}"):
        scaled_dot_product_attention(Q, K, V, mask=mask)


# -- the toy vocabulary -----------------------------------------------------------------------
def test_toy_embed_rows_and_readable_attention():
    from transformer_course.toy import EMBEDDINGS, embed

    X = embed(["cat", "ate", "fish"])
    assert X.shape == (3, 4) and X.dtype == np.float64
    np.testing.assert_array_equal(X[2], EMBEDDINGS["fish"])
    _, w = scaled_dot_product_attention(X, X, X)
    # "cat" shares the animal slot with "fish" (dot 0.5) and nothing with "ate" (dot 0).
    assert w[0, 0] > w[0, 2] > w[0, 1]
    np.testing.assert_allclose(w[0], softmax(np.array([1.0, 0.0, 0.5]) / 2.0), rtol=1e-14)


def test_toy_embed_unknown_token():
    from transformer_course.toy import embed

    with pytest.raises(ValueError, match=r"unknown token\(s\) \['bird', 'flew'\]; the toy vocabulary is \[.*'cat'.*\]"):
        embed(["the", "bird", "flew"])


def test_toy_embed_string_and_empty():
    from transformer_course.toy import embed

    with pytest.raises(TypeError, match=r"tokens must be a list of words, got the string 'the cat'; try tokens.split\(\)"):
        embed("the cat")
    with pytest.raises(ValueError, match=r"tokens must not be empty"):
        embed([])


# -- lookup_query (notebook 01, Exercise 3) ---------------------------------------------------
def test_lookup_query_by_hand():
    # Orthogonal keys of length 2 in d = 4, confidence 2/3: margin ln 2, scaled score of key 0 = q_0.
    K = np.array([[2.0, 0, 0, 0], [0, 2.0, 0, 0]])
    np.testing.assert_allclose(lookup_query(K, 0, 2 / 3), [math.log(2), 0, 0, 0], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(lookup_query(K, -1, 2 / 3), [0, math.log(2), 0, 0], rtol=1e-14, atol=1e-15)


def test_lookup_query_beats_the_naive_direction(rng):
    K = rng.normal(size=(4, 7))
    K[1] = 1.6 * K[2] + 0.3 * rng.normal(size=7)              # along K[2], key 1 scores highest
    assert np.argmax(K @ K[2]) == 1
    q = lookup_query(K, 2, 0.999)
    w = softmax(K @ q / np.sqrt(7))
    np.testing.assert_allclose(w, [0.001 / 3, 0.001 / 3, 0.999, 0.001 / 3], rtol=1e-9)


@PROPS
@given(data=st.data(), n=st.integers(2, 6), extra=st.integers(0, 4),
       confidence=st.floats(0.05, 0.9999, allow_nan=False))
def test_lookup_query_properties(data, n, extra, confidence):
    d = n + extra
    seed = data.draw(st.integers(0, 2**32 - 1))
    K = np.random.default_rng(seed).normal(size=(n, d)) * np.random.default_rng(seed + 1).uniform(0.3, 3.0, (n, 1))
    if np.linalg.cond(K) > 1e4:                            # nearly dependent keys: precision, not the property
        return
    j = data.draw(st.integers(0, n - 1))
    q = lookup_query(K, j, confidence)
    s = K @ q / np.sqrt(d)
    # scores: 0 for the others, m for key j; so key j's weight is exactly `confidence`.
    scale = np.abs(s).max()
    assert np.all(np.abs(np.delete(s, j)) <= 1e-9 * scale)
    np.testing.assert_allclose(softmax(s)[j], confidence, rtol=1e-9)
    # the shortest: q lies in the span of the keys, q = K^T a.
    a = np.linalg.lstsq(K.T, q, rcond=None)[0]
    assert np.linalg.norm(K.T @ a - q) <= 1e-9 * np.linalg.norm(q)


@pytest.mark.parametrize("name, alternative", [
    ("lstsq", lambda K, t: np.linalg.lstsq(K, t, rcond=None)[0]),
    ("pinv", lambda K, t: np.linalg.pinv(K) @ t),
    ("QR of K^T", lambda K, t: (lambda Q, R: Q @ np.linalg.solve(R.T, t))(*np.linalg.qr(K.T))),
    ("normal equations K K^T", lambda K, t: K.T @ np.linalg.solve(K @ K.T, t)),
])
@pytest.mark.parametrize("seed", range(5))
def test_lookup_query_hidden_cases_accept_correct_alternatives(name, alternative, seed):
    from transformer_course.grading import hidden_case
    for case_id in ("attention.lookup_query", "attention.lookup_query_square"):
        case = hidden_case(case_id, seed=seed)
        K, j, c = case.inputs["K"], case.inputs["j"], case.inputs["confidence"]
        n, d = K.shape
        t = np.zeros(n)
        t[j] = np.sqrt(d) * np.log((n - 1) * c / (1 - c))
        q = alternative(K, t)
        case.check((q, softmax(K @ q / np.sqrt(d))))


@pytest.mark.parametrize("args, exc, match", [
    ((np.ones(4), 0), ValueError, r"K must have at least 2 dimension"),
    ((np.ones((2, 3, 4)), 0), ValueError, r"K must be a 2-D array of keys \(n, d\), got shape \(2, 3, 4\)"),
    ((np.eye(3)[:, :2], 0), ValueError, r"2 <= n <= d .* got shape \(3, 2\)"),
    ((np.eye(4)[:1], 0), ValueError, r"2 <= n <= d .* got shape \(1, 4\)"),
    ((np.array([[1.0, 0, 0], [2.0, 0, 0]]), 0), ValueError, r"linearly independent .* got rank 1"),
    ((np.eye(3), 3), ValueError, r"j must index one of the n=3 keys, -3 <= j < 3, got 3"),
    ((np.eye(3), 1.0), TypeError, r"j must be an integer index of a key, got float 1.0"),
    ((np.eye(3), True), TypeError, r"j must be an integer index of a key, got bool True"),
    ((np.eye(3), 0, 1.0), ValueError, r"confidence must be strictly between 0 and 1, got 1.0"),
    ((np.eye(3), 0, 0.0), ValueError, r"confidence must be a positive number, got float 0.0"),
    ((np.array([[1.0, np.nan], [0.0, 1.0]]), 0), ValueError, r"K contains NaN"),
])
def test_lookup_query_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        lookup_query(*args)
