"""The fast attention core and fused multi-head attention, checked against the naive reference.

Values (float64 within 1e-6, float32 within float32 rounding), every tiling
edge (shapes that are not multiples of the tile, one-row tiles, more tiles than
rows), masks (boolean, additive, causal, fully masked rows), argument errors,
and memory: the peak of traced allocations grows linearly in n, not like n^2.
"""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_course import MultiHeadAttention, causal_mask, scaled_dot_product_attention, split_heads
from transformer_course_fast import FastMultiHeadAttention, flash_attention, release_buffers

F64 = dict(rtol=1e-6, atol=1e-6)
F32 = dict(rtol=2e-5, atol=5e-6)


def qkv(rng, lead=(), n_q=5, n_k=7, d_k=4, d_v=3, dtype=np.float64, scale=1.0):
    return (scale * rng.normal(size=(*lead, n_q, d_k))).astype(dtype), \
           (scale * rng.normal(size=(*lead, n_k, d_k))).astype(dtype), \
           rng.normal(size=(*lead, n_k, d_v)).astype(dtype)


def naive(Q, K, V, mask=None):
    return scaled_dot_product_attention(Q, K, V, mask)[0]


# -- values ----------------------------------------------------------------------
@pytest.mark.parametrize("lead, n_q, n_k, d_k, d_v, bq, bk", [
    ((), 1, 1, 1, 1, 4, 4),                 # a single query and key
    ((), 13, 29, 8, 5, 4, 8),               # n not a multiple of either tile size
    ((3,), 37, 37, 16, 16, 16, 16),
    ((2, 3), 64, 100, 8, 12, 64, 32),       # n_q a multiple, n_k not
    ((2, 2), 300, 300, 64, 64, 256, 1024),  # default-like tiles, one key tile
    ((1, 2), 19, 23, 32, 32, 1, 1),         # 1x1 tiles: every row and key its own tile
    ((4,), 9, 40, 8, 8, 100, 7),            # tiles bigger than the query count
])
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_naive_float64(rng, lead, n_q, n_k, d_k, d_v, bq, bk, threads):
    Q, K, V = qkv(rng, lead, n_q, n_k, d_k, d_v)
    out = flash_attention(Q, K, V, block_q=bq, block_k=bk, threads=threads)
    assert isinstance(out, np.ndarray) and out.shape == (*lead, n_q, d_v) and out.dtype == np.float64
    np.testing.assert_allclose(out, naive(Q, K, V), **F64)


@pytest.mark.parametrize("shape", [(2, 3, 200, 64), (1, 12, 128, 32), (1, 2, 1100, 64)])
def test_matches_naive_float32(rng, shape):
    Q, K, V = qkv(rng, shape[:-2], shape[-2], shape[-2], shape[-1], shape[-1], dtype=np.float32)
    out = flash_attention(Q, K, V)
    assert out.dtype == np.float32
    ref64 = naive(*(a.astype(np.float64) for a in (Q, K, V)))
    np.testing.assert_allclose(out, ref64, **F32)
    np.testing.assert_allclose(out, naive(Q, K, V), **F32)


def test_default_tiles_with_several_key_tiles(rng):
    # n_k > block_k, so the running maximum and the rescaling are exercised at default settings.
    Q, K, V = qkv(rng, (1, 2), 300, 2500, 16, 16)
    np.testing.assert_allclose(flash_attention(Q, K, V), naive(Q, K, V), **F64)


def test_rescaling_when_later_keys_score_higher(rng):
    # Scores rise key block by key block, so every new tile raises the running max.
    Q = np.abs(rng.normal(size=(50, 8))) * 3
    K = np.linspace(0.1, 6, 400)[:, None] * np.ones((1, 8))
    V = rng.normal(size=(400, 3))
    out = flash_attention(Q, K, V, block_q=16, block_k=32)
    np.testing.assert_allclose(out, naive(Q, K, V), **F64)


