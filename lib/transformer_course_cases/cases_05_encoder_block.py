"""Hidden-test cases of notebook 05 (layer norm, feed-forward network, encoder block, folding layer norm)."""

from __future__ import annotations

import numpy as np

from transformer_course.encoder import TransformerEncoderBlock
from transformer_course.feedforward import PositionwiseFeedForward
from transformer_course.normalization import layer_norm
from . import CASES, Case


# ---------------------------------------------------------------------------
# Notebook 05: layer_norm(x, gamma, beta, eps), feed_forward(x, W_1, b_1, W_2, b_2),
# encoder_block(x, params, n_heads, norm_first).
# Batch, token and feature sizes all differ, so statistics over the wrong axis
# show; rows of very different spreads and an eps drawn up to 1e-2 make eps
# outside the square root, a missing eps and ddof=1 show; every bias is
# non-zero, so ReLU in the wrong place shows; gamma and beta are not 1 and 0.
# ---------------------------------------------------------------------------
def _distinct_sizes(rng, low, high, count):
    return [int(v) for v in rng.choice(np.arange(low, high + 1), size=count, replace=False)]


def _rows(rng, shape, log10_scale):
    """Token vectors, each with its own offset and spread (spread 10**U(log10_scale))."""
    lead = shape[:-1] + (1,)
    scale = 10.0 ** rng.uniform(*log10_scale, size=lead)
    return rng.normal(0.0, 2.0, size=lead) + scale * rng.normal(size=shape)


def _layer_norm_inputs(rng):
    b, n, d = _distinct_sizes(rng, 3, 12, 3)
    return {
        "x": _rows(rng, (b, n, d), (-1.5, 0.5)),
        "gamma": 1.0 + 0.5 * rng.normal(size=d),
        "beta": rng.normal(size=d),
        "eps": float(10.0 ** rng.uniform(-3, -2)),
    }


def _layer_norm_default_eps_inputs(rng):
    n, d = _distinct_sizes(rng, 4, 16, 2)
    return {
        # spreads 0.002 .. 0.01: variances 4e-6 .. 1e-4, the size of the default eps = 1e-5
        "x": _rows(rng, (n, d), (np.log10(0.002), -2.0)),
        "gamma": 1.0 + 0.5 * rng.normal(size=d),
        "beta": rng.normal(size=d),
    }


def _layer_norm_ref(x, gamma, beta, eps=1e-5):
    return layer_norm(x, gamma, beta, eps)


CASES["encoder.layer_norm"] = Case(
    _layer_norm_inputs, _layer_norm_ref, ("y",),
    description="(b, n, d) all different; rows with spreads 0.03..3; eps 1e-3..1e-2; random gamma, beta")
CASES["encoder.layer_norm_default_eps"] = Case(
    _layer_norm_default_eps_inputs, _layer_norm_ref, ("y",),
    description="(n, d); variances near 1e-5, eps not passed: the default eps=1e-5 must be used")


def _ffn_weights(rng, d_model, d_ff):
    return {
        "W_1": rng.normal(size=(d_model, d_ff)) / np.sqrt(d_model),
        "b_1": rng.normal(0.0, 0.5, size=d_ff),
        "W_2": rng.normal(size=(d_ff, d_model)) / np.sqrt(d_ff),
        "b_2": rng.normal(0.0, 0.5, size=d_model),
    }


def _feed_forward_inputs(rng):
    b, n, d_model = _distinct_sizes(rng, 2, 9, 3)
    d_ff = int(rng.integers(2 * d_model, 4 * d_model + 1)) + 1
    return {"x": rng.normal(size=(b, n, d_model)), **_ffn_weights(rng, d_model, d_ff)}


def _feed_forward_ref(x, W_1, b_1, W_2, b_2):
    ffn = PositionwiseFeedForward(W_1.shape[0], W_1.shape[1], rng=np.random.default_rng(0))
    return ffn.set_weights(W_1, b_1, W_2, b_2)(x)


CASES["encoder.feed_forward"] = Case(
    _feed_forward_inputs, _feed_forward_ref, ("y",),
    description="(b, n, d_model) all different, d_ff between 2 and 4 d_model, non-zero biases")


def _block_inputs(rng, norm_first):
    n_heads = int(rng.integers(2, 5))
    d_head = int(rng.integers(2, 6))
    d_model = n_heads * d_head
    d_ff = d_model + int(rng.integers(3, 3 * d_model))
    b = int(rng.integers(2, 4))
    n = int(rng.integers(3, 9))
    if n == d_model:
        n += 1
    a = np.sqrt(6.0 / (2 * d_model))
    params = {name: rng.uniform(-a, a, (d_model, d_model)) for name in ("W_Q", "W_K", "W_V", "W_O")}
    params.update({name: rng.normal(0.0, 0.2, size=d_model) for name in ("b_Q", "b_K", "b_V", "b_O")})
    params.update(_ffn_weights(rng, d_model, d_ff))
    for ln in ("ln1", "ln2"):
        params[f"{ln}_gamma"] = 1.0 + 0.3 * rng.normal(size=d_model)
        params[f"{ln}_beta"] = 0.3 * rng.normal(size=d_model)
    return {"x": 1.5 * rng.normal(size=(b, n, d_model)), "params": params,
            "n_heads": n_heads, "norm_first": norm_first}


