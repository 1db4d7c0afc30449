"""Hand grading in nbgrader's formgrader: push results into the gradebook, read hand grades back.

    python -m grader formgrader            (after `make grade`)

For every submission that ran, this writes into nbgrader's gradebook (the
course's, from nbgrader_config.py, unless --db-url says otherwise), through
nbgrader's own Python API:

* the student (names and e-mail from the class list; a name the class list lacks is left as
  the gradebook has it, so names put there by the hub's ``hubctl.py users`` stay), the
  submission with its time (the ``timestamp.txt`` beside it in submitted/, nbgrader's own
  format: Formgrader shows a submission as autograded only when the two agree), and for
  every test cell the points the trusted comparison gave (``auto_score``);
* for every written answer: 0 and no hand grade needed when it was left as
  released, otherwise "needs manual grade" -- or the hand grade already recorded
  with ``python -m grader manual``;

and puts the notebook as it ran (the instructor's test cells, outputs cut) in
autograded/<student>/<assignment>/<notebook>.ipynb, where formgrader looks for
it, made inert first (grader/trusted/inert.py): Formgrader renders a student's markdown
as HTML without a sanitiser, so markup that could run as the instructor is shown as text. The instructor then grades the written answers in JupyterLab's Formgrader
panel; ``python -m grader table`` (or ``make grade-table``) reads those hand
grades back (a grade recorded with ``grader manual`` wins over the gradebook's).

The gradebook is never reachable from a sandbox; nbgrader's autograde is not used.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from . import grading, inert, late, notebooks, store

STATE = "formgrader.json"


def course_settings(root: Path) -> tuple[str, str]:
    """(db_url, course_id) from the course's nbgrader_config.py."""
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    cd = cfg.get("CourseDirectory", {})
    db_url = cd.get("db_url") or f"sqlite:///{root / 'gradebook.db'}"
    return str(db_url), str(cd.get("course_id") or "default_course")


def _ensure_assignment(gb, a: notebooks.Assignment) -> None:
    gb.update_or_create_assignment(a.name)
    gb.update_or_create_notebook(a.name, a.name)
    points = {t.grade_id: t.points for t in a.tests} | {w.grade_id: w.points for w in a.written}
    for cell in a.cells:
        if cell.grade_id is None:
            continue
        if cell.kind in ("test", "written"):
            gb.update_or_create_grade_cell(cell.grade_id, a.name, a.name, max_score=points[cell.grade_id],
                                           cell_type=cell.cell_type)
        if cell.kind in ("solution", "written"):
            gb.update_or_create_solution_cell(cell.grade_id, a.name, a.name)


def _autograded_notebook(record: dict, a: notebooks.Assignment):
    import nbformat

    nb = nbformat.v4.new_notebook(metadata=a.metadata)
    source_cells = {c.grade_id: c for c in a.cells if c.grade_id}
    points = {t.grade_id: t.points for t in a.tests} | {w.grade_id: w.points for w in a.written}
    for c in record["cells"]:
        gid = c.get("grade_id")
        src = source_cells.get(gid)
        text = src.source if src is not None and c["kind"] == "test" else c["source"]
        if c["cell_type"] == "code":
            cell = nbformat.v4.new_code_cell(text)
            if c.get("output"):
                cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=c["output"]))
            if c.get("error"):
                cell.outputs.append(nbformat.v4.new_output("error", ename=c["error"]["ename"],
                                                           evalue=c["error"]["evalue"], traceback=[]))
        elif c["cell_type"] == "markdown":
            cell = nbformat.v4.new_markdown_cell(text)
        else:
            cell = nbformat.v4.new_raw_cell(text)
        if src is not None:
            cell.metadata["nbgrader"] = {
                "grade": src.kind in ("test", "written"), "solution": src.kind in ("solution", "written"),
                "locked": src.kind in ("test", "locked"), "grade_id": gid, "schema_version": 3, "task": False}
            if gid in points:
                cell.metadata["nbgrader"]["points"] = points[gid]
        nb.cells.append(cell)
    return nb


