"""The LLaMA-style blocks and block quantisation (transformer_course.llama, .quantization, .gguf_file).

No model file needed except where marked: formulas written out, properties (hypothesis), the
equivalences the notebook states (RoPE = notebook 04's rotation; half-split = adjacent up to a
permutation; GQA = multi-head attention with repeated key/value heads), the KV cache (cached
forward = uncached), and quantisation round trips.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_course import causal_mask, layer_norm, relative_shift_matrix, scaled_dot_product_attention
from transformer_course import llama as L
from transformer_course import quantization as Q


# ---------------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------------
def test_rms_norm_by_hand():
    np.testing.assert_allclose(L.rms_norm(np.array([3.0, 4.0]), np.ones(2), 1e-300), [3 / 12.5**0.5, 4 / 12.5**0.5])
    np.testing.assert_allclose(L.rms_norm(np.array([3.0, 4.0]), np.array([2.0, -1.0]), 7.5), [6 / 20**0.5, -4 / 20**0.5])


def test_rms_norm_equals_layer_norm_on_centred_rows(rng):
    x = rng.standard_normal((4, 7, 16))
    x -= x.mean(axis=-1, keepdims=True)
    g = rng.uniform(0.5, 2, 16)
    np.testing.assert_allclose(L.rms_norm(x, g, 1e-5), layer_norm(x, g, np.zeros(16), 1e-5), rtol=1e-12, atol=1e-14)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(2, 40), st.floats(0.01, 100), st.integers(0, 2**31))
def test_rms_norm_is_scale_invariant_and_keeps_dtype(batch, d, scale, seed):
    x = np.random.default_rng(seed).standard_normal((batch, d)).astype(np.float32) + 0.5
    y = L.rms_norm(x, np.ones(d, np.float32), 1e-12)
    assert y.dtype == np.float32
    # each row has root mean square 1 (float32: ~10 eps), and scaling the row changes nothing
    np.testing.assert_allclose(np.sqrt(np.mean(y.astype(np.float64) ** 2, axis=-1)), 1.0, rtol=1e-5)
    np.testing.assert_allclose(L.rms_norm(np.float32(scale) * x, np.ones(d, np.float32), 1e-12), y, rtol=1e-5, atol=1e-6)


def test_rms_norm_refuses_a_wrong_gain():
    with pytest.raises(ValueError, match="weight must have shape"):
        L.rms_norm(np.ones((2, 4)), np.ones(3))
    with pytest.raises(ValueError, match="eps"):
        L.rms_norm(np.ones((2, 4)), np.ones(4), eps=0)


# ---------------------------------------------------------------------------------------------
# RoPE
# ---------------------------------------------------------------------------------------------
def test_rope_by_hand():
    out = L.apply_rope(np.array([[1.0, 0.0, 1.0, 0.0]]), [2], base=100.0)
    np.testing.assert_allclose(out, [[np.cos(2), np.sin(2), np.cos(0.2), np.sin(0.2)]], rtol=1e-14)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(-3000, 3000), st.integers(0, 2**31))
def test_rope_score_depends_on_relative_position_only(m, n, shift, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((1, 64)), rng.standard_normal((1, 64))
    s = lambda a, b: (L.apply_rope(q, [a], 1e5) @ L.apply_rope(k, [b], 1e5).T)[0, 0]   # noqa: E731
    # |q||k| ~ 64: angles up to 8000 rad lose ~1e-12 relative; 1e-9 absolute is ample
    assert abs(s(m, n) - s(m + shift + 3000, n + shift + 3000)) < 1e-9


@pytest.mark.parametrize("k", [1, 7, 300])
def test_rope_is_notebook_04s_rotation(rng, k):
    x = rng.standard_normal((1, 12))
    np.testing.assert_allclose(L.apply_rope(x, [k], 1e4), x @ relative_shift_matrix(k, 12).T, rtol=1e-12, atol=1e-13)


def test_half_split_layout_is_adjacent_layout_permuted(rng):
    d = 16
    x = rng.standard_normal((5, d))
    pos = np.array([0, 1, 17, 200, 4000])
    cos, sin = L.rope_tables(pos, d, 1e5, np.float64)
    P = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    a, b = x[:, P][:, : d // 2], x[:, P][:, d // 2:]
    halves = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=1)
    np.testing.assert_allclose(halves, L.apply_rope(x, pos, 1e5)[:, P], rtol=1e-13, atol=1e-14)


def test_rope_keeps_float32():
    x = np.ones((2, 3, 8), np.float32)
    assert L.apply_rope(x, [5, 6, 7], 1e5).dtype == np.float32
    cos, sin = L.rope_tables(np.arange(4), 8, 1e5, np.float32)
    assert cos.dtype == sin.dtype == np.float32


def test_rope_refuses_odd_width_and_wrong_positions():
    with pytest.raises(ValueError, match="even"):
        L.apply_rope(np.ones((2, 5)), [0, 1])
    with pytest.raises(ValueError, match="positions"):
        L.apply_rope(np.ones((2, 4)), [0, 1, 2])


# ---------------------------------------------------------------------------------------------
# SwiGLU
# ---------------------------------------------------------------------------------------------
def test_swiglu_formula(rng):
    x = rng.standard_normal((3, 5))
    Wg, Wu, Wd = rng.standard_normal((11, 5)), rng.standard_normal((11, 5)), rng.standard_normal((5, 11))
    g = x @ Wg.T
    expected = (g / (1 + np.exp(-g)) * (x @ Wu.T)) @ Wd.T
    np.testing.assert_allclose(L.swiglu(x, Wg, Wu, Wd), expected, rtol=1e-12)


def test_silu_is_finite_for_large_negative_inputs():
    out = L.silu(np.array([-1000.0, -50.0, 0.0, 50.0], np.float32))
    assert np.all(np.isfinite(out)) and out[0] == 0 and out[3] == 50


# ---------------------------------------------------------------------------------------------
# Grouped-query attention
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_heads,n_kv,n_q,n_k", [(9, 3, 6, 6), (9, 3, 1, 6), (4, 1, 3, 5), (6, 6, 4, 4)])
def test_gqa_is_attention_with_repeated_kv_heads(rng, n_heads, n_kv, n_q, n_k):
    q = rng.standard_normal((n_heads, n_q, 8))
    k, v = rng.standard_normal((n_kv, n_k, 8)), rng.standard_normal((n_kv, n_k, 8))
    g = n_heads // n_kv
    full_q = np.concatenate([np.zeros((n_heads, n_k - n_q, 8)), q], axis=1)
    expected, w_expected = scaled_dot_product_attention(full_q, np.repeat(k, g, 0), np.repeat(v, g, 0), causal_mask(n_k))
    out, w = L.grouped_query_attention_with_weights(q, k, v)
    np.testing.assert_array_equal(L.grouped_query_attention(q, k, v), out)   # the exercise's twin: the output
    np.testing.assert_allclose(out, expected[:, n_k - n_q:], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w, w_expected[:, n_k - n_q:], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_heads,n_kv,n_q,n_k", [(9, 3, 6, 6), (9, 3, 1, 6), (4, 1, 3, 5), (6, 6, 4, 4), (9, 3, 5, 40)])
def test_unchecked_gqa_is_the_same_arithmetic(rng, n_heads, n_kv, n_q, n_k, dtype):
    """Llama.forward's attention in every layer: the checked function's numbers, to the bit, without its checks."""
    q = rng.standard_normal((n_heads, n_q, 8)).astype(dtype)
    k, v = rng.standard_normal((n_kv, n_k, 8)).astype(dtype), rng.standard_normal((n_kv, n_k, 8)).astype(dtype)
    out = L.grouped_query_attention_unchecked(q, k, v)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, L.grouped_query_attention(q, k, v))


def test_gqa_refuses_kv_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="divide"):
        L.grouped_query_attention(np.ones((4, 2, 8)), np.ones((3, 2, 8)), np.ones((3, 2, 8)))


# ---------------------------------------------------------------------------------------------
# A tiny random model: the KV cache changes nothing
# ---------------------------------------------------------------------------------------------
def tiny_model(dtype=np.float64, seed=0):
    cfg = L.LlamaConfig(n_layers=2, d_model=24, n_heads=6, n_kv_heads=2, d_ff=40, vocab_size=50,
                        rope_base=1e4, eps=1e-5)
    rng = np.random.default_rng(seed)
    shapes = {"attn_norm": (24,), "ffn_norm": (24,), "attn_q": (24, 24), "attn_k": (8, 24), "attn_v": (8, 24),
              "attn_output": (24, 24), "ffn_gate": (40, 24), "ffn_up": (40, 24), "ffn_down": (24, 40)}
    w = {"token_embd.weight": rng.standard_normal((50, 24)), "output_norm.weight": rng.uniform(0.5, 1.5, 24)}
    for layer in range(2):
        for name, shape in shapes.items():
            scale = 1.0 if len(shape) == 1 else 1 / np.sqrt(shape[1])
            w[f"blk.{layer}.{name}.weight"] = (rng.uniform(0.5, 1.5, shape) if len(shape) == 1
                                               else rng.standard_normal(shape) * scale)
    return L.Llama(cfg, w, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cached_forward_equals_uncached(dtype):
    model = tiny_model(dtype)
    ids = np.random.default_rng(1).integers(0, 50, 12)
    full = model.forward(ids)
    cache = model.new_cache(16)
    pieces = [model.forward(ids[:5], cache), model.forward(ids[5:6], cache), model.forward(ids[6:], cache)]
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert full.dtype == dtype and all(p.dtype == dtype for p in pieces)
    np.testing.assert_allclose(np.concatenate(pieces), full, atol=tol * np.abs(full).max())
    assert cache.length == 12


def test_greedy_generation_with_and_without_cache_agree():
    model = tiny_model()
    prompt = np.array([3, 14, 15])
    np.testing.assert_array_equal(model.generate_greedy(prompt, 10), model.generate_greedy(prompt, 10, use_cache=False))


def test_cache_overflow_and_bad_ids_are_refused():
    model = tiny_model()
    cache = model.new_cache(4)
    with pytest.raises(ValueError, match="cache holds 4"):
        model.forward(np.arange(5), cache)
    with pytest.raises(ValueError, match="ids must lie"):
        model.forward(np.array([50]))


def test_forward_checks_its_logits_once_and_names_an_overflow():
    """The layers run the attention without its checks; non-finite logits send the forward through the checked
    attention, which names the cause. Finite logits are the checked attention's, to the bit."""
    model = tiny_model(np.float32)
    ids = np.random.default_rng(4).integers(0, 50, 7)
    checked = model.with_pieces(L.LlamaPieces(grouped_query_attention=lambda q, k, v: L.grouped_query_attention(q, k, v)))
    np.testing.assert_array_equal(model.forward(ids), checked.forward(ids))
    w = _weights_of(model)
    w["blk.1.attn_q.weight"] = w["blk.1.attn_q.weight"] * np.float32(1e19)    # q . k ~ 1e40: beyond float32
    w["blk.1.attn_k.weight"] = w["blk.1.attn_k.weight"] * np.float32(1e19)
    huge = L.Llama(model.config, w, np.float32)
    cache = huge.new_cache(16)
    huge.forward(ids[:1], cache)                                          # one token: its own key only, finite
    with pytest.raises(ValueError, match=r"the scores Q K\^T / sqrt\(d_k\) overflow float32"):
        huge.forward(ids[1:], cache)
    with pytest.raises(ValueError, match=r"the scores Q K\^T / sqrt\(d_k\) overflow float32"):
        huge.forward(ids)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weights_are_laid_out_transposed_and_stacked(dtype):
    """Each matrix has the file's shape (out, in) and values; in memory it is its transpose, q|k|v and gate|up each one
    array; one product over a stack equals the separate products."""
    model = tiny_model(dtype)
    w = _weights_of(tiny_model(np.float64))
    for layer, stacks in zip(model.layers, model.stacks):
        for stack, names in L.STACKS.items():
            assert stacks[stack].T.flags.c_contiguous, stack
            for name in names:
                assert np.shares_memory(layer[name], stacks[stack]), f"{name} must be a view of {stack}"
        assert layer["attn_output"].T.flags.c_contiguous and layer["ffn_down"].T.flags.c_contiguous
    assert model.embedding.T.flags.c_contiguous
    for name, a in _weights_of(model).items():
        np.testing.assert_array_equal(a, w[name].astype(dtype))
    y = np.random.default_rng(5).standard_normal((3, 24)).astype(dtype)
    for stack, names in L.STACKS.items():
        together = model.projections(1, stack, y)
        for name, part in zip(names, together):
            np.testing.assert_allclose(part, y @ model.layers[1][name].T, rtol=1e-5 if dtype == np.float32 else 1e-13,
                                       atol=1e-6 if dtype == np.float32 else 1e-14)
    bad = dict(w, **{"blk.1.ffn_up.weight": w["blk.1.ffn_up.weight"][:, :-1]})
    with pytest.raises(ValueError, match=r"weights\['blk.1.ffn_up.weight'\] must have shape \(40, 24\), got \(40, 23\)"):
        L.Llama(model.config, bad)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_open_swiglu_equals_the_piece(dtype):
    """The package's SwiGLU runs open (gate and up from one product); a notebook's swiglu piece runs closed."""
    model = tiny_model(dtype)
    ids = np.random.default_rng(6).integers(0, 50, 8)
    closed = model.with_pieces(L.LlamaPieces(swiglu=lambda x, Wg, Wu, Wd: L.swiglu(x, Wg, Wu, Wd)))
    expected = closed.forward(ids)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert np.abs(model.forward(ids) - expected).max() <= tol * np.abs(expected).max()


