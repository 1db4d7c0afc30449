"""transformer_course.backward and loss: every gradient against central differences (hypothesis) and
against PyTorch's autograd (float64).

Tolerances:
* central differences, float64, h = 1e-5: truncation h^2 |f'''| / 6 ~ 1e-11 and round-off
  eps |f| / h ~ 1e-11 for the O(1) functions drawn here; checked as max|a - n| / max|n| < 1e-6
  (inputs are kept to |x| <= 3 so that f''' stays O(1); a wrong gradient is off by O(1));
* PyTorch, float64: the same maths in another order of operations, so the difference is a few
  eps times the size of the intermediate sums: max|a - t| / max|t| <= 1e-10 (the issue's bound).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_course import causal_mask, gelu, layer_norm, scaled_dot_product_attention, softmax
from transformer_course.backward import (
    attention_backward,
    cross_entropy_backward,
    embedding_backward,
    feed_forward_backward,
    gelu_backward,
    layer_norm_backward,
    softmax_backward,
)
from transformer_course.loss import cross_entropy
from transformer_course.testing import central_differences as numerical_gradient

PROPS = settings(max_examples=15, deadline=None, database=None)
FD_TOL = 1e-6
TORCH_TOL = 1e-10




def rel(a, b):
    """max |a - b| / max |b| (b not all zero)."""
    b = np.asarray(b, dtype=float)
    return float(np.max(np.abs(np.asarray(a) - b)) / max(np.max(np.abs(b)), 1e-300))


def draw(seed, *shape, scale=1.0):
    return np.random.default_rng(seed).normal(0, scale, shape)


sizes = st.integers(1, 4)
seeds = st.integers(0, 2**31)


# -- finite differences (hypothesis) --------------------------------------------------------------------

@PROPS
@given(b=sizes, n=st.integers(1, 6), seed=seeds)
def test_softmax_backward_matches_finite_differences(b, n, seed):
    s, G = draw(seed, b, n), draw(seed + 1, b, n)
    numeric = numerical_gradient(lambda: np.sum(G * softmax(s)), s)
    assert rel(softmax_backward(softmax(s), G), numeric) < FD_TOL or np.max(np.abs(numeric)) < 1e-12


@PROPS
@given(b=sizes, n_q=sizes, n_k=sizes, d_k=sizes, d_v=sizes, masked=st.booleans(), seed=seeds)
def test_attention_backward_matches_finite_differences(b, n_q, n_k, d_k, d_v, masked, seed):
    Q, K, V = draw(seed, b, n_q, d_k), draw(seed + 1, b, n_k, d_k), draw(seed + 2, b, n_k, d_v)
    dO = draw(seed + 3, b, n_q, d_v)
    mask = (np.random.default_rng(seed).random((n_q, n_k)) < 0.7) if masked else None
    grads = attention_backward(dO, Q, K, V, mask)
    for grad, x in zip(grads, (Q, K, V)):
        numeric = numerical_gradient(lambda: np.sum(dO * scaled_dot_product_attention(Q, K, V, mask)[0]), x)
        scale = max(np.max(np.abs(numeric)), 1e-3)        # all-zero gradients (everything masked) allowed
        assert np.max(np.abs(grad - numeric)) / scale < FD_TOL


@PROPS
@given(b=sizes, d=st.integers(3, 6), seed=seeds)   # d = 2: LN(x) = ±1, dx ~ 0
def test_layer_norm_backward_matches_finite_differences(b, d, seed):
    x, dy = draw(seed, b, 3, d, scale=2.0), draw(seed + 1, b, 3, d)
    gamma, beta = draw(seed + 2, d) + 1.0, draw(seed + 3, d)
    loss = lambda: np.sum(dy * layer_norm(x, gamma, beta, 1e-5))
    dx, dgamma, dbeta = layer_norm_backward(dy, x, gamma, 1e-5)
    assert rel(dx, numerical_gradient(loss, x)) < FD_TOL
    assert rel(dgamma, numerical_gradient(loss, gamma)) < FD_TOL
    assert rel(dbeta, numerical_gradient(loss, beta)) < FD_TOL
    assert np.all(np.abs(dx.sum(-1)) < 1e-10)             # shifting x changes nothing


@PROPS
@given(n=sizes, d=sizes, d_ff=sizes, seed=seeds)
def test_feed_forward_backward_matches_finite_differences(n, d, d_ff, seed):
    x, dy = draw(seed, 2, n, d), draw(seed + 1, 2, n, d)
    W_1, b_1, W_2, b_2 = draw(seed + 2, d, d_ff), draw(seed + 3, d_ff), draw(seed + 4, d_ff, d), draw(seed + 5, d)
    loss = lambda: np.sum(dy * (gelu(x @ W_1 + b_1) @ W_2 + b_2))
    for grad, wrt in zip(feed_forward_backward(dy, x, W_1, b_1, W_2, b_2), (x, W_1, b_1, W_2, b_2)):
        assert rel(grad, numerical_gradient(loss, wrt)) < FD_TOL


@PROPS
@given(b=sizes, n=sizes, v=st.integers(2, 7), seed=seeds)
def test_cross_entropy_backward_matches_finite_differences(b, n, v, seed):
    z = draw(seed, b, n, v, scale=2.0)
    y = np.random.default_rng(seed).integers(0, v, (b, n))
    assert rel(cross_entropy_backward(z, y), numerical_gradient(lambda: cross_entropy(z, y), z)) < FD_TOL


@PROPS
@given(b=sizes, n=sizes, v=st.integers(1, 6), seed=seeds)
def test_embedding_backward_matches_finite_differences(b, n, v, seed):
    E, dX = draw(seed, v, 3), draw(seed + 1, b, n, 3)
    ids = np.random.default_rng(seed).integers(0, v, (b, n))
    assert rel(embedding_backward(dX, ids, v), numerical_gradient(lambda: np.sum(dX * E[ids]), E)) < FD_TOL


# -- exact properties -----------------------------------------------------------------------------------

def test_blocked_pairs_get_exactly_zero_gradient(rng):
    Q, K, V, dO = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    dO[1:] = 0                                             # only query 0, which sees key 0 only
    _, dK, dV = attention_backward(dO, Q, K, V, causal_mask(5))
    assert np.all(dK[1:] == 0) and np.all(dV[1:] == 0)


def test_fully_masked_row_gives_zero_gradient(rng):
    Q, K, V, dO = rng.normal(size=(3, 2)), rng.normal(size=(4, 2)), rng.normal(size=(4, 2)), rng.normal(size=(3, 2))
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False
    dQ, _, _ = attention_backward(dO, Q, K, V, mask)
    assert np.all(dQ[1] == 0) and np.all(np.isfinite(dQ))


def test_the_package_exports_the_backward_passes_under_the_exercise_names():
    import transformer_course as tc
    from transformer_course import backward

    for name in ("softmax_backward", "attention_backward", "layer_norm_backward", "feed_forward_backward",
                 "cross_entropy_backward", "embedding_backward"):
        assert getattr(tc, name) is getattr(backward, name)


def test_uniform_logits_give_ln_v_and_softmax_minus_onehot():
    assert cross_entropy(np.zeros((2, 5)), np.array([0, 3])) == pytest.approx(np.log(5), rel=1e-15)
    np.testing.assert_allclose(cross_entropy_backward(np.zeros(4), np.array(1)), [0.25, -0.75, 0.25, 0.25])


def test_gelu_backward_limits():
    x = np.array([-30.0, 0.0, 30.0])
    np.testing.assert_allclose(gelu_backward(np.ones(3), x), [0.0, 0.5, 1.0], atol=1e-15)


def test_embedding_backward_accumulates_repeats():
    dE = embedding_backward(np.array([[[1.0], [2.0], [4.0]]]), np.array([[2, 2, 0]]), 3)
    np.testing.assert_array_equal(dE, [[4.0], [0.0], [3.0]])


@pytest.mark.parametrize("call, message", [
    (lambda: softmax_backward(np.ones((2, 3)) / 3, np.ones((3, 2))), "g must have the shape of p"),
    (lambda: attention_backward(np.ones((2, 3)), np.ones((2, 4)), np.ones((5, 4)), np.ones((5, 2))),
     "grad_output must have the shape"),
    (lambda: layer_norm_backward(np.ones((2, 3)), np.ones((2, 3)), np.ones(4)), "gamma must have shape"),
    (lambda: embedding_backward(np.ones((1, 2, 3)), np.array([[0, 9]]), 4), "token_ids must lie in 0..3"),
    (lambda: embedding_backward(np.ones((1, 2, 3)), np.array([[0.0, 1.0]]), 4), "token_ids must be integers"),
    (lambda: cross_entropy(np.ones((2, 3)), np.array([0, 1, 2])), "targets must have shape (2,)"),
    (lambda: cross_entropy_backward(np.ones((2, 3)), np.array([0, 3])), "targets must lie in 0..2"),
    (lambda: feed_forward_backward(np.ones((2, 3)), np.ones((2, 3)), np.ones((3, 4)), np.ones(4), np.ones((3, 4)), np.ones(3)),
     "W_1 must be (d_model=3, d_ff)"),
])
def test_bad_arguments_are_refused_with_a_clear_message(call, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


# -- PyTorch autograd, float64 --------------------------------------------------------------------------

def _torch():
    return pytest.importorskip("torch", reason="PyTorch not installed: pip install -e '.[torch]' (torch==2.13.0)")


def _leaf(torch, a):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


@pytest.mark.torch
@pytest.mark.parametrize("seed", range(4))
def test_every_backward_matches_torch_autograd(seed):
    torch = _torch()
    F = torch.nn.functional
    rng = np.random.default_rng(seed)

    s, G = rng.normal(0, 3, (3, 4, 7)), rng.normal(size=(3, 4, 7))
    ts = _leaf(torch, s)
    (torch.softmax(ts, -1) * torch.from_numpy(G)).sum().backward()
    assert rel(softmax_backward(softmax(s), G), ts.grad.numpy()) <= TORCH_TOL

    Q, K, V = rng.normal(size=(2, 3, 5, 4)), rng.normal(size=(2, 3, 6, 4)), rng.normal(size=(2, 3, 6, 3))
    dO = rng.normal(size=(2, 3, 5, 3))
    mask = rng.random((5, 6)) < 0.7
    mask[:, 0] = True
    tq, tk, tv = (_leaf(torch, a) for a in (Q, K, V))
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(mask))
    (out * torch.from_numpy(dO)).sum().backward()
    for ours, leaf in zip(attention_backward(dO, Q, K, V, mask), (tq, tk, tv)):
        assert rel(ours, leaf.grad.numpy()) <= TORCH_TOL

    x, dy = rng.normal(2, 3, (2, 5, 6)), rng.normal(size=(2, 5, 6))
    gamma, beta = rng.normal(1, 0.5, 6), rng.normal(size=6)
    tx, tg, tb = (_leaf(torch, a) for a in (x, gamma, beta))
    (F.layer_norm(tx, (6,), tg, tb, 1e-5) * torch.from_numpy(dy)).sum().backward()
    for ours, leaf in zip(layer_norm_backward(dy, x, gamma, 1e-5), (tx, tg, tb)):
        assert rel(ours, leaf.grad.numpy()) <= TORCH_TOL

    W_1, b_1, W_2, b_2 = rng.normal(size=(6, 9)), rng.normal(size=9), rng.normal(size=(9, 6)), rng.normal(size=6)
    leaves = [_leaf(torch, a) for a in (x, W_1, b_1, W_2, b_2)]
    tx, t1, tb1, t2, tb2 = leaves
    ((F.gelu(tx @ t1 + tb1) @ t2 + tb2) * torch.from_numpy(dy)).sum().backward()
    for ours, leaf in zip(feed_forward_backward(dy, x, W_1, b_1, W_2, b_2), leaves):
        assert rel(ours, leaf.grad.numpy()) <= TORCH_TOL

    z, y = rng.normal(0, 3, (2, 5, 11)), rng.integers(0, 11, (2, 5))
    tz = _leaf(torch, z)
    loss = F.cross_entropy(tz.reshape(-1, 11), torch.from_numpy(y).reshape(-1))
    loss.backward()
    assert cross_entropy(z, y) == pytest.approx(loss.item(), rel=1e-13)
    assert rel(cross_entropy_backward(z, y), tz.grad.numpy()) <= TORCH_TOL

    E, dX = rng.normal(size=(11, 4)), rng.normal(size=(2, 5, 4))
    tE = _leaf(torch, E)
    (F.embedding(torch.from_numpy(y), tE) * torch.from_numpy(dX)).sum().backward()
    assert rel(embedding_backward(dX, y, 11), tE.grad.numpy()) <= TORCH_TOL
