"""decoder.py: KV cache, causal self-attention over a cache, TransformerDecoderBlock, DecoderLM,
the cached and uncached step functions, the hand-set induction model; PyTorch cross-checks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_course import MultiHeadAttention, causal_mask
from transformer_course.decoder import (
    CachedStep,
    DecoderLM,
    KVCache,
    TransformerDecoderBlock,
    UncachedStep,
    attention_params,
    causal_self_attention,
    cross_attention,
    decoder_block,
    induction_model,
    language_model_loss,
    offset_causal_mask,
)
from transformer_course.generation import generate

PROPS = settings(max_examples=20, deadline=None, database=None)


def _csa(mha, x, cache=None):
    """causal_self_attention with the weights of a MultiHeadAttention."""
    return causal_self_attention(x, attention_params(mha), mha.n_heads, cache)


def _mha(rng, d_model=8, n_heads=2):
    mha = MultiHeadAttention(d_model, n_heads, rng=rng)
    mha.b_Q, mha.b_K, mha.b_V, mha.b_O = (rng.normal(0, 0.3, d_model) for _ in range(4))
    return mha


def _random_block(rng, d_model=8, n_heads=2, d_ff=20, **kw):
    block = TransformerDecoderBlock(d_model, n_heads, d_ff, rng=rng, **kw)
    for i in (1, 2, 3):
        setattr(block, f"ln{i}_gamma", 1 + 0.3 * rng.normal(size=d_model))
        setattr(block, f"ln{i}_beta", 0.3 * rng.normal(size=d_model))
    return block


# =============================================================================
# offset_causal_mask and KVCache
# =============================================================================
def test_offset_causal_mask_without_past_is_the_causal_mask():
    np.testing.assert_array_equal(offset_causal_mask(5, 0), causal_mask(5))


def test_offset_causal_mask_known_value():
    # 2 new queries after 3 cached keys: query 0 is position 3 (sees keys 0..3), query 1 sees all 5.
    expected = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(offset_causal_mask(2, 3), expected)


@pytest.mark.parametrize("n_new, n_past, error", [(0, 1, ValueError), (2, -1, ValueError), (2, 1.5, ValueError)])
def test_offset_causal_mask_refuses_bad_sizes(n_new, n_past, error):
    with pytest.raises(error):
        offset_causal_mask(n_new, n_past)


def test_kv_cache_append_length_and_nbytes(rng):
    cache = KVCache(rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4)))
    grown = cache.append(rng.normal(size=(2, 1, 4)), rng.normal(size=(2, 1, 4)))
    assert cache.length == 3 and grown.length == 4
    np.testing.assert_array_equal(grown.keys[:, :3], cache.keys)      # old entries first, unchanged
    assert grown.nbytes == 2 * 2 * 4 * 4 * 8


# =============================================================================
# causal_self_attention
# =============================================================================
def test_causal_self_attention_without_cache_is_masked_mha(rng):
    mha = _mha(rng)
    x = rng.normal(size=(3, 6, 8))
    out, weights, cache = _csa(mha, x)
    ref_out, ref_w = mha(x, mask=causal_mask(6))
    np.testing.assert_allclose(out, ref_out, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(weights, ref_w)
    assert cache.keys.shape == cache.values.shape == (3, 2, 6, 4)


@PROPS
@given(split=st.lists(st.integers(1, 4), min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_feeding_in_pieces_equals_one_pass(split, seed):
    rng = np.random.default_rng(seed)
    mha = _mha(rng)
    x = rng.normal(size=(2, sum(split), 8))
    whole, _, whole_cache = _csa(mha, x)
    pieces, cache, start = [], None, 0
    for size in split:
        out, w, cache = _csa(mha, x[:, start:start + size], cache)
        assert w.shape == (2, 2, size, start + size)
        start += size
        pieces.append(out)
    # Different matrix shapes round differently: float64 eps x a few dozen operations.
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), whole, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(cache.values, whole_cache.values, rtol=1e-11, atol=1e-12)


def test_causal_self_attention_refuses_a_cache_of_the_wrong_shape(rng):
    mha = _mha(rng)
    bad = KVCache(np.zeros((2, 3, 5)), np.zeros((2, 3, 5)))                  # d_head 5, expected 4
    with pytest.raises(ValueError, match="cache must hold"):
        _csa(mha, rng.normal(size=(1, 8)), bad)
    with pytest.raises(TypeError, match="KVCache"):
        _csa(mha, rng.normal(size=(1, 8)), "not a cache")
    with pytest.raises(ValueError, match="d_model=8"):
        _csa(mha, rng.normal(size=(1, 6)))


# =============================================================================
# TransformerDecoderBlock
# =============================================================================
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_is_causal_and_cross_weights_are_a_rectangle(rng, norm_first):
    block = _random_block(rng, norm_first=norm_first)
    y, memory = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 7, 8))
    result = block(y, memory)
    assert result.output.shape == (2, 5, 8)
    assert result.cross_weights.shape == (2, 2, 5, 7)
    assert np.all(result.self_weights[..., ~causal_mask(5)] == 0)
    # Changing the last target token changes no earlier output (the causal lemma, §6.2).
    y2 = y.copy()
    y2[:, -1] = rng.normal(size=8)
    np.testing.assert_array_equal(block(y2, memory).output[:, :-1], result.output[:, :-1])


def test_decoder_block_with_cache_equals_one_pass(rng):
    block = _random_block(rng, norm_first=True)
    y, memory = rng.normal(size=(6, 8)), rng.normal(size=(4, 8))
    whole = block(y, memory).output
    first = block(y[:4], memory)
    rest = block(y[4:], memory, cache=first.cache)
    np.testing.assert_allclose(np.concatenate([first.output, rest.output]), whole, rtol=1e-11, atol=1e-12)


def test_decoder_block_padding_hides_source_tokens(rng):
    block = _random_block(rng)
    y, memory = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8))
    keep = np.array([[True] * 5, [True, True, False, False, False]])
    result = block(y, memory, memory_key_padding_mask=keep)
    assert np.all(result.cross_weights[1, ..., 2:] == 0)
    memory2 = memory.copy()
    memory2[1, 2:] = 100.0                                                  # the padded tokens do not matter
    np.testing.assert_array_equal(block(y, memory2, memory_key_padding_mask=keep).output, result.output)


def test_decoder_block_memory_checks(rng):
    with_cross = _random_block(rng)
    without = TransformerDecoderBlock(8, 2, rng=rng, cross_attention=False)
    x = rng.normal(size=(3, 8))
    with pytest.raises(ValueError, match="pass the encoder output"):
        with_cross(x)
    with pytest.raises(ValueError, match="no cross-attention"):
        without(x, x)
    with pytest.raises(TypeError, match="norm_first"):
        TransformerDecoderBlock(8, 2, rng=rng, norm_first=1)


def test_attention_only_block_is_a_residual_sum(rng):
    block = TransformerDecoderBlock(8, 2, rng=rng, cross_attention=False, attention_only=True)
    x = rng.normal(size=(4, 8))
    attended, _, _ = _csa(block.self_attention, x)
    np.testing.assert_allclose(block(x).output, x + attended, rtol=1e-14)


# =============================================================================
# DecoderLM, cached and uncached steps
# =============================================================================
def test_lm_rows_equal_prefix_runs(rng):
    lm = DecoderLM.random(30, 16, 2, 2, 40, rng=rng)
    ids = rng.integers(0, 30, size=10)
    logits = lm.logits(ids)
    for t in range(10):
        np.testing.assert_allclose(logits[t], lm.logits(ids[:t + 1])[-1], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw", [dict(temperature=0.0), dict(temperature=1.0, top_k=10), dict(top_p=0.8)])
def test_cached_and_uncached_generation_give_identical_tokens(rng, kw):
    lm = DecoderLM.random(40, 32, 4, 3, 80, rng=rng)
    prompt = rng.integers(0, 40, size=4)
    a = generate(UncachedStep(lm), prompt, 30, rng=np.random.default_rng(1), **kw)
    b = generate(CachedStep(lm), prompt, 30, rng=np.random.default_rng(1), **kw)
    np.testing.assert_array_equal(a, b)


def test_cache_memory_is_2_layers_n_d_model_itemsize(rng):
    lm = DecoderLM.random(20, 16, 2, 3, 50, rng=rng)
    step = CachedStep(lm)
    step(np.arange(7) % 20)
    assert step.cache_nbytes == 2 * 3 * 7 * 16 * 8


def test_cached_step_refuses_a_sequence_that_does_not_extend_the_last(rng):
    lm = DecoderLM.random(20, 16, 2, 1, 50, rng=rng)
    step = CachedStep(lm)
    step(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="extend"):
        step(np.array([1, 2, 4, 5]))


def test_lm_refuses_bad_ids_and_too_long_contexts(rng):
    lm = DecoderLM.random(20, 16, 2, 1, 8, rng=rng)
    with pytest.raises(ValueError, match="0..19"):
        lm.logits(np.array([0, 20]))
    with pytest.raises(ValueError, match="max_len=8"):
        lm.logits(np.zeros(9, dtype=int))
    with pytest.raises(ValueError, match="1-D"):
        lm.logits(np.array([0.5, 1.0]))


# =============================================================================
# The hand-set induction model
# =============================================================================
def test_induction_model_copies_the_token_after_the_previous_occurrence():
    model = induction_model(10, 32)
    ids = np.array([0, 3, 7, 2, 9, 3])
    assert int(np.argmax(model.logits(ids)[-1])) == 7
    out = generate(CachedStep(model), ids, 8, temperature=0.0)
    np.testing.assert_array_equal(out[6:], [7, 2, 9, 3, 7, 2, 9, 3])


def test_induction_model_attention_patterns():
    model = induction_model(8, 16)
    ids = np.array([0, 5, 6, 5])
    _, weights = model.forward(ids, return_weights=True)
    np.testing.assert_allclose(weights[0][0][1:], np.eye(4, k=-1)[1:], atol=1e-6)     # previous-token head
    assert weights[1][0][3, 2] > 1 - 1e-6                                             # 5 -> after the earlier 5


# =============================================================================
# PyTorch
# =============================================================================
@pytest.mark.torch
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_decoder_block_matches_torch(norm_first, dtype):
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]'")
    from transformer_course.decoder import decoder_block_from_torch

    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    layer = torch.nn.TransformerDecoderLayer(16, 4, 40, dropout=0.0, batch_first=True, norm_first=norm_first,
                                             dtype=tdtype)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.3 + (1.0 if name.endswith("weight") else 0.0))
    layer.eval()
    x, mem = torch.randn(2, 6, 16, dtype=tdtype), torch.randn(2, 9, 16, dtype=tdtype)
    with torch.no_grad():
        expected = layer(x, mem, tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(6, dtype=tdtype),
                         tgt_is_causal=True).numpy()
    got = decoder_block_from_torch(layer, getattr(np, dtype))(x.numpy(), mem.numpy()).output
    assert got.dtype == np.dtype(dtype)
    # Error relative to the output scale: float32 eps 6e-8 x a few dozen dependent roundings < 1e-5;
    # float64 eps 1.1e-16 x the same < 1e-12.
    bound = 1e-5 if dtype == "float32" else 1e-12
    assert np.abs(got - expected).max() / np.abs(expected).max() < bound


@pytest.mark.torch
def test_torch_layers_with_the_tanh_gelu_are_refused():
    """The course's GELU is the erf form; GELU(approximate="tanh") differs from it by up to ~1e-3 (a random
    16-wide decoder layer's outputs moved 1.0e-4 to 1.3e-4 in float64, measured on 3 seeds), so converting
    such a layer must not silently run the erf one."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]'")
    from transformer_course.decoder import decoder_block_from_torch
    from transformer_course.torch_interop import encoder_block_from_torch

    for make, convert in ((torch.nn.TransformerDecoderLayer, decoder_block_from_torch),
                          (torch.nn.TransformerEncoderLayer, encoder_block_from_torch)):
        layer = make(8, 2, 16, dropout=0.0, batch_first=True, activation=torch.nn.GELU(approximate="tanh"))
        with pytest.raises(ValueError, match=r"layer.activation must be relu or the exact \(erf\) gelu, got "
                                             r"GELU\(approximate='tanh'\): the tanh approximation differs"):
            convert(layer)
        for act, name in ((torch.nn.GELU(), "gelu"), ("gelu", "gelu"), (torch.nn.ReLU(), "relu"), ("relu", "relu")):
            block = convert(make(8, 2, 16, dropout=0.0, batch_first=True, activation=act))
            assert block.feed_forward.activation == name
        with pytest.raises(ValueError, match=r"layer.activation must be relu or the exact \(erf\) gelu, got"):
            convert(make(8, 2, 16, dropout=0.0, batch_first=True, activation=torch.nn.SiLU()))


