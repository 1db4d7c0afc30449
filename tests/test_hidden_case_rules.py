"""The rules a hidden case adds to the comparison: the promised dtype and the scale-relative error.

``Case.dtypes`` and ``Case.floor`` (lib/transformer_course_cases/__init__.py) are applied the same way by
the trusted grader (grader/trusted/compare.py, on the arrays a sandboxed run exported) and by
``HiddenCase.check`` in a notebook's own process (what tests/test_hidden_tests_catch_mutants.py runs).
Both paths are exercised here, and so is the instrument notebook 08's boundary case relies on:
numpy Generators set to a state whose next ``random()`` is a chosen u.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import transformer_course_cases as tcc
from transformer_course_cases import CASES, Case, dtype_mismatch, hidden_case, relative_errors, scaled_mismatch
from transformer_course_cases import cases_08_decoder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from grader.trusted import compare  # noqa: E402


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


# -- the dtype a case promises ------------------------------------------------------------------------------
@pytest.mark.parametrize("got,want,ok", [
    (np.zeros(3, np.float32), "float32", True), (np.zeros(3), "float32", False),
    (np.zeros(3), "float64", True), (np.zeros(3, np.float32), "float64", False),
    (np.arange(3), "integer", True), (np.arange(3, dtype=np.int32), "integer", True),
    (np.arange(3.0), "integer", False), (np.zeros(3, np.float32), "floating", True),
    (np.arange(3), "floating", False), (np.zeros(3), None, True), (np.arange(3), None, True),
    (2.5, "float64", True), (7, "integer", True), (np.float32(1), "float64", False),
])
def test_dtype_mismatch(got, want, ok):
    reason = dtype_mismatch(got, want)
    assert (reason == "") == ok, reason
    if not ok:
        assert reason.startswith(f"expected dtype {want}, got ")


def test_grader_refuses_a_dtype_other_than_the_promised_one():
    ref = np.array([[0.5, 0.25]])
    assert compare.compare_array("w", ref.astype(np.float32), ref, 1e-6, dtype="float32") == ""
    assert compare.compare_array("w", ref, ref, 1e-6, dtype="float32") == "w: expected dtype float32, got float64"
    assert compare.compare_array("w", ref, ref, 1e-6) == ""                            # nothing promised
    assert "expected dtype integer" in compare.compare_array("ids", np.array([1.0, 2.0]), np.array([1, 2]), 1e-12,
                                                             dtype="integer")


def test_grader_compares_against_the_outputs_scale_where_the_case_asks():
    ref = np.array([1.0, 1e-9])
    got = ref + np.array([0.0, 1e-12])                  # 1e-12 off where the entry cancels to ~0
    assert "relative error" in compare.compare_array("y", got, ref, 1e-10)                 # entry-wise: 1e-3 there
    assert compare.compare_array("y", got, ref, 1e-10, floor=1.0) == ""                    # 1e-12 of the scale
    assert "against the output's scale" in compare.compare_array("y", ref + 1e-9, ref, 1e-10, floor=1.0)
    e = np.array([2.0, -4.0, 1e-3])
    np.testing.assert_allclose(relative_errors(e + 1e-6, e, 1.0), [1e-6 / 4.000001, 1e-6 / 7.999999, 1e-6 / 4.0])


def test_scaled_mismatch_reports_shape_nan_and_infinities():
    assert "expected shape (2,)" in scaled_mismatch(np.zeros(3), np.zeros(2), 1e-10, 1.0)
    assert "NaN at index (1,)" in scaled_mismatch(np.array([0.0, np.nan]), np.zeros(2), 1e-10, 1.0)
    assert "where NaN was expected" in scaled_mismatch(np.zeros(2), np.array([0.0, np.nan]), 1e-10, 1.0)
    assert "infinite" in scaled_mismatch(np.array([np.inf, 0.0]), np.zeros(2), 1e-10, 1.0)
    assert scaled_mismatch(np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0]), 1e-10, 1.0) == ""
    assert "expected a numeric array" in scaled_mismatch("seven", np.zeros(2), 1e-10, 1.0)


def test_prepared_cases_carry_dtype_and_floor_to_the_comparison(tmp_path):
    """The grader's own path: prepare_cases records what the case promises; a float64 export of a float32 case
    and a float32-precision export of a float64 case both fail, the right ones pass."""
    ids = ["decoder.cross_attention_float32", "decoder.cross_attention"]
    prepared = compare.prepare_cases(ids, seed=5, folder=tmp_path)
    assert prepared.dtypes["decoder.cross_attention_float32"] == ("float32", "float32")
    assert prepared.floor["decoder.cross_attention"] == 1.0
    out32, w32 = (np.asarray(o) for o in prepared.expected["decoder.cross_attention_float32"])
    ok32 = compare.compare_case(ids[0], prepared, {f"{ids[0]}.npz": _npz(output=out32.astype(np.float32),
                                                                           weights=w32.astype(np.float32))})
    wide = compare.compare_case(ids[0], prepared, {f"{ids[0]}.npz": _npz(output=out32, weights=w32)})
    assert ok32.passed and not wide.passed and "expected dtype float32, got float64" in wide.reason
    out, w = (np.asarray(o) for o in prepared.expected["decoder.cross_attention"])
    exact = compare.compare_case(ids[1], prepared, {f"{ids[1]}.npz": _npz(output=out, weights=w)})
    rounded = compare.compare_case(ids[1], prepared, {f"{ids[1]}.npz": _npz(
        output=out.astype(np.float32).astype(np.float64), weights=w)})                 # float32 precision, float64 dtype
    assert exact.passed and not rounded.passed and "relative error" in rounded.reason


def test_the_sandbox_exports_the_dtype_the_function_returned(tmp_path, monkeypatch):
    """grader/sandboxed/grading_module.py keeps float32 as float32 (the comparison could not check it otherwise)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("grading_module", ROOT / "grader" / "sandboxed" / "grading_module.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("COURSE_GRADING_EXPORT", str(tmp_path))
    module.HiddenCase("c", {}, ("y", "ids")).check((np.ones(3, np.float32), [1, 2]))
    with np.load(tmp_path / "c.npz") as data:
        assert data["y"].dtype == np.float32 and data["ids"].dtype.kind == "i"


def test_hidden_case_check_applies_the_same_rules(monkeypatch):
    monkeypatch.delenv("COURSE_GRADING_EXPORT", raising=False)
    case = hidden_case("llm.rms_norm_float32", seed=3)
    reference = case.expected()[0]
    case.check(reference.astype(np.float32))
    with pytest.raises(AssertionError, match=r"llm.rms_norm_float32 y \(seed 3\): expected dtype float32, got float64"):
        case.check(reference)
    case = hidden_case("llm.rms_norm_2d", seed=3)
    with pytest.raises(AssertionError, match=r"against the output's scale"):
        case.check(case.expected()[0].astype(np.float32).astype(np.float64))


def test_every_case_of_08_to_11_says_what_it_promises():
    """Each of them states its measure: a dtype per output where the docstring promises one, and a tolerance
    from _precision.py (or a statistical one, stated where the case is defined)."""
    from transformer_course_cases._precision import FLOAT32_TOL, FLOAT64_TOL

    for case_id, spec in CASES.items():
        if case_id.split(".")[0] not in ("decoder", "llm", "learning", "finetune"):
            continue
        assert spec.dtypes is None or len(spec.dtypes) == len(spec.output_names), case_id
        if "float32" in (spec.dtypes or ()) and not case_id.startswith("llm.dequantize"):
            assert (spec.tol, spec.floor) == (FLOAT32_TOL, 1.0), case_id
        elif spec.floor:
            assert spec.tol == FLOAT64_TOL, case_id


# -- numpy Generators whose next random() is chosen (notebook 08's boundary draws) --------------------------
@pytest.mark.parametrize("seed", range(5))
def test_boundary_generators_draw_the_chosen_u(seed):
    inputs = hidden_case("decoder.sample_next_token_boundaries", seed=seed).inputs
    for state, u in zip(inputs["states"], cases_08_decoder.BOUNDARY_DRAWS, strict=True):
        for method in ("random", "uniform"):
            g = np.random.Generator(np.random.PCG64())
            g.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inputs["inc"]},
                                     "has_uint32": 0, "uinteger": 0}
            assert getattr(g, method)() == u


def test_boundary_case_counts_every_kept_token_exactly():
    """The reference counts are 16 p_j, whole numbers, and the first and last tokens are forbidden."""
    for seed in range(10):
        case = hidden_case("decoder.sample_next_token_boundaries", seed=seed)
        counts, allowed = case.expected()
        assert counts.sum() == 16 and np.array_equal(counts, np.round(counts)) and allowed == 1.0
        assert np.isneginf(case.inputs["logits"][[0, -1]]).all()
