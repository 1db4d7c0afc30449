"""Issue 38 through the real grader: submissions of notebooks 08-11 with plausible bugs of the classes the new
hidden cases draw for lose exactly those exercises' points, and keep every other point.

Each student is the correct submission of tests/fixtures/correct_class.py with two solution cells replaced by
mutants of tests/mutants (a student's file, as submitted), graded by `python -m grader grade` in the sandbox:
the inputs drawn outside, the notebook run as the student, the exported arrays compared by the trusted side.
The bugs: a softmax without its max shift (logits offset by ~1000), u on a cumulative boundary, float16
subnormals decoded by hand, a float64 result where the docstring promises float32, an eps argument ignored,
a wrong default base, float32 inside a float64 computation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import correct_class  # noqa: E402
from grader.trusted import supervisor  # noqa: E402
from test_hidden_tests_catch_mutants import MUTANT_FILES, load_mutants  # noqa: E402

pytestmark = pytest.mark.slow

# student -> (notebook, {mutant description: (the test cell that must score 0, a word of its failure reason)})
STUDENTS = {
    "dana_08": ("08_decoder", {
        "LM loss with its own softmax, no max shift (exp of logits ~1000 overflows)":
            ("test_language_model_loss", "NaN"),
        "draw by searchsorted on the left (u on a running sum goes to the token before it)":
            ("test_sample_next_token", "relative error")}),
    "emil_09": ("09_llm", {
        "Q8_0 with float16 decoded by hand, subnormals forgotten (exponent 0 read as 2**-15 * 1.m)":
            ("test_dequantize_q8_0", "relative error"),
        "RMSNorm with the mean square accumulated in float64 (float32 in, float64 out)":
            ("test_rms_norm", "expected dtype float32, got float64")}),
    "fay_10": ("10_learning", {
        "cross-entropy backward with its own softmax, no max shift (logits ~1000 overflow)":
            ("test_cross_entropy_backward", "NaN"),
        "layer-norm backward with eps hard-coded to 1e-5 (the argument ignored)":
            ("test_layer_norm_backward", "relative error")}),
    "gil_11": ("11_finetune", {
        "RoPE backward with SmolLM2's base 1e5 as the default": ("test_rope_backward", "relative error"),
        "LoRA forward with the adapter kept in float32 (as a model stores it)":
            ("test_lora_forward", "against the output's scale")}),
}


def _mutants(notebook):
    return load_mutants(next(p for p in MUTANT_FILES if p.stem == notebook))


def _submission(notebook, descriptions):
    """The correct submission with each mutant's solution cell(s) replaced by the mutant's source."""
    nb = correct_class.correct_submission(notebook)
    replaced = {}
    for description in descriptions:
        replaced.update(_mutants(notebook)[description])
    done = set()
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in replaced and cell["cell_type"] == "code":
            cell["source"] = replaced[gid].strip("\n").splitlines(keepends=True)
            done.add(gid)
    assert done == set(replaced), f"{notebook}: no released cell for {set(replaced) - done}"
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    problem = supervisor.sandbox_problem()
    if problem:
        pytest.skip(f"the grading sandbox is not available here: {problem}")
    out = tmp_path_factory.mktemp("hidden_08_11")
    for student, (notebook, bugs) in STUDENTS.items():
        path = out / "submitted" / student / notebook / f"{notebook}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(_submission(notebook, bugs), indent=1), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "--submitted", str(out / "submitted"),
                           "--grades", str(out / "grades"), "--quiet"], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, COURSE_GRADING_SEED="38"), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {student: json.loads((out / "grades" / "results" / student / f"{notebook}.json").read_text())
            for student, (notebook, _) in STUDENTS.items()}


@pytest.mark.parametrize("student", sorted(STUDENTS))
def test_each_bug_costs_its_exercise_and_nothing_else(graded, student):
    record = graded[student]
    assert record["auto_status"] is None, (record["auto_status"], record["details"])
    losing = {cell: word for cell, word in STUDENTS[student][1].values()}
    for test in record["tests"]:
        if test["grade_id"] in losing:
            reasons = " | ".join(c["reason"] for c in test["cases"] if not c["passed"])
            assert test["points"] == 0, f"{student}: {test['grade_id']} kept its points with the bug"
            assert losing[test["grade_id"]] in reasons, f"{student} {test['grade_id']}: {reasons}"
        else:
            assert test["points"] == test["max_points"], f"{student}: {test['grade_id']} lost points: {test['cases']}"
    assert set(losing) <= {t["grade_id"] for t in record["tests"]}
