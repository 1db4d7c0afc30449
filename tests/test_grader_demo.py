"""End to end: grade the demo class in the real sandbox; every student's points and status.

The demo class (tests/fixtures/demo_class/, built by tests/fixtures/make_demo_class.py
from the released notebook 01) has one student per way of gaming or breaking a grader.
This test runs `python -m grader demo` -- what `make grade-demo` runs -- and checks:

* every student's points and status (the table below, with the reason for each);
* what the hostile notebooks saw from inside: no gradebook, no other student, no
  reference, no seed, nothing written outside the sandbox, no network (127.0.0.1
  included: this test listens there and no connection may arrive);
* the feedback pages exist for every row and never show the hidden tests' code;
* the whole demo class is graded in bounded time.

The sandbox needs root (namespaces, an unprivileged user per worker): CI runs as root.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import make_demo_class  # noqa: E402
from grader.trusted import supervisor  # noqa: E402

pytestmark = pytest.mark.slow
DEMO = ROOT / "tests" / "fixtures" / "demo_class"

MANUAL = "needs manual grading"
# student: (points out of 10, status, why). Autograded points: test_softmax 2 + test_sdpa 3 + test_lookup_query 3
# (only alice solves lookup_query; everyone else leaves its stub, which scores 0);
# the written answer (2) is graded by hand: only alice has a hand grade (demo_class/manual.csv).
EXPECTED = {
    "alice_correct": (10, "graded", "correct, written answer graded by hand"),
    "bob_stub": (0, "graded", "untouched release: nothing passes; an unchanged written answer scores 0"),
    "carol_wrong_scale": (2, MANUAL, "softmax right, attention scaled by d_k"),
    "dave_edited_tests": (2, MANUAL, "edited test cells are the instructor's again"),
    "erin_commented_tests": (2, MANUAL, "commented-out test cells are restored"),
    "frank_deleted_tests": (2, MANUAL, "deleted test cells are re-inserted"),
    "grace_stripped_tests": (2, MANUAL, "metadata-stripped test cells are re-inserted"),
    "heidi_patches_numpy": (2, MANUAL, "patched numpy fools visible asserts only"),
    "ivan_patches_checks": (2, MANUAL, "patched assert_close / HiddenCase fool nothing outside"),
    "kate_equal_to_anything": (2, MANUAL, "an equal-to-anything object is not a numeric array"),
    "leo_blanks_later_cells": (2, MANUAL, "emptied test cells export nothing: 0, not full marks"),
    "mallory_sys_exit": (2, MANUAL, "sys.exit stops one cell; attention never defined"),
    "nick_os_exit": (2, "crashed", "softmax was exported before the process died"),
    "olivia_reads_secrets": (2, MANUAL, "finds nothing, writes nothing"),
    "peggy_writes_results": (2, MANUAL, "fake, linked, FIFO and zip-bomb exports are refused or fail"),
    "quinn_infinite_loop": (5, "timed out", "interrupted after the definition; the tests still ran"),
    "rupert_ignores_sigint": (5, "timed out", "SIGINT ignored, interrupted all the same"),
    "sybil_unstoppable_loop": (2, "timed out", "killed; what ran before keeps its points"),
    "trent_segfault": (2, "crashed", "segfault; softmax keeps its points"),
    "ursula_memory_bomb": (5, "memory limit", "MemoryError at the address-space limit; the rest ran"),
    "victor_fork_bomb": (5, "process limit", "fork fails at the process limit; the rest ran"),
    "wendy_huge_output": (5, MANUAL, "output cut, nothing lost"),
    "xavier_output_flood": (2, "output limit", "killed at the output cap"),
    "yolanda_network": (5, MANUAL, "no network; the correct code is graded"),
    "zack_imports_reference": (0, MANUAL, "the reference is not importable while grading"),
    "amy_stderr_and_warnings": (5, MANUAL, "stderr and warnings cost nothing"),
    "fay_metadata_stripped": (5, MANUAL, "solutions matched by content, tests re-inserted"),
    "ben_renamed_notebook": (0, "notebook missing or renamed", "found 01_attention-Copy1.ipynb"),
    "cathy_missing_notebook": (0, "notebook missing or renamed", "the folder holds no notebook"),
    "dan_invalid_json": (0, "invalid file", "not valid JSON"),
    "gus_lone_surrogate": (5, MANUAL, "a lone surrogate stops nothing, the class is graded"),
    "hal_keyring": (5, MANUAL, "the keyrings are out of reach (seccomp); the correct code is graded"),
    "jan_scratch_after_answer": (5, MANUAL, "metadata stripped: tests run where they were, not after the scratch"),
    "liam_symlinked_folder": (0, "invalid file", "a symlinked student folder is not followed"),
    "mona_imports_flash_attention": (0, MANUAL, "another notebook's module is not in notebook 01's sandbox"),
    "eve_no_submission": (0, "no submission", "on the class list only"),
    # the instructor's term (demo_class/grading.toml): points after the late rule
    "lena_two_days_late": (8, "graded", "10 earned, 2 started days late x 10%"),
    "ken_extension": (10, "graded", "late, but before the extension (extensions.csv)"),
    "max_after_cutoff": (0, "graded", "10 earned, more than 7 days late: 0"),
    "rita_own_work": (8, MANUAL, "her own correct code"),
    "sam_copies_rita": (8, MANUAL, "a disguised copy of rita's: the similarity report flags it, the grade stands"),
}


def test_expected_table_covers_the_demo_class():
    assert set(EXPECTED) == set(make_demo_class.STUDENTS)
    for student, spec in make_demo_class.STUDENTS.items():
        assert spec["expect"] == EXPECTED[student][:2], student


def test_demo_fixtures_are_fresh():
    """The committed notebooks are what make_demo_class.py builds from today's exercises/."""
    assert make_demo_class.main(["--check"]) == 0, \
        "run: .venv/bin/python tests/fixtures/make_demo_class.py"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    problem = supervisor.sandbox_problem()
    if problem:
        pytest.skip(f"the grading sandbox is not available here: {problem}")
    out = tmp_path_factory.mktemp("demo")
    connections = []
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", make_demo_class.LOCAL_PORT))
        listener.listen(5)
        listener.settimeout(0.2)
    except OSError:
        listener.close()
        listener = None

    stop = threading.Event()

    def accept():
        while listener is not None and not stop.is_set():
            try:
                conn, addr = listener.accept()
                connections.append(addr)
                conn.close()
            except (socket.timeout, OSError):
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "grader", "demo", "--out", str(out), "--quiet"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "COURSE_GRADING_SEED"})
    seconds = time.monotonic() - started
    stop.set()
    thread.join()
    if listener is not None:
        listener.close()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    grades = out / "grades"
    rows = {r["student"]: r for r in csv.DictReader((grades / "grades.csv").open())}
    records = {p.parent.name: json.loads(p.read_text()) for p in (grades / "results").glob("*/01_attention.json")}
    run = json.loads((grades / "run.json").read_text())
    print(proc.stdout)
    return {"rows": rows, "records": records, "run": run, "grades": grades, "seconds": seconds,
            "connections": connections, "listening": listener is not None, "stdout": proc.stdout}


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_points_and_status(graded, student):
    points, status, why = EXPECTED[student]
    row = graded["rows"][student]
    assert (float(row["points"]), row["status"]) == (points, status), \
        f"{student} ({why}): got {row['points']} / {row['status']}: {row['details']}"
    assert row["max_points"] == "10"


