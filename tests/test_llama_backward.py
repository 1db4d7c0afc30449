"""The backward passes of the LLaMA blocks (lib/transformer_course/llama.py), each checked two ways in
float64: against PyTorch's autograd on the same forward written in torch, and against central differences
of the package's own NumPy forward (h = 1e-5, the bound of notebook 10: relative error < 1e-7)."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_course import llama as ll
from transformer_course.testing import central_differences

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _torch_float64():
    """float64 for the tensors these tests build, and the default given back after each test: set at import,
    it leaked into every later test of the same pytest worker (the encoder cross-checks got float64 weights)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)

TORCH_TOL = 1e-12          # float64 autograd vs the hand-written backward: rounding only (max|diff| / max|g|)
FD_TOL = 1e-7              # central differences, h = 1e-5, float64 (notebook 10, section 1)


def rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))




def t(a, grad=True):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


@pytest.fixture
def rng():
    return np.random.default_rng(11)


def test_rms_norm_backward(rng):
    x = rng.normal(1.0, 2.0, (2, 3, 7))
    w = rng.uniform(0.5, 2.0, 7) * rng.choice([-1, 1], 7)
    G = rng.normal(0, 1, x.shape)
    dx, dw = ll.rms_norm_backward(G, x, w, 1e-5)
    xt, wt = t(x), t(w)
    y = wt * xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + 1e-5)
    (y * t(G, False)).sum().backward()
    assert rel(dx, xt.grad.numpy()) < TORCH_TOL and rel(dw, wt.grad.numpy()) < TORCH_TOL
    f = lambda: np.sum(G * ll.rms_norm(x, w, 1e-5))          # noqa: E731
    assert rel(dx, central_differences(f, x)) < FD_TOL
    assert rel(dw, central_differences(f, w)) < FD_TOL


@pytest.mark.parametrize(("dtype", "scale"), [(np.float32, 1e20), (np.float32, 1e30), (np.float64, 1e160)])
def test_rms_norm_backward_of_huge_rows_is_finite_and_right(rng, dtype, scale):
    """x * x overflows (float32 near 1e20, float64 near 1e155) while the forward is finite: the backward
    rescales the row as the forward does. RMSNorm ignores the row's scale (eps aside), so dL/dx of ``c x``
    is ``dL/dx(x) / c``: the float64 gradient of the unscaled row, divided by ``scale``."""
    x = rng.normal(0, 1, (3, 8))
    w = rng.uniform(0.5, 2.0, 8)
    G = rng.normal(0, 1, x.shape)
    big = (x * scale).astype(dtype)
    assert np.isfinite(ll.rms_norm(big, w.astype(dtype))).all()
    dx, dw = ll.rms_norm_backward(G.astype(dtype), big, w.astype(dtype))
    assert np.isfinite(dx).all() and np.isfinite(dw).all(), f"rms_norm_backward of |x| ~ {scale:g}: {dx}, {dw}"
    ref_dx, ref_dw = ll.rms_norm_backward(G, big.astype(np.float64) / scale, w, eps=1e-30)   # eps / scale^2 ~ 0
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert rel(dx.astype(np.float64) * scale, ref_dx) < tol, "dx of the huge rows is not dx of the row / scale"
    assert rel(dw, ref_dw) < tol, "dweight of the huge rows is not that of the unscaled rows"


def test_rope_backward_is_the_inverse_rotation(rng):
    x = rng.normal(0, 1, (3, 5, 8))
    pos = np.array([0, 3, 7, 100, 4095])
    G = rng.normal(0, 1, x.shape)
    dx = ll.rope_backward(G, pos, 1e5)
    cos, sin = (t(a, False) for a in ll.rope_tables(pos, 8, 1e5, np.float64))
    xt = t(x)
    out = torch.empty_like(xt)
    out = torch.stack((xt[..., 0::2] * cos - xt[..., 1::2] * sin, xt[..., 0::2] * sin + xt[..., 1::2] * cos), -1)
    (out.reshape(x.shape) * t(G, False)).sum().backward()
    assert rel(dx, xt.grad.numpy()) < TORCH_TOL
    f = lambda: np.sum(G * ll.apply_rope(x, pos, 1e5))        # noqa: E731
    assert rel(dx, central_differences(f, x)) < FD_TOL
    # the transpose of a rotation is its inverse: backward undoes forward exactly (to rounding)
    assert rel(ll.rope_backward(ll.apply_rope(x, pos, 1e5), pos, 1e5), x) < 1e-14


def test_silu_and_swiglu_backward(rng):
    d, d_ff = 6, 10
    x = rng.normal(0, 1.5, (2, 4, d))
    Wg, Wu, Wd = rng.normal(0, 0.7, (d_ff, d)), rng.normal(0, 0.7, (d_ff, d)), rng.normal(0, 0.5, (d, d_ff))
    G = rng.normal(0, 1, x.shape)
    z = rng.normal(0, 4, (3, 5))
    Gz = rng.normal(0, 1, z.shape)
    zt = t(z)
    (torch.nn.functional.silu(zt) * t(Gz, False)).sum().backward()
    assert rel(ll.silu_backward(Gz, z), zt.grad.numpy()) < TORCH_TOL
    grads = ll.swiglu_backward(G, x, Wg, Wu, Wd)
    xt, Wgt, Wut, Wdt = t(x), t(Wg), t(Wu), t(Wd)
    y = (torch.nn.functional.silu(xt @ Wgt.T) * (xt @ Wut.T)) @ Wdt.T
    (y * t(G, False)).sum().backward()
    for mine, theirs in zip(grads, (xt, Wgt, Wut, Wdt)):
        assert mine.shape == theirs.shape
        assert rel(mine, theirs.grad.numpy()) < TORCH_TOL
    f = lambda: np.sum(G * ll.swiglu(x, Wg, Wu, Wd))         # noqa: E731
    for mine, arr in zip(grads, (x, Wg, Wu, Wd)):
        assert rel(mine, central_differences(f, arr)) < FD_TOL


