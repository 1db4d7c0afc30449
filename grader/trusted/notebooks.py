"""Reading source notebooks and rebuilding a student's submission from them.

The SOURCE notebook (notebooks/<assignment>/<assignment>.ipynb) decides what
is graded: its autograded test cells (nbgrader ``grade: true`` code cells, with
their ``points``) and the hidden cases each one uses (parsed from the
``hidden_case("...")`` strings in its hidden block), its written answers
(graded by hand), and which cells belong to the instructor.

A submission is then *rebuilt* before it runs: the student's cells are kept in
the student's order, but every test cell and every locked cell is the
instructor's -- overwritten when edited or commented out, re-inserted when
deleted or stripped of its metadata -- so nothing the student does to a test
cell changes what runs in it.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .textsafe import clean

HIDDEN_BLOCK = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n(.*?)^[ \t]*### END HIDDEN TESTS[ \t]*\n?",
                          re.S | re.M)
STRING_LITERAL = re.compile(r"""(?P<q>["'])([A-Za-z0-9_.\-]+)(?P=q)""")


class InvalidNotebook(Exception):
    """The file is not a readable Jupyter notebook."""


@dataclass
class TestCell:
    grade_id: str
    points: float
    case_ids: list[str]
    visible: str            # the cell without its hidden block (what the student sees)
    hidden: str             # the hidden block's code


@dataclass
class WrittenAnswer:
    grade_id: str
    points: float
    stub: str               # the released text: an unchanged answer scores 0 without a hand grade


@dataclass
class SourceCell:
    index: int
    cell_type: str
    source: str
    grade_id: str | None
    kind: str               # plain | solution | test | written | locked


@dataclass
class Assignment:
    name: str
    path: Path
    cells: list[SourceCell]
    tests: list[TestCell]
    written: list[WrittenAnswer]
    solution_names: dict[str, list[str]]    # solution grade_id -> top-level def/class names
    metadata: dict = field(default_factory=dict)
    given: set = field(default_factory=set)  # stripped sources of the released notebook's cells

    @property
    def max_points(self) -> float:
        return sum(t.points for t in self.tests) + sum(w.points for w in self.written)

    @property
    def case_ids(self) -> list[str]:
        return [c for t in self.tests for c in t.case_ids]

    def cell(self, grade_id):
        return next(c for c in self.cells if c.grade_id == grade_id)


def _source_text(cell: dict) -> str:
    src = cell.get("source", "")
    if isinstance(src, list):
        if not all(isinstance(s, str) for s in src):
            raise InvalidNotebook("a cell's source is not text")
        return "".join(src)
    if not isinstance(src, str):
        raise InvalidNotebook("a cell's source is not text")
    return src


def _nbgrader_meta(cell: dict) -> dict:
    meta = cell.get("metadata")
    if not isinstance(meta, dict):
        return {}
    nbg = meta.get("nbgrader")
    return nbg if isinstance(nbg, dict) else {}


def _kind(cell_type: str, meta: dict) -> str:
    if not meta.get("grade_id"):
        return "plain"
    grade, solution, locked = bool(meta.get("grade")), bool(meta.get("solution")), bool(meta.get("locked"))
    if grade and not solution and cell_type == "code":
        return "test"
    if grade and solution:
        return "written"          # nbgrader: graded answers (markdown, or code with points) are manual
    if solution:
        return "solution"
    if locked or grade:
        return "locked"
    return "plain"


def top_level_names(code: str) -> list[str]:
    """Names of the functions and classes a code cell defines at top level (none if it does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def load_assignment(source_dir: Path, name: str, known_cases, release_dir: Path | None = None) -> Assignment:
    """Parse notebooks/<name>/<name>.ipynb (and the released stub texts from exercises/)."""
    path = Path(source_dir) / name / f"{name}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    stubs, given = {}, set()
    if release_dir is not None:
        released = Path(release_dir) / name / f"{name}.ipynb"
        if released.exists():
            for cell in json.loads(released.read_text(encoding="utf-8")).get("cells", []):
                meta = _nbgrader_meta(cell)
                if meta.get("grade_id"):
                    stubs[meta["grade_id"]] = _source_text(cell)
                else:
                    given.add(_source_text(cell).strip())
    cells, tests, written, solution_names = [], [], [], {}
    for index, cell in enumerate(nb["cells"]):
        meta = _nbgrader_meta(cell)
        text = _source_text(cell)
        kind = _kind(cell["cell_type"], meta)
        gid = meta.get("grade_id") if kind != "plain" else None
        cells.append(SourceCell(index, cell["cell_type"], text, gid, kind))
        if kind == "test":
            block = HIDDEN_BLOCK.search(text)
            hidden = block.group(1) if block else ""
            visible = HIDDEN_BLOCK.sub("", text).rstrip() if block else text
            ids = []
            for match in STRING_LITERAL.finditer(hidden):
                if match.group(2) in known_cases and match.group(2) not in ids:
                    ids.append(match.group(2))
            if "hidden_case" in hidden and not ids:
                raise ValueError(f"{name}: test cell {gid} calls hidden_case but names no known case "
                                 f"(write the case ids as string literals)")
            tests.append(TestCell(gid, float(meta.get("points", 0) or 0), ids, visible, hidden))
        elif kind == "written":
            written.append(WrittenAnswer(gid, float(meta.get("points", 0) or 0),
                                         stubs.get(gid, "YOUR ANSWER HERE")))
        elif kind == "solution" and cell["cell_type"] == "code":
            solution_names[gid] = top_level_names(re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION.*$", "", text,
                                                         flags=re.M))
    return Assignment(name, path, cells, tests, written, solution_names, nb.get("metadata", {}), given)


# --------------------------------------------------------------------------- submissions
def read_submission(path: Path, max_bytes: int, max_file_bytes: int | None = None) -> list[dict]:
    """The cells of a submitted notebook as plain dicts; InvalidNotebook when it cannot be read.

    Outputs (figures, printed text) are dropped before anything is counted: ``max_bytes`` limits
    what is kept -- the cells' sources -- and ``max_file_bytes`` (default 8 x ``max_bytes``) only
    the file that is parsed. Every string is made encodable (a lone surrogate becomes U+FFFD).
    """
    size = path.stat().st_size
    limit = max_file_bytes or 8 * max_bytes
    if size > limit:
        raise InvalidNotebook(f"the file is {size / 1e6:.1f} MB, more than the {limit / 1e6:.0f} MB allowed")
    raw = path.read_bytes()
    try:
        nb = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidNotebook("the file is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise InvalidNotebook(f"the file is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") \
            from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise InvalidNotebook(f"the file cannot be read as JSON ({type(exc).__name__})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        if isinstance(nb, dict) and "worksheets" in nb:
            raise InvalidNotebook("an nbformat 3 notebook; open and save it with Jupyter to convert it")
        raise InvalidNotebook("JSON, but not a Jupyter notebook (no list of cells)")
    cells = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise InvalidNotebook(f"cell {i} is not a notebook cell")
        cells.append({"cell_type": cell["cell_type"], "source": clean(_source_text(cell)),
                      "nbgrader": clean(_nbgrader_meta(cell))})
    kept = sum(len(c["source"]) for c in cells)
    if kept > max_bytes:
        raise InvalidNotebook(f"the cells' code and text (outputs not counted) are {kept / 1e6:.1f} MB, "
                              f"more than the {max_bytes / 1e6:.0f} MB allowed")
    return cells


@dataclass
class ExecCell:
    """One cell of the rebuilt notebook, as it runs and as the feedback shows it."""

    index: int
    cell_type: str
    owner: str               # "student" | "instructor" | "course" (a released cell, unchanged)
    source: str              # what the feedback shows
    chunks: list[dict]       # [{"code": ..., "hidden": bool}] for code cells
    grade_id: str | None = None
    kind: str = "plain"      # plain | solution | test | written | locked
    note: str = ""           # e.g. "test cell restored: it had been edited"


def rebuild(assignment: Assignment, student_cells: list[dict]) -> tuple[list[ExecCell], list[str]]:
    """The notebook that runs: the student's cells with every test and locked cell the instructor's.

    Returns the cells and a list of notes (what was restored or re-inserted).
    """
    by_id = {c.grade_id: c for c in assignment.cells if c.grade_id}
    tests = {t.grade_id: t for t in assignment.tests}
    order = [c for c in assignment.cells if c.grade_id]
    notes: list[str] = []

    occurrences: dict[str, list[int]] = {}
    for i, sc in enumerate(student_cells):
        gid = sc["nbgrader"].get("grade_id")
        if isinstance(gid, str) and gid in by_id:
            occurrences.setdefault(gid, []).append(i)
    match: dict[str, int] = {}            # grade id -> index of the student cell that holds it
    for gid, places in occurrences.items():
        if by_id[gid].kind in ("solution", "written"):
            match[gid] = places[0]

    # Where the released notebook's cells are in the submission: every unchanged released cell without
    # metadata (the text between the exercises, locked and test cells whose metadata was stripped) is an
    # anchor, matched in order. Anchors place what lost its metadata where the student had it.
    anchor: dict[int, int] = {}           # source cell index -> student cell index
    for gid, i in match.items():
        anchor[by_id[gid].index] = i
    pointer = 0
    for src in assignment.cells:
        if src.index in anchor:
            pointer = max(pointer, anchor[src.index] + 1)
            continue
        if src.kind == "test":
            text = tests[src.grade_id].visible.strip()
        elif src.kind in ("plain", "locked"):
            text = src.source.strip()
        else:
            continue
        if not text:
            continue
        j = next((j for j in range(pointer, len(student_cells))
                  if not student_cells[j]["nbgrader"].get("grade_id") and j not in anchor.values()
                  and student_cells[j]["source"].strip() == text), None)
        if j is None:
            continue
        anchor[src.index] = j
        pointer = j + 1
        if src.kind in ("test", "locked") and src.grade_id not in match:
            match[src.grade_id] = j
            occurrences.setdefault(src.grade_id, []).append(j)

    def window(src_index: int) -> tuple[int, int]:
        """Student positions of the nearest anchored source cells before and after this one."""
        lo = max((j for k, j in anchor.items() if k < src_index), default=-1)
        hi = min((j for k, j in anchor.items() if k > src_index and j > lo), default=len(student_cells))
        return lo, hi

    # Solution cells whose metadata is gone: the student cell that defines the same functions, between
    # the anchors around the solution (the last such cell there: the definition its test cell sees).
    for gid, names in assignment.solution_names.items():
        if gid in match or not names:
            continue
        taken = set(match.values())
        candidates = [i for i, sc in enumerate(student_cells)
                      if i not in taken and sc["cell_type"] == "code" and not sc["nbgrader"].get("grade_id")
                      and set(names) <= set(top_level_names(sc["source"]))]
        lo, hi = window(by_id[gid].index)
        inside = [i for i in candidates if lo < i < hi]
        if inside or candidates:
            match[gid] = (inside or candidates)[-1]
            anchor[by_id[gid].index] = match[gid]
            notes.append(f"solution cell '{gid}' had lost its nbgrader metadata: matched by the functions it defines")

    # Test and locked cells the student still has: the first copy after the cell they follow in the
    # source (a copy moved above its solution would test nothing; it is re-inserted instead).
    for pos, src in enumerate(order):
        if src.kind not in ("test", "locked") or src.grade_id not in occurrences:
            continue
        before = [match[c.grade_id] for c in order[:pos] if c.grade_id in match]
        after = max(before) if before else -1
        places = [i for i in occurrences[src.grade_id] if i > after]
        if places:
            match[src.grade_id] = places[0]

    out: list[dict] = []          # {"src": SourceCell|None, "student": dict|None}
    owner_of = {i: gid for gid, i in match.items()}
    for i, sc in enumerate(student_cells):
        gid = owner_of.get(i)
        out.append({"src": by_id[gid] if gid else None, "student": sc})
    used = set(match)

    # Instructor cells that are missing: re-insert them where they were released -- before the student
    # cell of the next source cell that is present (graded or an unchanged released cell).
    for pos, src in enumerate(order):
        if src.grade_id in used or src.kind not in ("test", "locked"):
            continue
        nxt = min((j for k, j in anchor.items() if k > src.index), default=None)
        at = next((i for i, e in enumerate(out) if nxt is not None and e["student"] is student_cells[nxt]), None)
        if at is None:
            later = {c.grade_id for c in order[pos + 1:]}
            at = next((i for i, e in enumerate(out) if e["src"] is not None and e["src"].grade_id in later), len(out))
        out.insert(at, {"src": src, "student": None})
        used.add(src.grade_id)
        what = "test cell" if src.kind == "test" else "locked cell"
        notes.append(f"{what} '{src.grade_id}' was missing (deleted or stripped of its metadata): re-inserted")

    cells: list[ExecCell] = []
    for i, entry in enumerate(out):
        src, sc = entry["src"], entry["student"]
        if src is not None and src.kind in ("test", "locked"):
            note = ""
            if sc is not None and (sc["source"].strip() != (tests[src.grade_id].visible if src.kind == "test"
                                                              else src.source).strip()
                                   or sc["cell_type"] != src.cell_type):
                note = "restored: the submitted copy of this cell had been changed"
                notes.append(f"{'test' if src.kind == 'test' else 'locked'} cell '{src.grade_id}' had been "
                             f"changed: the instructor's version ran")
            elif sc is None:
                note = "re-inserted: this cell was missing from the submission"
            if src.kind == "test":
                t = tests[src.grade_id]
                chunks = [{"code": t.visible, "hidden": False}]
                if t.hidden.strip():
                    chunks.append({"code": t.hidden, "hidden": True})
                cells.append(ExecCell(i, "code", "instructor", t.visible, chunks, src.grade_id, "test", note))
            else:
                chunks = [{"code": src.source, "hidden": False}] if src.cell_type == "code" else []
                cells.append(ExecCell(i, src.cell_type, "instructor", src.source, chunks, src.grade_id,
                                      "locked", note))
        else:
            ctype = sc["cell_type"]
            if src is not None and ctype != src.cell_type:
                ctype = src.cell_type
            text = sc["source"]
            chunks = [{"code": text, "hidden": False}] if ctype == "code" and text.strip() else []
            owner = "course" if src is None and text.strip() and text.strip() in assignment.given else "student"
            cells.append(ExecCell(i, ctype, owner, text, chunks, src.grade_id if src else None,
                                  src.kind if src else "plain"))
    return cells, notes


def written_answers(assignment: Assignment, cells: list[ExecCell]) -> dict[str, str | None]:
    """The student's text for each written answer (None when the cell is missing)."""
    found = {c.grade_id: c.source for c in cells if c.kind == "written"}
    return {w.grade_id: found.get(w.grade_id) for w in assignment.written}