def test_missing_tensor_is_named():
    model = tiny_model()
    weights = {"token_embd.weight": model.embedding, "output_norm.weight": model.final_norm}
    with pytest.raises(KeyError, match="blk.0.attn_norm.weight"):
        L.Llama(model.config, weights)


# ---------------------------------------------------------------------------------------------
# The model's pieces: the notebook's own functions can run it (Llama(..., pieces=...), with_pieces)
# ---------------------------------------------------------------------------------------------
def _rms_norm(x, weight, eps=1e-5):                        # written out as notebook 09 asks for them
    return weight * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def _apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    angles = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)       # (n, d/2)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * np.cos(angles) - x[..., 1::2] * np.sin(angles)
    out[..., 1::2] = x[..., 0::2] * np.sin(angles) + x[..., 1::2] * np.cos(angles)
    return out


def _swiglu(x, W_gate, W_up, W_down):
    gate = x @ W_gate.T
    return (gate / (1 + np.exp(-gate)) * (x @ W_up.T)) @ W_down.T


def _gqa(q, k, v):
    n_heads, n_q, d = q.shape
    g, n_k = n_heads // k.shape[0], k.shape[1]
    s = q @ np.repeat(k, g, 0).transpose(0, 2, 1) / np.sqrt(d)                       # (H, n_q, n_k)
    s = np.where(np.arange(n_k)[None, :] > np.arange(n_k - n_q, n_k)[:, None], -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ np.repeat(v, g, 0)


WRITTEN_OUT = {"rms_norm": _rms_norm, "apply_rope": _apply_rope, "swiglu": _swiglu, "grouped_query_attention": _gqa}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_with_pieces_shares_the_weights_and_changes_only_the_pieces(dtype):
    model = tiny_model(dtype)
    ids = np.random.default_rng(2).integers(0, 50, 9)
    expected = model.forward(ids)
    explicit = model.with_pieces({name: getattr(L, name) for name in L.PIECES})      # a mapping, read by name
    assert explicit.layers is model.layers and explicit.embedding is model.embedding, "with_pieces shares the weights"
    np.testing.assert_array_equal(explicit.forward(ids), expected)
    theirs, ours = explicit.new_cache(12), model.new_cache(12)          # prefill, then one step: the same bits
    for chunk in (ids[:4], ids[4:5]):
        np.testing.assert_array_equal(explicit.forward(chunk, theirs), model.forward(chunk, ours))
    halves = model.with_pieces({**WRITTEN_OUT, "apply_rope": lambda x, positions, base=10000.0: L.apply_rope(
        x[..., np.argsort(np.r_[0:x.shape[-1]:2, 1:x.shape[-1]:2])], positions, base)[..., np.r_[0:x.shape[-1]:2, 1:x.shape[-1]:2]]})
    assert np.abs(halves.forward(ids) - expected).max() > 1e-2 * np.abs(expected).max(), "the halves layout of RoPE"
    np.testing.assert_array_equal(model.forward(ids), expected)         # the original keeps its own pieces


def test_pieces_written_out_run_the_model():
    model = tiny_model(np.float64)
    ids = np.random.default_rng(3).integers(0, 50, 10)
    mine = model.with_pieces(WRITTEN_OUT)
    np.testing.assert_allclose(mine.forward(ids), model.forward(ids), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(mine.generate_greedy(ids[:3], 6), model.generate_greedy(ids[:3], 6))


def test_pieces_are_checked_and_weights_need_the_package_attention():
    model = tiny_model()
    with pytest.raises(TypeError, match="pieces.swiglu must be a function, got None"):
        model.with_pieces({"rms_norm": L.rms_norm, "apply_rope": L.apply_rope})
    with pytest.raises(ValueError, match="return_weights needs the package's grouped_query_attention"):
        model.with_pieces(WRITTEN_OUT).forward(np.arange(3), return_weights=True)
    mixed = model.with_pieces({**WRITTEN_OUT, "grouped_query_attention": L.grouped_query_attention})
    logits, weights = mixed.forward(np.arange(4), return_weights=True)
    np.testing.assert_allclose(logits, model.forward(np.arange(4)), rtol=1e-10, atol=1e-12)
    assert len(weights) == 2 and weights[0].shape == (6, 4, 4)


def test_dequantize_takes_the_given_dequantisers():
    from transformer_course import smollm2 as sm

    raw = Q.quantize_q4_1(np.random.default_rng(5).standard_normal((3, 64)))
    right = sm.dequantize(raw, "Q4_1", np.float64)
    assert right.dtype == np.float64
    np.testing.assert_array_equal(right, Q.dequantize_q4_1(raw))
    wrong = {"dequantize_q4_1": lambda raw: Q.dequantize_q4_1(raw) + 1, "dequantize_q8_0": Q.dequantize_q8_0}
    np.testing.assert_array_equal(sm.dequantize(raw, "Q4_1", np.float32, wrong), Q.dequantize_q4_1(raw) + 1)
    with pytest.raises(TypeError, match="must provide the function dequantize_q4_1"):
        sm.dequantize(raw, "Q4_1", np.float32, {"dequantize_q8_0": Q.dequantize_q8_0})


# ---------------------------------------------------------------------------------------------
# Quantisation
# ---------------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.floats(1e-3, 1e3), st.floats(-5, 5), st.integers(0, 2**31))
def test_quantisation_error_is_at_most_half_a_step(rows, blocks, scale, offset, seed):
    x = (np.random.default_rng(seed).standard_normal((rows, 32 * blocks)) * scale + offset * scale).astype(np.float32)
    xb = x.reshape(rows, blocks, 32)
    for quantize, dequantize, half_step in (
        (Q.quantize_q8_0, Q.dequantize_q8_0, np.abs(xb).max(-1) / 254),
        (Q.quantize_q4_1, Q.dequantize_q4_1, (xb.max(-1) - xb.min(-1)) / 30),
    ):
        raw = quantize(x)
        err = np.abs(dequantize(raw) - x).reshape(rows, blocks, 32).max(-1)
        # float16 d (and m): relative rounding 2^-11 of the step's scale, and of m for Q4_1
        slack = 1e-3 * (np.abs(xb).max(-1)) + 1e-30
        assert np.all(err <= half_step * 1.01 + slack)
        np.testing.assert_array_equal(quantize(dequantize(raw)), raw)       # levels are a fixed point


def test_dequantize_by_hand():
    q8 = np.concatenate([np.array([0.5], np.float16).view(np.uint8), np.arange(-16, 16, dtype=np.int8).view(np.uint8)])
    np.testing.assert_array_equal(Q.dequantize_q8_0(q8), 0.5 * np.arange(-16, 16))
    i = np.arange(16, dtype=np.uint8)
    q4 = np.concatenate([np.array([0.25, -1.0], np.float16).view(np.uint8), i | ((15 - i) << 4)])
    np.testing.assert_array_equal(Q.dequantize_q4_1(q4), 0.25 * np.r_[np.arange(16), np.arange(15, -1, -1)] - 1)


def test_dequantize_refuses_partial_blocks():
    with pytest.raises(ValueError, match="multiple of 20"):
        Q.dequantize_q4_1(np.zeros(30, np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        Q.dequantize_q8_0(np.zeros(34, np.int16))
    assert Q.bits_per_number("Q4_1") == 5.0 and Q.bits_per_number("Q8_0") == 8.5


# ---------------------------------------------------------------------------------------------
# The pieces it is composed of: the package's by default, any others on request
# ---------------------------------------------------------------------------------------------
def test_llama_runs_on_the_pieces_it_is_given():
    from types import SimpleNamespace

    from transformer_course import attention, feedforward, normalization, positional

    model = tiny_model(np.float64)
    ids = np.random.default_rng(7).integers(0, 50, 9)
    default = model.forward(ids)
    explicit = SimpleNamespace(rms_norm=normalization.rms_norm, apply_rope=positional.apply_rope,
                               swiglu=feedforward.swiglu, grouped_query_attention=attention.grouped_query_attention)
    again = L.Llama(model.config, _weights_of(model), np.float64, pieces=explicit)
    np.testing.assert_array_equal(again.forward(ids), default)          # the same functions: the same bits
    cache = again.new_cache(9)
    stepped = np.concatenate([again.forward(ids[:4], cache), again.forward(ids[4:], cache)])
    np.testing.assert_allclose(stepped, default, rtol=0, atol=1e-12 * np.abs(default).max())

    def rms_norm_without_gain(x, weight, eps):                          # a plausible wrong piece
        return normalization.rms_norm(x, np.ones_like(weight), eps)

    for name, wrong in (("rms_norm", rms_norm_without_gain),
                        ("apply_rope", lambda x, positions, base: x),   # no rotation
                        ("swiglu", lambda x, W_gate, W_up, W_down: (np.maximum(x @ W_gate.T, 0) * (x @ W_up.T)) @ W_down.T),
                        ("grouped_query_attention",                     # forgets the causal mask
                         lambda q, k, v: attention.grouped_query_attention_with_weights(q, k, v, np.full(q.shape[1], k.shape[1] - 1))[0])):
        pieces = SimpleNamespace(**{**vars(explicit), name: wrong})
        logits = L.Llama(model.config, _weights_of(model), np.float64, pieces=pieces).forward(ids)
        assert np.abs(logits - default).max() > 1e-3 * np.abs(default).max(), f"a wrong {name} left the logits as they were"


def test_llama_refuses_pieces_that_are_not_functions():
    model = tiny_model()
    with pytest.raises(TypeError, match="pieces.swiglu must be a function"):
        L.Llama(model.config, _weights_of(model), pieces=L.LlamaPieces(swiglu=None))


def _weights_of(model) -> dict:
    w = {"token_embd.weight": model.embedding, "output_norm.weight": model.final_norm}
    w.update({f"blk.{i}.{name}.weight": a for i, layer in enumerate(model.layers) for name, a in layer.items()})
    return w
