"""Hidden cases must cover what each stub's specification promises, not only the common path.

Every cases_NN_*.py module declares, in a ``COVERAGE`` dict, which exercises its cases
grade and which situations the exercise's docstring promises to handle, e.g.::

    COVERAGE = {"sdpa": {"cases": ("attention.sdpa", ...), "requires": {"rank2", "rank3", "rank4",
                         "self", "cross", "fully_masked", "saturated"}}}

This test draws the inputs of those cases for several seeds and checks, from the inputs
themselves (not from the declaration), that every required situation occurs in every
draw. Every registered case must belong to a declared exercise, so a notebook added later
has to declare its coverage too.

Situations (detected by ``situations`` below):
  rankN          the main input (x, Q, X, weights, p, scores, raw bytes, ...) has N dimensions
  self / cross   n_q == n_k / n_q != n_k (Q and K given, or grouped-query q and k; X alone is
                 self-attention)
  fully_masked   a query row with no visible key (boolean mask or `allowed` all False, an
                 additive mask or scores all -inf, a padding attention_mask row of zeros, a
                 softmax output p that is 0 along its whole axis)
  saturated      a row of the distribution the exercise computes with a weight >= 0.999
  max_first_block / max_later_block   (tiled attention) a row whose largest score is in the
                 first block of keys (the running max never moves: scores that fall) / in a
                 later block (the running max moves: scores that rise)
  top_p_at_running_sum   (sampling) top_p equal to a running sum of a row's sorted probabilities
                 (before the last): the nucleus ends exactly at a token, the boundary of "< p"
  max_falls_past_exp_range   (tiled attention) a row whose block maxima fall, from one block to
                 the next, by more than log(float64 max) = 709.78: re-expressing the old sums
                 relative to the new block's own maximum would overflow
  overflow_range  a row of logits, scores, an additive mask or x (divided by the temperature where one
                 is given) whose largest finite entry is above log(float64 max) = 709.78 or below
                 -745.2: exp of the row overflows (or gives 0 everywhere) unless its maximum is
                 subtracted first
  tied_max       a row of logits whose largest finite value occurs more than once
  float32        the main input is a float32 array (the float32-in, float32-out promise)
"""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

import transformer_course_cases as grading
from transformer_course_cases import CASES, hidden_case
from transformer_course.generation import sampling_probabilities
from transformer_course.softmax import softmax

MAIN = ("x", "Q", "X", "weights", "p", "scores", "logits", "states", "input_ids", "q", "k", "raw", "token_ids", "pe")
SEEDS = range(5)


def modules():
    return [importlib.import_module(f"{grading.__name__}.{m.name}")
            for m in sorted(pkgutil.iter_modules(grading.__path__), key=lambda m: m.name)
            if m.name.startswith("cases_")]


def declared():
    out = {}
    for module in modules():
        for exercise, spec in getattr(module, "COVERAGE", {}).items():
            out[f"{module.__name__.rsplit('.', 1)[1]}:{exercise}"] = spec
    return out


def _rows_all(a, value_test):
    a = np.asarray(a)
    return bool(a.ndim >= 1 and np.any(np.all(value_test(a), axis=-1)))