def _output(graded, student):
    return "\n".join(c.get("output") or "" for c in graded["records"][student]["cells"])


def test_nothing_secret_is_reachable_from_the_sandbox(graded):
    text = _output(graded, "olivia_reads_secrets")
    assert "LEAKED" not in text, text
    assert "blocked: nothing secret on the file system" in text
    assert "blocked: no seed in environment" in text
    assert text.count("blocked: read") == 8 and text.count("blocked: write") == 5
    assert "processes visible: [1]" in text


def test_no_network(graded):
    text = "\n".join(line for line in _output(graded, "yolanda_network").splitlines() if line.startswith("network:"))
    assert "CONNECTED" not in text and text.count("blocked") == 5, text
    if graded["listening"]:
        assert graded["connections"] == []


def test_forged_exports_are_refused_with_reasons(graded):
    reasons = {c["case_id"]: c["reason"] for t in graded["records"]["peggy_writes_results"]["tests"]
               for c in t["cases"]}
    assert "larger than expected" in reasons["attention.sdpa"]
    assert "FIFO" in reasons["attention.sdpa_bool_mask"]
    assert "symbolic link" in reasons["attention.sdpa_additive_mask"]


def test_status_details_say_why(graded):
    rows = graded["rows"]
    assert "SIGSEGV" in rows["trent_segfault"]["details"]
    assert "interrupted" in rows["quinn_infinite_loop"]["details"]
    assert "killed" in rows["sybil_unstoppable_loop"]["details"]
    assert "reference" in rows["zack_imports_reference"]["details"]
    assert "re-inserted" in rows["frank_deleted_tests"]["details"]
    assert "changed" in rows["dave_edited_tests"]["details"]
    assert "output cut" in rows["wendy_huge_output"]["details"]
    assert "01_attention-Copy1.ipynb" in rows["ben_renamed_notebook"]["details"]
    assert "JSON" in rows["dan_invalid_json"]["details"]
    zack = graded["records"]["zack_imports_reference"]["tests"][0]["cases"][0]["reason"]
    assert "not available while grading" in zack


