"""Similarity report: solution cells across a class that are more alike than independent work.

    python -m grader similarity [--assignment 01_attention] [--threshold 0.8]     (make similarity)

For every notebook and every exercise (solution cell, by nbgrader ``grade_id``) this
compares each student's cell with every other student's, and with the course's own
published solution, using winnowing fingerprints as MOSS does -- through the
``copydetect`` library (``copydetect.CodeFingerprint`` tokenises with Pygments and
replaces every name by ``V``/``F``/``O`` and every string by ``S``, drops comments and
whitespace, and hashes the k-grams that are left; ``copydetect.compare_files`` gives
the shared passages). Renamed variables, changed comments and docstrings and reordered
functions therefore still match; what is not evidence is taken out before comparing:

* the released stub of the cell (signature, docstring, ``raise NotImplementedError``);
* fingerprints that many submissions of the class share (``--common``: half of the
  submissions of that exercise and at least 3) -- the code every correct answer has
  (``return weights @ V, weights``), as MOSS's ``-m`` does;
* cells too short to judge once that is gone (``--min-tokens``): they are listed, not scored.

The score of a pair is the smaller of the two shares (each student's fingerprinted code
that the other also has): a student who copies a cell and pads it with extra code still
shares most of the other student's cell, but a long answer that merely contains a short
one is not a copy of it. Pairs at or above ``--threshold`` are flagged.

Output (``grades/similarity/``): ``<notebook>.html`` (flagged pairs per exercise side by
side, shared passages marked; the pairs flagged in several exercises first) and
``<notebook>.csv`` (every compared pair with both shares). The report never changes a
grade; it reads the submissions as text (nothing runs).

Fingerprints here are every k-gram (copydetect's window of 1: ``guarantee_t = noise_t``),
so a report does not depend on Python's per-process string hashing; the library's
boilerplate filter is applied by dropping those hashes from each fingerprint
(``copydetect``'s own ``np.intersect1d(..., assume_unique=True)`` drops wrong entries when
a k-gram repeats within a cell).
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from .notebooks import Assignment, InvalidNotebook, read_submission, rebuild
from .store import safe_name

SOLUTION_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.M)
COURSE = "(course solution)"        # the published solution, compared like a student
NOISE = 10                          # k: characters of tokenised code in one fingerprint (measured: README)
THRESHOLD = 0.7                     # see grader/README.md ("Similarity report") for the measured rates
MIN_TOKENS = 30                     # fingerprinted characters a cell needs, after boilerplate, to be judged
COMMON_SHARE = 0.5                  # fingerprints in at least this share of an exercise's submissions ...
COMMON_MIN = 3                      # ... and in at least this many are code every answer shares
MAX_CELL_CHARS = 200_000            # a cell longer than this is cut (tokenising is linear, but bounded)


@dataclass
class Cell:
    student: str
    code: str
    fp: object = None               # copydetect.CodeFingerprint
    coverage: int = 0


@dataclass
class Pair:
    exercise: str
    a: str
    b: str
    share_a: float                  # of a's fingerprinted code, the part b also has
    share_b: float
    shared: int                     # tokenised characters in common
    slices: tuple = ()

    @property
    def score(self) -> float:
        return min(self.share_a, self.share_b)


@dataclass
class ExerciseReport:
    exercise: str
    compared: list[str] = field(default_factory=list)       # students (and COURSE) scored
    too_short: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    pairs: list[Pair] = field(default_factory=list)
    common: int = 0                                          # fingerprints dropped as shared by the class


# --------------------------------------------------------------------------- fingerprints
def _fingerprint(code: str):
    from copydetect import CodeFingerprint

    # window 1 (every k-gram): guarantee threshold = noise threshold, copydetect's exact mode
    return CodeFingerprint("cell.py", NOISE, 1, fp=io.StringIO(code))


def _drop(fp, hashes: set) -> None:
    """Remove these fingerprints from ``fp`` (copydetect's boilerplate rule, done per hash)."""
    from copydetect.utils import get_token_coverage

    gone = fp.hashes & hashes
    if gone:
        fp.hashes = fp.hashes - gone
        for h in gone:
            fp.hash_idx.pop(h, None)
    fp.token_coverage = get_token_coverage(fp.hash_idx, fp.k, len(fp.filtered_code))


def _code_of(text: str) -> str:
    return SOLUTION_MARKER.sub("", text)[:MAX_CELL_CHARS]


# --------------------------------------------------------------------------- reading a class
def released_stubs(release_dir: Path, name: str) -> dict[str, str]:
    """grade_id -> the released text of every solution cell (what every student starts from)."""
    path = Path(release_dir) / name / f"{name}.ipynb"
    if not path.exists():
        return {}
    out = {}
    for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if meta.get("grade_id") and meta.get("solution"):
            src = cell.get("source", "")
            out[meta["grade_id"]] = "".join(src) if isinstance(src, list) else src
    return out


def exercises(assignment: Assignment) -> list[str]:
    """The code solution cells of the assignment (written answers are prose: not compared here)."""
    return [c.grade_id for c in assignment.cells if c.kind == "solution" and c.cell_type == "code"]


def class_cells(assignment: Assignment, submitted: Path, students: list[str] | None = None,
                max_bytes: int = 25 << 20) -> tuple[dict[str, dict[str, str]], list[str]]:
    """student -> {exercise grade_id: code} for every readable submission; and notes on the rest.

    The submission is rebuilt as for grading (notebooks.rebuild), so a solution cell whose
    metadata was stripped is still found by the functions it defines.
    """
    name = assignment.name
    wanted = set(exercises(assignment))
    cells, notes = {}, []
    folder = Path(submitted)
    if students is None:
        students = sorted(p.name for p in folder.iterdir() if safe_name(p.name)) if folder.is_dir() else []
    for student in students:
        sdir = folder / student
        nb = sdir / name / f"{name}.ipynb"
        if sdir.is_symlink() or (sdir / name).is_symlink() or nb.is_symlink() or not nb.is_file():
            continue
        try:
            raw = read_submission(nb, max_bytes)
            rebuilt, _ = rebuild(assignment, raw)
        except (InvalidNotebook, ValueError, RecursionError, MemoryError) as exc:
            notes.append(f"{student}: not read ({exc})")
            continue
        found = {}
        for c in rebuilt:
            if c.kind == "solution" and c.grade_id in wanted and c.owner == "student":
                found[c.grade_id] = _code_of(c.source)
        cells[student] = found
    return cells, notes


def course_solutions(assignment: Assignment) -> dict[str, str]:
    return {c.grade_id: _code_of(c.source) for c in assignment.cells
            if c.kind == "solution" and c.cell_type == "code"}


# --------------------------------------------------------------------------- comparing
def compare_exercise(exercise: str, codes: dict[str, str], stub: str, *, threshold: float = THRESHOLD,
                     min_tokens: int = MIN_TOKENS, common_share: float = COMMON_SHARE,
                     common_min: int = COMMON_MIN, keep_slices: bool = True) -> ExerciseReport:
    """Every pair of ``codes`` (name -> cell text) scored; the released ``stub`` is not evidence."""
    from copydetect import compare_files

    report = ExerciseReport(exercise)
    stub_hashes = _fingerprint(stub).hashes if stub.strip() else set()
    cells = []
    for name, code in codes.items():
        if not code.strip() or code.strip() == stub.strip():
            report.unanswered.append(name)
            continue
        cells.append(Cell(name, code, _fingerprint(code)))
    students = [c for c in cells if c.student != COURSE]
    counts: dict[int, int] = {}
    for c in students:
        for h in c.fp.hashes - stub_hashes:
            counts[h] = counts.get(h, 0) + 1
    needed = max(common_min, common_share * len(students))
    common = {h for h, n in counts.items() if n >= needed}
    report.common = len(common)
    for c in cells:
        _drop(c.fp, stub_hashes | common)
        c.coverage = int(c.fp.token_coverage)
    judged = [c for c in cells if c.coverage >= min_tokens]
    report.too_short = [c.student for c in cells if c.coverage < min_tokens]
    report.compared = [c.student for c in judged]
    for x, y in itertools.combinations(judged, 2):
        overlap, (sx, sy), slices = compare_files(x.fp, y.fp)
        pair = Pair(exercise, x.student, y.student, float(sx), float(sy), int(overlap))
        if keep_slices and pair.score >= threshold:
            pair.slices = slices
        report.pairs.append(pair)
    report.pairs.sort(key=lambda p: -p.score)
    return report


def compare_assignment(assignment: Assignment, submitted: Path, release_dir: Path, *,
                       threshold: float = THRESHOLD, with_course: bool = True, **options) -> dict:
    """{exercise: ExerciseReport} for one notebook, plus the cells and notes (for the page)."""
    cells, notes = class_cells(assignment, submitted)
    stubs = released_stubs(release_dir, assignment.name)
    course = course_solutions(assignment) if with_course else {}
    reports, texts = {}, {}
    for ex in exercises(assignment):
        codes = {s: found[ex] for s, found in cells.items() if ex in found}
        if ex in course:
            codes[COURSE] = course[ex]
        texts[ex] = codes
        reports[ex] = compare_exercise(ex, codes, stubs.get(ex, ""), threshold=threshold, **options)
    return {"reports": reports, "texts": texts, "notes": notes, "students": sorted(cells)}


# --------------------------------------------------------------------------- output
CSV_FIELDS = ["notebook", "exercise", "student_a", "student_b", "score", "share_a", "share_b",
              "shared_tokens", "flagged"]


def write_report(result: dict, name: str, out_dir: Path, threshold: float = THRESHOLD) -> tuple[Path, Path, int]:
    """grades/similarity/<name>.csv and .html; returns the paths and the number of flagged pairs."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, html_path = out_dir / f"{name}.csv", out_dir / f"{name}.html"
    flagged = []
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, CSV_FIELDS)
        writer.writeheader()
        for ex, rep in result["reports"].items():
            for p in rep.pairs:
                hit = p.score >= threshold
                if hit:
                    flagged.append(p)
                writer.writerow({"notebook": name, "exercise": ex, "student_a": p.a, "student_b": p.b,
                                 "score": f"{p.score:.3f}", "share_a": f"{p.share_a:.3f}",
                                 "share_b": f"{p.share_b:.3f}", "shared_tokens": p.shared,
                                 "flagged": "yes" if hit else ""})
    html_path.write_text(_page(result, name, flagged, threshold), encoding="utf-8", errors="replace")
    return csv_path, html_path, len(flagged)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;
color:#1d1d1f;line-height:1.4} h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0} td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left;
vertical-align:top} th{background:#f5f5f7} .meta{font-size:.85em;color:#57606a}
.side{display:grid;grid-template-columns:1fr 1fr;gap:.8em} pre{background:#f6f8fa;border:1px solid #e1e4e8;
padding:.6em;overflow-x:auto;white-space:pre-wrap;font-size:.85em;margin:.3em 0}
mark{background:#ffd33d66;border-bottom:2px solid #d4a72c} .pair{margin:1.2em 0;padding:.4em .8em;
border-left:4px solid #d4a72c}
"""


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _marked(code: str, slices) -> str:
    from copydetect.utils import highlight_overlap

    if slices is None or len(slices) == 0 or slices.shape[-1] == 0:
        return _e(code)
    text, _ = highlight_overlap(code, slices, "<mark>", "</mark>", escape_html=True)
    return text


def _page(result: dict, name: str, flagged: list[Pair], threshold: float) -> str:
    reports, texts = result["reports"], result["texts"]
    by_pair: dict[tuple[str, str], list[Pair]] = {}
    for p in flagged:
        by_pair.setdefault((p.a, p.b), []).append(p)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(name)}: similarity</title>"
             f"<style>{CSS}</style></head><body><h1>{_e(name)}: similarity of solution cells</h1>",
             f"<p class='meta'>{len(result['students'])} submissions read, generated "
             f"{_e(time.strftime('%Y-%m-%d %H:%M'))}. Pairs whose score (the smaller of the two shares of "
             f"fingerprinted code the other has) is at least {threshold:.2f} are shown. The released stub and "
             f"code most of the class shares are not counted; names, comments and the order of functions do "
             f"not matter. This report is a reason to look, not a finding: it changes no grade.</p>"]
    if by_pair:
        parts.append("<h2>Pairs flagged</h2><table><tr><th>pair</th><th>exercises flagged</th><th>scores</th></tr>")
        for (a, b), ps in sorted(by_pair.items(), key=lambda kv: (-len(kv[1]), -max(p.score for p in kv[1]))):
            parts.append(f"<tr><td>{_e(a)} · {_e(b)}</td><td>{len(ps)} of {len(reports)}: "
                         f"{_e(', '.join(p.exercise for p in ps))}</td>"
                         f"<td>{_e(', '.join(f'{p.score:.2f}' for p in ps))}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p><b>No pair of submissions is flagged.</b></p>")
    for ex, rep in reports.items():
        hits = [p for p in rep.pairs if p.score >= threshold]
        parts.append(f"<h2>Exercise <code>{_e(ex)}</code></h2><p class='meta'>{len(rep.compared)} cells compared, "
                     f"{len(rep.pairs)} pairs; {len(hits)} flagged; {rep.common} fingerprints shared by most of the "
                     f"class not counted"
                     + (f"; too short to judge once the stub and shared code are removed: {_e(', '.join(rep.too_short))}"
                        if rep.too_short else "")
                     + (f"; left as released: {len(rep.unanswered)}" if rep.unanswered else "") + ".</p>")
        for p in hits:
            sa, sb = p.slices if len(p.slices) == 2 else (None, None)
            parts.append(f"<div class='pair'><b>{_e(p.a)}</b> and <b>{_e(p.b)}</b>: score {p.score:.2f} "
                         f"({p.share_a:.0%} of {_e(p.a)}'s cell, {p.share_b:.0%} of {_e(p.b)}'s)"
                         f"<div class='side'><div><div class='meta'>{_e(p.a)}</div><pre>"
                         f"{_marked(texts[ex][p.a], sa)}</pre></div><div><div class='meta'>{_e(p.b)}</div><pre>"
                         f"{_marked(texts[ex][p.b], sb)}</pre></div></div></div>")
    if result["notes"]:
        parts.append("<h2>Not read</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in result["notes"]) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def run(course, submitted: Path, grades: Path, assignments: list[str] | None = None, *,
        threshold: float = THRESHOLD, with_course: bool = True, **options) -> list[dict]:
    """The report of every notebook with submissions (or those named) into grades/similarity/."""
    from transformer_course_cases import CASES

    from .notebooks import load_assignment

    submitted = Path(submitted)
    present = set()
    if submitted.is_dir():
        for s in submitted.iterdir():
            if s.is_dir() and not s.is_symlink():
                present |= {q.name for q in s.iterdir() if q.is_dir() and not q.is_symlink()}
    names = assignments or [a for a in course.assignments() if a in present]
    out = []
    for name in names:
        a = load_assignment(course.source_dir, name, CASES, course.release_dir)
        result = compare_assignment(a, submitted, course.release_dir, threshold=threshold,
                                    with_course=with_course, **options)
        csv_path, html_path, n = write_report(result, name, Path(grades) / "similarity", threshold)
        out.append({"notebook": name, "students": len(result["students"]), "flagged": n,
                    "csv": csv_path, "html": html_path})
    return out