@pytest.mark.parametrize("n_heads,n_kv,n_q,n_k", [(6, 2, 5, 5), (4, 1, 2, 6), (3, 3, 4, 4)])
def test_grouped_query_attention_backward(rng, n_heads, n_kv, n_q, n_k):
    d = 4
    q, k, v = rng.normal(0, 1, (n_heads, n_q, d)), rng.normal(0, 1, (n_kv, n_k, d)), rng.normal(0, 1, (n_kv, n_k, d))
    G = rng.normal(0, 1, q.shape)
    dq, dk, dv = ll.grouped_query_attention_backward(G, q, k, v)
    qt, kt, vt = t(q), t(k), t(v)
    group = n_heads // n_kv
    kr, vr = kt.repeat_interleave(group, 0), vt.repeat_interleave(group, 0)     # head h reads h // group
    pos = torch.arange(n_k - n_q, n_k)
    mask = torch.arange(n_k)[None, :] > pos[:, None]
    s = (qt @ kr.transpose(1, 2)) / np.sqrt(d)
    out = torch.softmax(s.masked_fill(mask, -torch.inf), -1) @ vr
    (out * t(G, False)).sum().backward()
    for mine, theirs in ((dq, qt), (dk, kt), (dv, vt)):
        assert rel(mine, theirs.grad.numpy()) < TORCH_TOL
    f = lambda: np.sum(G * ll.grouped_query_attention(q, k, v))   # noqa: E731
    for mine, arr in ((dq, q), (dk, k), (dv, v)):
        assert rel(mine, central_differences(f, arr)) < FD_TOL
    # a shared key/value head's gradient is the sum of what each query head of its group sends back
    if group > 1:
        parts = [ll.grouped_query_attention_backward(G[h:h + 1], q[h:h + 1], k[h // group:h // group + 1],
                                                     v[h // group:h // group + 1])[1] for h in range(n_heads)]
        summed = np.stack([sum(parts[h] for h in range(j * group, (j + 1) * group))[0] for j in range(n_kv)])
        assert rel(dk, summed) < 1e-14


def test_tied_embedding_gradient(rng):
    V, d, n = 11, 5, 7
    E = rng.normal(0, 1, (V, d))
    w = rng.uniform(0.5, 1.5, d)
    ids = np.array([3, 1, 3, 9, 0, 3, 1])
    G = rng.normal(0, 1, (n, V))

    def forward(E):                                 # x = E[ids] -> RMSNorm -> logits = h E^T (tied)
        return ll.rms_norm(E[ids], w) @ E.T

    h = ll.rms_norm(E[ids], w)
    dh, dE_head = ll.tied_head_backward(G, h, E)
    from transformer_course.backward import embedding_backward

    dx, _ = ll.rms_norm_backward(dh, E[ids], w)
    dE = dE_head + embedding_backward(dx, ids, V)
    Et = t(E)
    x = Et[torch.as_tensor(ids)]
    logits = (t(w, False) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)) @ Et.T
    (logits * t(G, False)).sum().backward()
    assert rel(dE, Et.grad.numpy()) < TORCH_TOL
    assert rel(dE, central_differences(lambda: np.sum(G * forward(E)), E)) < FD_TOL


def test_backward_checks_its_arguments():
    with pytest.raises(ValueError, match="grad_output must have the shape of x"):
        ll.rms_norm_backward(np.ones((2, 3)), np.ones((2, 4)), np.ones(4))
    with pytest.raises(ValueError, match="positions must have shape"):
        ll.rope_backward(np.ones((3, 4)), [0, 1])
    with pytest.raises(ValueError, match="grad_output must have the shape of q"):
        ll.grouped_query_attention_backward(np.ones((2, 3, 4)), np.ones((2, 2, 4)), np.ones((1, 2, 4)), np.ones((1, 2, 4)))


def test_kv_head_gradient_is_what_grouped_attention_sends_back(rng):
    n_heads, n_kv, n, d = 6, 2, 4, 3
    q, k, v = rng.normal(0, 1, (n_heads, n, d)), rng.normal(0, 1, (n_kv, n, d)), rng.normal(0, 1, (n_kv, n, d))
    G = rng.normal(0, 1, q.shape)
    _, dk, dv = ll.grouped_query_attention_backward(G, q, k, v)
    group = n_heads // n_kv
    # every query head with its own copy of its key/value head: plain multi-head attention
    _, dk_each, dv_each = ll.grouped_query_attention_backward(G, q, np.repeat(k, group, 0), np.repeat(v, group, 0))
    assert rel(ll.kv_head_gradient(dk_each, n_kv), dk) < 1e-14
    assert rel(ll.kv_head_gradient(dv_each, n_kv), dv) < 1e-14
    with pytest.raises(ValueError, match="multiple of"):
        ll.kv_head_gradient(dk_each, 4)