def test_no_keyring_from_the_sandbox(graded):
    text = "\n".join(line for line in _output(graded, "hal_keyring").splitlines() if line.startswith("keyring:"))
    assert text.count("blocked EPERM") == 4 and "CREATED" not in text and "READABLE" not in text, text
    assert "LEFT BEHIND" not in text, text


def test_new_cases_say_why(graded):
    rows, records = graded["rows"], graded["records"]
    assert "symbolic link" in rows["liam_symlinked_folder"]["details"]
    assert "flash_attention" in rows["mona_imports_flash_attention"]["details"]
    mona = [c["error"] for c in records["mona_imports_flash_attention"]["cells"] if c.get("grade_id") == "softmax"]
    assert mona[0]["ename"] == "ImportError" and "flash_attention" in mona[0]["evalue"], mona
    gus = records["gus_lone_surrogate"]
    assert "\ufffd" in _output(graded, "gus_lone_surrogate") or "?" in _output(graded, "gus_lone_surrogate")
    assert any("\ufffd" in c["source"] for c in gus["cells"])
    jan = records["jan_scratch_after_answer"]
    ran = [c for c in jan["cells"] if c["kind"] == "test" or "scratch" in c["source"]]
    assert [c["kind"] for c in ran][-1] == "plain", "the scratch cell stays last, after the tests"


def test_feedback_pages_hide_the_hidden_tests(graded):
    hidden_lines = ['for case_id in ("attention.softmax", "attention.softmax_masked"):',
                    "case.check(scaled_dot_product_attention(**case.inputs))"]
    pages = list((graded["grades"] / "feedback").glob("*/01_attention.html"))
    assert {p.parent.name for p in pages} == set(EXPECTED)
    for page in pages:
        html = page.read_text()
        assert "### BEGIN HIDDEN TESTS" not in html
        for line in hidden_lines:
            assert line not in html.replace("&quot;", '"'), page
    wendy = (graded["grades"] / "feedback" / "wendy_huge_output" / "01_attention.html").stat().st_size
    assert wendy < 400_000


def test_every_submission_ran_and_the_time_is_reported(graded):
    run = graded["run"]
    assert run["submissions_run"] == 36
    # No bound on the time (it is the machine's and the load's); pytest's --timeout catches a hang.
    assert run["seconds"] > 0 and run["seconds_per_submission"] > 0
    print(f"demo class: {run['seconds']} s, {run['seconds_per_submission']} s per notebook-submission")


def test_the_term_late_rule_columns(graded):
    rows = graded["rows"]
    lena, ken, max_ = rows["lena_two_days_late"], rows["ken_extension"], rows["max_after_cutoff"]
    assert (lena["raw_points"], lena["late_penalty"], lena["points"], lena["days_late"]) == ("10", "2", "8", "2")
    assert (ken["late_penalty"], ken["days_late"]) == ("0", "") and "extension" in ken["details"]
    assert (max_["raw_points"], max_["points"]) == ("10", "0") and "more than 7 days late" in max_["details"]
    assert rows["alice_correct"]["submitted"] == "2026-02-06 21:30 UTC" and rows["alice_correct"]["late_penalty"] == "0"
    assert rows["eve_no_submission"]["submitted"] == "" and rows["eve_no_submission"]["late_penalty"] == "0"
    page = (graded["grades"] / "feedback" / "lena_two_days_late" / "01_attention.html").read_text()
    assert "Late penalty" in page and "2 started days late" in page
    assert "late policy" in graded["stdout"] and "lena_two_days_late: submitted" in graded["stdout"]


