"""The grades folder's stored data: result records, hand grades, the class list.

Plain files under grades/: results/<student>/<notebook>.json (one record per graded
submission, written by grading.py), manual.csv (hand grades), students.csv (class list).
Everything read here may hold text a student wrote; strings are made encodable
(a lone surrogate becomes U+FFFD) so no student's bytes can stop the table or the
feedback of the class.
"""

from __future__ import annotations

import csv
import json
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from .textsafe import clean

MANUAL_FIELDS = ["student", "notebook", "cell", "points", "comment", "graded_at"]
ROSTER_FIELDS = ["id", "first_name", "last_name", "email"]
# Statuses of rows where nothing ran: no hand grade applies to them (grading.py defines them).
NOT_RUN = ("no submission", "invalid file", "notebook missing or renamed")


def safe_name(name: str) -> bool:
    """A student or assignment id that can be a folder name and be written anywhere (UTF-8, printable)."""
    return (bool(name) and not name.startswith(".") and "/" not in name and len(name) < 200
            and name.isprintable() and clean(name) == name)



# --------------------------------------------------------------------------- points
POINT_STEP = Decimal("0.25")      # hand grades: quarter points (the mark schemes award 0.25s), page and `grader manual`


def cents(value) -> Decimal:
    """Points to 2 decimals, half up, in decimal: 8.325 -> 8.33, as the table shows 8.325 and as Canvas's own
    exporter rounds (lib/gradebook_exporter.rb format_numbers: I18n.n(precision: 2), a BigDecimal)."""
    return Decimal(repr(float(value)) if not isinstance(value, Decimal) else value).quantize(
        Decimal("0.01"), rounding=ROUND_HALF_UP)


def hand_points(raw, maximum: float, student: str, written: dict | None, status: str | None) -> float:
    """The one rule for a hand grade (the question pages and `grader manual`): a number, a multiple of 0.25,
    between 0 and the answer's points, for an answer that exists and was changed from the release."""
    if status in NOT_RUN:
        raise ValueError(f"{student}: {status}: there is no answer to grade")
    if written is None:
        raise ValueError(f"{student}: no such written answer")
    if written.get("unchanged"):
        raise ValueError(f"{student}: the answer is left as released: it scores 0 and takes no hand grade")
    try:
        points = Decimal(str(raw).strip())
    except ArithmeticError:
        raise ValueError(f"{student}: points {raw!r} is not a number") from None
    if not points.is_finite():
        raise ValueError(f"{student}: points {raw!r} is not a number")
    if not 0 <= points <= Decimal(repr(float(maximum))):
        raise ValueError(f"{student}: points must be between 0 and {maximum:g}, got {points:f}")
    if points % POINT_STEP:
        raise ValueError(f"{student}: points go in steps of {POINT_STEP} (0, 0.25, 0.5, ...), got {points:f}")
    return float(points)


def hand_grade(student: str, notebook: str, cell: str, points: float, comment: str = "") -> dict:
    """One row of manual.csv (the same entry from a question page and from `grader manual`)."""
    return {"student": student, "notebook": notebook, "cell": cell, "points": f"{points:g}",
            "comment": comment, "graded_at": time.strftime("%Y-%m-%d %H:%M:%S")}


# --------------------------------------------------------------------------- stores
def load_manual(grades: Path) -> dict[tuple[str, str, str], dict]:
    path = Path(grades) / "manual.csv"
    if not path.exists():
        return {}
    with path.open(newline="", encoding="utf-8") as fh:
        return {(r["student"], r["notebook"], r["cell"]): r for r in csv.DictReader(fh)}


def _write_csv(path: Path, fields: list[str], rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8", errors="replace") as fh:
        writer = csv.DictWriter(fh, fields)
        writer.writeheader()
        writer.writerows({f: row.get(f, "") for f in fields} for row in rows)


def save_manual(grades: Path, entries: dict) -> None:
    _write_csv(Path(grades) / "manual.csv", MANUAL_FIELDS, [entries[key] for key in sorted(entries)])


def load_roster(grades: Path) -> list[dict]:
    path = Path(grades) / "students.csv"
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def import_roster(grades: Path, classlist: Path) -> tuple[int, int]:
    """Merge a class list (columns id, first_name, last_name, email) into grades/students.csv."""
    with Path(classlist).open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or "id" not in reader.fieldnames:
            raise SystemExit(f"{classlist}: needs a header with at least an 'id' column "
                             f"(id, first_name, last_name, email)")
        incoming = [r for r in reader if (r.get("id") or "").strip()]
    roster = {r["id"]: r for r in load_roster(grades)}
    added = 0
    for row in incoming:
        sid = row["id"].strip()
        if not safe_name(sid):
            raise SystemExit(f"{classlist}: student id {sid!r} cannot be a folder name")
        added += sid not in roster
        roster[sid] = {f: (row.get(f) or "").strip() for f in ROSTER_FIELDS} | {"id": sid}
    _write_csv(Path(grades) / "students.csv", ROSTER_FIELDS, [roster[sid] for sid in sorted(roster)])
    return added, len(roster)


def load_records(grades: Path) -> list[dict]:
    out = []
    for path in sorted((Path(grades) / "results").glob("*/*.json")):
        out.append(clean(json.loads(path.read_text(encoding="utf-8", errors="replace"))))
    return out


