"""The grade table (CSV) and the feedback pages (HTML), from the result records.

Both are rebuilt from grades/results/<student>/<notebook>.json plus the hand
grades (grades/manual.csv), so grading a written answer never re-runs code.

grades.csv:  student, notebook, raw_points, late_penalty, points, max_points, status,
             submitted, due, days_late, details   (points = raw_points - late_penalty: late.py)
cells.csv:   student, notebook, cell, points, max_points, result, reason
feedback/<student>/<notebook>.html: the student's own cells and outputs, and for
each test cell its points and, when it failed, which hidden case failed and a
short reason -- never the hidden tests' code, inputs or reference values.
"""

from __future__ import annotations

import csv
import html
import json
import time
from pathlib import Path

from . import grading, late

from .store import (NOT_RUN, ROSTER_FIELDS, import_roster, load_manual, load_records,  # noqa: F401
                    load_roster, save_manual)

TABLE_FIELDS = ["student", "notebook", "raw_points", "late_penalty", "points", "max_points", "status",
                "submitted", "due", "days_late", "details"]
PRINTED = ["student", "notebook", "raw_points", "late_penalty", "points", "max_points", "status"]
CELL_FIELDS = ["student", "notebook", "cell", "points", "max_points", "result", "reason"]


# --------------------------------------------------------------------------- rows
def fmt(x: float) -> str:
    return f"{x:g}"


def row_for(record: dict, manual: dict, policy: late.Policy | None = None) -> dict:
    student, nb = record["student"], record["notebook"]
    points = float(record["auto_points"])
    pending, details = [], list(record["details"])
    for w in record["written"]:
        entry = manual.get((student, nb, w["grade_id"])) if record["auto_status"] not in NOT_RUN else None
        if entry is not None:
            points += float(entry["points"])
        elif w["unchanged"]:
            details.append(f"written answer '{w['grade_id']}' left unanswered: 0")
        elif record["auto_status"] not in NOT_RUN:
            pending.append(w["grade_id"])
    auto = record["auto_status"]
    lateness = late.assess(policy or late.Policy(), student, nb, record.get("submitted_at"), points,
                           not_run=auto in NOT_RUN)
    if lateness["zeroed"] and pending:          # no hand grade can change a row the late rule zeroes
        details.append("not graded by hand, the late rule gives 0 whatever it earns: " + ", ".join(pending))
        pending = []
    if auto is not None:
        status = auto
    elif pending:
        status = grading.MANUAL
    else:
        status = grading.GRADED
    if pending:
        details.append("needs manual grading: " + ", ".join(pending))
    failed = [t["grade_id"] for t in record["tests"] if not t["passed"]]
    if failed and auto not in NOT_RUN:
        details.append("failed: " + ", ".join(failed))
    if lateness["note"]:
        details.append(lateness["note"])
    return {"student": student, "notebook": nb, "raw_points": fmt(points), "late_penalty": fmt(lateness["penalty"]),
            "points": fmt(lateness["final"]), "max_points": fmt(record["max_points"]), "status": status,
            "submitted": lateness["submitted"], "due": lateness["due"], "days_late": lateness["days_late"],
            "details": "; ".join(details), "zeroed": lateness["zeroed"]}       # zeroed: not a column of grades.csv