@pytest.mark.torch
def test_cached_generation_matches_a_torch_causal_forward():
    """The cached step's logits for every position equal PyTorch's masked attention over the whole sequence."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]'")
    rng = np.random.default_rng(3)
    mha = _mha(rng, 16, 4)
    x = rng.normal(size=(7, 16))
    tm = torch.nn.MultiheadAttention(16, 4, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        tm.in_proj_weight.copy_(torch.from_numpy(np.concatenate([mha.W_Q.T, mha.W_K.T, mha.W_V.T])))
        tm.in_proj_bias.copy_(torch.from_numpy(np.concatenate([mha.b_Q, mha.b_K, mha.b_V])))
        tm.out_proj.weight.copy_(torch.from_numpy(mha.W_O.T))
        tm.out_proj.bias.copy_(torch.from_numpy(mha.b_O))
        xt = torch.from_numpy(x)[None]
        expected = tm(xt, xt, xt, attn_mask=torch.from_numpy(~causal_mask(7)), need_weights=False)[0][0].numpy()
    outs, cache = [], None
    for t in range(7):
        out, _, cache = _csa(mha, x[t:t + 1], cache)
        outs.append(out)
    np.testing.assert_allclose(np.concatenate(outs), expected, rtol=1e-10, atol=1e-12)


# =============================================================================
# The functional twins of notebook 08's exercises, and DecoderLM running a given self-attention
# =============================================================================
def test_language_model_loss_scores_row_t_against_token_t_plus_1(rng):
    from transformer_course.loss import cross_entropy

    logits, ids = rng.normal(size=(3, 6, 11)), rng.integers(0, 11, size=(3, 6))
    loop = np.mean([cross_entropy(logits[b, t], ids[b, t + 1]) for b in range(3) for t in range(5)])
    assert abs(language_model_loss(logits, ids) - loop) < 1e-12
    with pytest.raises(ValueError, match="ids must have shape"):
        language_model_loss(logits, ids[:, :-1])


def test_causal_self_attention_takes_a_pair_as_its_cache(rng):
    mha = _mha(rng)
    x = rng.normal(size=(2, 5, 8))
    whole, _, _ = _csa(mha, x)
    _, _, cache = _csa(mha, x[:, :3])
    keys, values = cache                                              # a KVCache unpacks as the pair
    out, _, grown = _csa(mha, x[:, 3:], (keys, values))
    np.testing.assert_allclose(out, whole[:, 3:], rtol=1e-11, atol=1e-12)
    assert isinstance(grown, KVCache) and grown.length == 5


def test_cross_attention_and_decoder_block_equal_the_classes(rng):
    x, memory = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 7, 8))
    pad = np.arange(7)[None, :] < np.array([[7], [3]])                # (2, 7)
    mha = _mha(rng)
    out, w = cross_attention(x, memory, attention_params(mha), 2, memory_mask=pad)
    ref_out, ref_w = mha(x, memory, memory, key_padding_mask=pad)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(w, ref_w)
    for norm_first in (False, True):
        block = TransformerDecoderBlock(8, 2, 20, rng=rng, norm_first=norm_first)
        f = block.feed_forward
        params = {"self_attn": attention_params(block.self_attention),
                  "cross_attn": attention_params(block.cross_attention),
                  "W_1": f.W_1, "b_1": f.b_1, "W_2": f.W_2, "b_2": f.b_2}
        for i in (1, 2, 3):
            params[f"ln{i}_gamma"], params[f"ln{i}_beta"] = 1 + 0.3 * rng.normal(size=8), 0.3 * rng.normal(size=8)
            setattr(block, f"ln{i}_gamma", params[f"ln{i}_gamma"])
            setattr(block, f"ln{i}_beta", params[f"ln{i}_beta"])
        got, got_self, got_cross = decoder_block(x, memory, params, 2, norm_first=norm_first)
        ref = block(x, memory)
        np.testing.assert_array_equal(got, ref.output)
        np.testing.assert_array_equal(got_self, ref.self_weights)
        np.testing.assert_array_equal(got_cross, ref.cross_weights)


def _tuple_attention(x, params, n_heads, cache=None):
    """A student-style causal_self_attention: the package's, with the cache as a plain (keys, values) tuple."""
    assert cache is None or type(cache) is tuple
    out, weights, kv = causal_self_attention(x, params, n_heads, cache)
    return out, weights, (kv.keys, kv.values)


