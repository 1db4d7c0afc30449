"""Notebook 12 through the real grader (``python -m grader grade``, its sandbox): the honest student and the three
independent students of the similarity class (tests/fixtures/similarity_class.py: bodies written apart from the
course's solutions) each get every autograded point, in one run.

tests/test_similarity.py checks the independent bodies against the hidden tests in-process, for every notebook;
this is the same for 12 through the grader itself: its package copy (bpe_encode, train_bpe, shortest_tokenization
and wordpiece_tokenize stubbed), the one rule's site-packages view (regex allowed, tokenizers not), the data
packages 12 reads, and its time limits.
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
import similarity_class as S  # noqa: E402
from grader.trusted import supervisor  # noqa: E402

pytestmark = pytest.mark.slow
NAME = "12_tokens"


def test_the_grader_gives_12s_honest_and_independent_students_every_point(tmp_path):
    problem = supervisor.sandbox_problem()
    if problem:
        pytest.skip(f"the grading sandbox is not available here: {problem}")
    students = {"honest": correct_class.correct_submission(NAME)}
    for i, student in enumerate(S.INDEPENDENT_STUDENTS):
        students[student] = S.submission(NAME, S.independent_cells(NAME, i))
    for student, nb in students.items():
        path = tmp_path / "submitted" / student / NAME / f"{NAME}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb), encoding="utf-8")
    env = dict(os.environ, COURSE_GRADING_SEED="20261241")
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "--submitted", str(tmp_path / "submitted"),
                           "--grades", str(tmp_path / "grades"), "--quiet"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for student in students:
        r = json.loads((tmp_path / "grades" / "results" / student / f"{NAME}.json").read_text())
        failed = [(t["grade_id"], t.get("message", "")[:300]) for t in r["tests"] if not t["passed"]]
        assert not failed, (student, failed, r["details"])
        assert r["auto_points"] == sum(t["max_points"] for t in r["tests"]) > 0, (student, r["auto_points"])
        errors = [(c["index"], c["error"]) for c in r["cells"] if c.get("error")]
        assert not errors, f"{student}: a correct submission's cells raise while grading (issue 38, point 4): {errors}"
