"""transformer_course.testing (rel_error, assert_close) and transformer_course_cases (hidden cases)."""

import os
import warnings
import zlib

import numpy as np
import pytest

from transformer_course import attention_scores, scaled_dot_product_attention, softmax
import transformer_course_cases as grading
from transformer_course_cases import CASES, EXPORT_ENV, SEED_ENV, case_rng, grading_seed, hidden_case
from transformer_course.testing import assert_close, rel_error


# =============================================================================
# rel_error
# =============================================================================
def test_rel_error_known_values():
    assert rel_error([1.0], [3.0]) == pytest.approx(0.5)                    # |1-3| / (1+3)
    assert rel_error(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 2.0], [3.0, 5.0]])) == pytest.approx(1 / 9)
    assert rel_error([2.0, -2.0], [2.0, -2.0]) == 0.0
    assert isinstance(rel_error([1.0], [1.0]), float)


def test_rel_error_floor_near_zero():
    assert rel_error([0.0], [0.0]) == 0.0
    assert rel_error([1e-10], [0.0]) == pytest.approx(1e-2)                 # denominator floored at 1e-8
    assert rel_error([1e-3], [0.0]) == pytest.approx(1.0)


def test_rel_error_shape_mismatch_is_infinite():
    assert rel_error(np.zeros(3), np.zeros((3, 1))) == float("inf")
    assert rel_error(np.zeros((2, 3)), np.zeros((3, 2))) == float("inf")


