"""Honest work gets every autograded point, from the real grader, for EVERY notebook; and two grading
runs on one host at the same time give the same grades as one run alone (issue 12).

The class is built by tests/fixtures/correct_class.py: for each notebooks/NN_*/ (whatever notebooks
exist, later ones included), the released exercise with the source's solutions put into its solution
cells -- what a student who solved everything submits. Two `python -m grader grade` runs of that class
(two courses on one server; in the second, one notebook was saved with 28 MB of figures) run at
once in the real sandbox. Each must give every notebook its full
autograded points with no cell raising on the way (a cross-check the grader cannot run is skipped with a note),
leave the written answers "needs manual grading", use sandbox users of its own,
and produce exactly the same table as the other (same COURSE_GRADING_SEED: the same inputs).
"""

from __future__ import annotations

import csv
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


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    problem = supervisor.sandbox_problem()
    if problem:
        pytest.skip(f"the grading sandbox is not available here: {problem}")
    env = dict(os.environ, COURSE_GRADING_SEED="20261203")
    procs, outs = [], []
    for name in ("course_a", "course_b"):
        out = tmp_path_factory.mktemp(name)
        correct_class.write_class(out)
        if name == "course_b":          # saved with its figures: 28 MB, graded all the same (issue 12)
            first = correct_class.notebooks()[0]
            path = out / "submitted" / "correct_1" / first / f"{first}.ipynb"
            nb = json.loads(path.read_text(encoding="utf-8"))
            figure = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBOR" * 200_000}}
            code = [c for c in nb["cells"] if c["cell_type"] == "code"]
            for cell in code:
                cell["outputs"] = [figure] * (28 // len(code) + 1)
            path.write_text(json.dumps(nb), encoding="utf-8")
            assert path.stat().st_size > 28_000_000
        outs.append(out)
        procs.append(subprocess.Popen([sys.executable, "-m", "grader", "grade", "--submitted",
                                       str(out / "submitted"), "--grades", str(out / "grades"), "--quiet"],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    for proc, out in zip(procs, outs):
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
        print(stdout)
        grades = out / "grades"
        results.append({
            "table": (grades / "grades.csv").read_text(encoding="utf-8"),
            "cells": (grades / "cells.csv").read_text(encoding="utf-8"),
            "records": {p.stem: json.loads(p.read_text()) for p in (grades / "results" / "correct_1").glob("*.json")},
            "run": json.loads((grades / "run.json").read_text()),
        })
    return results


@pytest.mark.parametrize("notebook", correct_class.notebooks())
def test_a_correct_submission_gets_full_autograded_points(two_runs, notebook):
    for result in two_runs:
        r = result["records"][notebook]
        failed = {t["grade_id"]: [c["reason"] for c in t["cases"] if not c["passed"]]
                  for t in r["tests"] if not t["passed"]}
        assert not failed, f"{notebook}: a correct submission failed {failed}; details: {r['details']}"
        assert r["tests"], f"{notebook} has no autograded test cell"
        assert r["auto_points"] == sum(t["max_points"] for t in r["tests"]) > 0
        assert r["auto_status"] is None, (r["auto_status"], r["details"])
        errors = [(c["index"], c["error"]) for c in r["cells"] if c.get("error")]
        assert not errors, f"{notebook}: a correct submission's cells raise while grading (issue 38, point 4): {errors}"
        assert all(not w["missing"] and not w["unchanged"] for w in r["written"]), r["written"]
        row = next(row for row in csv.DictReader(result["table"].splitlines()) if row["notebook"] == notebook)
        assert row["status"] == ("needs manual grading" if r["written"] else "graded"), row


def test_two_runs_at_once_give_the_same_grades_with_their_own_sandbox_users(two_runs):
    a, b = two_runs
    assert a["table"] == b["table"]
    assert a["cells"] == b["cells"]
    assert a["run"]["seed"] == b["run"]["seed"]
    assert not set(a["run"]["sandbox_users"]) & set(b["run"]["sandbox_users"]), \
        (a["run"]["sandbox_users"], b["run"]["sandbox_users"])
    # the runs overlapped (otherwise this test would prove nothing about running at once)
    (a0, a1), (b0, b1) = a["run"]["interval_unix"], b["run"]["interval_unix"]
    assert max(a0, b0) < min(a1, b1), (a["run"]["interval_unix"], b["run"]["interval_unix"])
