"""Grading on a Dask cluster gives the same grades as grading on this machine.

`python -m grader grade --scheduler ADDRESS` hands each submission's sandbox run to a
Dask worker (grader/trusted/dask_backend.py); inputs, references and the comparison stay in the
grading process. This test grades part of the demo class (tests/fixtures/demo_class:
correct, stub, wrong, hostile and crashing notebooks) twice with the same
COURSE_GRADING_SEED -- once locally with 2 workers, once on a LocalCluster of 2 worker
processes on 127.0.0.1 -- and checks that every result record (points, statuses, each
hidden case's verdict and reason, the feedback's cells and outputs) and the grade table are
identical. Only the timings may differ, and they are left out of the comparison.

Like the local grader, a Dask worker builds sandboxes as root: CI runs as root.
Throughput with 1 and 2 workers: hub/scripts/grading_throughput.py (hub/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "tests" / "fixtures" / "demo_class"
# A correct notebook, the untouched stub, a wrong answer, two hostile ones and one that kills
# its own process: each a different path through the sandbox and the comparison.
STUDENTS = ["alice_correct", "bob_stub", "carol_wrong_scale", "ivan_patches_checks",
            "peggy_writes_results", "nick_os_exit"]

pytestmark = pytest.mark.slow
distributed = pytest.importorskip("distributed", reason="distributed (requirements/hub.txt) is not installed")


def comparable(record: dict) -> dict:
    """A result record without its timings (the only thing that may differ between runs)."""
    record = dict(record)
    record.pop("run", None)
    record["cells"] = [{k: v for k, v in c.items() if k != "seconds"} for c in record["cells"]]
    return record


def grade(tmp: Path, name: str, *extra: str) -> Path:
    out = tmp / name
    shutil.copytree(DEMO / "submitted", out / "submitted",
                    ignore=lambda d, names: [n for n in names if Path(d) == DEMO / "submitted" and n not in STUDENTS])
    env = dict(os.environ, COURSE_GRADING_SEED="20261203", PYTHONPATH=str(ROOT / "lib"))
    proc = subprocess.run([sys.executable, "-m", "grader", "--course", str(ROOT), "grade",
                           "--submitted", str(out / "submitted"), "--grades", str(out / "grades"),
                           "--assignment", "01_attention", "--cell-timeout", "5", "--notebook-timeout", "60",
                           "--quiet", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "grades"


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root (CI runs as root)")
def test_dask_grades_equal_local_grades(tmp_path, monkeypatch):
    from distributed import LocalCluster

    # The workers import grader.trusted.dask_backend: the repository (and its lib/) on their path.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(ROOT / "lib")]))
    monkeypatch.syspath_prepend(str(ROOT))

    local = grade(tmp_path, "local", "--workers", "2")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None) as cluster:
        remote = grade(tmp_path, "dask", "--scheduler", cluster.scheduler_address)

    local_records = {p.relative_to(local): json.loads(p.read_text()) for p in (local / "results").rglob("*.json")}
    remote_records = {p.relative_to(remote): json.loads(p.read_text()) for p in (remote / "results").rglob("*.json")}
    assert sorted(local_records) == sorted(remote_records)
    assert len(local_records) == len(STUDENTS)
    for key, record in local_records.items():
        assert comparable(remote_records[key]) == comparable(record), key
    assert (remote / "grades.csv").read_text() == (local / "grades.csv").read_text()
    assert (remote / "cells.csv").read_text() == (local / "cells.csv").read_text()

    # The comparison is not vacuous: the class has full marks, zero and crashes in it.
    by_student = {r["student"]: r for r in local_records.values()}
    assert by_student["alice_correct"]["auto_points"] == by_student["alice_correct"]["max_points"] - 2
    assert by_student["bob_stub"]["auto_points"] == 0
    assert by_student["nick_os_exit"]["auto_status"] == "crashed"
    assert json.loads((remote / "run.json").read_text())["workers"] == 2
