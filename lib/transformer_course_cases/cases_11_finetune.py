"""Hidden-test cases of notebook 11 (fine-tuning SmolLM2 with LoRA).

The references are the package's functions (llama.rms_norm_backward, rope_backward, kv_head_gradient;
lora.lora_forward, lora_backward), checked against torch.autograd and central differences in
tests/test_llama_backward.py and tests/test_lora.py. The inputs are chosen so that the classic bugs show:

* RMSNorm backward: rows with a mean far from 0 (LayerNorm's centring term fails), a row of small RMS
  (a forgotten eps fails), a gain of both signs and far from 1, two leading axes (dweight summed over one);
* RoPE backward: positions up to thousands and a base other than 10000 (rotating forwards, ignoring the
  base or the half-split convention fail), several heads;
* LoRA: in != out != r, B not zero, a scale other than 1 (a scale dropped in dA or dB fails), two
  leading axes (dB, dA summed over one only);
* the K/V head gradient: n_heads / n_kv_heads groups of 2 to 4 (a mean, or the strided grouping
  h % n_kv, fails), and n_kv = 1 and n_kv = n_heads.

* eps and base passed explicitly are never the defaults (1e-5, 10000), so an argument that is ignored shows, and
  one case of each calls without them (a wrong default shows); a rank-1 adapter (r = 1).

Float64 throughout: every case holds each output to FLOAT64_TOL = 1e-10 of its scale (_precision.py: round-off
stays below ~1e-12 of the scale in any correct order, RoPE's angles at positions up to 5000 included; tables or
sums in float32, the mistake the notebook warns about, err by ~1e-8..1e-7).
"""

from __future__ import annotations

import numpy as np

from transformer_course.llama import kv_head_gradient, rms_norm_backward, rope_backward
from transformer_course.lora import lora_backward, lora_forward
from . import CASES, Case
from ._precision import FLOAT64_TOL

F64 = {"tol": FLOAT64_TOL, "floor": 1.0}


def _distinct(rng, low, high, k):
    return [int(v) for v in rng.choice(np.arange(low, high), size=k, replace=False)]


# -- RMSNorm backward ----------------------------------------------------------------------------------

def _rms_inputs(rng, batched=True):
    b, n, d = _distinct(rng, 3, 10, 3)
    shape = (b, n, d) if batched else (d,)
    x = rng.normal(2.0, 1.5, shape)                          # mean far from 0: RMS is not the std
    if batched:
        x[0, 0] = rng.normal(0, 3e-3, d)                     # RMS ~ 3e-3: eps matters
    else:
        x = x * 1e-2                                         # RMS ~2e-2: an eps of 1e-4..1e-3 matters
    # eps is never the default here (finetune.rms_norm_backward_default_eps calls without it)
    return {"grad_output": rng.normal(0, 1, shape), "x": x,
            "weight": rng.uniform(0.3, 3.0, d) * rng.choice([-1, 1], d), "eps": float(rng.choice([1e-4, 1e-3]))}


def _rms_default_eps_inputs(rng):
    """eps left to its default 1e-5: rows of RMS 1e-3..1e-2, where 1e-5 against 1e-6 or 1e-8 shows."""
    inputs = _rms_inputs(rng)
    x = inputs["x"]
    inputs["x"] = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) * 10.0 ** rng.uniform(-3, -2, x.shape[:-1] + (1,))
    del inputs["eps"]
    return inputs


CASES["finetune.rms_norm_backward"] = Case(
    _rms_inputs, rms_norm_backward, ("dx", "dweight"), **F64,
    description="(batch, n, d), mean ~2, a row of RMS ~3e-3, gain of both signs, eps 1e-4 or 1e-3")
CASES["finetune.rms_norm_backward_1d"] = Case(
    lambda rng: _rms_inputs(rng, batched=False), rms_norm_backward, ("dx", "dweight"), **F64,
    description="one vector (d,) of RMS ~2e-2, eps 1e-4 or 1e-3")
CASES["finetune.rms_norm_backward_default_eps"] = Case(
    _rms_default_eps_inputs, rms_norm_backward, ("dx", "dweight"), **F64,
    description="(batch, n, d) rows of RMS 1e-3..1e-2, called without eps (the default 1e-5)")


# -- RoPE backward -------------------------------------------------------------------------------------

def _rope_inputs(rng, heads=True):
    n = int(rng.integers(3, 8))
    d = 2 * int(rng.integers(2, 6))
    positions = np.sort(rng.choice(np.arange(0, 5000), size=n, replace=False))
    shape = (int(rng.integers(2, 5)), n, d) if heads else (n, d)
    return {"grad_output": rng.normal(0, 1, shape), "positions": positions,
            "base": float(rng.choice([1e5, 500.0, 3e4]))}   # never 1e4: a base ignored shows


def _rope_default_base_inputs(rng):
    inputs = _rope_inputs(rng)
    del inputs["base"]                                        # the default, 10000
    return inputs


