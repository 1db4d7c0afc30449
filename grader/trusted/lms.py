"""Grades into the LMS: Canvas's gradebook CSV and Moodle's grade-import CSV, as they import them.

    python -m grader export [--per-question]                    (make grade-export)

writes grades/lms/canvas.csv and grades/lms/moodle.csv -- one column per notebook holding the
table's final points (late penalty applied) -- and, with ``--per-question``,
canvas-questions.csv and moodle-questions.csv with one column per test cell and written answer
("<notebook> <cell>", points before any late penalty). Students are the class list's
(grades/students.csv): matched in Canvas by SIS User ID (the list's id) and SIS Login ID (its
e-mail), in Moodle by "ID number" or "Email address" (choose one when importing). A student on the
class list without a submission gets what each LMS reads as "no grade" -- blank for Canvas (its
importer's ``no_score?``: blank or "-"; no score before and none after is no change), "-" for Moodle
(``load_data.php``: "-" is no grade for an existing grade item and for a new one, while a blank would
be a grade for a new item) -- not 0; a graded student missing from the class list is reported and
left out (the LMS could not match them). Points are rounded to cents half up in decimal (store.cents),
as the table's points already are and as Canvas's own exporter rounds: 8.325 is 8.33 everywhere.

The rules each file follows, and that ``read_canvas`` / ``read_moodle`` check on the written file
(the export refuses to write a file its LMS would misread):

Canvas -- from Canvas's own importer, instructure/canvas-lms ``lib/gradebook_importer.rb``:
  * the header row starts with the student columns: row[0] contains "Student", row[1] contains "ID"
    (``row_has_student_headers?``), then "SIS User ID" and "SIS Login ID" (``update_column_count``),
    and the last student column is "Section" (``header?``); every later column is an assignment;
  * an assignment column is "Title" or "Title (id)" (``Assignment.title_and_id``); a title Canvas
    does not know becomes a new assignment;
  * a row whose first field contains "Points Possible" sets the assignments' points (``process_pp``);
  * a student is found by ID, else by SIS User ID, else by SIS Login ID, else by name (``process_student``);
  * fields are comma (or semicolon) separated; a number may use "." or "," as its decimal mark
    (``decimal_comma_to_period``); the exporter rounds to 2 decimals, the importer compares at that
    precision (``no_change_to_value?``): points are written with at most 2 decimals; blank or "-" is
    no score, "EX" excused.
Moodle -- from Moodle's importer, moodle/moodle ``grade/import/csv/classes/load_data.php`` and
``lib/csvlib.class.php`` (``csv_import_reader``):
  * UTF-8 (a BOM is removed), the first row is the header (names trimmed), every row must have the
    header's number of fields ("csvweirdcolumns");
  * one column identifies the user, mapped when importing to user id, ID number, e-mail or username
    (``map_user_data_with_value``); the other columns are mapped to grade items (or a new item
    named after the header);
  * a grade is a number ("" or "-": no grade; ``unformat_float``) and at most the site's
    gradepointmax (100 unless ``unlimitedgrades``; ``insert_grade_record``: "gradevaluetoobig").
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from .store import cents, load_roster

NO_SUBMISSION = "no submission"          # grading.NO_SUBMISSION (lms does not import the grader)

CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_STUDENT_COLUMNS = ["First name", "Last name", "ID number", "Email address"]
MOODLE_GRADEPOINTMAX = 100.0


class ExportError(ValueError):
    """The export would not import as intended (the reason says which rule)."""


def points_text(value: float) -> str:
    """At most 2 decimals (half up, in decimal: store.cents), '.' as the decimal mark, no thousands separator."""
    text = f"{cents(value):f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _student_name(row: dict) -> str:
    last, first = (row.get("last_name") or "").strip(), (row.get("first_name") or "").strip()
    return f"{last}, {first}" if last and first else (last or first or row["id"])


def _formula_safe(text: str) -> str:
    """A spreadsheet would run a field starting with = + - @ as a formula (names come from the class list)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _columns(rows: list[dict]) -> list[str]:
    return sorted({r["notebook"] for r in rows})