@pytest.mark.parametrize("running_max", ["auto", "always"])
def test_both_softmax_paths_match(rng, running_max):
    # "auto" skips the running max where |q| max|k| proves it unnecessary; "always" never does.
    Q, K, V = qkv(rng, (2, 3), 70, 130, 16, 8)
    mask = rng.random((70, 130)) < 0.8
    out = flash_attention(Q, K, V, mask, causal=True, block_q=16, block_k=32, running_max=running_max)
    np.testing.assert_allclose(out, naive(Q, K, V, mask & np.tril(np.ones((70, 130), bool))), **F64)


def test_huge_values_fall_back_to_the_running_max(rng):
    # Small scores, but p @ v would overflow float32 without the max subtracted: redone safely.
    Q, K, V = qkv(rng, (2,), 30, 50, 8, 4, dtype=np.float32)
    V = V * np.float32(1e30)
    out = flash_attention(Q, K, V, block_q=8, block_k=16)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out / 1e30, naive(*(a.astype(np.float64) for a in (Q, K, V))) / 1e30, **F32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_guards_by_sums_of_squares_answer_safe_only_when_it_is(rng, dtype):
    """The usual path's guards (three dot products): "surely safe" for ordinary inputs; "not sure"
    for NaN or inf anywhere, for scores or sums over V that may overflow, and for strided inputs;
    then the exact checks decide. "Safe" means the true scores and output are finite."""
    from transformer_course_fast.attention import _all_finite, _surely_safe
    Q, K, V = qkv(rng, (2, 3), 16, 20, 8, 4, dtype=dtype)
    assert _surely_safe(Q, K, V) and _all_finite(Q)
    for name, value in (("Q", np.nan), ("K", np.inf), ("V", -np.inf)):
        arrays = {"Q": Q.copy(), "K": K.copy(), "V": V.copy()}
        arrays[name][1, 2, 3, 1] = value
        assert not _surely_safe(arrays["Q"], arrays["K"], arrays["V"]), (name, value)
    big = np.sqrt(0.75 * np.finfo(dtype).max)                       # q . k = big^2: within 2x of overflow,
    Q_big, K_big = Q.copy(), K.copy()                               # while each sum of squares is finite
    Q_big[1, 2, 3, 0], K_big[1, 2, 5, 0] = big, big
    assert not _surely_safe(Q_big, K_big, V)
    K_small = K.copy()
    K_small[1, 2, 5] = 1 / big                                      # the same big row against small keys: safe
    assert _surely_safe(Q_big, K_small, V)
    V_big = V.copy()
    V_big[0, 0, :, 0] = np.finfo(dtype).max / 8                     # 20 keys: their sum may overflow
    assert not _surely_safe(Q, K, V_big)
    assert not _surely_safe(Q[..., ::2, :], K, V)                   # strided: not decided here
    for bad in (np.nan, np.inf):
        out = V.copy()
        out[1, 1, 1, 1] = bad
        assert not _all_finite(out)
    huge = np.full((4, 4), np.finfo(dtype).max / 2, dtype)          # finite, but its sum of squares overflows
    assert _all_finite(huge)                                        # the exact test decided


def test_large_scores_do_not_overflow(rng):
    Q, K, V = qkv(rng, (2,), 40, 90, 8, 4, scale=30.0)              # scores up to ~1e3
    np.testing.assert_allclose(flash_attention(Q, K, V, block_q=8, block_k=16), naive(Q, K, V), **F64)
    Q32, K32, V32 = (a.astype(np.float32) for a in (Q, K, V))
    out = flash_attention(Q32, K32, V32, block_q=8, block_k=16)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, naive(Q, K, V), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shift", [-70.0, -30.0, 30.0, 60.0])
