"""The similarity report (grader/trusted/similarity.py) on a class with planted copies, every notebook.

The class (tests/fixtures/similarity_class.py): per notebook three independent correct students
(tests/fixtures/independent_solutions.py), the published solution, and four planted copies
(renamed, reordered, re-commented and padded, a renamed published solution). Measured here:

* every independent body is correct: it passes every hidden test (the procedure of
  tests/test_hidden_tests_catch_mutants.py), so the false-positive rate is measured on real answers;
* the detection rate: planted (copier, source) pairs flagged, per exercise and per notebook;
* the false-positive rate: every other pair of the class flagged, per exercise and per notebook.

The bounds asserted are the ones grader/README.md states ("Similarity report"); the measured numbers
are printed (pytest -s) and are in the README.
"""

from __future__ import annotations

import collections
import csv
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import similarity_class as S  # noqa: E402
import test_hidden_tests_catch_mutants as H  # noqa: E402
from grader.trusted import grading, similarity  # noqa: E402

NOTEBOOKS = sorted(S.INDEPENDENT)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_independent_solutions_are_correct(name, monkeypatch):
    assert set(S.INDEPENDENT[name]) == set(S.released_stubs(name)), f"{name}: a body for every exercise"
    for i, student in enumerate(S.INDEPENDENT_STUDENTS):
        assert all(len(bodies) == len(S.INDEPENDENT_STUDENTS) for bodies in S.INDEPENDENT[name].values())
        failed = H.run_hidden(H.hidden_only_program(name, S.independent_cells(name, i)), monkeypatch, 61 + i)
        assert not failed, f"{name}: {student}'s solutions fail the hidden tests {failed}"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("similarity")
    S.write_class(out)
    done = similarity.run(grading.Course.at(ROOT), out / "submitted", out / "grades")
    rows = []
    for d in done:
        with d["csv"].open(encoding="utf-8") as fh:
            rows += list(csv.DictReader(fh))
    return {"done": done, "rows": rows, "out": out}


def _planted(row) -> bool:
    return frozenset((row["student_a"], row["student_b"])) in {frozenset(p) for p in S.PLANTED}


def test_every_notebook_and_exercise_is_reported(report):
    assert [d["notebook"] for d in report["done"]] == NOTEBOOKS
    exercises = {(r["notebook"], r["exercise"]) for r in report["rows"]}
    assert exercises == {(n, e) for n in NOTEBOOKS for e in S.INDEPENDENT[n]}
    assert not (report["out"] / "grades" / "grades.csv").exists(), "the report never writes grades"


def test_detection_and_false_positive_rates(report):
    rows = report["rows"]
    planted_total = sum(len(S.INDEPENDENT[n]) for n in NOTEBOOKS) * len(S.PLANTED)
    planted = [r for r in rows if _planted(r)]
    independent = [r for r in rows if not _planted(r)]
    found = sum(r["flagged"] == "yes" for r in planted)
    false = [r for r in independent if r["flagged"] == "yes"]
    detection, fp_rate = found / planted_total, len(false) / len(independent)
    by_notebook = collections.defaultdict(list)
    for r in rows:
        by_notebook[(r["notebook"], frozenset((r["student_a"], r["student_b"])), _planted(r))].append(
            r["flagged"] == "yes")
    planted_nb = [sum(v) for k, v in by_notebook.items() if k[2]]
    independent_nb = [sum(v) for k, v in by_notebook.items() if not k[2]]
    print(f"\nsimilarity, threshold {similarity.THRESHOLD}, k = {similarity.NOISE}: "
          f"per exercise: {found}/{planted_total} planted pairs flagged ({detection:.1%}; "
          f"{planted_total - len(planted)} not judged: too short once the stub and shared code are gone), "
          f"{len(false)}/{len(independent)} independent pairs flagged ({fp_rate:.2%}); "
          f"per notebook: {sum(n >= 2 for n in planted_nb)}/{len(planted_nb)} planted pairs flagged in 2+ exercises, "
          f"{sum(n >= 2 for n in independent_nb)}/{len(independent_nb)} independent pairs "
          f"({sum(n >= 1 for n in independent_nb)} in one exercise)")
    for r in false:
        print("  flagged independent pair:", r["notebook"], r["exercise"], r["student_a"], r["student_b"], r["score"])
    assert detection >= 0.95
    assert fp_rate <= 0.01
    assert len(planted_nb) == len(NOTEBOOKS) * len(S.PLANTED) and min(planted_nb) >= 2
    assert max(independent_nb) <= 1, "no two independent students are flagged in two exercises of a notebook"


def test_page_shows_flagged_pairs_side_by_side(report):
    page = (report["out"] / "grades" / "similarity" / "01_attention.html").read_text(encoding="utf-8")
    assert "copy_renamed" in page and "indep_1" in page and "<mark>" in page and "class='side'" in page
    assert "Pairs flagged" in page and "changes no grade" in page


def test_stub_and_code_the_class_shares_are_not_evidence():
    stub = 'def f(x):\n    """Docstring of the stub, long enough to fingerprint."""\n    raise NotImplementedError("x")\n'
    shared = stub.replace('    raise NotImplementedError("x")\n', "    e = np.exp(x - np.max(x, axis=-1, keepdims=True))"
                          "\n    return e / np.sum(e, axis=-1, keepdims=True)\n")
    own = stub.replace('    raise NotImplementedError("x")\n', "    out = []\n    for row in x:\n"
                       "        w = [math.exp(v - max(row)) for v in row]\n        out.append([v / sum(w) for v in w])"
                       "\n    return out\n")
    codes = {"a": stub, "b": stub, "c": shared, "d": shared, "e": shared, "f": shared, "g": own}
    rep = similarity.compare_exercise("f", codes, stub)
    assert sorted(rep.unanswered) == ["a", "b"]                       # the released stub is no answer
    assert rep.common > 0 and not any(p.score >= similarity.THRESHOLD for p in rep.pairs), \
        "code most of the class shares (4 of 5) is not evidence of copying"
    rep = similarity.compare_exercise("f", {"c": shared, "d": shared, "g": own}, stub)
    assert [(p.a, p.b) for p in rep.pairs if p.score >= similarity.THRESHOLD] == [("c", "d")]


def test_command_line(report, capsys):
    from grader.__main__ import main

    assert main(["similarity", "--submitted", str(report["out"] / "submitted"), "--grades",
                 str(report["out"] / "grades2"), "--assignment", "02_scaling", "--threshold", "0.9"]) == 0
    assert "02_scaling: 7 submissions" in capsys.readouterr().out
    assert (report["out"] / "grades2" / "similarity" / "02_scaling.csv").exists()
    assert os.listdir(report["out"] / "grades2") == ["similarity"]
