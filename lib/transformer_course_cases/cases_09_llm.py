"""Hidden-test cases of notebook 09 (SmolLM2 in NumPy: quantised blocks and the LLaMA blocks).

Every input is a random array (no model file is needed to grade).
"""

from __future__ import annotations

import numpy as np

from transformer_course.llama import apply_rope, grouped_query_attention, rms_norm, swiglu
from transformer_course.quantization import dequantize_q4_1, dequantize_q8_0, quantize_q4_1, quantize_q8_0
from . import CASES, Case
from ._precision import FLOAT32_TOL, FLOAT64_TOL, as_dtype, float64_reference

# The float64 cases hold each output to FLOAT64_TOL of its scale (a float64 task computed in float64, whatever
# the order; float32 anywhere inside fails), the float32 ones to FLOAT32_TOL of the float64 result; both ask for
# the dtype the docstrings promise: x's dtype (_precision.py says why these numbers).
F64 = {"tol": FLOAT64_TOL, "floor": 1.0, "dtypes": ("float64",)}
F32 = {"tol": FLOAT32_TOL, "floor": 1.0, "dtypes": ("float32",)}


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


# "returns: float32": every dequantised number is d * q (+ m) with d, m float16 and q an integer of 8 or 4 bits.
# d * q is exact in float32 (11 + 8 bits); + m is rounded once. So any correct implementation gives the same
# float32 numbers up to that one rounding (1 ulp of float32: a relative error |a - e| / (|a| + |e|) <= 2**-24 =
# 6e-8 entry by entry); DEQUANT_TOL = 2.5e-7 allows 4 ulp (a formula such as d * (q + m / d) rounds twice).
# A float64 result, or d * q rounded to float16 (a relative error up to 2**-11 = 5e-4), fails.
DEQUANT = {"tol": 2.5e-7, "dtypes": ("float32",)}

for _rank, _what in ((1, "rows of blocks (rows, n_blocks * {b})"), (0, "one 1-D run of blocks"),
                     (2, "a 3-D array of rows")):
    _suffix = {1: "", 0: "_1d", 2: "_3d"}[_rank]
    CASES[f"llm.dequantize_q8_0{_suffix}"] = Case(
        lambda rng, r=_rank: _q8_inputs(rng, r), lambda raw: dequantize_q8_0(raw), ("x",), **DEQUANT,
        description="Q8_0: " + _what.format(b=34) + ", signed levels, scales 0.01..2")
    CASES[f"llm.dequantize_q4_1{_suffix}"] = Case(
        lambda rng, r=_rank: _q4_inputs(rng, r), lambda raw: dequantize_q4_1(raw), ("x",), **DEQUANT,
        description="Q4_1: " + _what.format(b=20) + ", offsets -3..3 per block")


# float16 d (and m) at the edges of their range, written as raw bytes (the quantiser would not make them):
# in every draw one block each with a subnormal float16 (2**-24 .. 2**-14, exponent bits 0: no implicit
# leading 1), the smallest normal 2**-14, zero, a negative value, the largest finite 65504, and the rest
# ordinary; the levels are any bytes (Q8_0: -128..127). Decoding float16 by hand without its subnormals,
# its sign, or multiplying in float16 (65504 * 127 overflows it) shows.
_EDGE_HALVES = (0x0001, 0x03FF, 0x0400, 0x0000, 0x8000 | 0x3C00, 0x7BFF)    # 2^-24, max subnormal, 2^-14, 0, -1, 65504


def _edge_halves(rng, n_blocks):
    """(n_blocks,) uint16 float16 bit patterns: the edge values above (shuffled), then ordinary ones of either sign."""
    special = np.array(list(_EDGE_HALVES) + [int(rng.integers(1, 0x3FF))], dtype=np.uint16)   # + a random subnormal
    ordinary = np.asarray(rng.uniform(0.01, 4.0, n_blocks) * rng.choice([-1, 1], n_blocks), np.float16).view(np.uint16)
    out = ordinary.copy()
    out[:special.size] = special
    return out[rng.permutation(n_blocks)]


