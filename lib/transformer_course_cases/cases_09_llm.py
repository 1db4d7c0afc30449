"""Hidden-test cases of notebook 09 (SmolLM2 in NumPy: quantised blocks and the LLaMA blocks).

Every input is a random array (no model file is needed to grade).
"""

from __future__ import annotations

import numpy as np

from transformer_course.llama import apply_rope, grouped_query_attention, rms_norm, swiglu
from transformer_course.quantization import dequantize_q4_1, dequantize_q8_0, quantize_q4_1, quantize_q8_0
from . import CASES, Case


# ---------------------------------------------------------------------------
# Dequantisation: raw bytes written by the course's quantisers from random blocks whose scale and
# offset vary from block to block (a Q4_1 offset m far from 0 shows a forgotten "+ m"; negative
# numbers show an unsigned read of Q8_0's int8). Leading shapes: (), (rows,), (a, b).
# ---------------------------------------------------------------------------
def _random_blocks(rng, lead, n_blocks, offset):
    scale = rng.uniform(0.01, 2.0, size=(*lead, n_blocks, 1))
    shift = rng.uniform(-3, 3, size=(*lead, n_blocks, 1)) if offset else 0.0
    x = rng.standard_normal((*lead, n_blocks, 32)) * scale + shift
    return x.reshape(*lead, n_blocks * 32)


def _lead(rng, rank):
    return tuple(int(s) for s in rng.integers(1, 5, size=rank))


def _q8_inputs(rng, rank):
    return {"raw": quantize_q8_0(_random_blocks(rng, _lead(rng, rank), int(rng.integers(1, 5)), False))}


def _q4_inputs(rng, rank):
    return {"raw": quantize_q4_1(_random_blocks(rng, _lead(rng, rank), int(rng.integers(1, 5)), True))}


for _rank, _what in ((1, "rows of blocks (rows, n_blocks * {b})"), (0, "one 1-D run of blocks"),
                     (2, "a 3-D array of rows")):
    _suffix = {1: "", 0: "_1d", 2: "_3d"}[_rank]
    CASES[f"llm.dequantize_q8_0{_suffix}"] = Case(
        lambda rng, r=_rank: _q8_inputs(rng, r), lambda raw: dequantize_q8_0(raw), ("x",), tol=1e-6,
        description="Q8_0: " + _what.format(b=34) + ", signed levels, scales 0.01..2")
    CASES[f"llm.dequantize_q4_1{_suffix}"] = Case(
        lambda rng, r=_rank: _q4_inputs(rng, r), lambda raw: dequantize_q4_1(raw), ("x",), tol=1e-6,
        description="Q4_1: " + _what.format(b=20) + ", offsets -3..3 per block")


# ---------------------------------------------------------------------------
# RMSNorm: vectors with a non-zero mean (LayerNorm's centring shows), a gain far from 1, and an
# eps large enough to matter for small vectors (eps outside the square root shows).
# ---------------------------------------------------------------------------
def _rms_inputs(rng, rank):
    d = int(rng.integers(3, 17))
    lead = _lead(rng, rank - 1)
    scale = rng.uniform(0.05, 3.0, size=(*lead, 1))
    x = (rng.standard_normal((*lead, d)) + rng.uniform(-2, 2)) * scale
    return {"x": x, "weight": rng.uniform(-2, 2, size=d), "eps": float(rng.choice([1e-5, 1e-2, 0.3]))}


for _rank in (1, 2, 3):
    CASES[f"llm.rms_norm_{_rank}d"] = Case(
        lambda rng, r=_rank: _rms_inputs(rng, r), rms_norm, ("y",),
        description=f"RMSNorm of a {_rank}-D x with mean != 0, random gain, eps in (1e-5, 1e-2, 0.3)")


# ---------------------------------------------------------------------------
# RoPE: several heads, positions that are not 0..n-1 (a cache offset, unsorted), a base that is
# not 10000, and d >= 6 so that pair 1's frequency base^(-2/d) differs from base^(-1/d).
# ---------------------------------------------------------------------------
def _rope_inputs(rng, heads):
    d = 2 * int(rng.integers(3, 9))
    n = int(rng.integers(2, 7))
    shape = (int(rng.integers(1, 4)), n, d) if heads else (n, d)
    return {"x": rng.standard_normal(shape), "positions": rng.permutation(np.arange(3, 3 + 3 * n))[:n],
            "base": float(rng.choice([100.0, 1e4, 1e5]))}