def submission_time(submitted: Path, student: str, assignment: str):
    """The submission's time as nbgrader reads it (naive UTC) from submitted/<student>/<assignment>/timestamp.txt."""
    from nbgrader.utils import parse_utc

    if late.read_timestamp(submitted / student / assignment) is None:     # none, unreadable, a link
        return None
    return parse_utc((submitted / student / assignment / late.TIMESTAMP_FILE).read_text(encoding="utf-8").strip())


def push(*, course: grading.Course, grades: Path, db_url: str | None = None, course_id: str | None = None,
         autograded: Path | None = None, submitted: Path | None = None, students: list[str] | None = None) -> int:
    import nbformat
    from nbgrader.api import Gradebook
    from transformer_course_cases import CASES

    os.environ["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    default_url, default_id = course_settings(course.root)
    db_url = db_url or default_url
    course_id = course_id or default_id
    autograded = Path(autograded or course.root / "autograded")
    submitted = Path(submitted or course.root / "submitted")
    if db_url.startswith("sqlite:///"):
        Path(db_url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    records = [r for r in store.load_records(grades) if not students or r["student"] in students]
    roster = {r["id"]: r for r in store.load_roster(grades)}
    manual = store.load_manual(grades)
    assignments = {name: notebooks.load_assignment(course.source_dir, name, CASES, course.release_dir)
                   for name in sorted({r["notebook"] for r in records})}
    pushed = 0
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")   # nbgrader's own add_submission
    with Gradebook(db_url, course_id=course_id) as gb:
        for a in assignments.values():
            _ensure_assignment(gb, a)
        for r in records:
            student, name = r["student"], r["notebook"]
            info = roster.get(student, {})
            gb.update_or_create_student(student, **{k: info[k] for k in ("first_name", "last_name", "email")
                                                    if info.get(k)})
            if r["run"] is None:          # nothing ran: no submission in nbgrader's sense
                continue
            gb.update_or_create_submission(name, student, timestamp=submission_time(submitted, student, name))
            for t in r["tests"]:
                grade = gb.find_grade(t["grade_id"], name, name, student)
                grade.auto_score = float(t["points"])
                grade.needs_manual_grade = False
            for w in r["written"]:
                grade = gb.find_grade(w["grade_id"], name, name, student)
                entry = manual.get((student, name, w["grade_id"]))
                if entry is not None:
                    grade.manual_score = float(entry["points"])
                    grade.needs_manual_grade = False
                elif w["unchanged"]:
                    grade.auto_score = 0.0
                    grade.needs_manual_grade = False
                else:
                    grade.auto_score = None
                    grade.needs_manual_grade = grade.manual_score is None
            gb.db.commit()
            path = autograded / student / name / f"{name}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            shown, _ = inert.inert_notebook(_autograded_notebook(r, assignments[name]))
            nbformat.write(shown, str(path))
            pushed += 1
    (Path(grades) / STATE).write_text(json.dumps({"db_url": db_url, "course_id": course_id}), encoding="utf-8")
    return pushed


def hand_grades(grades: Path) -> dict[tuple[str, str, str], dict]:
    """Hand grades of written answers entered in formgrader (after a push), as manual entries."""
    state = Path(grades) / STATE
    if not state.exists():
        return {}
    settings = json.loads(state.read_text(encoding="utf-8"))
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    records = store.load_records(grades)
    with Gradebook(settings["db_url"], course_id=settings["course_id"]) as gb:
        for r in records:
            for w in r["written"]:
                try:
                    grade = gb.find_grade(w["grade_id"], r["notebook"], r["notebook"], r["student"])
                except MissingEntry:
                    continue
                if grade.manual_score is not None and r["auto_status"] not in store.NOT_RUN:
                    try:
                        comment = gb.find_comment(w["grade_id"], r["notebook"], r["notebook"], r["student"])
                        text = comment.manual_comment or comment.auto_comment or ""
                    except MissingEntry:
                        text = ""
                    out[(r["student"], r["notebook"], w["grade_id"])] = {
                        "student": r["student"], "notebook": r["notebook"], "cell": w["grade_id"],
                        "points": f"{grade.manual_score:g}", "comment": text.strip() or "graded in formgrader",
                        "graded_at": ""}
    return out