def _edge_raw(rng, kind):
    rows, n_blocks = int(rng.integers(1, 4)), int(rng.integers(len(_EDGE_HALVES) + 1, len(_EDGE_HALVES) + 5))
    per_block = 34 if kind == "q8_0" else 20
    raw = rng.integers(0, 256, size=(rows, n_blocks, per_block), dtype=np.uint8)
    for r in range(rows):
        raw[r, :, 0:2] = _edge_halves(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        if kind == "q4_1":
            raw[r, :, 2:4] = _edge_halves(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return {"raw": raw.reshape(rows, n_blocks * per_block)}


CASES["llm.dequantize_q8_0_edge_scales"] = Case(
    lambda rng: _edge_raw(rng, "q8_0"), lambda raw: dequantize_q8_0(raw), ("x",), **DEQUANT,
    description="Q8_0 bytes with d subnormal, 2^-14, 0, negative and 65504 in every row; levels -128..127")
CASES["llm.dequantize_q4_1_edge_scales"] = Case(
    lambda rng: _edge_raw(rng, "q4_1"), lambda raw: dequantize_q4_1(raw), ("x",), **DEQUANT,
    description="Q4_1 bytes with d and m subnormal, 2^-14, 0, negative and 65504 in every row")


# ---------------------------------------------------------------------------
# RMSNorm: vectors with a non-zero mean (LayerNorm's centring shows), a gain far from 1, and an
# eps large enough to matter for small vectors (eps outside the square root shows).
# ---------------------------------------------------------------------------
def _rms_inputs(rng, rank):
    d = int(rng.integers(3, 17))
    lead = _lead(rng, rank - 1)
    scale = rng.uniform(0.05, 3.0, size=(*lead, 1))
    x = (rng.standard_normal((*lead, d)) + rng.uniform(-2, 2)) * scale
    # eps is passed explicitly and is never the default 1e-5 here (llm.rms_norm_default_eps calls without it), so
    # an eps argument that is ignored shows: rows of RMS 0.05..3 make 1e-3 against 1e-5 a change of >= 1e-4
    return {"x": x, "weight": rng.uniform(-2, 2, size=d), "eps": float(rng.choice([1e-3, 1e-2, 0.3]))}


for _rank in (1, 2, 3):
    CASES[f"llm.rms_norm_{_rank}d"] = Case(
        lambda rng, r=_rank: _rms_inputs(rng, r), rms_norm, ("y",), **F64,
        description=f"RMSNorm of a {_rank}-D x with mean != 0, random gain, eps in (1e-3, 1e-2, 0.3)")


def _rms_default_eps_inputs(rng):
    """eps left to its default, 1e-5: rows of mean square 1e-6..1e-4, where 1e-5 against 1e-6 or 1e-8 shows."""
    inputs = _rms_inputs(rng, 2)
    rows = inputs["x"].shape[0]
    inputs["x"] = inputs["x"] / np.sqrt(np.mean(inputs["x"] ** 2, axis=-1, keepdims=True)) \
        * 10.0 ** rng.uniform(-3.0, -2.0, size=(rows, 1))
    del inputs["eps"]
    return inputs


CASES["llm.rms_norm_default_eps"] = Case(
    _rms_default_eps_inputs, rms_norm, ("y",), **F64,
    description="(rows, d) of RMS 1e-3..1e-2, called without eps (the default 1e-5)")
CASES["llm.rms_norm_float32"] = Case(
    lambda rng: as_dtype(_rms_inputs(rng, 3), np.float32), float64_reference(rms_norm), ("y",), **F32,
    description="float32 x and weight (batch, n, d): float32 out")


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


def _rope_far_inputs(rng):
    """Positions up to 8192 (SmolLM2's context), unsorted; angles there are thousands of radians."""
    inputs = _rope_inputs(rng, True)
    n = inputs["positions"].size
    inputs["positions"] = rng.choice(np.arange(1024, 8192), size=n, replace=False)
    return inputs


def _rope_default_base_inputs(rng):
    inputs = _rope_inputs(rng, True)
    del inputs["base"]                                        # the default, 10000 (the RoPE paper's)
    return inputs


CASES["llm.rope_heads"] = Case(lambda rng: _rope_inputs(rng, True), apply_rope, ("x_rotated",), **F64,
                               description="(heads, n, d) with d 6..16, unsorted positions 3.., base 100/1e4/1e5")
CASES["llm.rope_2d"] = Case(lambda rng: _rope_inputs(rng, False), apply_rope, ("x_rotated",), **F64,
                            description="(n, d): a single head")
CASES["llm.rope_far"] = Case(_rope_far_inputs, apply_rope, ("x_rotated",), **F64,
                             description="(heads, n, d), unsorted positions 1024..8191")
CASES["llm.rope_default_base"] = Case(_rope_default_base_inputs, apply_rope, ("x_rotated",), **F64,
                                      description="(heads, n, d) called without base (the default 10000)")
# float32: positions below 64 (float32 angles, which a float32 model may compute, stay within ~1e-5 rad there)
CASES["llm.rope_float32"] = Case(
    lambda rng: as_dtype(_rope_inputs(rng, True), np.float32), float64_reference(apply_rope), ("x_rotated",),
    **F32, description="float32 x (heads, n, d), positions 3..20: float32 out")


# ---------------------------------------------------------------------------
# SwiGLU: d != d_ff, inputs of both signs (silu(z) != relu(z) for z < 0), non-square matrices.
# ---------------------------------------------------------------------------
def _swiglu_inputs(rng, rank):
    d, d_ff = int(rng.integers(3, 9)), int(rng.integers(10, 20))
    lead = _lead(rng, rank - 1)
    return {"x": rng.standard_normal((*lead, d)) * 1.5, "W_gate": rng.standard_normal((d_ff, d)),
            "W_up": rng.standard_normal((d_ff, d)), "W_down": rng.standard_normal((d, d_ff)) / np.sqrt(d_ff)}


def _swiglu_large_gate_inputs(rng):
    """float32, one token scaled so its gates reach -+1000: exp(-z) overflows float32 (z < -88.7) and float64
    (z < -709.8). silu(z) = z / (1 + exp(-z)) is still right there (z / inf = -0); z e^z / (1 + e^z) is NaN."""
    inputs = _swiglu_inputs(rng, 2)
    x = inputs["x"]
    row = int(rng.integers(0, x.shape[0]))
    x[row] *= 1000.0 / np.abs(x[row] @ inputs["W_gate"].T).max()
    return as_dtype(inputs, np.float32)


CASES["llm.swiglu"] = Case(lambda rng: _swiglu_inputs(rng, 2), swiglu, ("y",), **F64,
                           description="(n, d) tokens, d_ff 10..19, matrices stored (out, in)")
CASES["llm.swiglu_3d"] = Case(lambda rng: _swiglu_inputs(rng, 3), swiglu, ("y",), **F64,
                              description="(batch, n, d) tokens")
CASES["llm.swiglu_float32"] = Case(
    _swiglu_large_gate_inputs, float64_reference(swiglu), ("y",), **F32,
    description="float32 (n, d), one token's gates up to +-1000 (exp overflows): float32 out, no NaN")


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


def _gqa_large_inputs(rng):
    """Query head 0 and kv head 0 scaled so their scores reach the thousands: a softmax without the max
    shift overflows; the causal rows saturate."""
    inputs = _gqa_inputs(rng, True)
    inputs["q"][0] *= 30.0
    inputs["k"][0] *= 30.0
    return inputs


def _gqa_decode_inputs(rng):
    """Multi-query attention decoding: one kv head shared by all, one new query (n_q = 1) at the end."""
    heads, d, n_k = int(rng.integers(2, 6)), int(rng.integers(3, 9)), int(rng.integers(2, 9))
    return {"q": rng.standard_normal((heads, 1, d)) * 1.5, "k": rng.standard_normal((1, n_k, d)) * 1.5,
            "v": rng.standard_normal((1, n_k, d))}


CASES["llm.gqa_prefill"] = Case(lambda rng: _gqa_inputs(rng, True), _gqa_ref, ("out",), **F64,
                                description="n_q = n_k: a causal prompt; 2-3 kv heads, groups of 2-3")
CASES["llm.gqa_cached"] = Case(lambda rng: _gqa_inputs(rng, False), _gqa_ref, ("out",), **F64,
                               description="n_q < n_k: new queries at the last positions of the cache")
CASES["llm.gqa_large"] = Case(_gqa_large_inputs, _gqa_ref, ("out",), **F64,
                              description="prefill with query head 0 and kv head 0 scaled by 30: scores in the thousands")
CASES["llm.gqa_decode_one_kv_head"] = Case(_gqa_decode_inputs, _gqa_ref, ("out",), **F64,
                                           description="n_kv = 1 (multi-query), n_q = 1 (one decoding step)")
CASES["llm.gqa_float32"] = Case(
    lambda rng: as_dtype(_gqa_inputs(rng, False), np.float32), float64_reference(_gqa_ref), ("out",), **F32,
    description="float32 q, k, v (n_q < n_k): float32 out")


# What each exercise's docstring promises, checked by tests/test_hidden_case_coverage.py: the
# dequantisers take raw bytes of any leading shape; RMSNorm, SwiGLU any (..., d); RoPE (..., n, d);
# grouped-query attention a prompt (n_q = n_k) and new queries against a longer cache (n_q < n_k).
COVERAGE = {
    "dequantize_q8_0": {"cases": ("llm.dequantize_q8_0", "llm.dequantize_q8_0_1d", "llm.dequantize_q8_0_3d",
                                  "llm.dequantize_q8_0_edge_scales"),
                        "requires": {"rank1", "rank2", "rank3"}},
    "dequantize_q4_1": {"cases": ("llm.dequantize_q4_1", "llm.dequantize_q4_1_1d", "llm.dequantize_q4_1_3d",
                                  "llm.dequantize_q4_1_edge_scales"),
                        "requires": {"rank1", "rank2", "rank3"}},
    "rms_norm": {"cases": ("llm.rms_norm_1d", "llm.rms_norm_2d", "llm.rms_norm_3d", "llm.rms_norm_default_eps",
                           "llm.rms_norm_float32"),
                 "requires": {"rank1", "rank2", "rank3", "float32"}},
    "apply_rope": {"cases": ("llm.rope_heads", "llm.rope_2d", "llm.rope_far", "llm.rope_default_base",
                             "llm.rope_float32"), "requires": {"rank2", "rank3", "float32"}},
    "swiglu": {"cases": ("llm.swiglu", "llm.swiglu_3d", "llm.swiglu_float32"), "requires": {"rank2", "rank3", "float32"}},
    "grouped_query_attention": {"cases": ("llm.gqa_prefill", "llm.gqa_cached", "llm.gqa_large",
                                          "llm.gqa_decode_one_kv_head", "llm.gqa_float32"),
                                "requires": {"rank3", "self", "cross", "saturated", "float32"}},
}

# The package computes apply_rope from rope_tables and rotate_pairs, and swiglu around silu: with
# those the exercises are one line each, so they count as their twins. transformer_course_fast's FastLlama is
# the whole of this notebook's model written for speed: its row scaling (_rms) times the gain is rms_norm.
TWINS = {"apply_rope": ("rope_tables", "rotate_pairs"), "swiglu": ("silu",),
         "grouped_query_attention": ("grouped_query_attention_with_weights", "grouped_query_attention_unchecked"),
         "rms_norm": ("FastLlama",)}