def test_decoder_lm_runs_a_given_self_attention(rng):
    lm = DecoderLM.random(30, 16, 2, 2, 40, rng=rng)
    ids = rng.integers(0, 30, size=12)
    default = lm.logits(ids)
    for fn in (causal_self_attention, _tuple_attention):
        mine = lm.with_self_attention(fn)
        assert all(a is b for a, b in zip(mine.blocks, lm.blocks)) and mine.W_E is lm.W_E
        np.testing.assert_array_equal(mine.logits(ids), default)
        step = CachedStep(mine)
        cached = np.stack([step(ids[:t + 1]) for t in range(12)])
        np.testing.assert_allclose(cached, default, rtol=1e-10, atol=1e-12)
        assert step.cache_nbytes == 2 * 2 * 12 * 16 * 8

    def unmasked(x, params, n_heads, cache=None):                     # a planted mistake: no causal mask
        out, weights, kv = causal_self_attention(x, params, n_heads, cache)
        mha = MultiHeadAttention(16, n_heads, rng=np.random.default_rng(0)).set_weights(**params)
        return mha(x)[0], weights, kv

    leaky = lm.with_self_attention(unmasked).logits(ids)
    assert np.max(np.abs(leaky[:-1] - default[:-1])) > 1e-3, "a self-attention without the mask must change the logits"
    with pytest.raises(TypeError, match="causal_self_attention"):
        lm.with_self_attention("not a function")