def table(rows: list[dict], roster: list[dict], cell_rows: list[dict] | None = None
          ) -> tuple[list[str], dict[str, dict[str, float | None]], dict[str, float], list[str]]:
    """(columns, student -> {column: points, None: no submission}, column -> points possible, warnings)."""
    warnings = []
    ids = [r["id"] for r in roster] or sorted({r["student"] for r in rows})
    if not roster:
        warnings.append("no class list (grades/students.csv): students are matched by their folder name only")
    known = set(ids)
    stray = sorted({r["student"] for r in rows} - known)
    if stray:
        warnings.append(f"not on the class list, left out: {', '.join(stray)}")
    values: dict[str, dict[str, float | None]] = {sid: {} for sid in ids}
    possible: dict[str, float] = {}
    absent = {(r["student"], r["notebook"]) for r in rows if r["status"] == NO_SUBMISSION}
    if cell_rows is None:
        columns = _columns(rows)
        for r in rows:
            possible[r["notebook"]] = float(r["max_points"])
            if r["student"] in values:
                values[r["student"]][r["notebook"]] = (None if (r["student"], r["notebook"]) in absent
                                                       else float(r["points"] or 0))
        pending = sorted({f"{r['student']} {r['notebook']}" for r in rows
                          if r["status"] == "needs manual grading" and r["student"] in known})
        if pending:
            warnings.append(f"{len(pending)} rows still need manual grading (their points so far are exported)")
    else:
        columns = []
        for r in cell_rows:
            col = f"{r['notebook']} {r['cell']}"
            if col not in possible:
                columns.append(col)
            possible[col] = float(r["max_points"])
            if r["student"] in values and r["points"] != "" and (r["student"], r["notebook"]) not in absent:
                values[r["student"]][col] = float(r["points"])
    for sid in ids:
        for col in columns:
            values[sid].setdefault(col, None)
    blank = sum(1 for sid in ids if all(values[sid][c] is None for c in columns)) if columns else 0
    if blank:
        warnings.append(f"{blank} student{'s' if blank != 1 else ''} without any submission: no grade (Canvas: blank, "
                        "Moodle: -), not 0")
    return columns, values, possible, warnings


def canvas_csv(columns, values, possible, roster: list[dict], canvas_ids: dict | None = None) -> str:
    by_id = {r["id"]: r for r in roster}
    heads = [f"{c} ({canvas_ids[c]})" if canvas_ids and c in canvas_ids else c for c in columns]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CANVAS_STUDENT_COLUMNS + heads)
    writer.writerow(["Points Possible", "", "", "", ""] + [points_text(possible[c]) for c in columns])
    for sid, row in values.items():
        who = by_id.get(sid, {"id": sid})
        writer.writerow([_formula_safe(_student_name(who)), "", sid, _formula_safe((who.get("email") or "").strip()), ""]
                        + ["" if row[c] is None else points_text(row[c]) for c in columns])
    return out.getvalue()


def moodle_csv(columns, values, roster: list[dict], gradepointmax: float = MOODLE_GRADEPOINTMAX) -> str:
    by_id = {r["id"]: r for r in roster}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(MOODLE_STUDENT_COLUMNS + columns)
    for sid, row in values.items():
        who = by_id.get(sid, {"id": sid})
        for c in columns:
            if row[c] is not None and row[c] > gradepointmax:
                raise ExportError(f"Moodle refuses grades above gradepointmax ({gradepointmax:g}): {sid} {c} = {row[c]:g}")
        writer.writerow([_formula_safe((who.get("first_name") or "").strip()),
                         _formula_safe((who.get("last_name") or "").strip()), sid,
                         _formula_safe((who.get("email") or "").strip())]
                        + ["-" if row[c] is None else points_text(row[c]) for c in columns])
    return out.getvalue()


# --------------------------------------------------------------------------- readers (the importers' rules)
TITLE_AND_ID = re.compile(r"\A(.*)\s\((\d+)\)\Z")
NON_ASSIGNMENT = ("Current Score", "Current Points", "Current Grade", "Final Score", "Final Points", "Final Grade",
                  "Override Score", "Override Grade", "Override Status")


def _canvas_number(field: str) -> float | None:
    """gradebook_importer.rb's decimal_comma_to_period, then a number (None: no score)."""
    field = field.strip()
    if field in ("", "-") or field.upper() == "EX":
        return None
    if re.fullmatch(r"-?[0-9.,]+%?", field):
        parts = re.split(r"[,.]", field)
        field = parts[-1] if len(parts) == 1 else "".join(parts[:-1]) + "." + parts[-1]
    return float(field.rstrip("%"))


