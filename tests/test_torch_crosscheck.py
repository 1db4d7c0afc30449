"""Cross-checks against PyTorch: F.scaled_dot_product_attention, nn.MultiheadAttention, nn.TransformerEncoderLayer.

Conventions that differ and are converted here:
- weights: PyTorch computes ``x @ weight.T``; the course ``x @ W`` with ``W = weight.T``;
- boolean ``attn_mask`` of nn.MultiheadAttention: PyTorch True = NOT allowed, ours True = may attend;
- ``key_padding_mask``: PyTorch True = padding, ours True = real token.
(F.scaled_dot_product_attention's boolean mask is True = may attend, like ours.)
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]' (torch==2.13.0)")

from transformer_course import (  # noqa: E402
    MultiHeadAttention,
    TransformerEncoderBlock,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from transformer_course.torch_interop import encoder_block_from_torch, multihead_from_torch  # noqa: E402

F = torch.nn.functional
pytestmark = pytest.mark.torch

TOL32 = {"rtol": 1e-5, "atol": 1e-5}
TOL64 = {"rtol": 1e-10, "atol": 1e-10}


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(1234)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(ours, theirs, tol=TOL32):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, **tol)


# =============================================================================
# F.scaled_dot_product_attention
# =============================================================================
def qkv(rng, lead=(2,), n_q=4, n_k=6, d_k=8, d_v=5, dtype=np.float32):
    return (rng.normal(size=(*lead, n_q, d_k)).astype(dtype),
            rng.normal(size=(*lead, n_k, d_k)).astype(dtype),
            rng.normal(size=(*lead, n_k, d_v)).astype(dtype))


def test_sdpa_no_mask(rng):
    Q, K, V = qkv(rng)
    out, _ = scaled_dot_product_attention(Q, K, V)
    close(out, F.scaled_dot_product_attention(t(Q), t(K), t(V)))


def test_sdpa_boolean_mask(rng):
    Q, K, V = qkv(rng)
    mask = rng.random((4, 6)) < 0.5
    mask[:, 0] = True                                        # no fully masked row here
    out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    close(out, F.scaled_dot_product_attention(t(Q), t(K), t(V), attn_mask=t(mask)))
    assert (w[..., ~mask] == 0).all()


def test_sdpa_causal_mask_equals_is_causal(rng):
    Q, K, V = qkv(rng, n_q=5, n_k=5)
    out, _ = scaled_dot_product_attention(Q, K, V, mask=causal_mask(5))
    close(out, F.scaled_dot_product_attention(t(Q), t(K), t(V), is_causal=True))


def test_sdpa_additive_float_mask(rng):
    Q, K, V = qkv(rng)
    mask = rng.normal(size=(4, 6)).astype(np.float32)
    mask[rng.random((4, 6)) < 0.3] = -np.inf
    mask[:, 1] = 0.0
    out, _ = scaled_dot_product_attention(Q, K, V, mask=mask)
    close(out, F.scaled_dot_product_attention(t(Q), t(K), t(V), attn_mask=t(mask)))


def test_sdpa_batched_with_heads_and_per_batch_mask(rng):
    Q, K, V = qkv(rng, lead=(3, 4))                          # (batch, heads, n, d)
    mask = padding_mask([2, 6, 4], 6)[:, None, None, :]      # (batch, 1, 1, n_k)
    out, _ = scaled_dot_product_attention(Q, K, V, mask=mask)
    close(out, F.scaled_dot_product_attention(t(Q), t(K), t(V), attn_mask=t(mask)))


def test_sdpa_fully_masked_row_gives_zero_in_both(rng):
    Q, K, V = qkv(rng, lead=(2, 2))
    mask = np.ones((4, 6), bool)
    mask[2] = False
    out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    ref = F.scaled_dot_product_attention(t(Q), t(K), t(V), attn_mask=t(mask)).numpy()
    np.testing.assert_array_equal(out[..., 2, :], 0.0)
    np.testing.assert_array_equal(ref[..., 2, :], 0.0)
    np.testing.assert_array_equal(w[..., 2, :], 0.0)
    close(out, ref)


def test_sdpa_float64_to_1e_10(rng):
    Q, K, V = qkv(rng, lead=(2, 3), dtype=np.float64)
    mask = causal_mask(6)[:4]
    out, _ = scaled_dot_product_attention(Q, K, V, mask=mask)
    close(out, F.scaled_dot_product_attention(t(Q), t(K), t(V), attn_mask=t(mask)), TOL64)


# =============================================================================
# nn.MultiheadAttention
# =============================================================================
def torch_mha(d_model=16, n_heads=4, bias=True, dtype=torch.float32):
    m = torch.nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, dtype=dtype).eval()
    if bias:                                                 # PyTorch initialises biases to 0: make them count
        with torch.no_grad():
            m.in_proj_bias.normal_()
            m.out_proj.bias.normal_()
    return m


def run_torch_mha(m, q, k=None, v=None, **kw):
    k = q if k is None else k
    v = k if v is None else v
    with torch.no_grad():
        out, w = m(t(q), t(k), t(v), need_weights=True, average_attn_weights=False, **kw)
    return out, w


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_heads", [1, 2, 4, 8])
def test_mha_self_attention_with_per_head_weights(rng, bias, n_heads):
    m = torch_mha(16, n_heads, bias)
    ours = multihead_from_torch(m, np.float32)
    assert (ours.b_Q is None) == (not bias)
    x = rng.normal(size=(3, 5, 16)).astype(np.float32)
    out, w = ours(x)
    ref_out, ref_w = run_torch_mha(m, x)
    close(out, ref_out)
    close(w, ref_w)                                          # (batch, heads, n_q, n_k)


def test_mha_cross_attention_different_lengths(rng):
    m = torch_mha(16, 4)
    ours = multihead_from_torch(m, np.float32)
    q = rng.normal(size=(2, 3, 16)).astype(np.float32)
    k = rng.normal(size=(2, 7, 16)).astype(np.float32)
    v = rng.normal(size=(2, 7, 16)).astype(np.float32)
    out, w = ours(q, k, v)
    ref_out, ref_w = run_torch_mha(m, q, k, v)
    close(out, ref_out)
    close(w, ref_w)


def test_mha_boolean_attn_mask_is_inverted(rng):
    m = torch_mha()
    ours = multihead_from_torch(m, np.float32)
    x = rng.normal(size=(2, 6, 16)).astype(np.float32)
    allowed = causal_mask(6)
    out, w = ours(x, mask=allowed)
    ref_out, ref_w = run_torch_mha(m, x, attn_mask=t(~allowed))       # PyTorch: True = NOT allowed
    close(out, ref_out)
    close(w, ref_w)
    # Passing our mask unconverted gives a different answer: the conventions really are opposite.
    wrong_out, _ = run_torch_mha(m, x, attn_mask=t(np.triu(np.ones((6, 6), bool))))
    assert not np.allclose(out, wrong_out.numpy(), atol=1e-3)


def test_mha_additive_float_mask(rng):
    m = torch_mha()
    ours = multihead_from_torch(m, np.float32)
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    mask = rng.normal(size=(5, 5)).astype(np.float32)
    mask[np.triu_indices(5, 2)] = -np.inf
    out, w = ours(x, mask=mask)
    ref_out, ref_w = run_torch_mha(m, x, attn_mask=t(mask))
    close(out, ref_out)
    close(w, ref_w)


def test_mha_key_padding_mask_is_inverted(rng):
    m = torch_mha()
    ours = multihead_from_torch(m, np.float32)
    x = rng.normal(size=(3, 6, 16)).astype(np.float32)
    real = padding_mask([6, 2, 4], 6)                                     # True = real token
    out, w = ours(x, key_padding_mask=real)
    ref_out, ref_w = run_torch_mha(m, x, key_padding_mask=t(~real))       # PyTorch: True = padding
    close(out, ref_out)
    close(w, ref_w)
    assert (w[1, :, :, 2:] == 0).all()


def test_mha_key_padding_and_causal_mask_together(rng):
    m = torch_mha(16, 2)
    ours = multihead_from_torch(m, np.float32)
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    real = padding_mask([5, 3], 5)
    out, w = ours(x, mask=causal_mask(5), key_padding_mask=real)
    ref_out, ref_w = run_torch_mha(m, x, attn_mask=t(~causal_mask(5)), key_padding_mask=t(~real))
    close(out, ref_out)
    close(w, ref_w)


def test_mha_averaged_weights_are_the_mean_over_heads(rng):
    m = torch_mha()
    ours = multihead_from_torch(m, np.float32)
    x = rng.normal(size=(2, 4, 16)).astype(np.float32)
    _, w = ours(x)
    with torch.no_grad():
        _, avg = m(t(x), t(x), t(x), need_weights=True, average_attn_weights=True)
    close(w.mean(axis=1), avg)


def test_mha_weight_conversion_by_hand(rng):
    """Convert without torch_interop: W = weight.T, in_proj_weight rows are [Q; K; V]."""
    d, h = 12, 3
    m = torch_mha(d, h)
    w_in = m.in_proj_weight.detach().numpy()                  # (3d, d)
    b_in = m.in_proj_bias.detach().numpy()
    W_Q, W_K, W_V = w_in[:d].T, w_in[d:2 * d].T, w_in[2 * d:].T
    b_Q, b_K, b_V = b_in[:d], b_in[d:2 * d], b_in[2 * d:]
    W_O, b_O = m.out_proj.weight.detach().numpy().T, m.out_proj.bias.detach().numpy()
    mine = MultiHeadAttention(d, h, rng=np.random.default_rng(0), dtype=np.float32)
    mine.set_weights(W_Q, W_K, W_V, W_O, b_Q, b_K, b_V, b_O)

    x = rng.normal(size=(2, 5, d)).astype(np.float32)
    out, w = mine(x)
    ref_out, ref_w = run_torch_mha(m, x)
    close(out, ref_out)
    close(w, ref_w)

    # torch_interop must produce exactly the same parameters.
    conv = multihead_from_torch(m, np.float32)
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
        np.testing.assert_array_equal(getattr(conv, name), getattr(mine, name), err_msg=name)
        assert getattr(conv, name).dtype == np.float32
    assert conv.n_heads == h and conv.d_model == d


def test_mha_conversion_copies_the_weights(rng):
    m = torch_mha()
    ours = multihead_from_torch(m, np.float32)
    before = ours.W_Q.copy()
    with torch.no_grad():
        m.in_proj_weight.add_(1.0)
    np.testing.assert_array_equal(ours.W_Q, before)


def test_mha_float64_to_1e_10(rng):
    m = torch_mha(16, 4, dtype=torch.float64)
    ours = multihead_from_torch(m)                           # float64 by default
    assert ours.W_Q.dtype == np.float64
    x = rng.normal(size=(2, 5, 16))
    real = padding_mask([5, 3], 5)
    out, w = ours(x, mask=causal_mask(5), key_padding_mask=real)
    ref_out, ref_w = run_torch_mha(m, x, attn_mask=t(~causal_mask(5)), key_padding_mask=t(~real))
    close(out, ref_out, TOL64)
    close(w, ref_w, TOL64)


def test_multihead_from_torch_refuses_separate_kdim():
    m = torch.nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True)
    with pytest.raises(ValueError, match=r"only nn.MultiheadAttention with a packed in_proj_weight \(kdim == vdim == embed_dim\)"):
        multihead_from_torch(m)


@pytest.mark.parametrize("kw", [{"add_bias_kv": True}, {"add_zero_attn": True}])
def test_multihead_from_torch_refuses_extra_key_value_options(kw):
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True, **kw)
    with pytest.raises(ValueError, match=r"add_bias_kv=True or add_zero_attn=True is not supported"):
        multihead_from_torch(m)


# =============================================================================
# nn.TransformerEncoderLayer
# =============================================================================
def torch_layer(norm_first, activation, d_model=16, n_heads=4, d_ff=32, dtype=torch.float32):
    layer = torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, activation=activation,
                                             batch_first=True, norm_first=norm_first, dtype=dtype).eval()
    with torch.no_grad():                                    # non-trivial norms and biases
        for norm in (layer.norm1, layer.norm2):
            norm.weight.add_(0.1 * torch.randn_like(norm.weight))
            norm.bias.add_(0.1 * torch.randn_like(norm.bias))
        layer.self_attn.in_proj_bias.normal_(0, 0.1)
        layer.self_attn.out_proj.bias.normal_(0, 0.1)
    return layer


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_with_padding_mask(rng, norm_first, activation):
    layer = torch_layer(norm_first, activation)
    block = encoder_block_from_torch(layer, np.float32)
    assert block.norm_first is norm_first
    assert block.feed_forward.activation == activation
    x = rng.normal(size=(3, 6, 16)).astype(np.float32)
    real = padding_mask([6, 3, 5], 6)
    out, _ = block(x, key_padding_mask=real)
    with torch.no_grad():                                    # inference (may take PyTorch's fast path)
        ref = layer(t(x), src_key_padding_mask=t(~real))
    close(out, ref)
    ref_grad = layer(t(x), src_key_padding_mask=t(~real))     # autograd enabled: the reference Python path
    close(out, ref_grad)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_no_mask_and_causal_mask(rng, norm_first):
    layer = torch_layer(norm_first, "gelu")
    block = encoder_block_from_torch(layer, np.float32)
    x = rng.normal(size=(2, 5, 16)).astype(np.float32)
    with torch.no_grad():
        close(block(x)[0], layer(t(x)))
        close(block(x, mask=causal_mask(5))[0], layer(t(x), src_mask=t(~causal_mask(5))))


def test_encoder_layer_activation_modules(rng):
    x = rng.normal(size=(2, 4, 16)).astype(np.float32)
    for act, name in ((torch.nn.GELU(), "gelu"), (torch.nn.ReLU(), "relu"), (F.gelu, "gelu"), (F.relu, "relu")):
        layer = torch_layer(False, act)
        block = encoder_block_from_torch(layer, np.float32)
        assert block.feed_forward.activation == name
        with torch.no_grad():
            close(block(x)[0], layer(t(x)))


@pytest.mark.parametrize("act", [F.silu, torch.nn.GELU(approximate="tanh")])
def test_encoder_block_from_torch_refuses_other_activations(act):
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation=act, batch_first=True)
    with pytest.raises(ValueError, match=r"layer.activation must be relu or the exact \(erf\) gelu, got"):
        encoder_block_from_torch(layer)


def test_encoder_layer_eps_is_carried_over(rng):
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, layer_norm_eps=1e-3).eval()
    block = encoder_block_from_torch(layer, np.float32)
    assert block.eps == pytest.approx(1e-3)
    x = (0.01 * rng.normal(size=(2, 3, 8))).astype(np.float32)    # small variance: eps matters
    with torch.no_grad():
        close(block(x)[0], layer(t(x)))


def test_encoder_layer_conversion_by_hand(rng):
    layer = torch_layer(False, "relu", d_model=8, n_heads=2, d_ff=16)
    d = 8
    sa = layer.self_attn
    g = lambda p: p.detach().numpy()                          # noqa: E731
    block = TransformerEncoderBlock(d, 2, 16, rng=np.random.default_rng(0), dtype=np.float32)
    w_in, b_in = g(sa.in_proj_weight), g(sa.in_proj_bias)
    block.attention.set_weights(w_in[:d].T, w_in[d:2 * d].T, w_in[2 * d:].T, g(sa.out_proj.weight).T,
                                b_in[:d], b_in[d:2 * d], b_in[2 * d:], g(sa.out_proj.bias))
    block.feed_forward.set_weights(g(layer.linear1.weight).T, g(layer.linear1.bias),
                                   g(layer.linear2.weight).T, g(layer.linear2.bias))
    block.ln1_gamma, block.ln1_beta = g(layer.norm1.weight), g(layer.norm1.bias)
    block.ln2_gamma, block.ln2_beta = g(layer.norm2.weight), g(layer.norm2.bias)
    x = rng.normal(size=(2, 5, d)).astype(np.float32)
    with torch.no_grad():
        ref = layer(t(x))
    close(block(x)[0], ref)
    close(encoder_block_from_torch(layer, np.float32)(x)[0], block(x)[0], {"rtol": 0, "atol": 0})


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_float64_to_1e_10(rng, norm_first, activation):
    layer = torch_layer(norm_first, activation, dtype=torch.float64)
    block = encoder_block_from_torch(layer)
    x = rng.normal(size=(2, 5, 16))
    real = padding_mask([5, 2], 5)
    out, _ = block(x, key_padding_mask=real)
    ref = layer(t(x), src_key_padding_mask=t(~real))
    close(out, ref, TOL64)