def test_the_term_collects_canvas_and_moodle_downloads(graded):
    """Nine students arrive as Canvas's and Moodle's downloads (tests/fixtures/demo_class/lms/), collected
    through the gradebook export and the grading worksheet before grading, with the LMSs' own times."""
    out, rows = graded["stdout"], graded["rows"]
    assert "5 submissions collected (5 from Canvas), 1 file skipped" in out
    assert "4 submissions collected (4 from Moodle), 2 files skipped" in out
    assert out.count("1 resubmission replaced an older file") == 2 and "2 marked LATE by Canvas" in out
    assert "1 submission has no submission time: time unknown, not checked for lateness (sam_copies_rita)" in out
    assert "1 submission has no submission time: time unknown, not checked for lateness (amy_stderr_and_warnings)" in out
    assert "Canvas user 1099 is not in Canvas's gradebook export" in out
    assert "Moodle participant 3099 is not in this assignment's Moodle grading worksheet" in out
    for student in ("sam_copies_rita", "amy_stderr_and_warnings"):           # no time: said, never guessed
        assert rows[student]["submitted"] == "" and "time unknown: not checked for lateness" in rows[student]["details"]
    assert rows["lena_two_days_late"]["submitted"] == "2026-02-08 09:00 UTC"     # Canvas's submitted_at
    assert rows["max_after_cutoff"]["submitted"] == "2026-02-16 10:00 UTC"       # Moodle's worksheet
    # the resubmissions, not the first files (the untouched release, 0 points), were graded
    assert rows["rita_own_work"]["raw_points"] == "8" and rows["dave_edited_tests"]["raw_points"] == "2"


def test_the_term_similarity_flags_the_copied_pair_only(graded):
    with (graded["grades"] / "similarity" / "01_attention.csv").open() as fh:
        flagged = {(r["student_a"], r["student_b"]) for r in csv.DictReader(fh) if r["flagged"]}
    assert {frozenset(p) for p in flagged} == {frozenset(("rita_own_work", "sam_copies_rita"))}, flagged
    page = (graded["grades"] / "similarity" / "01_attention.html").read_text()
    assert "<mark>" in page and "rita_own_work" in page
    assert "rita_own_work + sam_copies_rita" in graded["stdout"]
    assert graded["rows"]["sam_copies_rita"]["points"] == graded["rows"]["rita_own_work"]["points"] == "8"