def read_canvas(text: str) -> dict:
    """Parse a gradebook CSV as Canvas's importer does: {assignments, points_possible, students}."""
    rows = list(csv.reader(io.StringIO(text.lstrip("\ufeff"))))
    if not rows:
        raise ExportError("Canvas: empty file")
    head = rows[0]
    if not (len(head) > 3 and "Student" in head[0] and "ID" in head[1]):
        raise ExportError("Canvas: the header must start with 'Student', 'ID' (row_has_student_headers?)")
    student_columns = 3
    sis_user = sis_login = None
    if re.search(r"SIS\s+Login\s+ID", head[2]):
        sis_login, student_columns = 2, 4
    elif re.search(r"SIS\s+User\s+ID", head[2]) and re.search(r"SIS\s+Login\s+ID", head[3]):
        sis_user, sis_login, student_columns = 2, 3, 5
    if "Section" not in head[student_columns - 1]:
        raise ExportError("Canvas: the last student column must be 'Section' (header?)")
    assignment_cols = [(i, h) for i, h in enumerate(head) if i >= student_columns
                       and not any(n in h for n in NON_ASSIGNMENT)]
    assignments = []
    for i, h in assignment_cols:
        m = TITLE_AND_ID.match(h)
        assignments.append((i, m.group(1) if m else h, m.group(2) if m else None))
    out = {"assignments": [(t, cid) for _, t, cid in assignments], "points_possible": {}, "students": {}}
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(head):
            raise ExportError(f"Canvas: line {n} has {len(row)} fields, the header {len(head)}")
        if "Points Possible" in row[0]:
            out["points_possible"] = {t: _canvas_number(row[i]) for i, t, _ in assignments}
            continue
        if all(re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", c, re.I) for c in row):
            continue
        key = (row[1].strip() and ("ID", row[1].strip())) \
            or (sis_user is not None and row[sis_user].strip() and ("SIS User ID", row[sis_user].strip())) \
            or (sis_login is not None and row[sis_login].strip() and ("SIS Login ID", row[sis_login].strip())) \
            or ("name", row[0].strip())
        if key in out["students"]:
            raise ExportError(f"Canvas: line {n}: a second row for {key[0]} {key[1]}")
        out["students"][key] = {t: _canvas_number(row[i]) for i, t, _ in assignments}
    return out


def read_moodle(text: str, identify_by: str = "Email address",
                gradepointmax: float = MOODLE_GRADEPOINTMAX) -> dict[str, dict[str, float | None]]:
    """Parse a grade-import CSV as Moodle's csv_import_reader and load_data do: user -> {column: grade}."""
    text = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").strip()
    rows = [r for r in csv.reader(io.StringIO(text)) if r != [""] and r]
    if not rows:
        raise ExportError("Moodle: empty file (csvemptyfile)")
    head = [h.strip() for h in rows[0]]
    for n, row in enumerate(rows, start=1):
        if len(row) != len(head):
            raise ExportError(f"Moodle: line {n} has {len(row)} fields, the header {len(head)} (csvweirdcolumns)")
    if identify_by not in head:
        raise ExportError(f"Moodle: no column {identify_by!r} to identify users by")
    who = head.index(identify_by)
    grade_cols = [(i, h) for i, h in enumerate(head) if h not in MOODLE_STUDENT_COLUMNS]
    out = {}
    for n, row in enumerate(rows[1:], start=2):
        user = row[who].strip()
        if not user:                                        # "Skip invalid row with blank user field."
            continue
        grades = {}
        for i, h in grade_cols:
            value = row[i].strip()
            if value in ("", "-"):
                grades[h] = None
                continue
            try:
                number = float(value)                        # unformat_float with '.' as the decimal mark
            except ValueError:
                raise ExportError(f"Moodle: line {n}, {h}: {value!r} is not a number (badgrade)") from None
            if number > gradepointmax:
                raise ExportError(f"Moodle: line {n}, {h}: {number:g} > {gradepointmax:g} (gradevaluetoobig)")
            grades[h] = number
        if user in out:
            raise ExportError(f"Moodle: line {n}: a second row for {user}")
        out[user] = grades
    return out


def export(grades: Path, rows: list[dict], per_question: bool = False, canvas_ids: dict | None = None,
           gradepointmax: float = MOODLE_GRADEPOINTMAX) -> tuple[list[Path], list[str]]:
    """Write grades/lms/*.csv from the table rows (and cells.csv); check each file as its LMS reads it."""
    grades = Path(grades)
    roster = load_roster(grades)
    out_dir = grades / "lms"
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [("", None)]
    if per_question:
        with (grades / "cells.csv").open(newline="", encoding="utf-8") as fh:
            jobs.append(("-questions", list(csv.DictReader(fh))))
    written, warnings = [], []
    for suffix, cell_rows in jobs:
        columns, values, possible, notes = table(rows, roster, cell_rows)
        warnings += [n for n in notes if n not in warnings]
        canvas = canvas_csv(columns, values, possible, roster, canvas_ids if not suffix else None)
        moodle = moodle_csv(columns, values, roster, gradepointmax)
        parsed = read_canvas(canvas)                         # the export must read back as it was meant
        for sid, row in values.items():
            got = parsed["students"][("SIS User ID", sid)]
            if any((got[c] is None) != (row[c] is None) or (row[c] is not None and
                   abs(got[c] - float(cents(row[c]))) > 1e-9) for c in columns):
                raise ExportError(f"Canvas export of {sid} does not read back")
        back = read_moodle(moodle, "ID number", gradepointmax)
        for sid, row in values.items():
            if any((back[sid][c] is None) != (row[c] is None) for c in columns):
                raise ExportError(f"Moodle export of {sid} does not read back")
        for name, text in ((f"canvas{suffix}.csv", canvas), (f"moodle{suffix}.csv", moodle)):
            path = out_dir / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written, warnings