def _distributions(inputs):
    """The softmax rows the exercise computes, where that can be read off its inputs."""
    if "Q" in inputs and "K" in inputs:
        Q, K = np.asarray(inputs["Q"], float), np.asarray(inputs["K"], float)
        s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
        mask = inputs.get("mask")
        if mask is not None:
            mask = np.asarray(mask)
            s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
        return [softmax(s)]
    if "q" in inputs and "k" in inputs:                 # grouped-query, causal, queries at the last positions
        q, k = np.asarray(inputs["q"], float), np.asarray(inputs["k"], float)
        k = np.repeat(k, q.shape[0] // k.shape[0], axis=0)              # (n_heads, n_k, d)
        n_q, n_k = q.shape[-2], k.shape[-2]
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        seen = np.arange(n_k)[None, :] <= (n_k - n_q + np.arange(n_q))[:, None]
        return [softmax(np.where(seen, s, -np.inf))]
    if "p" in inputs and "axis" in inputs:
        return [np.moveaxis(np.asarray(inputs["p"], float), inputs["axis"], -1)]
    if "x" in inputs and "axis" in inputs:
        return [np.moveaxis(softmax(np.asarray(inputs["x"], float), axis=inputs["axis"]), inputs["axis"], -1)]
    for name in ("scores", "logits"):
        if isinstance(inputs.get(name), np.ndarray):
            return [softmax(np.asarray(inputs[name], float))]
    return [np.asarray(inputs[k], float) for k in ("weights", "p") if isinstance(inputs.get(k), np.ndarray)]


def situations(inputs):
    tags = set()
    main = next((inputs[k] for k in MAIN if isinstance(inputs.get(k), np.ndarray)), None)
    if main is not None:
        tags.add(f"rank{main.ndim}")
    pair = next(((q, k) for q, k in (("Q", "K"), ("q", "k")) if q in inputs and k in inputs), None)
    if pair:
        tags.add("self" if inputs[pair[0]].shape[-2] == inputs[pair[1]].shape[-2] else "cross")
    elif "X" in inputs:
        tags.add("self")
    elif "memory" in inputs and "x" in inputs:
        tags.add("cross")
    for name in ("mask", "allowed", "memory_mask"):
        m = inputs.get(name)
        if isinstance(m, np.ndarray):
            if m.dtype == bool and _rows_all(m, lambda a: ~a):
                tags.add("fully_masked")
            elif m.dtype != bool and _rows_all(m, np.isneginf):
                tags.add("fully_masked")
    for name in ("x", "scores"):
        x = inputs.get(name)
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            axis = inputs.get("axis", -1)
            if _rows_all(np.moveaxis(x, axis, -1), np.isneginf):
                tags.add("fully_masked")
    p = inputs.get("p")
    if isinstance(p, np.ndarray) and p.dtype.kind == "f" and _rows_all(np.moveaxis(p, inputs.get("axis", -1), -1),
                                                                        lambda a: a == 0):
        tags.add("fully_masked")
    if main is not None and main.dtype == np.float32:
        tags.add("float32")
    limit = np.log(np.finfo(np.float64).max)
    for name in ("logits", "scores", "x", "mask"):
        a = inputs.get(name)
        if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim >= 1:
            t = inputs.get("temperature") or 1.0
            top = np.max(np.where(np.isfinite(a), a, -np.inf), axis=-1) / t
            if np.any(top > limit) or np.any(np.isfinite(top) & (top < -745.2)):
                tags.add("overflow_range")
    logits = inputs.get("logits")
    if isinstance(logits, np.ndarray) and logits.ndim >= 1:
        top = logits.max(axis=-1, keepdims=True)
        if np.any((np.isfinite(top)) & ((logits == top).sum(axis=-1, keepdims=True) > 1)):
            tags.add("tied_max")
    am = inputs.get("attention_mask")
    if isinstance(am, np.ndarray) and np.any(am == 0):
        tags.add("padding")
    for w in _distributions(inputs):
        with np.errstate(invalid="ignore"):
            if np.nanmax(w, initial=0.0) >= 0.999:
                tags.add("saturated")
    if inputs.get("top_p") is not None and "logits" in inputs:
        base = sampling_probabilities(inputs["logits"], temperature=inputs.get("temperature", 1.0),
                                      top_k=inputs.get("top_k"))
        running = np.cumsum(-np.sort(-base, axis=-1), axis=-1)[..., :-1]
        if np.any(running == inputs["top_p"]):
            tags.add("top_p_at_running_sum")
    if "block_size" in inputs and "Q" in inputs:
        Q, K = np.asarray(inputs["Q"], float), np.asarray(inputs["K"], float)
        first = (Q @ np.swapaxes(K, -1, -2)).argmax(axis=-1) < inputs["block_size"]
        tags.update({"max_first_block"} if first.all() else {"max_later_block"} if not first.any()
                    else {"max_first_block", "max_later_block"})
        s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])                         # (..., n_q, n_k)
        b = inputs["block_size"]
        maxima = np.stack([s[..., j:j + b].max(axis=-1) for j in range(0, s.shape[-1], b)], axis=-1)
        if np.any(maxima[..., :-1] - maxima[..., 1:] > np.log(np.finfo(np.float64).max)):
            tags.add("max_falls_past_exp_range")
    return tags


DECLARED = declared()


def test_every_cases_module_declares_its_coverage():
    silent = [m.__name__ for m in modules() if not getattr(m, "COVERAGE", None)]
    assert not silent, f"cases modules without a COVERAGE dict: {silent}"


def test_every_case_belongs_to_a_declared_exercise():
    covered = [c for spec in DECLARED.values() for c in spec["cases"]]
    assert sorted(covered) == sorted(set(covered)), "a case is declared by two exercises"
    assert set(covered) == set(CASES), (f"undeclared: {sorted(set(CASES) - set(covered))}, "
                                        f"unknown: {sorted(set(covered) - set(CASES))}")