def test_rel_error_empty_is_zero():
    assert rel_error(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0


def test_rel_error_same_infinities_give_no_runtime_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rel_error([-np.inf, 0.5], [-np.inf, 0.5]) == 0.0         # e.g. masked scores
        assert rel_error([np.inf], [1.0]) == float("inf")


def test_rel_error_infinities_and_nan():
    assert rel_error([np.inf, 1.0], [np.inf, 1.0]) == 0.0                   # the same infinity matches
    assert rel_error([-np.inf], [-np.inf]) == 0.0
    assert rel_error([np.inf], [-np.inf]) == float("inf")
    assert rel_error([np.inf], [1.0]) == float("inf")
    assert rel_error([np.nan, 1.0], [0.0, 1.0]) == float("inf")
    assert rel_error([1.0], [np.nan]) == float("inf")


# =============================================================================
# assert_close
# =============================================================================
def test_assert_close_passes_and_prints_the_bound_not_the_round_off(capsys):
    # The printed line must not depend on the last digits of the error (BLAS kernel, threads):
    # two results that differ only in round-off print the same line.
    assert assert_close(np.array([1.0, 2.0]), [1.0, 2.0 + 1e-9], "weights") is None
    first = capsys.readouterr().out
    assert_close(np.array([1.0, 2.0]), [1.0, 2.0 + 3e-12], "weights")
    assert first == capsys.readouterr().out == "weights: relative error < 1e-06\n"
    assert_close([1.0], [1.0 + 1e-13], "tight", tol=1e-12)
    assert capsys.readouterr().out == "tight: relative error < 1e-12\n"


def test_assert_close_quiet_prints_nothing(capsys):
    assert assert_close([1.0], [1.0], quiet=True) is None
    assert capsys.readouterr().out == ""


def test_assert_close_none_means_missing_return():
    with pytest.raises(AssertionError, match=r"out: got None -- did the function forget to `return`\?"):
        assert_close(None, [1.0], "out")


@pytest.mark.parametrize("bad", ["abc", {"a": 1}, [[1.0, 2.0], [3.0]]])
def test_assert_close_non_numeric(bad):
    with pytest.raises(AssertionError, match=rf"res: expected a numeric array, got {type(bad).__name__}"):
        assert_close(bad, [1.0, 2.0], "res", quiet=True)


def test_assert_close_shape_mismatch():
    with pytest.raises(AssertionError, match=r"res: expected shape \(2, 3\), got shape \(3, 2\)"):
        assert_close(np.zeros((3, 2)), np.zeros((2, 3)), "res", quiet=True)


def test_assert_close_nan():
    with pytest.raises(AssertionError, match=r"res: contains NaN at \[1, 0\]; expected finite values"):
        assert_close(np.array([[0.0, 1.0], [np.nan, 2.0]]), np.zeros((2, 2)), "res", quiet=True)


def test_assert_close_on_a_single_number_says_the_value_not_an_empty_index():
    # A 0-d result (one entropy, one loss) has no index: "at []" or "at index ()" says nothing (issue 28).
    with pytest.raises(AssertionError, match=r"^H: the value is NaN; expected a finite value$"):
        assert_close(np.float64(np.nan), 0.0, "H", quiet=True)
    with pytest.raises(AssertionError, match=r"^H: expected 0, got 0\.003: absolute error 3\.00e-03"):
        assert_close(3e-3, 0.0, "H", quiet=True)
    with pytest.raises(AssertionError, match=r"^H: relative error \S+ exceeds 1e-06; for the value: expected 2, got 3$"):
        assert_close(3.0, 2.0, "H", quiet=True)


def test_assert_close_tolerance_exceeded_names_the_index():
    expected = np.array([[1.0, 2.0], [3.0, 4.0]])
    actual = expected.copy()
    actual[1, 0] = 3.5
    with pytest.raises(AssertionError, match=r"res: relative error 7\.69e-02 exceeds 1e-06; at index \(1, 0\) expected 3, got 3\.5"):
        assert_close(actual, expected, "res", quiet=True)


def test_assert_close_against_an_expected_zero_reports_the_absolute_error():
    # A relative error against 0 is 1 whatever came (issue 28): the message gives the absolute error instead.
    with pytest.raises(AssertionError, match=r"H: expected 0 at index \(1,\), got 0\.003: absolute error 3\.00e-03 "
                                             r"exceeds 1e-14 \(the tolerance near 0\)"):
        assert_close(np.array([1.0, 3e-3]), np.array([1.0, 0.0]), "H", quiet=True)
    assert_close(np.array([1.0, 1e-15]), np.array([1.0, 0.0]), quiet=True)     # within tol * 1e-8: passes


def test_assert_close_tol_is_respected():
    assert_close([1.0], [1.001], tol=1e-3, quiet=True)           # error 0.001 / 2.001 < 1e-3: passes
    with pytest.raises(AssertionError, match=r"exceeds 1e-04"):
        assert_close([1.0], [1.001], tol=1e-4, quiet=True)


def test_assert_close_scalar():
    with pytest.raises(AssertionError, match=r"s: relative error .* for the value: expected 2, got 1"):
        assert_close(1.0, 2.0, "s", quiet=True)


# =============================================================================
# grading: registered cases
# =============================================================================
CASES_01 = ["attention.softmax", "attention.softmax_masked", "attention.sdpa",
            "attention.sdpa_bool_mask", "attention.sdpa_additive_mask"]
SEEDS = ["0", "1", "2", "3", "4", "20240601", "course-final"]


def test_notebook_01_cases_are_registered():
    assert set(CASES_01) <= set(CASES)
    for cid in CASES_01:
        assert CASES[cid].description
        assert CASES[cid].tol <= 1e-6


@pytest.mark.parametrize("case_id", sorted(CASES))
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_every_case_passes_with_its_own_reference(monkeypatch, case_id, seed):
    monkeypatch.setenv(SEED_ENV, seed)
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    case = hidden_case(case_id)
    case.check(case.spec.as_promised(case.spec.reference(**case.inputs)))   # float32 cases: the float64 reference, rounded
    # and the expected outputs are real numbers, not NaN
    for out in case.expected():
        assert not np.isnan(np.asarray(out, dtype=float)).any()


@pytest.mark.parametrize(("case_id", "fn"), [
    ("attention.softmax", softmax), ("attention.softmax_masked", softmax),
    ("attention.sdpa", scaled_dot_product_attention),
    ("attention.sdpa_bool_mask", scaled_dot_product_attention),
    ("attention.sdpa_additive_mask", scaled_dot_product_attention),
])
def test_public_functions_pass_their_hidden_cases(monkeypatch, case_id, fn):
    monkeypatch.setenv(SEED_ENV, "99")
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    case = hidden_case(case_id)
    case.check(fn(**case.inputs))


# -- plausible wrong student implementations -----------------------------------------------
def naive_softmax(x, axis=-1):
    """No max-shift: exp overflows on large scores (inf / inf = NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)


def shifted_softmax_no_masked_row_handling(x, axis=-1):
    """Max-shift but a fully masked row gives -inf - (-inf) = NaN."""
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


def softmax_wrong_axis(x, axis=-1):
    axis = axis % x.ndim
    return softmax(x, axis=0 if axis != 0 else -1)


def softmax_global_normaliser(x, axis=-1):
    """Max-shifted, but divides by the sum over the whole array instead of per slice."""
    e = np.exp(x - x.max())
    return e / e.sum()


def softmax_masked_as_zero(x, axis=-1):
    """Treats -inf scores as 0 instead of blocking them."""
    return softmax(np.where(np.isneginf(x), 0.0, x), axis=axis)


def sdpa_scale_by_dk(Q, K, V, mask=None):
    s = Q @ np.swapaxes(K, -1, -2) / Q.shape[-1]
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    w = softmax(s)
    return w @ V, w


def sdpa_no_scale(Q, K, V, mask=None):
    return scaled_dot_product_attention(Q * np.sqrt(Q.shape[-1]), K, V, mask=mask)


def sdpa_softmax_over_queries(Q, K, V, mask=None):
    s = attention_scores(Q, K)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    w = softmax(s, axis=-2)
    return w @ V, w


def sdpa_outputs_swapped(Q, K, V, mask=None):
    out, w = scaled_dot_product_attention(Q, K, V, mask=mask)
    return w, out


def sdpa_mask_after_softmax(Q, K, V, mask=None):
    w = softmax(attention_scores(Q, K))
    w = np.where(mask, w, 0.0) if mask.dtype == bool else w + mask
    with np.errstate(invalid="ignore"):
        return w @ V, w


def sdpa_mask_ignored(Q, K, V, mask=None):
    return scaled_dot_product_attention(Q, K, V)


def sdpa_mask_inverted(Q, K, V, mask=None):
    """PyTorch's boolean convention (True = blocked) used by mistake."""
    return scaled_dot_product_attention(Q, K, V, mask=~mask)


WRONG = {
    "attention.softmax": [softmax_wrong_axis, softmax_global_normaliser],   # naive_softmax: see below
    "attention.softmax_masked": [naive_softmax, shifted_softmax_no_masked_row_handling, softmax_wrong_axis,
                                 softmax_masked_as_zero],
    "attention.sdpa": [sdpa_scale_by_dk, sdpa_no_scale, sdpa_softmax_over_queries, sdpa_outputs_swapped],
    "attention.sdpa_bool_mask": [sdpa_scale_by_dk, sdpa_softmax_over_queries, sdpa_mask_after_softmax,
                                 sdpa_mask_ignored, sdpa_mask_inverted],
    "attention.sdpa_additive_mask": [sdpa_scale_by_dk, sdpa_softmax_over_queries, sdpa_mask_after_softmax,
                                     sdpa_mask_ignored],
}


@pytest.mark.parametrize(("case_id", "wrong"), [(c, f) for c, fs in WRONG.items() for f in fs],
                         ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_plausible_wrong_implementation_fails(monkeypatch, case_id, wrong):
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    for seed in SEEDS:
        monkeypatch.setenv(SEED_ENV, seed)
        case = hidden_case(case_id)
        with pytest.raises(AssertionError, match=rf"{case_id} .*\(seed {case.seed}\)|{case_id}: expected"):
            case.check(wrong(**case.inputs))


def test_every_notebook_01_case_has_wrong_implementations():
    assert set(WRONG) == set(CASES_01)


def test_naive_softmax_gives_nan_when_the_offset_overflows(monkeypatch):
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    monkeypatch.setenv(SEED_ENV, "0")                   # a seed whose offset is above log(max float)
    case = hidden_case("attention.softmax")
    assert case.inputs["x"].max() > np.log(np.finfo(np.float64).max)
    assert np.isnan(naive_softmax(**case.inputs)).any()
    with pytest.raises(AssertionError, match=r"contains NaN"):
        case.check(naive_softmax(**case.inputs))


def test_naive_softmax_fails_the_softmax_case_for_every_seed(monkeypatch):
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    passed = []
    for seed in range(40):
        monkeypatch.setenv(SEED_ENV, str(seed))
        case = hidden_case("attention.softmax")
        try:
            case.check(naive_softmax(**case.inputs))
            passed.append(seed)
        except AssertionError:
            pass
    assert passed == [], f"naive softmax passed for seeds {passed}"


def test_check_refuses_wrong_number_of_outputs(monkeypatch):
    monkeypatch.setenv(SEED_ENV, "1")
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    case = hidden_case("attention.sdpa")
    out, _ = scaled_dot_product_attention(**case.inputs)
    with pytest.raises(AssertionError, match=r"attention.sdpa: expected 2 output\(s\) \('output', 'weights'\), got 1"):
        case.check(out)


def test_unknown_case_id():
    with pytest.raises(KeyError, match=r"unknown hidden case 'attention.nope'; known: \[.*'attention.sdpa'"):
        hidden_case("attention.nope")


# -- seeds -------------------------------------------------------------------------------------
def _same_inputs(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("case_id", CASES_01)
def test_same_seed_gives_same_inputs(monkeypatch, case_id):
    monkeypatch.setenv(SEED_ENV, "314")
    a, b = hidden_case(case_id), hidden_case(case_id)
    assert a.seed == b.seed == 314
    assert _same_inputs(a.inputs, b.inputs)
    monkeypatch.setenv(SEED_ENV, "315")
    c = hidden_case(case_id)
    assert c.seed == 315
    assert not _same_inputs(a.inputs, c.inputs)


def test_seed_env_var_controls_the_generator(monkeypatch):
    monkeypatch.setenv(SEED_ENV, "42")
    assert grading_seed() == 42
    expected = CASES["attention.sdpa"].make_inputs(case_rng("attention.sdpa", 42))
    assert _same_inputs(hidden_case("attention.sdpa").inputs, expected)
    monkeypatch.setenv(SEED_ENV, "final exam")
    assert grading_seed() == zlib.crc32(b"final exam")


def test_without_seed_env_var_a_fixed_session_seed_is_used(monkeypatch):
    monkeypatch.delenv(SEED_ENV, raising=False)
    s = grading_seed()
    assert isinstance(s, int) and s == grading_seed()
    assert _same_inputs(hidden_case("attention.sdpa").inputs, hidden_case("attention.sdpa").inputs)
    monkeypatch.setenv(SEED_ENV, "")
    assert grading_seed() == s                          # empty means unset


def test_case_rng_depends_on_case_id_and_seed():
    a = case_rng("attention.sdpa", 1).random(4)
    np.testing.assert_array_equal(a, case_rng("attention.sdpa", 1).random(4))
    assert not np.array_equal(a, case_rng("attention.softmax", 1).random(4))
    assert not np.array_equal(a, case_rng("attention.sdpa", 2).random(4))


def test_negative_seed_is_usable(monkeypatch):
    monkeypatch.setenv(SEED_ENV, "-1")
    case = hidden_case("attention.sdpa")
    assert case.inputs["Q"].ndim == 3


# -- export --------------------------------------------------------------------------------------
def test_export_writes_the_outputs_as_npz(monkeypatch, tmp_path):
    folder = tmp_path / "export"
    monkeypatch.setenv(SEED_ENV, "7")
    monkeypatch.setenv(EXPORT_ENV, str(folder))
    case = hidden_case("attention.sdpa_bool_mask")
    out, w = scaled_dot_product_attention(**case.inputs)
    case.check((out, w.astype(np.float32)))
    assert sorted(os.listdir(folder)) == ["attention.sdpa_bool_mask.npz"]
    with np.load(folder / "attention.sdpa_bool_mask.npz") as data:
        assert sorted(data.files) == ["output", "weights"]
        np.testing.assert_array_equal(data["output"], out)
        assert data["weights"].dtype == np.float64
        np.testing.assert_allclose(data["weights"], w, rtol=1e-6)


def test_export_happens_even_when_the_check_fails(monkeypatch, tmp_path):
    monkeypatch.setenv(SEED_ENV, "7")
    monkeypatch.setenv(EXPORT_ENV, str(tmp_path))
    case = hidden_case("attention.softmax")
    wrong = softmax_wrong_axis(**case.inputs)
    with pytest.raises(AssertionError):
        case.check(wrong)
    with np.load(tmp_path / "attention.softmax.npz") as data:
        np.testing.assert_array_equal(data["weights"], wrong)


def test_export_non_numeric_output_is_stored_as_nan(monkeypatch, tmp_path):
    monkeypatch.setenv(SEED_ENV, "7")
    monkeypatch.setenv(EXPORT_ENV, str(tmp_path))
    case = hidden_case("attention.softmax")
    with pytest.raises(AssertionError, match=r"expected a numeric array"):
        case.check("not an array")
    with np.load(tmp_path / "attention.softmax.npz") as data:
        assert data["weights"].shape == () and np.isnan(data["weights"])


def test_no_export_without_the_env_var(monkeypatch, tmp_path):
    monkeypatch.setenv(SEED_ENV, "7")
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    case = hidden_case("attention.softmax")
    case.check(softmax(**case.inputs))
    assert list(tmp_path.iterdir()) == []


def test_export_file_name_is_sanitised(tmp_path):
    grading._export(str(tmp_path / "a" / "b"), "nb 01/case:x", {"y": [1, 2]})
    assert os.listdir(tmp_path / "a" / "b") == ["nb_01_case_x.npz"]
    with np.load(tmp_path / "a" / "b" / "nb_01_case_x.npz") as data:
        np.testing.assert_array_equal(data["y"], [1.0, 2.0])


def test_reference_is_computed_from_untouched_inputs(monkeypatch):
    """A student function that edits its input in place is still compared with the true reference."""
    monkeypatch.setenv(SEED_ENV, "5")
    monkeypatch.delenv(EXPORT_ENV, raising=False)
    case = hidden_case("attention.softmax_masked")
    result = softmax(**case.inputs)
    case.inputs["x"][...] = 0.0                         # the student's code scribbles on its input
    case.check(result)                                  # still passes: the reference used a copy
    with pytest.raises(AssertionError):
        case.check(softmax(**case.inputs))              # and a result from scribbled inputs fails


def test_a_tiny_error_prints_the_digits_where_the_numbers_differ():
    """1.7315401 vs 1.7315400 at tol 1e-8: six digits would print "expected 1.73154, got 1.73154"."""
    with pytest.raises(AssertionError, match=r"expected 1\.73154, got 1\.7315401\b|expected 1\.7315400?, got 1\.7315401"):
        assert_close(np.array([1.7315401]), np.array([1.7315400]), "x", tol=1e-8)
    with pytest.raises(AssertionError, match=r"expected 2, got 3"):
        assert_close(3.0, 2.0, "y")
