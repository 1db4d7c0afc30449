"""split_heads / merge_heads and MultiHeadAttention: values, masks, batching, properties, bad inputs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from transformer_course import (
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
)
from transformer_course.multihead import head_bilinear_forms

PROPS = settings(max_examples=25, deadline=None, database=None)
elems = st.floats(-2, 2, allow_nan=False, allow_infinity=False, width=64)


def make_mha(d_model=8, n_heads=2, seed=0, random_biases=True, **kw):
    r = np.random.default_rng(seed)
    mha = MultiHeadAttention(d_model, n_heads, rng=r, **kw)
    if random_biases and mha.b_Q is not None:
        for name in ("b_Q", "b_K", "b_V", "b_O"):
            setattr(mha, name, r.normal(size=d_model).astype(mha.W_Q.dtype))
    return mha


def reference_mha(mha, query, key, value, mask=None):
    """Head by head, with explicit column slices: the definition in the paper."""
    def proj(x, W, b):
        return x @ W + (0 if b is None else b)
    heads, weights = [], []
    dh = mha.d_head
    for i in range(mha.n_heads):
        cols = slice(i * dh, (i + 1) * dh)
        q = proj(query, mha.W_Q, mha.b_Q)[..., cols]
        k = proj(key, mha.W_K, mha.b_K)[..., cols]
        v = proj(value, mha.W_V, mha.b_V)[..., cols]
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(dh)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        w = np.exp(s) / np.exp(s).sum(axis=-1, keepdims=True)
        heads.append(w @ v)
        weights.append(w)
    out = proj(np.concatenate(heads, axis=-1), mha.W_O, mha.b_O)
    return out, np.stack(weights, axis=-3)


# -- split_heads / merge_heads -------------------------------------------------------
def test_split_heads_gives_each_head_its_column_block():
    x = np.arange(2 * 3 * 6, dtype=float).reshape(2, 3, 6)       # (batch, n, d_model)
    h = split_heads(x, 3)
    assert h.shape == (2, 3, 3, 2)                               # (batch, heads, n, d_head)
    for i in range(3):
        np.testing.assert_array_equal(h[:, i], x[..., 2 * i:2 * i + 2])


def test_merge_heads_known_value():
    heads = np.array([[[1.0, 2.0]], [[3.0, 4.0]]])                # (h=2, n=1, d_head=2)
    np.testing.assert_array_equal(merge_heads(heads), [[1.0, 2.0, 3.0, 4.0]])


@PROPS
@given(lead=st.lists(st.integers(1, 3), max_size=2), n=st.integers(1, 4),
       n_heads=st.integers(1, 4), d_head=st.integers(1, 3), data=st.data())
def test_split_merge_round_trip(lead, n, n_heads, d_head, data):
    x = data.draw(arrays(np.float64, (*lead, n, n_heads * d_head), elements=elems), label="x")
    heads = split_heads(x, n_heads)
    assert heads.shape == (*lead, n_heads, n, d_head)
    np.testing.assert_array_equal(merge_heads(heads), x)
    np.testing.assert_array_equal(split_heads(merge_heads(heads), n_heads), heads)


# -- construction -----------------------------------------------------------------------
def test_parameter_shapes_and_counts():
    mha = MultiHeadAttention(12, 3, rng=np.random.default_rng(0))
    assert mha.d_head == 4
    for W in (mha.W_Q, mha.W_K, mha.W_V, mha.W_O):
        assert W.shape == (12, 12)
    for b in (mha.b_Q, mha.b_K, mha.b_V, mha.b_O):
        np.testing.assert_array_equal(b, np.zeros(12))
    assert mha.n_parameters == 4 * 12 * 12 + 4 * 12
    no_bias = MultiHeadAttention(12, 3, rng=np.random.default_rng(0), bias=False)
    assert no_bias.b_Q is None and no_bias.b_O is None
    assert no_bias.n_parameters == 4 * 12 * 12


def test_same_seed_same_weights_different_seed_different_weights():
    a = MultiHeadAttention(8, 2, rng=np.random.default_rng(3))
    b = MultiHeadAttention(8, 2, rng=np.random.default_rng(3))
    c = MultiHeadAttention(8, 2, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(a.W_V, b.W_V)
    assert not np.array_equal(a.W_V, c.W_V)
    assert not np.array_equal(a.W_Q, a.W_K)                      # the four matrices are distinct draws


def test_xavier_uniform_limit():
    mha = MultiHeadAttention(32, 4, rng=np.random.default_rng(0))
    limit = np.sqrt(6 / 64)
    W = np.stack([mha.W_Q, mha.W_K, mha.W_V, mha.W_O])
    assert np.abs(W).max() <= limit
    assert np.abs(W).max() > 0.9 * limit


def test_float32_parameters_and_outputs(rng):
    mha = make_mha(dtype=np.float32)
    assert mha.W_Q.dtype == np.float32 and mha.b_O.dtype == np.float32
    x = rng.normal(size=(2, 5, 8)).astype(np.float32)
    out, w = mha(x)
    assert out.dtype == np.float32 and w.dtype == np.float32
    ref, _ = reference_mha(mha, x.astype(np.float64), x.astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_set_weights_replaces_everything_and_returns_self(rng):
    mha = make_mha()
    Ws = [rng.normal(size=(8, 8)) for _ in range(4)]
    bs = [rng.normal(size=8) for _ in range(4)]
    assert mha.set_weights(*Ws, *bs) is mha
    for name, W in zip(("W_Q", "W_K", "W_V", "W_O"), Ws):
        np.testing.assert_array_equal(getattr(mha, name), W)
    for name, b in zip(("b_Q", "b_K", "b_V", "b_O"), bs):
        np.testing.assert_array_equal(getattr(mha, name), b)
    mha.set_weights(*Ws)
    assert mha.b_Q is None and mha.b_O is None
    assert mha.n_parameters == 4 * 64


# -- forward ---------------------------------------------------------------------------
@pytest.mark.parametrize(("d_model", "n_heads"), [(8, 1), (8, 2), (12, 3), (8, 8)])
def test_matches_head_by_head_reference(rng, d_model, n_heads):
    mha = make_mha(d_model, n_heads)
    x = rng.normal(size=(2, 5, d_model))
    out, w = mha(x)
    assert out.shape == (2, 5, d_model)
    assert w.shape == (2, n_heads, 5, 5)
    ref_out, ref_w = reference_mha(mha, x, x, x)
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(w, ref_w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-13)


def test_one_head_is_plain_attention_of_the_projections(rng):
    mha = make_mha(6, 1)
    x = rng.normal(size=(4, 6))
    out, w = mha(x)
    o, ww = scaled_dot_product_attention(x @ mha.W_Q + mha.b_Q, x @ mha.W_K + mha.b_K, x @ mha.W_V + mha.b_V)
    np.testing.assert_allclose(out, o @ mha.W_O + mha.b_O, rtol=1e-12)
    np.testing.assert_allclose(w[0], ww, rtol=1e-12)


def test_cross_attention_with_different_lengths(rng):
    mha = make_mha()
    q = rng.normal(size=(2, 3, 8))
    kv = rng.normal(size=(2, 5, 8))
    out, w = mha(q, kv, kv)
    assert out.shape == (2, 3, 8) and w.shape == (2, 2, 3, 5)
    ref_out, ref_w = reference_mha(mha, q, kv, kv)
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-13)
    # value defaults to key
    np.testing.assert_allclose(mha(q, kv)[0], out, rtol=1e-14)


def test_separate_value_tensor(rng):
    mha = make_mha()
    q, k, v = rng.normal(size=(3, 2, 4, 8))
    out, _ = mha(q, k, v)
    np.testing.assert_allclose(out, reference_mha(mha, q, k, v)[0], rtol=1e-12, atol=1e-13)
    assert not np.allclose(out, mha(q, k, k)[0])


def test_unbatched_and_extra_leading_dims_agree(rng):
    mha = make_mha()
    x = rng.normal(size=(2, 3, 4, 8))
    out, w = mha(x)
    assert out.shape == (2, 3, 4, 8) and w.shape == (2, 3, 2, 4, 4)
    o, ww = mha(x[1, 2])
    np.testing.assert_allclose(out[1, 2], o, rtol=1e-13)
    np.testing.assert_allclose(w[1, 2], ww, rtol=1e-13)


def test_causal_mask_in_every_head(rng):
    mha = make_mha()
    x = rng.normal(size=(2, 5, 8))
    out, w = mha(x, mask=causal_mask(5))
    assert (w[..., ~causal_mask(5)] == 0).all()
    np.testing.assert_allclose(out, reference_mha(mha, x, x, x, causal_mask(5))[0], rtol=1e-12, atol=1e-13)


def test_key_padding_mask_equals_explicit_mask(rng):
    mha = make_mha()
    x = rng.normal(size=(2, 4, 8))
    kpm = padding_mask([2, 4], 4)
    out, w = mha(x, key_padding_mask=kpm)
    assert (w[0, :, :, 2:] == 0).all()
    out2, w2 = mha(x, mask=kpm[:, None, None, :])
    np.testing.assert_allclose(out, out2, rtol=1e-14)
    np.testing.assert_allclose(w, w2, rtol=1e-14)
    # The real tokens of the short sequence behave as if the padding did not exist.
    short, _ = mha(x[0, :2])
    np.testing.assert_allclose(out[0, :2], short, rtol=1e-12)


def test_key_padding_mask_combines_with_boolean_and_float_masks(rng):
    mha = make_mha()
    x = rng.normal(size=(2, 4, 8))
    kpm = padding_mask([3, 4], 4)
    causal = causal_mask(4)
    _, w_bool = mha(x, mask=causal, key_padding_mask=kpm)
    _, w_float = mha(x, mask=np.where(causal, 0.0, -np.inf), key_padding_mask=kpm)
    allowed = causal[None, None] & kpm[:, None, None, :]
    assert (w_bool[~np.broadcast_to(allowed, w_bool.shape)] == 0).all()
    np.testing.assert_allclose(w_bool, w_float, rtol=1e-14)
    bias = rng.normal(size=(4, 4))
    _, w_bias = mha(x, mask=bias, key_padding_mask=kpm)
    assert (w_bias[0, :, :, 3] == 0).all() and (w_bias[1] > 0).all()


def test_integer_mask_is_refused_also_with_key_padding_mask(rng):
    # Regression: an int 0/1 mask used to be silently treated as an additive mask
    # (ignoring the causal structure) when combined with a key_padding_mask.
    mha = make_mha()
    x = rng.normal(size=(1, 3, 8))
    int_mask = causal_mask(3).astype(int)
    for kw in ({}, {"key_padding_mask": np.ones((1, 3), bool)}):
        with pytest.raises(TypeError, match=r"mask must be boolean .* got array of shape \(3, 3\) and dtype int64"):
            mha(x, mask=int_mask, **kw)


def test_output_does_not_depend_on_other_batch_items(rng):
    mha = make_mha()
    x = rng.normal(size=(3, 4, 8))
    y = x.copy()
    y[2] += 5.0
    np.testing.assert_allclose(mha(x)[0][:2], mha(y)[0][:2], rtol=1e-14)


# -- properties ---------------------------------------------------------------------------
@PROPS
@given(x=arrays(np.float64, st.tuples(st.integers(2, 6), st.just(8)), elements=elems),
       seed=st.integers(0, 2**16), n_heads=st.sampled_from([1, 2, 4]))
def test_mha_is_permutation_equivariant(x, seed, n_heads):
    mha = make_mha(8, n_heads, seed=seed % 7)
    perm = np.random.default_rng(seed).permutation(x.shape[0])
    out, w = mha(x)
    out_p, w_p = mha(x[perm])
    np.testing.assert_allclose(out_p, out[perm], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(w_p, w[:, perm][:, :, perm], rtol=1e-9, atol=1e-11)


@PROPS
@given(data=st.data(), n=st.integers(2, 6), t=st.integers(1, 5))
def test_mha_no_leakage_through_causal_mask(data, n, t):
    t = min(t, n - 1)
    mha = make_mha(8, 2)
    x = data.draw(arrays(np.float64, (n, 8), elements=elems), label="x")
    y = x.copy()
    y[t:] = data.draw(arrays(np.float64, (n - t, 8), elements=elems), label="future")
    out_x, _ = mha(x, mask=causal_mask(n))
    out_y, _ = mha(y, mask=causal_mask(n))
    np.testing.assert_allclose(out_y[:t], out_x[:t], rtol=1e-12, atol=1e-13)


@PROPS
@given(lead=st.lists(st.integers(1, 3), max_size=2), n_q=st.integers(1, 4), n_k=st.integers(1, 4))
def test_mha_shapes(lead, n_q, n_k):
    mha = make_mha(8, 4)
    q = np.ones((*lead, n_q, 8))
    kv = np.ones((*lead, n_k, 8))
    out, w = mha(q, kv, kv)
    assert out.shape == (*lead, n_q, 8)
    assert w.shape == (*lead, 4, n_q, n_k)


# -- bad inputs ------------------------------------------------------------------------------
def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"d_model=10 must be divisible by n_heads=4"):
        MultiHeadAttention(10, 4, rng=np.random.default_rng(0))


def test_split_heads_not_divisible():
    with pytest.raises(ValueError, match=r"last dimension d_model=10 of x must be divisible by n_heads=4"):
        split_heads(np.zeros((3, 10)), 4)


@pytest.mark.parametrize(("n_heads", "exc"), [(2.0, TypeError), ("2", TypeError), (True, TypeError), (0, ValueError), (-2, ValueError)])
def test_split_heads_bad_n_heads(n_heads, exc):
    with pytest.raises(exc, match=r"n_heads must be a positive integer, got"):
        split_heads(np.zeros((3, 4)), n_heads)


def test_split_heads_needs_2d_and_merge_heads_needs_3d():
    with pytest.raises(ValueError, match=r"x must have at least 2 dimension\(s\).*got shape \(4,\)"):
        split_heads(np.zeros(4), 2)
    with pytest.raises(ValueError, match=r"x must have at least 3 dimension\(s\).*got shape \(3, 4\)"):
        merge_heads(np.zeros((3, 4)))


@pytest.mark.parametrize(("kw", "exc", "match"), [
    ({"d_model": 8.0, "n_heads": 2}, TypeError, r"d_model must be a positive integer, got float 8.0"),
    ({"d_model": 0, "n_heads": 2}, ValueError, r"d_model must be a positive integer, got 0"),
    ({"d_model": 8, "n_heads": "2"}, TypeError, r"n_heads must be a positive integer, got str '2'"),
    ({"d_model": 8, "n_heads": -1}, ValueError, r"n_heads must be a positive integer, got -1"),
])
def test_bad_sizes(kw, exc, match):
    with pytest.raises(exc, match=match):
        MultiHeadAttention(**kw, rng=np.random.default_rng(0))


@pytest.mark.parametrize("bad_rng", [None, 0, np.random.RandomState(0), "seed"])
def test_rng_must_be_a_generator(bad_rng):
    with pytest.raises(TypeError, match=r"rng must be a numpy.random.Generator \(e.g. np.random.default_rng\(0\)\), got"):
        MultiHeadAttention(8, 2, rng=bad_rng)


@pytest.mark.parametrize("which", range(4))
def test_set_weights_wrong_matrix_shape(which):
    mha = make_mha()
    Ws = [np.zeros((8, 8)) for _ in range(4)]
    Ws[which] = np.zeros((8, 4))
    name = ("W_Q", "W_K", "W_V", "W_O")[which]
    with pytest.raises(ValueError, match=rf"{name} must have shape \(8, 8\), got shape \(8, 4\)"):
        mha.set_weights(*Ws)


@pytest.mark.parametrize("which", range(4))
def test_set_weights_wrong_bias_shape(which):
    mha = make_mha()
    bs = [np.zeros(8) for _ in range(4)]
    bs[which] = np.zeros((1, 8))
    name = ("b_Q", "b_K", "b_V", "b_O")[which]
    with pytest.raises(ValueError, match=rf"{name} must have shape \(8,\), got shape \(1, 8\)"):
        mha.set_weights(*[np.zeros((8, 8))] * 4, *bs)


def test_set_weights_wrong_type():
    mha = make_mha()
    with pytest.raises(TypeError, match=r"W_K must be a real-valued array, got str 'w'"):
        mha.set_weights(np.zeros((8, 8)), "w", np.zeros((8, 8)), np.zeros((8, 8)))
    with pytest.raises(ValueError, match=r"W_Q must have at least 2 dimension\(s\).*got shape \(8,\)"):
        mha.set_weights(np.zeros(8), np.zeros((8, 8)), np.zeros((8, 8)), np.zeros((8, 8)))


@pytest.mark.parametrize("name", ["query", "key", "value"])
def test_wrong_model_width(rng, name):
    mha = make_mha()
    args = {"query": rng.normal(size=(2, 3, 8)), "key": rng.normal(size=(2, 3, 8)), "value": rng.normal(size=(2, 3, 8))}
    args[name] = rng.normal(size=(2, 3, 6))
    with pytest.raises(ValueError, match=rf"{name} must have last dimension d_model=8, got shape \(2, 3, 6\)"):
        mha(args["query"], args["key"], args["value"])


def test_key_and_value_shapes_differ(rng):
    mha = make_mha()
    with pytest.raises(ValueError, match=r"key and value must have the same shape, got key \(2, 4, 8\) and value \(2, 5, 8\)"):
        mha(rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 4, 8)), rng.normal(size=(2, 5, 8)))


@pytest.mark.parametrize("name", ["query", "key", "value"])
def test_nan_in_inputs_names_the_argument(rng, name):
    mha = make_mha()
    args = {n: rng.normal(size=(3, 8)) for n in ("query", "key", "value")}
    args[name][1, 2] = np.nan
    with pytest.raises(ValueError, match=rf"{name} contains NaN; expected finite values"):
        mha(args["query"], args["key"], args["value"])


@pytest.mark.parametrize(("bad", "exc", "match"), [
    ("hello", TypeError, r"query must be a real-valued array, got str 'hello'"),
    (None, TypeError, r"query must be a real-valued array, got NoneType None"),
    (np.array([[{}] * 8]), TypeError, r"query must be a real-valued numeric array, got array of shape \(1, 8\) and dtype object"),
    (np.zeros(8), ValueError, r"query must have at least 2 dimension\(s\).*got shape \(8,\)"),
])
def test_bad_query(bad, exc, match):
    with pytest.raises(exc, match=match):
        make_mha()(bad)


def test_key_padding_mask_wrong_dtype(rng):
    mha = make_mha()
    with pytest.raises(TypeError, match=r"key_padding_mask must be boolean \(True = real token\), got array of shape \(2, 4\) and dtype int64"):
        mha(rng.normal(size=(2, 4, 8)), key_padding_mask=np.ones((2, 4), dtype=np.int64))


@pytest.mark.parametrize("shape", [(4,), (2, 3), (2, 1, 4)])
def test_key_padding_mask_wrong_shape(rng, shape):
    mha = make_mha()
    with pytest.raises(ValueError, match=rf"key_padding_mask must have shape \(2, 4\) \(\.\.\., n_k\), got {re_shape(shape)}"):
        mha(rng.normal(size=(2, 4, 8)), key_padding_mask=np.ones(shape, bool))


def re_shape(shape):
    return str(shape).replace("(", r"\(").replace(")", r"\)")


def test_mask_that_does_not_broadcast_to_per_head_scores(rng):
    mha = make_mha()                                                    # scores (2, 2, 4, 4)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast to the score shape \(2, 2, 4, 4\)"):
        mha(rng.normal(size=(2, 4, 8)), mask=np.ones((3, 4), bool))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 1, 1, 4\) does not broadcast to the score shape \(2, 2, 4, 4\)"):
        mha(rng.normal(size=(2, 4, 8)), mask=np.ones((3, 1, 1, 4), bool))


# -- head_bilinear_forms (notebook 03, Exercise 3) -------------------------------------------
def test_bilinear_forms_by_hand():
    # d_model = 4, 2 heads of width 2: head 0 reads feature 0 (query) against feature 3 (key).
    W_Q, W_K = np.zeros((4, 4)), np.zeros((4, 4))
    W_Q[0, 1], W_K[3, 1] = 1.0, 2.0
    A = head_bilinear_forms(W_Q, W_K, 2)
    want = np.zeros((2, 4, 4))
    want[0, 0, 3] = 2.0 / np.sqrt(2)
    np.testing.assert_allclose(A, want, rtol=1e-15, atol=0)


@PROPS
@given(data=st.data(), n_heads=st.integers(1, 4), d_head=st.integers(1, 4), n=st.integers(1, 5))
def test_bilinear_forms_reproduce_each_heads_scores(data, n_heads, d_head, n):
    d_model = n_heads * d_head
    W_Q = data.draw(arrays(np.float64, (d_model, d_model), elements=elems))
    W_K = data.draw(arrays(np.float64, (d_model, d_model), elements=elems))
    X = data.draw(arrays(np.float64, (2, n, d_model), elements=elems))
    A = head_bilinear_forms(W_Q, W_K, n_heads)
    assert A.shape == (n_heads, d_model, d_model)
    mha = MultiHeadAttention(d_model, n_heads, rng=np.random.default_rng(0), bias=False)
    mha.set_weights(W_Q, W_K, np.eye(d_model), np.eye(d_model))
    scores = split_heads(X @ W_Q, n_heads) @ np.swapaxes(split_heads(X @ W_K, n_heads), -1, -2) / np.sqrt(d_head)
    # (2, 1, n, d) @ (h, d, d) @ (2, 1, d, n) -> (2, h, n, n). Entries of X and W are <= 2 and d_model <= 16,
    # so every score and partial sum is <= 4 * 16^3 = 16384; rounding over ~2 * 16^2 products stays below
    # 16384 * 512 * 1.1e-16 ~ 1e-9 (the atol).
    got = X[:, None] @ A @ np.swapaxes(X, -1, -2)[:, None]
    np.testing.assert_allclose(got, scores, rtol=1e-9, atol=1e-9)
    with np.errstate(all="ignore"):
        weights = mha(X)[1]
    e = np.exp(got - got.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(axis=-1, keepdims=True), weights, rtol=1e-9, atol=1e-12)
    # rank at most d_head; one head of width d_model adds the forms (scale sqrt(d_head / d_model)).
    assert np.all(np.linalg.matrix_rank(A) <= d_head)
    np.testing.assert_allclose(head_bilinear_forms(W_Q, W_K, 1)[0], A.sum(axis=0) * np.sqrt(d_head / d_model),
                               rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("args, exc, match", [
    ((np.eye(4), np.eye(4), 3), ValueError, r"d_model=4 of x must be divisible by n_heads=3"),
    ((np.eye(4), np.eye(4), 0), ValueError, r"n_heads must be a positive integer, got 0"),
    ((np.ones((4, 2)), np.ones((4, 2)), 2), ValueError, r"W_Q must be a square \(d_model, d_model\) matrix, got shape \(4, 2\)"),
    ((np.eye(4), np.eye(6), 2), ValueError, r"W_K must have shape \(4, 4\), got shape \(6, 6\)"),
    ((np.full((4, 4), np.inf), np.eye(4), 2), ValueError, r"W_Q contains \+inf"),
])
def test_bilinear_forms_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        head_bilinear_forms(*args)


# -- the functional twin of notebook 03's exercise ------------------------------------------------
def test_multi_head_attention_is_the_class_without_biases(rng):
    from transformer_course import multi_head_attention

    d, h = 12, 3
    mha = MultiHeadAttention(d, h, rng=rng, bias=False)
    X = rng.normal(size=(2, 5, d))
    mask = np.tril(np.ones((5, 5), dtype=bool))
    out, w = multi_head_attention(X, mha.W_Q, mha.W_K, mha.W_V, mha.W_O, h, mask=mask)
    ref_out, ref_w = mha(X, mask=mask)
    np.testing.assert_array_equal(out, ref_out)       # one computation, so the same bits
    np.testing.assert_array_equal(w, ref_w)
    assert w.shape == (2, h, 5, 5) and np.allclose(np.triu(w[0, 0], 1), 0), "the mask applies per head"


def test_multi_head_attention_names_a_bad_weight(rng):
    from transformer_course import multi_head_attention

    X, W = rng.normal(size=(4, 8)), rng.normal(size=(8, 8))
    with pytest.raises(ValueError, match=r"W_V must have shape \(8, 8\), got shape \(8, 6\)"):
        multi_head_attention(X, W, W, W[:, :6], W, 2)
    with pytest.raises(ValueError, match="divisible by n_heads=3"):
        multi_head_attention(X, W, W, W, W, 3)