def test_scores_far_from_zero_stay_exact(rng, shift):
    # Every score near `shift` (natural units; float32's exp over- or underflows near +-88,
    # and 2^-60 is the smallest row sum the fast path accepts): whichever path is taken,
    # the result must equal the reference within float32 rounding.
    d = 16
    Q, K, V = qkv(rng, (2,), 20, 50, d, 4)
    u = np.ones(d) / np.sqrt(d)
    K = K * 0.3 + u * np.sqrt(np.sqrt(d) * abs(shift))            # q.k / sqrt(d) ~ shift
    Q = Q * 0.3 + np.sign(shift) * u * np.sqrt(np.sqrt(d) * abs(shift))
    ref = naive(Q, K, V)
    out32 = flash_attention(*(a.astype(np.float32) for a in (Q, K, V)), block_q=8, block_k=16)
    assert np.isfinite(out32).all()
    np.testing.assert_allclose(out32, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(flash_attention(Q, K, V, block_q=8, block_k=16), ref, **F64)


def test_float16_in_float16_out(rng):
    Q, K, V = qkv(rng, (2,), 10, 12, 8, 8, dtype=np.float16)
    out = flash_attention(Q, K, V, block_k=5)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), naive(*(a.astype(np.float64) for a in (Q, K, V))),
                               atol=2e-3, rtol=2e-3)


def test_integer_inputs_promote_to_float64(rng):
    Q = rng.integers(-2, 3, size=(4, 3))
    out = flash_attention(Q, Q, Q)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, naive(Q, Q, Q), **F64)


def test_strided_views_need_no_copy(rng):
    # Heads from split_heads are views with a row stride of d_model, as in multi-head attention.
    x = rng.normal(size=(2, 33, 24))
    q = split_heads(x, 4)                                           # (2, 4, 33, 6), not contiguous
    assert not q.flags.c_contiguous
    out = flash_attention(q, q[..., ::-1, :], q, block_q=8, block_k=8)
    np.testing.assert_allclose(out, naive(q, q[..., ::-1, :], q), **F64)


def test_threads_give_the_same_result(rng):
    Q, K, V = qkv(rng, (3, 5), 70, 90, 8, 8)
    a = flash_attention(Q, K, V, block_q=16, block_k=32, threads=1)
    b = flash_attention(Q, K, V, block_q=16, block_k=32, threads=2)
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)


# -- masks -----------------------------------------------------------------------
@pytest.mark.parametrize("n_q, n_k, bq, bk", [(40, 40, 8, 16), (33, 33, 7, 5), (20, 50, 4, 16),
                                              (300, 300, 256, 1024)])
def test_causal_matches_the_causal_mask(rng, n_q, n_k, bq, bk):
    Q, K, V = qkv(rng, (2, 3), n_q, n_k, 8, 8)
    mask = np.tril(np.ones((n_q, n_k), dtype=bool))                # query i sees keys j <= i
    out = flash_attention(Q, K, V, causal=True, block_q=bq, block_k=bk)
    np.testing.assert_allclose(out, naive(Q, K, V, mask), **F64)
    if n_q == n_k:
        np.testing.assert_allclose(out, naive(Q, K, V, causal_mask(n_q)), **F64)


@pytest.mark.parametrize("mask_shape", [(6, 9), (1, 6, 9), (2, 1, 6, 9), (2, 3, 6, 9), (2, 1, 1, 9), (6, 1)])
def test_boolean_masks_broadcast_like_the_reference(rng, mask_shape):
    Q, K, V = qkv(rng, (2, 3), 6, 9, 4, 5)
    mask = rng.random(mask_shape) < 0.7
    out = flash_attention(Q, K, V, mask, block_q=4, block_k=4)
    np.testing.assert_allclose(out, naive(Q, K, V, mask), **F64)


def test_additive_float_mask(rng):
    Q, K, V = qkv(rng, (2,), 12, 20, 4, 4)
    bias = rng.normal(size=(12, 20))
    bias[rng.random((12, 20)) < 0.3] = -np.inf
    out = flash_attention(Q, K, V, bias, block_q=5, block_k=6)
    np.testing.assert_allclose(out, naive(Q, K, V, bias), **F64)
    out32 = flash_attention(*(a.astype(np.float32) for a in (Q, K, V)), bias, block_q=5, block_k=6)
    np.testing.assert_allclose(out32, naive(Q, K, V, bias), **F32)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fully_masked_rows_give_zeros_not_nan(rng, dtype):
    Q, K, V = qkv(rng, (2,), 10, 24, 4, 3, dtype=dtype)
    mask = rng.random((2, 10, 24)) < 0.5
    mask[0, 3] = False                                              # no key at all
    mask[1, 7] = False
    mask[1, 2, :20] = False                                         # masked in the first key tiles only
    mask[1, 2, 22] = True
    out = flash_attention(Q, K, V, mask, block_q=4, block_k=8)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0, 3], 0)
    np.testing.assert_array_equal(out[1, 7], 0)
    tol = F64 if dtype == np.float64 else F32
    np.testing.assert_allclose(out, naive(Q, K, V, mask), **tol)
    additive = np.where(mask, 0.0, -np.inf)
    np.testing.assert_allclose(flash_attention(Q, K, V, additive, block_q=4, block_k=8), out, **tol)