def _block_ref(x, params, n_heads, norm_first=False):
    d_model, d_ff = params["W_1"].shape
    block = TransformerEncoderBlock(d_model, n_heads, d_ff, rng=np.random.default_rng(0), norm_first=norm_first)
    block.attention.set_weights(*(params[k] for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")))
    block.feed_forward.set_weights(params["W_1"], params["b_1"], params["W_2"], params["b_2"])
    block.ln1_gamma, block.ln1_beta = params["ln1_gamma"], params["ln1_beta"]
    block.ln2_gamma, block.ln2_beta = params["ln2_gamma"], params["ln2_beta"]
    return block(x)


CASES["encoder.block_post_ln"] = Case(
    lambda rng: _block_inputs(rng, False), _block_ref, ("output", "weights"),
    description="post-LN block (norm_first=False): batched, 2-4 heads, all biases and LN parameters random")
CASES["encoder.block_pre_ln"] = Case(
    lambda rng: _block_inputs(rng, True), _block_ref, ("output", "weights"),
    description="pre-LN block (norm_first=True): batched, 2-4 heads, all biases and LN parameters random")


# ---------------------------------------------------------------------------
# fold_layer_norm(gamma, beta, W, b) -> (W', b'), graded by what it computes:
# x_hat @ W' + b' must equal (gamma * x_hat + beta) @ W + b on normalised tokens
# x_hat (rows of mean 0 and variance 1, the only inputs the folded map ever sees;
# so a W' shifted by a row-constant 1 v^T, which such rows cannot see, passes).
# gamma has negative and zero entries; d != m, so a scale on the wrong axis or
# beta added to b without W breaks the shapes, and d == m (a W_Q), where the same
# mistakes run silently and give wrong numbers.
# ---------------------------------------------------------------------------
def _fold_inputs(rng, square, rank):
    d = int(rng.integers(4, 13))
    m = d if square else d + int(rng.choice([-1, 1])) * int(rng.integers(1, 4))
    gamma = rng.normal(1.0, 0.8, size=d)
    gamma[rng.choice(d, size=2, replace=False)] = [0.0, -abs(gamma[0]) - 0.5]   # a zero and a negative scale
    lead = (int(rng.integers(2, 4)), int(rng.integers(3, 7)))[-(rank - 1):]
    x = rng.normal(0.0, 2.0, size=lead + (1,)) + 3.0 * rng.normal(size=lead + (d,))
    return {"gamma": gamma, "beta": rng.normal(size=d), "W": rng.normal(size=(d, m)) / np.sqrt(d),
            "b": rng.normal(size=m), "x_hat": layer_norm(x)}


def _fold_ref(gamma, beta, W, b, x_hat):
    return (gamma * x_hat + beta) @ W + b             # what the layer norm's scale and shift, then (W, b), compute


CASES["encoder.fold_layer_norm"] = Case(
    lambda rng: _fold_inputs(rng, False, 3), _fold_ref, ("y",),
    description="W (d, m), d != m; gamma with a 0 and a negative entry; checked on normalised tokens (b, n, d)")
CASES["encoder.fold_layer_norm_square"] = Case(
    lambda rng: _fold_inputs(rng, True, 2), _fold_ref, ("y",),
    description="W (d, d) like W_Q: a scale on the wrong axis runs silently; normalised tokens (n, d)")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py.
COVERAGE = {
    "layer_norm": {"cases": ("encoder.layer_norm", "encoder.layer_norm_default_eps"), "requires": {"rank2", "rank3"}},
    "feed_forward": {"cases": ("encoder.feed_forward",), "requires": {"rank3"}},
    "encoder_block": {"cases": ("encoder.block_post_ln", "encoder.block_pre_ln"), "requires": {"rank3"}},
    # Fixed-rank parameters (no batch axes to cover); the probes x_hat are rank 3 and rank 2.
    "fold_layer_norm": {"cases": ("encoder.fold_layer_norm", "encoder.fold_layer_norm_square"), "requires": set()},
}

# The package's twins of the exercises under other names: the classes the references run.
TWINS = {"feed_forward": ("PositionwiseFeedForward",), "encoder_block": ("TransformerEncoderBlock",)}