def _cell(value) -> str:
    """A CSV field that a spreadsheet will not run as a formula (student-controlled text)."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _safe_row(row: dict) -> dict:
    return {k: _cell(v) for k, v in row.items()}


def write_table(grades: Path, formgrader_grades: dict | None = None, policy: late.Policy | None = None) -> list[dict]:
    """grades.csv and cells.csv from the records and the hand grades; also every feedback page.

    ``formgrader_grades``: hand grades read back from nbgrader's gradebook (formgrader.hand_grades);
    a grade recorded with ``grader manual`` wins over them. ``policy``: the term's due dates and
    late rule (late.load(grading.toml)); none: no penalty.
    """
    grades = Path(grades)
    manual = dict(formgrader_grades or {})
    manual.update(load_manual(grades))                     # `grader manual` wins
    records = load_records(grades)
    rows = [row_for(r, manual, policy) for r in records]
    rows.sort(key=lambda r: (r["student"], r["notebook"]))
    with (grades / "grades.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, TABLE_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(_safe_row(r) for r in rows)
    zeroed = {(r["student"], r["notebook"]) for r in rows if r["zeroed"]}
    with (grades / "cells.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, CELL_FIELDS)
        writer.writeheader()
        for r in records:
            for t in r["tests"]:
                reasons = "; ".join(f"{c['case_id']}: {c['reason']}" for c in t["cases"] if not c["passed"])
                writer.writerow(_safe_row({"student": r["student"], "notebook": r["notebook"], "cell": t["grade_id"],
                                           "points": fmt(t["points"]), "max_points": fmt(t["max_points"]),
                                           "result": "passed" if t["passed"] else "failed", "reason": reasons}))
            for w in r["written"]:
                entry = manual.get((r["student"], r["notebook"], w["grade_id"]))
                result = ("graded by hand" if entry else "unanswered" if w["unchanged"]
                          else "not graded (0 by the late rule)" if (r["student"], r["notebook"]) in zeroed
                          else "needs manual grading")
                writer.writerow(_safe_row({
                    "student": r["student"], "notebook": r["notebook"], "cell": w["grade_id"],
                    "points": fmt(float(entry["points"])) if entry else "0" if w["unchanged"] else "",
                    "max_points": fmt(w["max_points"]), "result": result,
                    "reason": entry.get("comment", "") if entry else ""}))
    for r, row in zip(sorted(records, key=lambda r: (r["student"], r["notebook"])), rows):
        write_feedback(grades, r, row, manual)
    return rows


def print_table(rows: list[dict], stream) -> None:
    widths = {f: max(len(f), *(len(str(r[f])) for r in rows)) if rows else len(f) for f in PRINTED}
    head = "  ".join(f.ljust(widths[f]) for f in PRINTED) + "  details"
    stream.write(head + "\n" + "-" * min(len(head) + 40, 160) + "\n")
    for r in rows:
        line = "  ".join(str(r[f]).ljust(widths[f]) for f in PRINTED)
        details = r["details"]
        stream.write(line + "  " + (details[:110] + ("..." if len(details) > 110 else "")) + "\n")


# --------------------------------------------------------------------------- feedback
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;
color:#1d1d1f;line-height:1.45}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;margin:.6em 0} td,th{border:1px solid #ddd;padding:.35em .6em;
text-align:left;vertical-align:top} th{background:#f5f5f7}
.pass{color:#0a7d22;font-weight:600} .fail{color:#b3261e;font-weight:600} .warn{color:#8a5a00;font-weight:600}
pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:.6em;overflow-x:auto;white-space:pre-wrap;
word-break:break-all;font-size:.86em;margin:.3em 0}
pre.out{background:#fff;border-style:dashed} pre.err{background:#fff5f5;border-color:#f3b7b2}
.cell{margin:1em 0;padding:.4em .8em;border-left:4px solid #d0d7de}
.cell.instructor,.cell.course{border-left-color:#8250df} .cell.test{border-left-color:#0969da}
.meta{font-size:.8em;color:#57606a} .note{font-size:.85em;color:#8a5a00}
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def write_feedback(grades: Path, record: dict, row: dict, manual: dict) -> Path:
    student, nb = record["student"], record["notebook"]
    out = Path(grades) / "feedback" / student / f"{nb}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
             f"<title>{_e(nb)}: feedback for {_e(student)}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(nb)}</h1><p class='meta'>Feedback for <b>{_e(student)}</b>, "
             f"generated {_e(time.strftime('%Y-%m-%d %H:%M'))}</p>",
             "<table><tr><th>Points</th><th>Status</th><th>Details</th></tr>",
             f"<tr><td><b>{_e(row['points'])}</b> / {_e(row['max_points'])}</td><td>{_e(row['status'])}</td>"
             f"<td>{'<br>'.join(_e(d) for d in row['details'].split('; ')) if row['details'] else ''}</td></tr>"
             "</table>"]
    if row.get("due") or row.get("submitted"):                 # due date and late policy (late.py)
        parts.append("<table><tr><th>Submitted</th><th>Due</th><th>Days late</th><th>Points earned</th>"
                     "<th>Late penalty</th><th>Points</th></tr>"
                     f"<tr><td>{_e(row.get('submitted') or 'unknown')}</td><td>{_e(row.get('due') or '-')}</td>"
                     f"<td>{_e(row.get('days_late') or '0')}</td><td>{_e(row['raw_points'])}</td>"
                     f"<td>{_e(row['late_penalty'])}</td><td><b>{_e(row['points'])}</b></td></tr></table>")
    parts.append("<h2>Tests</h2><p class='meta'>Points come from hidden tests run at grading time on fresh "
                 "inputs; every case of a test cell must pass for its points.</p>"
                 "<table><tr><th>Test cell</th><th>Points</th><th>Result</th></tr>")
    for t in record["tests"]:
        if t["passed"]:
            result = "<span class='pass'>passed</span>"
        else:
            reasons = [f"<code>{_e(c['case_id'])}</code>: {_e(c['reason'])}" for c in t["cases"] if not c["passed"]]
            result = "<span class='fail'>failed</span>" + ("<br>" + "<br>".join(reasons) if reasons else "")
        parts.append(f"<tr><td><code>{_e(t['grade_id'])}</code></td><td>{_e(fmt(t['points']))} / "
                     f"{_e(fmt(t['max_points']))}</td><td>{result}</td></tr>")
    for w in record["written"]:
        entry = manual.get((student, nb, w["grade_id"])) if record["auto_status"] not in NOT_RUN else None
        if record["auto_status"] in NOT_RUN:
            result, pts = f"<span class='fail'>{_e(record['auto_status'])}</span>", f"0 / {_e(fmt(w['max_points']))}"
        elif entry:
            result = "graded by hand" + (f": {_e(entry.get('comment', ''))}" if entry.get("comment") else "")
            pts = f"{_e(fmt(float(entry['points'])))} / {_e(fmt(w['max_points']))}"
        elif w["unchanged"]:
            result, pts = "<span class='fail'>not answered</span>", f"0 / {_e(fmt(w['max_points']))}"
        elif row.get("zeroed"):
            result, pts = "not graded: the late rule gives this notebook 0", f"- / {_e(fmt(w['max_points']))}"
        else:
            result, pts = "<span class='warn'>waiting for a hand grade</span>", f"? / {_e(fmt(w['max_points']))}"
        parts.append(f"<tr><td><code>{_e(w['grade_id'])}</code> (written)</td><td>{pts}</td><td>{result}</td></tr>")
    parts.append("</table>")

    if record["cells"]:
        parts.append("<h2>Your notebook, as it ran</h2><p class='meta'>Test cells are the course's own "
                     "(restored if they had been changed); the hidden part of each test is not shown. "
                     "Outputs are cut when long.</p>")
    reference_failed = None            # the first course cell that needed the reference (off while grading)
    for c in record["cells"]:
        classes = "cell " + c["owner"] + (" test" if c["kind"] == "test" else "")
        who = {"student": "your cell", "course": "course cell, as released"}.get(c["owner"], "course cell")
        label = f"cell {c['index']} · {who}" + (f" · <code>{_e(c['grade_id'])}</code>" if c.get("grade_id") else "")
        error = c.get("error") or {}
        uses_reference = "is what this notebook asks you to write" in error.get("evalue", "")
        # A later course cell that fails only on a name that cell could not define fails for the same reason.
        follows_reference = (reference_failed is not None and c["owner"] == "course" and c["kind"] != "test"
                             and error.get("ename") == "NameError" and not uses_reference)
        if uses_reference and c["owner"] == "course" and c["kind"] != "test" and reference_failed is None:
            reference_failed = c["index"]
        if c["cell_type"] == "markdown" and c["kind"] != "written":
            parts.append(f"<details class='{classes}'><summary class='meta'>{label} · text</summary>"
                         f"<pre>{_e(c['source'])}</pre></details>")
            continue
        # A course cell (not a test) whose only error is the reference being off costs nothing: folded too.
        free = c["owner"] == "course" and c["kind"] != "test" and (uses_reference or follows_reference)
        folded = c["owner"] == "course" and (not c.get("error") or free) and not c.get("timeout") and c.get("ran", True)
        if folded:
            status = ("stopped while grading (costs no points)" if c.get("error") else
                      "skipped while grading (costs no points)" if c.get("skipped") else "ran")
            parts.append(f"<details class='{classes}'><summary class='meta'>{label} · {status}</summary>")
        else:
            parts.append(f"<div class='{classes}'><div class='meta'>{label}</div>")
        if c.get("note"):
            parts.append(f"<div class='note'>{_e(c['note'])}</div>")
        if uses_reference and c["owner"] == "course":
            parts.append("<div class='note'>This course cell compares with the course's reference "
                         "implementation, which is not available while grading: its error costs no points.</div>")
        elif follows_reference:
            parts.append(f"<div class='note'>This course cell uses what cell {reference_failed} builds with the "
                         "course's reference implementation, which is not available while grading: its error "
                         "costs no points.</div>")
        source = c["source"]
        if c["kind"] == "test":
            source = source.rstrip() + "\n# (hidden tests run here at grading time)"
        parts.append(f"<pre>{_e(source)}</pre>")
        if c["cell_type"] == "code":
            if c.get("output"):
                parts.append(f"<pre class='out'>{_e(c['output'])}</pre>")
            if c.get("timeout"):
                parts.append("<pre class='err'>interrupted: the cell ran past the time limit</pre>")
            elif error:
                parts.append(f"<pre class='err'>{_e(error.get('ename'))}: {_e(error.get('evalue'))}</pre>")
            if not c.get("ran") and c["source"].strip():
                parts.append("<pre class='err'>did not run (the notebook had stopped)</pre>")
        parts.append("</details>" if folded else "</div>")
    parts.append("</body></html>\n")
    out.write_text("\n".join(parts), encoding="utf-8", errors="replace")
    return out