CASES["finetune.rope_backward"] = Case(
    _rope_inputs, rope_backward, ("dx",), **F64,
    description="(heads, n, d), positions up to 5000, base 1e5, 500 or 3e4")
CASES["finetune.rope_backward_2d"] = Case(
    lambda rng: _rope_inputs(rng, heads=False), rope_backward, ("dx",), **F64,
    description="(n, d) without a head axis")
CASES["finetune.rope_backward_default_base"] = Case(
    _rope_default_base_inputs, rope_backward, ("dx",), **F64,
    description="(heads, n, d), positions up to 5000, called without base (the default 10000)")


# -- LoRA layer ----------------------------------------------------------------------------------------

def _lora_inputs(rng, batched=True, grad=False, rank=None):
    d_in, d_out, r = _distinct(rng, 3, 12, 3)
    r = r if rank is None else rank
    lead = tuple(_distinct(rng, 2, 6, 2)) if batched else (int(rng.integers(2, 7)),)
    inputs = {"x": rng.normal(0, 1, lead + (d_in,)), "W": rng.normal(0, 1, (d_out, d_in)),
              "A": rng.normal(0, 1, (r, d_in)), "B": rng.normal(0, 1, (d_out, r)),
              "scale": float(rng.choice([0.5, 2.0, 4.0]))}
    if grad:
        inputs = {"grad_output": rng.normal(0, 1, lead + (d_out,)), **inputs}
    return inputs


CASES["finetune.lora_forward"] = Case(
    _lora_inputs, lora_forward, ("y",), **F64,
    description="(batch, n, in) with in != out != r, B != 0, scale != 1")
CASES["finetune.lora_forward_2d"] = Case(
    lambda rng: _lora_inputs(rng, batched=False), lora_forward, ("y",), **F64,
    description="(n, in) tokens without a batch axis")
CASES["finetune.lora_forward_rank1"] = Case(
    lambda rng: _lora_inputs(rng, rank=1), lora_forward, ("y",), **F64,
    description="(batch, n, in), a rank-1 adapter: A (1, in), B (out, 1)")
CASES["finetune.lora_backward"] = Case(
    lambda rng: _lora_inputs(rng, grad=True), lora_backward, ("dx", "dA", "dB"), **F64,
    description="(batch, n, in) with in != out != r, B != 0, scale != 1")
CASES["finetune.lora_backward_2d"] = Case(
    lambda rng: _lora_inputs(rng, batched=False, grad=True), lora_backward, ("dx", "dA", "dB"), **F64,
    description="(n, in) tokens without a batch axis")
CASES["finetune.lora_backward_rank1"] = Case(
    lambda rng: _lora_inputs(rng, grad=True, rank=1), lora_backward, ("dx", "dA", "dB"), **F64,
    description="(batch, n, in), a rank-1 adapter")


# -- the shared K/V head gradient ----------------------------------------------------------------------

def _kv_inputs(rng, extreme=False):
    n, d = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    if extreme:
        n_heads = int(rng.integers(2, 6))
        n_kv = int(rng.choice([1, n_heads]))
    else:
        n_kv, group = int(rng.integers(2, 4)), int(rng.integers(2, 5))
        n_heads = n_kv * group
    return {"grad_per_query_head": rng.normal(0, 1, (n_heads, n, d)), "n_kv_heads": n_kv}


CASES["finetune.kv_head_gradient"] = Case(
    _kv_inputs, kv_head_gradient, ("grad_kv",), **F64,
    description="n_kv_heads 2..3, groups of 2..4 query heads")
CASES["finetune.kv_head_gradient_extreme"] = Case(
    lambda rng: _kv_inputs(rng, extreme=True), kv_head_gradient, ("grad_kv",), **F64,
    description="one shared head (n_kv = 1) or none shared (n_kv = n_heads)")


COVERAGE = {
    "rms_norm_backward": {"cases": ("finetune.rms_norm_backward", "finetune.rms_norm_backward_1d",
                                    "finetune.rms_norm_backward_default_eps"),
                          "requires": {"rank1", "rank3"}},
    "rope_backward": {"cases": ("finetune.rope_backward", "finetune.rope_backward_2d",
                                "finetune.rope_backward_default_base"), "requires": set()},
    "lora_forward": {"cases": ("finetune.lora_forward", "finetune.lora_forward_2d", "finetune.lora_forward_rank1"),
                     "requires": {"rank2", "rank3"}},
    "lora_backward": {"cases": ("finetune.lora_backward", "finetune.lora_backward_2d", "finetune.lora_backward_rank1"),
                      "requires": {"rank2", "rank3"}},
    "kv_head_gradient": {"cases": ("finetune.kv_head_gradient", "finetune.kv_head_gradient_extreme"),
                         "requires": set()},
}

# grouped_query_attention_backward sums each key/value head's gradient over its group: given the attention
# weights as the identity, its value gradient IS kv_head_gradient, so it counts as that exercise's twin.
TWINS = {"kv_head_gradient": ("grouped_query_attention_backward",)}