def test_the_term_lms_files_and_question_pages(graded):
    from grader.trusted import lms

    canvas = lms.read_canvas((graded["grades"] / "lms" / "canvas.csv").read_text())
    moodle = lms.read_moodle((graded["grades"] / "lms" / "moodle.csv").read_text(), "Email address")
    for student, (points, status, _) in EXPECTED.items():       # no submission: no grade (blank / -), not 0
        want = None if status == "no submission" else points
        assert canvas["students"][("SIS User ID", student)]["01_attention"] == want, student
        assert moodle[f"{student.split('_')[0]}@example.org"]["01_attention"] == want, student
    assert (graded["grades"] / "lms" / "moodle-questions.csv").exists()
    page = (graded["grades"] / "questions" / "01_attention" / "written_values.html").read_text()
    assert "Mark scheme" in page and page.count("class='answer'") == len(EXPECTED)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_formgrader_shows_the_results_and_hand_grades_come_back(graded, tmp_path):
    """Push into a fresh nbgrader gradebook; formgrader (the pinned Jupyter) lists the submissions
    with our scores; a hand grade entered there reaches the grade table."""
    import urllib.parse
    import urllib.request

    from nbgrader.api import Gradebook

    course = tmp_path / "course"
    (course / "source" / "01_attention").mkdir(parents=True)
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    (course / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.root = {str(course)!r}\n"
        "c.CourseDirectory.course_id = 'demo'\n"
        "c.CourseDirectory.source_directory = 'source'\n"
        f"c.CourseDirectory.db_url = {db_url!r}\n")
    out = subprocess.run([sys.executable, "-m", "grader", "formgrader", "--grades", str(graded["grades"]),
                          "--db-url", db_url, "--course-id", "demo", "--autograded", str(course / "autograded"),
                          "--submitted", str(DEMO / "submitted")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    with Gradebook(db_url, course_id="demo") as gb:
        scores = {s.student.id: (s.score, s.needs_manual_grade) for s in gb.assignment_submissions("01_attention")}
        assert len(scores) == graded["run"]["submissions_run"] == 36 and len(gb.students) == len(EXPECTED)
        assert scores["alice_correct"] == (10.0, False) and scores["bob_stub"] == (0.0, False)
        assert scores["carol_wrong_scale"] == (2.0, True)
        grade = gb.find_grade("written_values", "01_attention", "01_attention", "carol_wrong_scale")
        grade.manual_score = 1.5          # what formgrader's "save" does
        grade.needs_manual_grade = False
        comment = gb.find_comment("written_values", "01_attention", "01_attention", "carol_wrong_scale")
        comment.manual_comment = "names both roles of a token"
        gb.db.commit()

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "server", "--no-browser", f"--port={port}", "--ServerApp.token=t",
         f"--ServerApp.root_dir={course}", "--allow-root"],
        cwd=course, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                 JUPYTER_PATH=str(ROOT / "grader" / "jupyter")))     # formgrader's MathJax from this server
    try:
        url = f"http://127.0.0.1:{port}/formgrader/api/submitted_notebooks/01_attention/01_attention?token=t"
        listing = None
        for _ in range(120):
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    listing = json.loads(resp.read())
                break
            except OSError:
                time.sleep(0.5)
        assert listing is not None, "formgrader did not answer"
        by_student = {x["student"]: x for x in listing}
        assert len(by_student) == 36
        assert by_student["carol_wrong_scale"]["score"] == 3.5
        # Manage Submissions: every submission that ran is "autograded" (its gradebook time is the
        # submitted folder's timestamp.txt, as nbgrader compares them), with the class list's names
        url = f"http://127.0.0.1:{port}/formgrader/api/submissions/01_attention?token=t"
        shutil.copytree(DEMO / "submitted", course / "submitted")     # where Manage Submissions reads timestamps
        with urllib.request.urlopen(url, timeout=30) as resp:
            manage = {x["student"]: x for x in json.loads(resp.read())}
        ran = set(by_student)
        assert {s for s, x in manage.items() if s in ran and not x["autograded"]} == set(), manage
        assert manage["alice_correct"]["first_name"] == "Alice" and manage["alice_correct"]["last_name"] == "Demo"
        carol = by_student["carol_wrong_scale"]["id"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/formgrader/submissions/{carol}/?token=t",
                                    timeout=30) as resp:
            page = resp.read().decode()
        assert "written_values" in page
        # the maths renders offline: MathJax from this server (jupyter-server-mathjax), no CDN
        assert "cdnjs" not in page and "../../../static/jupyter_server_mathjax/MathJax.js" in page
        mathjax = urllib.parse.urljoin(f"http://127.0.0.1:{port}/formgrader/submissions/{carol}/",
                                       "../../../static/jupyter_server_mathjax/MathJax.js")
        with urllib.request.urlopen(mathjax, timeout=30) as resp:
            assert resp.status == 200 and b"MathJax" in resp.read(4096)
    finally:
        server.terminate()
        server.wait(timeout=30)

    table = subprocess.run([sys.executable, "-m", "grader", "table", "--grades", str(graded["grades"])],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    rows = {r["student"]: r for r in csv.DictReader((graded["grades"] / "grades.csv").open())}
    assert (rows["carol_wrong_scale"]["points"], rows["carol_wrong_scale"]["status"]) == ("3.5", "graded")
    carol_page = (graded["grades"] / "feedback" / "carol_wrong_scale" / "01_attention.html").read_text()
    assert "graded by hand: names both roles of a token" in carol_page      # the comment typed in formgrader
    assert (rows["alice_correct"]["points"], rows["alice_correct"]["status"]) == ("10", "graded")