@pytest.mark.parametrize("exercise", sorted(DECLARED))
@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_cases_cover_the_specification(exercise, seed):
    spec = DECLARED[exercise]
    seen = set()
    for case_id in spec["cases"]:
        seen |= situations(hidden_case(case_id, seed=seed).inputs)
    missing = set(spec["requires"]) - seen
    assert not missing, f"{exercise}, seed {seed}: no hidden case has {sorted(missing)} (seen {sorted(seen)})"


def test_the_detector_sees_each_situation():
    # The detector itself could fail silently: check it on inputs built to have (or lack) each situation.
    Q, K = np.zeros((2, 3, 4)), np.zeros((2, 5, 4))
    assert situations({"Q": Q, "K": K, "V": K}) == {"rank3", "cross"}
    mask = np.ones((3, 5), bool)
    mask[1] = False
    assert "fully_masked" in situations({"Q": Q, "K": K, "V": K, "mask": mask})
    Q[..., 0], K[..., 0] = 10.0, np.arange(5) * 10.0
    assert {"saturated", "max_later_block"} <= situations({"Q": Q, "K": K, "V": K, "block_size": 2})
    assert "max_first_block" in situations({"Q": Q, "K": K[..., ::-1, :], "V": K, "block_size": 2})
    assert "max_falls_past_exp_range" not in situations({"Q": Q, "K": K[..., ::-1, :], "V": K, "block_size": 2})
    K_fall = np.zeros((2, 5, 4))
    K_fall[..., :2, 0] = 800.0 / 5                                   # block 0 scores 10 * 160 / 2 = 800, then 0
    assert "max_falls_past_exp_range" in situations({"Q": Q, "K": K_fall, "V": K_fall, "block_size": 2})
    assert situations({"x": np.array([[0.0, -np.inf], [-np.inf, -np.inf]]), "axis": -1}) >= {"rank2", "fully_masked"}
    # grouped-query attention: 4 query heads on 2 key/value heads, a prompt (causal: query 0 sees key 0 only)
    q, k = np.zeros((4, 3, 2)), np.zeros((2, 3, 2))
    assert situations({"q": q, "k": k, "v": k}) == {"rank3", "self", "saturated"}
    assert situations({"q": q[:, 1:], "k": k, "v": k}) == {"rank3", "cross"}
    # a softmax output along axis 0 with one column of zeros (a fully masked query)
    p = np.array([[0.5, 0.0], [0.5, 0.0]])
    assert situations({"p": p, "grad_p": p, "axis": 0}) == {"rank2", "fully_masked"}
    assert situations({"p": p, "grad_p": p, "axis": -1}) == {"rank2"}
    assert situations({"raw": np.zeros((2, 3, 34), np.uint8)}) == {"rank3"}
    # top_p exactly at a running sum: 0.5 of four equal probabilities, not 0.6
    quarters = {"logits": np.zeros(4), "temperature": 1.0}
    assert "top_p_at_running_sum" in situations({**quarters, "top_p": 0.5})
    assert "top_p_at_running_sum" not in situations({**quarters, "top_p": 0.6})
    # a padded source sequence with no real token; rows beyond exp's range; a tied maximum; float32
    assert "fully_masked" in situations({"x": np.zeros((2, 3, 4)), "memory": np.zeros((2, 5, 4)),
                                         "memory_mask": np.array([[True] * 5, [False] * 5])})
    assert "fully_masked" not in situations({"x": np.zeros((2, 3, 4)), "memory": np.zeros((2, 5, 4)),
                                             "memory_mask": np.array([[True] * 5, [False] * 4 + [True]])})
    row = np.array([[1.0, 2.0, -np.inf], [800.0, 801.0, -np.inf]])
    assert "overflow_range" in situations({"logits": row})
    assert "overflow_range" not in situations({"logits": row, "temperature": 2.0})
    assert "overflow_range" not in situations({"logits": np.array([[-800.0, 0.0]])})
    assert "tied_max" in situations({"logits": np.array([[0.0, 2.0, 2.0], [1.0, 0.0, -1.0]])})
    assert "tied_max" not in situations({"logits": np.array([[0.0, 2.0, 1.0], [1.0, 1.0, 2.0]])})
    assert "float32" in situations({"x": np.zeros((2, 3), np.float32)})
    assert "float32" not in situations({"x": np.zeros((2, 3))})