CASES["llm.rope_heads"] = Case(lambda rng: _rope_inputs(rng, True), apply_rope, ("x_rotated",),
                               description="(heads, n, d) with d 6..16, unsorted positions 3.., base 100/1e4/1e5")
CASES["llm.rope_2d"] = Case(lambda rng: _rope_inputs(rng, False), apply_rope, ("x_rotated",),
                            description="(n, d): a single head")


# ---------------------------------------------------------------------------
# SwiGLU: d != d_ff, inputs of both signs (silu(z) != relu(z) for z < 0), non-square matrices.
# ---------------------------------------------------------------------------
def _swiglu_inputs(rng, rank):
    d, d_ff = int(rng.integers(3, 9)), int(rng.integers(10, 20))
    lead = _lead(rng, rank - 1)
    return {"x": rng.standard_normal((*lead, d)) * 1.5, "W_gate": rng.standard_normal((d_ff, d)),
            "W_up": rng.standard_normal((d_ff, d)), "W_down": rng.standard_normal((d, d_ff)) / np.sqrt(d_ff)}


CASES["llm.swiglu"] = Case(lambda rng: _swiglu_inputs(rng, 2), swiglu, ("y",),
                           description="(n, d) tokens, d_ff 10..19, matrices stored (out, in)")
CASES["llm.swiglu_3d"] = Case(lambda rng: _swiglu_inputs(rng, 3), swiglu, ("y",),
                              description="(batch, n, d) tokens")


# ---------------------------------------------------------------------------
# Grouped-query attention: group sizes 2..3 with 2..3 key/value heads (interleaved sharing h % n_kv
# shows), n_q = n_k (prefill) and n_q < n_k (queries at the last positions, as with a KV cache).
# ---------------------------------------------------------------------------
def _gqa_inputs(rng, n_q_equal):
    n_kv, group = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    d, n_k = int(rng.integers(3, 9)), int(rng.integers(4, 9))
    n_q = n_k if n_q_equal else int(rng.integers(1, n_k))
    return {"q": rng.standard_normal((n_kv * group, n_q, d)) * 1.5,
            "k": rng.standard_normal((n_kv, n_k, d)) * 1.5, "v": rng.standard_normal((n_kv, n_k, d))}


def _gqa_ref(q, k, v):
    return grouped_query_attention(q, k, v)


CASES["llm.gqa_prefill"] = Case(lambda rng: _gqa_inputs(rng, True), _gqa_ref, ("out",),
                                description="n_q = n_k: a causal prompt; 2-3 kv heads, groups of 2-3")
CASES["llm.gqa_cached"] = Case(lambda rng: _gqa_inputs(rng, False), _gqa_ref, ("out",),
                               description="n_q < n_k: new queries at the last positions of the cache")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py: the
# dequantisers take raw bytes of any leading shape; RMSNorm, SwiGLU any (..., d); RoPE (..., n, d);
# grouped-query attention a prompt (n_q = n_k) and new queries against a longer cache (n_q < n_k).
COVERAGE = {
    "dequantize_q8_0": {"cases": ("llm.dequantize_q8_0", "llm.dequantize_q8_0_1d", "llm.dequantize_q8_0_3d"),
                        "requires": {"rank1", "rank2", "rank3"}},
    "dequantize_q4_1": {"cases": ("llm.dequantize_q4_1", "llm.dequantize_q4_1_1d", "llm.dequantize_q4_1_3d"),
                        "requires": {"rank1", "rank2", "rank3"}},
    "rms_norm": {"cases": ("llm.rms_norm_1d", "llm.rms_norm_2d", "llm.rms_norm_3d"),
                 "requires": {"rank1", "rank2", "rank3"}},
    "apply_rope": {"cases": ("llm.rope_heads", "llm.rope_2d"), "requires": {"rank2", "rank3"}},
    "swiglu": {"cases": ("llm.swiglu", "llm.swiglu_3d"), "requires": {"rank2", "rank3"}},
    "grouped_query_attention": {"cases": ("llm.gqa_prefill", "llm.gqa_cached"),
                                "requires": {"rank3", "self", "cross", "saturated"}},
}

# The package computes apply_rope from rope_tables and rotate_pairs, and swiglu around silu: with
# those the exercises are one line each, so they count as their twins. transformer_course_fast's FastLlama is
# the whole of this notebook's model written for speed: its row scaling (_rms) times the gain is rms_norm.
TWINS = {"apply_rope": ("rope_tables", "rotate_pairs"), "swiglu": ("silu",),
         "grouped_query_attention": ("grouped_query_attention_with_weights", "grouped_query_attention_unchecked"),
         "rms_norm": ("FastLlama",)}
