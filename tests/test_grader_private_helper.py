"""A notebook-03 submission that answers multi_head_attention with the package's private helper scores
nothing for that exercise, through the real grader and its sandbox (the unit-level twin of this is
tests/test_grader_units.py::test_a_submission_answering_with_a_private_helper_gets_no_points).

``MultiHeadAttention`` and ``multi_head_attention`` are thin holders over
``multihead._project_attend_merge``. The attacking student wrote split_heads and merge_heads (exercise 1,
graded on their own), puts them into the package's module -- the helper calls them there -- and returns the
helper's result for exercise 2. The package rule (grader/README.md) blocks the helper in 03's sandbox: only
03's exercises reach it. A correct student graded in the same run gets every point, so the run itself is
sound.
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
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import correct_class  # noqa: E402
from grader.trusted import supervisor  # noqa: E402

pytestmark = pytest.mark.slow
NAME = "03_multihead"
ATTACK = (
    "import transformer_course as tc\n"
    "tc.multihead.split_heads, tc.multihead.merge_heads = split_heads, merge_heads   # my exercise 1\n"
    "def multi_head_attention(X, W_Q, W_K, W_V, W_O, n_heads, mask=None):\n"
    "    return tc.multihead._project_attend_merge(X, X, X, (W_Q, W_K, W_V, W_O), (None,) * 4, n_heads, mask)\n"
)


def test_answering_with_the_private_helper_scores_nothing_for_that_exercise(tmp_path):
    problem = supervisor.sandbox_problem()
    if problem:
        pytest.skip(f"the grading sandbox is not available here: {problem}")
    honest = correct_class.correct_submission(NAME)
    attack = json.loads(json.dumps(honest))
    cell = next(c for c in attack["cells"]
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "multi_head_attention")
    cell["source"] = ATTACK.splitlines(keepends=True)
    for student, nb in (("honest", honest), ("helper_caller", attack)):
        path = tmp_path / "submitted" / student / NAME / f"{NAME}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb), encoding="utf-8")
    env = dict(os.environ, COURSE_GRADING_SEED="20261204")
    out = subprocess.run([sys.executable, "-m", "grader", "grade", "--submitted", str(tmp_path / "submitted"),
                          "--grades", str(tmp_path / "grades"), "--assignment", NAME, "--quiet"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    records = {s: json.loads((tmp_path / "grades" / "results" / s / f"{NAME}.json").read_text())
               for s in ("honest", "helper_caller")}
    passed = {s: {t["grade_id"]: t["passed"] for t in r["tests"]} for s, r in records.items()}
    assert all(passed["honest"].values()), passed["honest"]
    assert passed["helper_caller"].pop("test_multi_head_attention") is False, records["helper_caller"]["tests"]
    assert all(passed["helper_caller"].values()), passed["helper_caller"]     # the student's own work still counts
    r = records["helper_caller"]
    assert r["auto_points"] == records["honest"]["auto_points"] - 3
    assert "_project_attend_merge" in " ".join(r["details"]), r["details"]
