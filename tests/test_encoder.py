"""layer_norm, fold_layer_norm, relu, gelu, PositionwiseFeedForward and TransformerEncoderBlock."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from transformer_course import (
    PositionwiseFeedForward,
    TransformerEncoderBlock,
    causal_mask,
    fold_layer_norm,
    gelu,
    layer_norm,
    padding_mask,
    relu,
)

PROPS = settings(max_examples=25, deadline=None, database=None)
elems = st.floats(-3, 3, allow_nan=False, allow_infinity=False, width=64)


# =============================================================================
# layer_norm
# =============================================================================
def test_layer_norm_known_value():
    out = layer_norm(np.array([1.0, 2.0, 3.0]), eps=1e-12)
    np.testing.assert_allclose(out, np.array([-1.0, 0.0, 1.0]) * math.sqrt(1.5), rtol=1e-10)


def test_layer_norm_rows_have_mean_0_and_variance_1(rng):
    x = rng.normal(3.0, 5.0, size=(4, 6, 32))
    out = layer_norm(x)
    assert out.shape == x.shape
    np.testing.assert_allclose(out.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.var(axis=-1), 1.0, rtol=1e-5)       # var / (var + eps)
    np.testing.assert_allclose(layer_norm(x, eps=1e-12).var(axis=-1), 1.0, rtol=1e-10)


def test_layer_norm_uses_biased_variance_and_eps(rng):
    x = rng.normal(size=(3, 5))
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 0.5)
    np.testing.assert_allclose(layer_norm(x, eps=0.5), expected, rtol=1e-13)


def test_layer_norm_scale_and_shift(rng):
    x = rng.normal(size=(3, 4))
    gamma, beta = np.array([1.0, 2.0, -1.0, 0.5]), np.array([0.0, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(layer_norm(x, gamma, beta), layer_norm(x) * gamma + beta, rtol=1e-14)
    np.testing.assert_allclose(layer_norm(x, beta=beta), layer_norm(x) + beta, rtol=1e-14)
    np.testing.assert_allclose(layer_norm(x, gamma=gamma), layer_norm(x) * gamma, rtol=1e-14)


def test_layer_norm_constant_row_gives_zeros_not_nan():
    out = layer_norm(np.full((2, 4), 7.0))
    np.testing.assert_array_equal(out, np.zeros((2, 4)))


def test_layer_norm_float32_stays_float32(rng):
    x = rng.normal(size=(2, 8)).astype(np.float32)
    out = layer_norm(x, np.ones(8), np.zeros(8))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, layer_norm(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@PROPS
@given(x=arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 8)), elements=elems),
       shift=elems, scale=st.floats(0.5, 4.0))
def test_layer_norm_ignores_shift_and_positive_scale_of_each_row(x, shift, scale):
    assume((x.std(axis=-1) > 1e-2).all())            # near-constant rows: eps would dominate
    np.testing.assert_allclose(layer_norm(x * scale + shift, eps=1e-12), layer_norm(x, eps=1e-12),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "kw", "match"), [
    ("gamma", {"gamma": np.ones(3)}, r"gamma must have shape \(4,\), got shape \(3,\)"),
    ("gamma", {"gamma": np.ones((1, 4))}, r"gamma must have shape \(4,\), got shape \(1, 4\)"),
    ("beta", {"beta": np.zeros(5)}, r"beta must have shape \(4,\), got shape \(5,\)"),
])
def test_layer_norm_wrong_parameter_shape(name, kw, match):
    with pytest.raises(ValueError, match=match):
        layer_norm(np.zeros((2, 4)), **kw)


def test_layer_norm_scalar_gamma_is_refused():
    with pytest.raises(ValueError, match=r"gamma must have at least 1 dimension\(s\).*got shape \(\)"):
        layer_norm(np.zeros((2, 4)), gamma=2.0)


@pytest.mark.parametrize(("eps", "exc"), [(0, ValueError), (-1e-5, ValueError), (np.nan, ValueError),
                                          (np.inf, ValueError), ("1e-5", TypeError), (None, TypeError),
                                          (True, TypeError)])
def test_layer_norm_bad_eps(eps, exc):
    with pytest.raises(exc, match=r"eps must be a positive number, got"):
        layer_norm(np.ones((2, 4)), eps=eps)


@pytest.mark.parametrize("eps", [1e-5, np.float32(1e-5), np.float64(1e-12), 1])
def test_layer_norm_takes_numpy_and_python_eps(eps):
    out = layer_norm(np.array([[1.0, 2.0, 3.0, 4.0]]), eps=eps)
    # mean 0 exactly; variance 1 up to the eps added to the variance 1.25 (relative eps / 1.25)
    assert abs(out.mean()) < 1e-15 and abs(out.var() - 1.25 / (1.25 + float(eps))) < 1e-6


@pytest.mark.parametrize(("x", "exc", "match"), [
    (np.array([[1.0, np.nan]]), ValueError, r"x contains NaN"),
    (np.array([[1.0, -np.inf]]), ValueError, r"x contains -inf"),
    ("x", TypeError, r"x must be a real-valued array, got str 'x'"),
    (3.0, ValueError, r"x must have at least 1 dimension\(s\).*got shape \(\)"),
])
def test_layer_norm_bad_x(x, exc, match):
    with pytest.raises(exc, match=match):
        layer_norm(x)


# =============================================================================
# relu and gelu
# =============================================================================
def test_relu_known_values_and_dtype():
    np.testing.assert_array_equal(relu(np.array([-2.0, -0.0, 0.0, 3.5])), [0.0, 0.0, 0.0, 3.5])
    assert relu(np.array([-1.0], dtype=np.float32)).dtype == np.float32
    assert relu(-3) == 0.0 and relu(2) == 2.0                # 0-d input is fine
    assert relu([1, -1]).dtype == np.float64


def test_gelu_zero_and_known_values():
    assert gelu(0.0) == 0.0
    for x in (-3.0, -1.0, -0.1, 0.5, 1.0, 2.0, 7.0):
        assert gelu(x) == pytest.approx(0.5 * x * (1 + math.erf(x / math.sqrt(2))), rel=1e-14, abs=1e-300)


def test_gelu_is_the_erf_form_not_the_tanh_approximation():
    x = np.linspace(-4, 4, 81)
    tanh_form = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    assert np.abs(gelu(x) - tanh_form).max() > 1e-5


def test_gelu_limits_and_dtype():
    np.testing.assert_allclose(gelu(np.array([30.0, -30.0])), [30.0, 0.0], atol=1e-12)
    assert gelu(np.ones(3, dtype=np.float32)).dtype == np.float32
    assert gelu(np.ones((2, 3))).shape == (2, 3)


@PROPS
@given(x=arrays(np.float64, st.integers(1, 10), elements=st.floats(-10, 10)))
def test_gelu_odd_part_identity(x):
    # x*Phi(x) - (-x)*Phi(-x) = x (Phi(x) + Phi(-x)) = x
    np.testing.assert_allclose(gelu(x) - gelu(-x), x, rtol=1e-12, atol=1e-12)
    assert (gelu(x) >= -0.17).all()                 # global minimum of GELU is about -0.170


@pytest.mark.parametrize("fn", [relu, gelu])
@pytest.mark.parametrize(("bad", "match"), [("1.0", r"x must be a real-valued array, got str"),
                                            (None, r"x must be a real-valued array, got NoneType"),
                                            (np.array([1j]), r"x must be a real-valued numeric array")])
def test_activations_refuse_non_numeric(fn, bad, match):
    with pytest.raises(TypeError, match=match):
        fn(bad)


# =============================================================================
# PositionwiseFeedForward
# =============================================================================
def test_ffn_shapes_and_init_ranges():
    ffn = PositionwiseFeedForward(8, 32, rng=np.random.default_rng(0))
    assert ffn.W_1.shape == (8, 32) and ffn.b_1.shape == (32,)
    assert ffn.W_2.shape == (32, 8) and ffn.b_2.shape == (8,)
    assert np.abs(ffn.W_1).max() <= 1 / np.sqrt(8) and np.abs(ffn.W_2).max() <= 1 / np.sqrt(32)
    assert ffn.activation == "relu"


@pytest.mark.parametrize(("activation", "act"), [("relu", lambda h: np.maximum(h, 0)),
                                                  ("gelu", lambda h: 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2))))])
def test_ffn_matches_formula(rng, activation, act):
    ffn = PositionwiseFeedForward(6, 10, rng=np.random.default_rng(1), activation=activation)
    x = rng.normal(size=(2, 4, 6))
    expected = act(x @ ffn.W_1 + ffn.b_1) @ ffn.W_2 + ffn.b_2
    out = ffn(x)
    assert out.shape == (2, 4, 6)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-14)


def test_ffn_relu_and_gelu_differ(rng):
    x = rng.normal(size=(3, 6))
    a = PositionwiseFeedForward(6, 10, rng=np.random.default_rng(1), activation="relu")(x)
    b = PositionwiseFeedForward(6, 10, rng=np.random.default_rng(1), activation="gelu")(x)
    assert not np.allclose(a, b)


def test_ffn_is_position_wise(rng):
    ffn = PositionwiseFeedForward(6, 12, rng=np.random.default_rng(2))
    x = rng.normal(size=(5, 6))
    out = ffn(x)
    for i in range(5):
        np.testing.assert_allclose(ffn(x[i]), out[i], rtol=1e-13)


def test_ffn_set_weights_and_dtype(rng):
    ffn = PositionwiseFeedForward(2, 3, rng=np.random.default_rng(0), dtype=np.float32)
    assert ffn.W_1.dtype == np.float32
    assert ffn(np.ones((1, 2), np.float32)).dtype == np.float32
    W1 = np.array([[1.0, -1.0, 0.0], [0.0, 1.0, 2.0]])
    W2 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert ffn.set_weights(W1, np.zeros(3), W2, np.array([0.5, 0.0])) is ffn
    # x = [1, 2]: hidden = relu([1, 1, 4]) = [1, 1, 4]; out = [1+4, 1+4] + [0.5, 0]
    np.testing.assert_allclose(ffn(np.array([1.0, 2.0])), [5.5, 5.0])


@pytest.mark.parametrize(("args", "match"), [
    ({"W_1": np.zeros((3, 2))}, r"W_1 must have shape \(2, 3\), got shape \(3, 2\)"),
    ({"b_1": np.zeros(2)}, r"b_1 must have shape \(3,\), got shape \(2,\)"),
    ({"W_2": np.zeros((2, 3))}, r"W_2 must have shape \(3, 2\), got shape \(2, 3\)"),
    ({"b_2": np.zeros(3)}, r"b_2 must have shape \(2,\), got shape \(3,\)"),
])
def test_ffn_set_weights_wrong_shapes(args, match):
    ffn = PositionwiseFeedForward(2, 3, rng=np.random.default_rng(0))
    params = {"W_1": np.zeros((2, 3)), "b_1": np.zeros(3), "W_2": np.zeros((3, 2)), "b_2": np.zeros(2)}
    params.update(args)
    with pytest.raises(ValueError, match=match):
        ffn.set_weights(**params)


def test_ffn_unknown_activation():
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'relu'\], got 'swish'"):
        PositionwiseFeedForward(4, 8, rng=np.random.default_rng(0), activation="swish")


@pytest.mark.parametrize(("kw", "exc", "match"), [
    ({"d_model": 0, "d_ff": 8}, ValueError, r"d_model must be a positive integer, got 0"),
    ({"d_model": 4, "d_ff": 8.0}, TypeError, r"d_ff must be a positive integer, got float 8.0"),
])
def test_ffn_bad_sizes(kw, exc, match):
    with pytest.raises(exc, match=match):
        PositionwiseFeedForward(**kw, rng=np.random.default_rng(0))


def test_ffn_bad_rng_and_width():
    with pytest.raises(TypeError, match=r"rng must be a numpy.random.Generator.*got int 0"):
        PositionwiseFeedForward(4, 8, rng=0)
    ffn = PositionwiseFeedForward(4, 8, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=4, got shape \(2, 5\)"):
        ffn(np.zeros((2, 5)))


# =============================================================================
# TransformerEncoderBlock
# =============================================================================
def make_block(norm_first=False, activation="relu", d_model=8, n_heads=2, d_ff=16, seed=0, **kw):
    r = np.random.default_rng(seed)
    blk = TransformerEncoderBlock(d_model, n_heads, d_ff, rng=r, norm_first=norm_first, activation=activation, **kw)
    # Non-trivial layer-norm parameters and attention biases so that every term matters.
    for name in ("ln1_gamma", "ln2_gamma"):
        setattr(blk, name, 1 + 0.1 * r.normal(size=d_model))
    for name in ("ln1_beta", "ln2_beta"):
        setattr(blk, name, 0.1 * r.normal(size=d_model))
    for name in ("b_Q", "b_K", "b_V", "b_O"):
        setattr(blk.attention, name, 0.1 * r.normal(size=d_model))
    return blk


def reference_block(blk, x, **mask_kw):
    ln1 = lambda v: layer_norm(v, blk.ln1_gamma, blk.ln1_beta, blk.eps)  # noqa: E731
    ln2 = lambda v: layer_norm(v, blk.ln2_gamma, blk.ln2_beta, blk.eps)  # noqa: E731
    if blk.norm_first:
        z = x + blk.attention(ln1(x), **mask_kw)[0]
        return z + blk.feed_forward(ln2(z))
    z = ln1(x + blk.attention(x, **mask_kw)[0])
    return ln2(z + blk.feed_forward(z))


def test_block_defaults():
    blk = TransformerEncoderBlock(8, 4, rng=np.random.default_rng(0))
    assert blk.d_ff == 32 and blk.n_heads == 4 and blk.norm_first is False
    assert blk.feed_forward.W_1.shape == (8, 32)
    np.testing.assert_array_equal(blk.ln1_gamma, np.ones(8))
    np.testing.assert_array_equal(blk.ln2_beta, np.zeros(8))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_block_matches_its_definition(rng, norm_first, activation):
    blk = make_block(norm_first, activation)
    x = rng.normal(size=(2, 5, 8))
    out, w = blk(x)
    assert out.shape == x.shape and w.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(out, reference_block(blk, x), rtol=1e-12, atol=1e-13)


def test_post_ln_and_pre_ln_differ(rng):
    x = rng.normal(size=(5, 8))
    assert not np.allclose(make_block(False)(x)[0], make_block(True)(x)[0])


def test_post_ln_output_is_normalised(rng):
    blk = TransformerEncoderBlock(16, 4, rng=np.random.default_rng(0))          # ln2 gamma=1, beta=0
    out, _ = blk(rng.normal(size=(3, 7, 16)))
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.var(-1), 1.0, rtol=1e-4)


def test_block_key_padding_mask_ignores_padding(rng):
    for norm_first in (False, True):
        blk = make_block(norm_first)
        x = rng.normal(size=(2, 5, 8))
        out, w = blk(x, key_padding_mask=padding_mask([3, 5], 5))
        assert (w[0, ..., 3:] == 0).all()
        short, _ = blk(x[0, :3])
        np.testing.assert_allclose(out[0, :3], short, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(out, reference_block(blk, x, key_padding_mask=padding_mask([3, 5], 5)),
                                   rtol=1e-12, atol=1e-13)


def test_block_float32(rng):
    blk = TransformerEncoderBlock(8, 2, rng=np.random.default_rng(0), dtype=np.float32)
    out, w = blk(rng.normal(size=(3, 8)).astype(np.float32))
    assert out.dtype == np.float32 and w.dtype == np.float32


@PROPS
@given(lead=st.lists(st.integers(1, 3), max_size=2), n=st.integers(1, 5),
       norm_first=st.booleans(), activation=st.sampled_from(["relu", "gelu"]))
def test_block_output_shape_equals_input_shape(lead, n, norm_first, activation):
    blk = make_block(norm_first, activation)
    x = np.linspace(-1, 1, int(np.prod(lead, dtype=int)) * n * 8).reshape(*lead, n, 8)
    out, w = blk(x)
    assert out.shape == x.shape
    assert w.shape == (*lead, 2, n, n)
    out2, _ = blk(out)                                # blocks stack
    assert out2.shape == x.shape


@PROPS
@given(x=arrays(np.float64, st.tuples(st.integers(2, 6), st.just(8)), elements=elems),
       seed=st.integers(0, 2**16), norm_first=st.booleans())
def test_block_is_permutation_equivariant(x, seed, norm_first):
    blk = make_block(norm_first)
    perm = np.random.default_rng(seed).permutation(x.shape[0])
    np.testing.assert_allclose(blk(x[perm])[0], blk(x)[0][perm], rtol=1e-8, atol=1e-9)


@PROPS
@given(data=st.data(), n=st.integers(2, 6), t=st.integers(1, 5), norm_first=st.booleans())
def test_block_no_leakage_through_causal_mask(data, n, t, norm_first):
    t = min(t, n - 1)
    blk = make_block(norm_first)
    x = data.draw(arrays(np.float64, (n, 8), elements=elems), label="x")
    y = x.copy()
    y[t:] = data.draw(arrays(np.float64, (n - t, 8), elements=elems), label="future")
    np.testing.assert_allclose(blk(y, mask=causal_mask(n))[0][:t], blk(x, mask=causal_mask(n))[0][:t],
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("norm_first", [1, "yes", None])
def test_block_norm_first_must_be_bool(norm_first):
    with pytest.raises(TypeError, match=r"norm_first must be True or False, got"):
        TransformerEncoderBlock(8, 2, rng=np.random.default_rng(0), norm_first=norm_first)


def test_block_bad_arguments():
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'relu'\], got 'tanh'"):
        TransformerEncoderBlock(8, 2, rng=np.random.default_rng(0), activation="tanh")
    with pytest.raises(ValueError, match=r"d_model=8 must be divisible by n_heads=3"):
        TransformerEncoderBlock(8, 3, rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"rng must be a numpy.random.Generator.*got NoneType None"):
        TransformerEncoderBlock(8, 2, rng=None)
    with pytest.raises(ValueError, match=r"d_ff must be a positive integer, got 0"):
        TransformerEncoderBlock(8, 2, 0, rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"d_model must be a positive integer, got str '8'"):
        TransformerEncoderBlock("8", 2, rng=np.random.default_rng(0))


def test_block_bad_inputs(rng):
    blk = make_block()
    with pytest.raises(ValueError, match=r"x must have last dimension d_model=8, got shape \(3, 6\)"):
        blk(rng.normal(size=(3, 6)))
    with pytest.raises(ValueError, match=r"x must have at least 2 dimension\(s\).*got shape \(8,\)"):
        blk(rng.normal(size=8))
    with pytest.raises(TypeError, match=r"x must be a real-valued array, got str"):
        blk("tokens")
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(2, 3\) \(\.\.\., n_k\), got \(3,\)"):
        blk(rng.normal(size=(2, 3, 8)), key_padding_mask=np.ones(3, bool))


def test_block_bad_eps_is_reported_at_construction():
    with pytest.raises(ValueError, match=r"eps must be a positive number, got float 0.0"):
        TransformerEncoderBlock(8, 2, rng=np.random.default_rng(0), eps=0.0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_block_nan_input_is_refused(rng, norm_first):
    x = rng.normal(size=(3, 8))
    x[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"(x|query) contains NaN"):
        make_block(norm_first)(x)


# =============================================================================
# fold_layer_norm: LN(x) W + b = xhat W' + b'
# =============================================================================
def test_fold_known_values():
    gamma, beta = np.array([2.0, -1.0]), np.array([0.5, 1.0])
    W, b = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), np.array([0.1, 0.2, 0.3])
    W_f, b_f = fold_layer_norm(gamma, beta, W, b)
    np.testing.assert_array_equal(W_f, [[2.0, 4.0, 6.0], [-4.0, -5.0, -6.0]])      # row j times gamma_j
    np.testing.assert_allclose(b_f, [0.5 + 4.0 + 0.1, 1.0 + 5.0 + 0.2, 1.5 + 6.0 + 0.3], rtol=1e-15)


@PROPS
@given(d=st.integers(1, 12), m=st.integers(1, 12), lead=st.lists(st.integers(1, 4), max_size=2),
       seed=st.integers(0, 2**32 - 1))
def test_fold_then_unscaled_norm_equals_norm_then_map(d, m, lead, seed):
    r = np.random.default_rng(seed)
    gamma, beta = r.normal(size=d) * (r.random(d) > 0.2), r.normal(size=d)   # some scales exactly 0
    W, b = r.normal(size=(d, m)), r.normal(size=m)
    x = r.normal(2.0, 3.0, size=tuple(lead) + (d,))
    W_f, b_f = fold_layer_norm(gamma, beta, W, b)
    assert W_f.shape == (d, m) and b_f.shape == (m,)
    want = layer_norm(x, gamma, beta) @ W + b
    got = layer_norm(x) @ W_f + b_f
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * (1 + np.abs(want).max()))


def test_folding_a_pre_ln_block_keeps_its_output(rng):
    block = TransformerEncoderBlock(8, 2, 20, rng=rng, norm_first=True)
    for name in ("ln1_gamma", "ln2_gamma"):
        setattr(block, name, rng.normal(1.0, 0.5, 8))
    for name in ("ln1_beta", "ln2_beta"):
        setattr(block, name, rng.normal(size=8))
    a, ffn = block.attention, block.feed_forward
    a.b_Q, a.b_K, a.b_V = rng.normal(size=8), rng.normal(size=8), rng.normal(size=8)
    x = rng.normal(size=(2, 5, 8))
    want, _ = block(x)
    folded = [fold_layer_norm(block.ln1_gamma, block.ln1_beta, W, bias)
              for W, bias in ((a.W_Q, a.b_Q), (a.W_K, a.b_K), (a.W_V, a.b_V))]
    W_1, b_1 = fold_layer_norm(block.ln2_gamma, block.ln2_beta, ffn.W_1, ffn.b_1)
    a.set_weights(folded[0][0], folded[1][0], folded[2][0], a.W_O, folded[0][1], folded[1][1], folded[2][1], a.b_O)
    ffn.set_weights(W_1, b_1, ffn.W_2, ffn.b_2)
    block.ln1_gamma, block.ln2_gamma, block.ln1_beta, block.ln2_beta = np.ones(8), np.ones(8), np.zeros(8), np.zeros(8)
    np.testing.assert_allclose(block(x)[0], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("args", "exc", "match"), [
    ((np.ones(3), np.zeros(3), np.ones((4, 2)), np.zeros(2)), ValueError, r"gamma must have shape \(4,\), got shape \(3,\)"),
    ((np.ones(4), np.zeros(5), np.ones((4, 2)), np.zeros(2)), ValueError, r"beta must have shape \(4,\), got shape \(5,\)"),
    ((np.ones(4), np.zeros(4), np.ones((4, 2)), np.zeros(4)), ValueError, r"b must have shape \(2,\), got shape \(4,\)"),
    ((np.ones(4), np.zeros(4), np.ones(4), np.zeros(4)), ValueError, r"W must have at least 2 dimension"),
    ((np.ones(4), np.zeros(4), np.ones((1, 4, 2)), np.zeros(2)), ValueError, r"W must be a matrix \(d, m\), got shape \(1, 4, 2\)"),
    ((np.ones(4), np.zeros(4), np.full((4, 2), np.nan), np.zeros(2)), ValueError, r"W contains NaN"),
    ((np.ones(4), np.zeros(4), "W", np.zeros(2)), TypeError, r"W must be a real-valued array"),
])
def test_fold_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        fold_layer_norm(*args)



# -- the functional twins of notebook 05's exercises ----------------------------------------------
def _block_params(block):
    a, f = block.attention, block.feed_forward
    return {"W_Q": a.W_Q, "W_K": a.W_K, "W_V": a.W_V, "W_O": a.W_O, "b_Q": a.b_Q, "b_K": a.b_K,
            "b_V": a.b_V, "b_O": a.b_O, "W_1": f.W_1, "b_1": f.b_1, "W_2": f.W_2, "b_2": f.b_2,
            "ln1_gamma": block.ln1_gamma, "ln1_beta": block.ln1_beta,
            "ln2_gamma": block.ln2_gamma, "ln2_beta": block.ln2_beta}


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_is_the_class_from_a_dict(rng, norm_first):
    from transformer_course import encoder_block

    block = TransformerEncoderBlock(8, 2, 24, rng=rng, norm_first=norm_first)
    for name in ("b_Q", "b_K", "b_V", "b_O"):
        setattr(block.attention, name, rng.normal(size=8))         # non-zero biases must be used
    block.ln1_gamma, block.ln2_beta = rng.normal(size=8), rng.normal(size=8)
    x = rng.normal(size=(2, 5, 8))
    out, w = encoder_block(x, _block_params(block), 2, norm_first=norm_first)
    ref_out, ref_w = block(x)
    np.testing.assert_allclose(out, ref_out, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(w, ref_w, rtol=1e-13, atol=1e-15)


def test_encoder_block_names_a_missing_parameter(rng):
    from transformer_course import encoder_block

    params = _block_params(TransformerEncoderBlock(8, 2, rng=rng))
    del params["ln2_beta"]
    with pytest.raises(ValueError, match=r"params lacks \['ln2_beta'\]"):
        encoder_block(np.zeros((3, 8)), params, 2)
    with pytest.raises(TypeError, match="norm_first must be True or False"):
        encoder_block(np.zeros((3, 8)), _block_params(TransformerEncoderBlock(8, 2, rng=rng)), 2, norm_first=1)


def test_feed_forward_is_the_relu_class(rng):
    from transformer_course import PositionwiseFeedForward, feed_forward

    ffn = PositionwiseFeedForward(6, 10, rng=rng)
    x = rng.normal(size=(3, 4, 6))
    np.testing.assert_array_equal(feed_forward(x, ffn.W_1, ffn.b_1, ffn.W_2, ffn.b_2), ffn(x))
    with pytest.raises(ValueError, match=r"W_2 must have shape \(10, 6\), got shape \(6, 10\)"):
        feed_forward(x, ffn.W_1, ffn.b_1, ffn.W_1, ffn.b_2)
    with pytest.raises(ValueError, match="x must have last dimension d_model=6"):
        feed_forward(x[..., :5], ffn.W_1, ffn.b_1, ffn.W_2, ffn.b_2)