def test_causal_and_mask_combine(rng):
    Q, K, V = qkv(rng, (2,), 16, 16, 4, 4)
    pad = np.ones((2, 1, 16), dtype=bool)
    pad[1, :, 11:] = False
    out = flash_attention(Q, K, V, pad, causal=True, block_q=4, block_k=8)
    np.testing.assert_allclose(out, naive(Q, K, V, pad & causal_mask(16)), **F64)


@settings(max_examples=25, deadline=None, database=None)
@given(n_q=st.integers(1, 40), n_k=st.integers(1, 40), d=st.integers(1, 9), bq=st.integers(1, 17),
       bk=st.integers(1, 17), causal=st.booleans(), masked=st.booleans(), seed=st.integers(0, 2**16))
def test_property_random_shapes_tiles_and_masks(n_q, n_k, d, bq, bk, causal, masked, seed):
    rng = np.random.default_rng(seed)
    Q, K, V = qkv(rng, (2,), n_q, n_k, d, 3)
    mask = rng.random((2, n_q, n_k)) < 0.6 if masked else None
    full = np.ones((n_q, n_k), dtype=bool) if mask is None else mask
    if causal:
        full = full & np.tril(np.ones((n_q, n_k), dtype=bool))
    out = flash_attention(Q, K, V, mask, causal=causal, block_q=bq, block_k=bk)
    np.testing.assert_allclose(out, naive(Q, K, V, full), **F64)


# -- bad inputs ------------------------------------------------------------------
@pytest.mark.parametrize("args, kwargs, exc, match", [
    (("abc", np.ones((2, 2)), np.ones((2, 2))), {}, TypeError, "Q must be a real-valued"),
    ((None, np.ones((2, 2)), np.ones((2, 2))), {}, TypeError, "Q must be a real-valued"),
    ((np.ones((2, 2)), np.ones((2, 2), complex), np.ones((2, 2))), {}, TypeError, "K must be a real-valued"),
    ((np.ones(3), np.ones((2, 3)), np.ones((2, 3))), {}, ValueError, "Q must have at least 2"),
    ((np.ones((2, 3)), np.ones((2, 4)), np.ones((2, 3))), {}, ValueError, "same last dimension d_k"),
    ((np.ones((2, 3)), np.ones((4, 3)), np.ones((5, 3))), {}, ValueError, "same number of positions n_k"),
    ((np.ones((2, 2, 3)), np.ones((3, 2, 3)), np.ones((3, 2, 3))), {}, ValueError, "leading"),
    ((np.ones((2, 3)), np.ones((0, 3)), np.ones((0, 3))), {}, ValueError, r"at least one key \(n_k >= 1\)"),
    ((np.full((2, 3), np.nan), np.ones((2, 3)), np.ones((2, 3))), {}, ValueError, "Q contains NaN"),
    ((np.ones((2, 3)), np.ones((2, 3)), np.full((2, 3), np.inf)), {}, ValueError, r"V contains \+inf"),
    ((np.ones((2, 3)),) * 3, {"mask": np.ones((2, 2), int)}, TypeError, "mask must be boolean"),
    ((np.ones((2, 3)),) * 3, {"mask": np.ones((3, 2), bool)}, ValueError, "does not broadcast"),
    ((np.ones((2, 3)),) * 3, {"mask": np.ones((4, 2, 2), bool)}, ValueError, "does not broadcast"),
    ((np.ones((2, 3)),) * 3, {"mask": np.full((2, 2), np.nan)}, ValueError, "mask contains NaN"),
    ((np.ones((2, 3)),) * 3, {"causal": "yes"}, TypeError, "causal must be True or False"),
    ((np.ones((2, 3)),) * 3, {"block_q": 0}, ValueError, "block_q must be a positive integer"),
    ((np.ones((2, 3)),) * 3, {"block_k": 2.5}, TypeError, "block_k must be a positive integer"),
    ((np.ones((2, 3)),) * 3, {"threads": 0}, ValueError, "threads must be a positive integer"),
    ((np.ones((2, 3)),) * 3, {"running_max": "never"}, ValueError, "running_max must be"),
])
def test_bad_inputs_raise_clear_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        flash_attention(*args, **kwargs)


# NaN or inf where the fast path could hide it: at masked keys, in fully masked rows,
# in a key whose -inf only meets queries of one sign, in one value among many.
def _bad(rng, where):
    Q, K, V = qkv(rng, (2,), 12, 40, 4, 3)
    Q = np.abs(Q)                                         # every query positive in every feature
    mask = np.ones((2, 12, 40), dtype=bool)
    mask[:, :, 7] = False                                 # key 7 masked for everyone
    mask[1, 5] = False                                    # query 5 of batch 1 sees nothing
    if where == "K at a masked key":
        K[0, 7, 2] = np.nan
    elif where == "K = -inf meeting positive queries":
        K[1, 30, 1] = -np.inf
    elif where == "Q in a fully masked row":
        Q[1, 5, 0] = np.nan
    elif where == "Q = +inf":
        Q[0, 3, 3] = np.inf
    elif where == "V at a masked key":
        V[0, 7, 1] = np.inf
    elif where == "V once":
        V[1, 33, 2] = np.nan
    return (Q, K, V), mask


@pytest.mark.parametrize("where", ["K at a masked key", "K = -inf meeting positive queries",
                                   "Q in a fully masked row", "Q = +inf", "V at a masked key", "V once"])
@pytest.mark.parametrize("running_max", ["auto", "always"])
@pytest.mark.parametrize("threads", [1, 2])
def test_non_finite_inputs_are_refused_wherever_they_hide(rng, where, running_max, threads):
    (Q, K, V), mask = _bad(rng, where)
    name = where[0]
    for use_mask in (True, False):
        with pytest.raises(ValueError, match=rf"{name} contains (NaN|\+inf|-inf)"):
            flash_attention(Q, K, V, mask if use_mask else None, block_q=4, block_k=8,
                            running_max=running_max, threads=threads)


# -- fused multi-head attention ----------------------------------------------------
@pytest.fixture
def mha(rng):
    m = MultiHeadAttention(32, 4, rng=rng)
    m.set_weights(m.W_Q, m.W_K, m.W_V, m.W_O, *(rng.normal(size=32) * 0.1 for _ in range(4)))
    return m


def test_fused_projection_packs_the_weights(mha):
    fast = FastMultiHeadAttention(mha)
    assert fast.W_QKV.shape == (32, 96) and fast.b_QKV.shape == (96,)
    np.testing.assert_array_equal(fast.W_QKV[:, 32:64], mha.W_K)


@pytest.mark.parametrize("threads", [None, 1, 2])    # None: small input -> BLAS's threads project
def test_fast_mha_matches_the_reference(rng, mha, threads):
    fast = FastMultiHeadAttention(mha, block_q=8, block_k=16, threads=threads)
    x, y, z = rng.normal(size=(2, 21, 32)), rng.normal(size=(2, 30, 32)), rng.normal(size=(2, 30, 32))
    np.testing.assert_allclose(fast(x), mha(x)[0], **F64)                  # self-attention
    np.testing.assert_allclose(fast(x, y), mha(x, y)[0], **F64)            # key = value
    np.testing.assert_allclose(fast(x, y, z), mha(x, y, z)[0], **F64)      # all different
    kpm = np.ones((2, 30), dtype=bool)
    kpm[1, 17:] = False
    np.testing.assert_allclose(fast(x, y, key_padding_mask=kpm), mha(x, y, key_padding_mask=kpm)[0], **F64)
    np.testing.assert_allclose(fast(x, causal=True), mha(x, mask=causal_mask(21))[0], **F64)
    bias = np.where(rng.random((21, 21)) < 0.8, rng.normal(size=(21, 21)), -np.inf)
    np.testing.assert_allclose(fast(x, mask=bias), mha(x, mask=bias)[0], **F64)


def test_fast_mha_float32_and_no_bias(rng):
    m = MultiHeadAttention(48, 6, rng=rng, bias=False, dtype=np.float32)
    fast = FastMultiHeadAttention(m)
    assert fast.b_QKV is None
    x = rng.normal(size=(3, 40, 48)).astype(np.float32)
    out = fast(x)
    assert out.dtype == np.float32 and out.shape == (3, 40, 48)
    np.testing.assert_allclose(out, m(x)[0], **F32)
    np.testing.assert_allclose(fast(x[0]), m(x[0])[0], **F32)               # no batch axis


def test_fast_mha_refresh_sees_new_weights(rng, mha):
    fast = FastMultiHeadAttention(mha)
    x = rng.normal(size=(5, 32))
    mha.set_weights(mha.W_Q * 2, mha.W_K, mha.W_V, mha.W_O)
    assert not np.allclose(fast(x), mha(x)[0])
    np.testing.assert_allclose(fast.refresh()(x), mha(x)[0], **F64)


def test_fast_mha_bad_inputs(rng, mha):
    with pytest.raises(TypeError, match="mha must be a transformer_course.MultiHeadAttention"):
        FastMultiHeadAttention("mha")
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        FastMultiHeadAttention(mha, dtype=int)
    fast = FastMultiHeadAttention(mha)
    with pytest.raises(ValueError, match="last dimension d_model=32"):
        fast(np.ones((3, 31)))
    with pytest.raises(ValueError, match="key and value must have the same shape"):
        fast(np.ones((3, 32)), np.ones((4, 32)), np.ones((5, 32)))
    with pytest.raises(TypeError, match="key_padding_mask must be boolean"):
        fast(np.ones((3, 32)), key_padding_mask=np.ones(3))
    with pytest.raises(ValueError, match="does not broadcast"):
        fast(np.ones((3, 32)), mask=np.ones((4, 4), bool))
    x, bad = rng.normal(size=(3, 32)), np.ones((3, 32))
    bad[1, 4] = np.nan
    with pytest.raises(ValueError, match="query contains NaN"):
        fast(bad)
    with pytest.raises(ValueError, match="key contains NaN"):
        fast(x, bad)
    with pytest.raises(ValueError, match="value contains NaN"):
        fast(x, x.copy(), bad)
    with pytest.raises(ValueError, match="value contains NaN"):
        fast(x, x, bad)                                 # key is the query, value is not


# -- memory ----------------------------------------------------------------------
def traced_peak(fn):
    """Peak bytes allocated (NumPy reports its buffers to tracemalloc) while ``fn`` runs."""
    fn()                                    # warm up: thread pool, BLAS buffers, caches
    release_buffers()                       # the per-thread tile buffers must count, too
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_tracemalloc_sees_the_naive_score_matrix(rng):
    # Guard for the test below: the naive version's n x n scores must show up.
    n = 512
    Q, K, V = qkv(rng, (), n, n, 64, 64, dtype=np.float32)
    assert traced_peak(lambda: naive(Q, K, V)) >= n * n * 4


def test_peak_memory_grows_linearly_in_n(rng):
    d, peaks = 64, {}
    for n in (1024, 2048, 4096):
        Q, K, V = qkv(rng, (1, 1), n, n, d, d, dtype=np.float32)
        peaks[n] = traced_peak(lambda: flash_attention(Q, K, V, threads=2))   # buffers are per thread
    assert peaks[4096] < 0.1 * 4096 * 4096 * 4, peaks                  # far below one n x n matrix
    first, second = peaks[2048] - peaks[1024], peaks[4096] - peaks[2048]
    # Linear growth doubles the increment when n doubles; quadratic would quadruple it.
    assert second <= 2.5 * max(first, 1), peaks
    # And an explicit O(n d) budget: the output, K^T and a few rows per thread, plus fixed tiles.
    assert peaks[4096] <= 8 * 4096 * d * 4 + 4 * 2**20, peaks
