"""Autograde a class: discover submissions, run each in the sandbox, score outside it.

For every (student, notebook) this produces a result record (JSON, kept in the
grades folder) with the points of every test cell, the status of the run and
what the feedback shows; report.py turns the records into the grade table and
the feedback pages.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import secrets
import shutil
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from transformer_course import exercise_rule

from . import compare, late, notebooks, package, sandbox_users, supervisor
from .store import safe_name
from .supervisor import Limits

# Statuses of a row in the grade table (README, "Grading").
GRADED = "graded"
MANUAL = "needs manual grading"
TIMED_OUT = "timed out"
CRASHED = "crashed"
MEMORY = "memory limit"
PROCESSES = "process limit"
OUTPUT = "output limit"
INVALID = "invalid file"
MISSING = "notebook missing or renamed"
NO_SUBMISSION = "no submission"
SANDBOX_ERROR = "sandbox error"

MAX_NOTEBOOK_BYTES = 25 << 20          # the cells' sources (outputs are dropped before counting)
MAX_NOTEBOOK_FILE_BYTES = 256 << 20    # the file parsed to find them (figures make notebooks big)
MAX_EXTRA_FILES = 50
MAX_EXTRA_BYTES = 20 << 20


@dataclass
class Course:
    root: Path
    source_dir: Path
    release_dir: Path
    package_dir: Path

    @classmethod
    def at(cls, root: Path) -> "Course":
        root = Path(root).resolve()
        return cls(root, root / "notebooks", root / "exercises", root / "lib" / "transformer_course")

    @property
    def lib_dir(self) -> Path:
        return self.package_dir.parent

    def assignments(self) -> list[str]:
        return sorted(p.name for p in self.source_dir.iterdir()
                      if p.is_dir() and (p / f"{p.name}.ipynb").exists() and p.name[:2].isdigit())


def run_seed_from_env() -> tuple[int, str]:
    raw = os.environ.get("COURSE_GRADING_SEED", "")
    if raw == "":
        return secrets.randbits(32), "random"
    try:
        return int(raw), "COURSE_GRADING_SEED"
    except ValueError:
        return zlib.crc32(raw.encode()), "COURSE_GRADING_SEED"


# --------------------------------------------------------------------------- discovery
@dataclass
class Submission:
    student: str
    assignment: str
    notebook: Path | None
    status: str | None = None        # set when it cannot run (missing, invalid, no submission)
    details: list[str] = field(default_factory=list)
    cells: list[dict] | None = None
    extra_files: list[Path] = field(default_factory=list)
    submitted_at: str | None = None  # [late hook] nbgrader's timestamp.txt, ISO 8601 UTC


def discover(submitted: Path, assignments: list[str], students: list[str]) -> list[Submission]:
    out = []
    for student in students:
        sdir = submitted / student
        for name in assignments:
            adir = sdir / name
            sub = Submission(student, name, None)
            out.append(sub)
            if sdir.is_symlink():                 # someone else's folder, or anything on the host
                sub.status = INVALID
                sub.details.append(f"submitted/{student} is a symbolic link: not followed")
                continue
            if not adir.is_dir() or adir.is_symlink():
                others = sorted(p.name for p in sdir.iterdir()) if sdir.is_dir() and not sdir.is_symlink() else []
                others = [o for o in others if o not in assignments and not o.startswith(".")]
                if others:
                    sub.status = MISSING
                    sub.details.append(f"no folder {name}/ in the submission; found: {', '.join(others[:5])}")
                else:
                    sub.status = NO_SUBMISSION
                continue
            nb = adir / f"{name}.ipynb"
            if not nb.exists() and not nb.is_symlink():
                found = sorted(p.name for p in adir.iterdir() if p.suffix == ".ipynb")
                sub.status = MISSING
                sub.details.append(f"{name}.ipynb is not in the submission"
                                   + (f"; found {', '.join(found[:5])} (rename it to {name}.ipynb)" if found
                                      else "; the folder holds no notebook"))
                continue
            if nb.is_symlink() or not nb.is_file():
                sub.status = INVALID
                sub.details.append(f"{name}.ipynb is not a regular file")
                continue
            try:
                sub.cells = notebooks.read_submission(nb, MAX_NOTEBOOK_BYTES, MAX_NOTEBOOK_FILE_BYTES)
            except notebooks.InvalidNotebook as exc:
                sub.status = INVALID
                sub.details.append(f"{name}.ipynb: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 -- whatever the file does, it is one invalid file
                sub.status = INVALID
                sub.details.append(f"{name}.ipynb: unreadable ({type(exc).__name__})")
                continue
            sub.notebook = nb
            sub.submitted_at = late.read_timestamp(adir)      # [late hook] the exchange's or collect's time
            total = 0
            for extra in sorted(adir.iterdir()):
                if extra == nb or extra.is_symlink() or not extra.is_file() or extra.name.startswith(".") \
                        or extra.name == late.TIMESTAMP_FILE:   # [late hook] metadata, not the student's file
                    continue
                size = extra.stat().st_size
                if len(sub.extra_files) >= MAX_EXTRA_FILES or total + size > MAX_EXTRA_BYTES:
                    sub.details.append(f"file {extra.name} not copied into the sandbox (too many or too large)")
                    continue
                total += size
                sub.extra_files.append(extra)
    return out


# --------------------------------------------------------------------------- reference imports
def reference_uses(cells: list[notebooks.ExecCell], blocked_names: set[str]) -> list[str]:
    """Blocked reference functions that the student's own cells import or call from the package."""
    found: list[str] = []
    for cell in cells:
        if cell.owner != "student" or cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        package_aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "transformer_course":
                        package_aliases.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformer_course":
                for alias in node.names:
                    if alias.name in blocked_names and alias.name not in found:
                        found.append(alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in blocked_names:
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in package_aliases and node.attr not in found:
                    found.append(node.attr)
    return found


# --------------------------------------------------------------------------- one submission
def _outcome_status(execution: supervisor.Execution) -> tuple[str | None, list[str]]:
    """The abnormal status of a run (None when it ran normally) and what to say about it."""
    notes: list[str] = []
    soft = memory = procs = None
    for cell in sorted(execution.cells.values(), key=lambda c: c.index):
        for chunk in cell.chunks:
            err = chunk.get("error") or {}
            if chunk.get("timeout") and soft is None:
                soft = cell.index
            if err.get("ename") == "MemoryError" and memory is None:
                memory = cell.index
            if err.get("ename") == "BlockingIOError" and "Resource temporarily unavailable" in err.get("evalue", "") \
                    and procs is None:
                procs = cell.index
    where = f" in cell {execution.last_cell}" if execution.last_cell is not None else ""
    if execution.status == "timeout":
        notes.append(f"timed out{where}: {execution.detail}; later cells did not run and score 0")
        return TIMED_OUT, notes
    if execution.status == "crashed":
        notes.append(f"crashed{where}: {execution.detail}; later cells did not run and score 0")
        return CRASHED, notes
    if execution.status == "output-limit":
        notes.append(f"stopped{where}: {execution.detail}; later cells did not run and score 0")
        return OUTPUT, notes
    if execution.status in ("sandbox-error", "startup-timeout"):
        notes.append(f"the sandbox failed: {execution.detail}: {execution.preamble.strip()[-500:]}")
        return SANDBOX_ERROR, notes
    status = None
    if soft is not None:
        notes.append(f"cell {soft} was interrupted at the time limit; the cells after it ran")
        status = TIMED_OUT
    if procs is not None:
        notes.append(f"cell {procs} hit the process limit (fork failed); the cells after it ran")
        status = status or PROCESSES
    if memory is not None:
        notes.append(f"cell {memory} hit the memory limit (MemoryError); the cells after it ran")
        status = MEMORY if status in (None, TIMED_OUT, PROCESSES) else status
    return status, notes


@dataclass
class Plan:
    """Everything prepared once per assignment."""

    assignment: notebooks.Assignment
    pkg_dir: Path
    blocked_names: set[str]
    unavailable_names: set[str] = field(default_factory=set)
    data: tuple[str, ...] = ()            # the data distributions its site-packages shows (exercise_rule.DATA)


def grade_submission(sub: Submission, plan: Plan, *, run_seed: int, run_dir: Path, user, limits: Limits,
                     venv: Path, zygote: supervisor.Zygote,
                     run=supervisor.run_in_sandbox) -> dict:   # [dask hook] run: where the sandbox runs
    """Rebuild, run in the sandbox, compare: the result record of one submission."""
    a = plan.assignment
    t0 = time.monotonic()
    cells, notes = notebooks.rebuild(a, sub.cells)
    details = list(sub.details) + notes
    uses = reference_uses(cells, plan.blocked_names)
    if uses:
        details.append("imports the course's reference " + ", ".join(f"`{u}`" for u in uses)
                       + " instead of writing it: not available while grading")
    others = reference_uses(cells, plan.unavailable_names)
    if others:
        details.append("imports " + ", ".join(f"`{u}`" for u in others) + f" from the course package: "
                       f"{sub.assignment} does not use it, so it is not available while grading")

    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=run_dir))   # no student name: the sandbox sees its paths
    job = {"cells": [{"index": c.index, "chunks": c.chunks} for c in cells if c.chunks]}
    content = json.dumps(job, sort_keys=True).encode() + b"".join(
        extra.name.encode() + b"\0" + extra.read_bytes() for extra in sub.extra_files)
    seed = compare.derive_seed(run_seed, sub.student, sub.assignment, content)
    prepared = compare.prepare_cases(a.case_ids, seed, job_dir / "inputs")
    files_dir = job_dir / "files"
    files_dir.mkdir()
    if sub.notebook is not None:
        shutil.copyfile(sub.notebook, files_dir / sub.notebook.name)
    for extra in sub.extra_files:
        shutil.copyfile(extra, files_dir / extra.name)
    try:
        execution, files, refused = run(job=job, job_dir=job_dir, pkg_dir=plan.pkg_dir, user=user,
                                        limits=limits, venv=venv, zygote=zygote, data=plan.data)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)

    status, run_notes = _outcome_status(execution)
    details.extend(run_notes)
    if execution.dropped_bytes:
        details.append(f"output cut for the feedback: {execution.dropped_bytes:,} of {execution.total_bytes:,} "
                       f"bytes not kept")

    # Score every test cell from the trusted comparison only.
    by_grade = {c.grade_id: c for c in cells if c.kind == "test"}
    tests = []
    auto_points = 0.0
    for t in a.tests:
        cell = by_grade.get(t.grade_id)
        run = execution.cells.get(cell.index) if cell else None
        hidden_error = None
        if run is not None and len(run.chunks) > 1:
            hidden_error = run.chunks[1].get("error")
        results = []
        for case_id in t.case_ids:
            r = compare.compare_case(case_id, prepared, files, refused)
            if not r.passed and r.reason.startswith("no result"):
                if run is None or not run.started:
                    r.reason = "did not run: the notebook stopped before this test cell"
                elif hidden_error:
                    r.reason = f"the hidden test raised {hidden_error['ename']}: {hidden_error['evalue'][:200]}"
                elif run is not None and not run.ended:
                    r.reason = "did not finish: the run stopped in this test cell"
            results.append(asdict(r))
        passed = bool(t.case_ids) and all(r["passed"] for r in results)
        if not t.case_ids:
            results.append({"case_id": "-", "passed": False,
                            "reason": "this test cell has no hidden cases, so it cannot be graded safely"})
        points = t.points if passed else 0.0
        auto_points += points
        tests.append({"grade_id": t.grade_id, "points": points, "max_points": t.points, "passed": passed,
                      "cases": results})

    answers = notebooks.written_answers(a, cells)
    written = []
    for w in a.written:
        text = answers.get(w.grade_id)
        unchanged = text is not None and text.strip() in ("", w.stub.strip())
        written.append({"grade_id": w.grade_id, "max_points": w.points, "missing": text is None,
                        "unchanged": unchanged})
        if text is None:
            details.append(f"written answer '{w.grade_id}' not found (cell deleted or its metadata stripped): "
                           f"grade it by hand from the feedback page")

    shown = []
    for c in cells:
        run = execution.cells.get(c.index)
        entry = {"index": c.index, "cell_type": c.cell_type, "owner": c.owner, "kind": c.kind,
                 "grade_id": c.grade_id, "source": c.source[:20_000], "note": c.note, "ran": bool(run and run.started)}
        if run is not None:
            entry["output"] = "\n".join(run.output).strip("\n")
            if run.dropped_bytes:
                entry["output"] += f"\n[... {run.dropped_bytes:,} more bytes of output not kept]"
            visible = run.chunks[0] if run.chunks else {}
            entry["error"] = visible.get("error")
            entry["skipped"] = bool(visible.get("skipped"))     # testing.skip_while_grading: not an error
            entry["timeout"] = bool(visible.get("timeout"))
            entry["seconds"] = visible.get("seconds")
            entry["finished"] = run.ended
        shown.append(entry)

    return {
        "student": sub.student, "notebook": sub.assignment, "auto_status": status,
        "auto_points": auto_points, "max_points": a.max_points,
        "tests": tests, "written": written, "details": details, "cells": shown,
        "submitted_at": sub.submitted_at,                     # [late hook]
        "run": {"status": execution.status, "exit_code": execution.exit_code,
                "seconds": round(execution.seconds, 3), "detail": execution.detail,
                "total_seconds": round(time.monotonic() - t0, 3)},
    }


def not_run_record(sub: Submission, a: notebooks.Assignment) -> dict:
    return {"student": sub.student, "notebook": sub.assignment, "auto_status": sub.status,
            "auto_points": 0.0, "max_points": a.max_points,
            "tests": [{"grade_id": t.grade_id, "points": 0.0, "max_points": t.points, "passed": False,
                       "cases": []} for t in a.tests],
            "written": [{"grade_id": w.grade_id, "max_points": w.points, "missing": True, "unchanged": False}
                        for w in a.written],
            "details": list(sub.details), "cells": [], "run": None, "submitted_at": sub.submitted_at}


# --------------------------------------------------------------------------- a class
class Progress:
    def __init__(self, total: int, stream=sys.stderr, enabled: bool = True):
        self.total, self.done, self.stream, self.enabled = total, 0, stream, enabled
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def step(self, label: str) -> None:
        with self.lock:
            self.done += 1
            if not self.enabled:
                return
            width = 30
            filled = int(width * self.done / max(1, self.total))
            elapsed = time.monotonic() - self.started
            line = (f"grading [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                    f"{elapsed:5.1f}s  {label[:50]}")
            if self.tty:
                self.stream.write("\r" + line.ljust(110) + ("\n" if self.done == self.total else ""))
            else:
                self.stream.write(line + "\n")
            self.stream.flush()


def grade_class(*, course: Course, submitted: Path, grades: Path, assignments: list[str] | None = None,
                students: list[str] | None = None, roster: list[str] = (), workers: int = 2,
                limits: Limits | None = None, progress: bool = True, log=print,
                scheduler: str | None = None) -> dict:   # [dask hook] scheduler: a Dask cluster runs the sandboxes
    """Grade every submission under ``submitted`` into ``grades``; return the run's summary."""
    from transformer_course_cases import CASES

    limits = limits or Limits()
    # [dask hook] with a scheduler, the sandboxes run on the cluster's workers (grader/trusted/dask_backend.py)
    remote = None
    if scheduler:
        from .dask_backend import RemoteSandbox
        remote = RemoteSandbox(scheduler)
        workers = remote.slots()
    problem = None if remote else supervisor.sandbox_problem()
    if problem:
        raise SystemExit(f"cannot grade: {problem}")
    supervisor.private_mount_namespace()

    submitted = Path(submitted).resolve()
    grades = Path(grades).resolve()
    if not submitted.is_dir():
        raise SystemExit(f"cannot grade: {submitted} does not exist (collect submissions first: "
                         f"submitted/<student>/<assignment>/<assignment>.ipynb, or `make collect`)")
    grades.mkdir(parents=True, exist_ok=True)
    for folder in (grades, submitted):
        os.chmod(folder, 0o700)                 # nothing of a class is readable by other users
    gradebook = course.root / ".nbgrader" / "gradebook.db"
    if gradebook.exists():
        os.chmod(gradebook, 0o600)

    found_students = sorted(p.name for p in submitted.iterdir()
                            if (p.is_dir() or p.is_symlink()) and safe_name(p.name))
    all_students = sorted(set(found_students) | set(roster))
    if students:
        all_students = sorted(set(students))
    if assignments is None:
        present = {q.name for s in found_students if not (submitted / s).is_symlink()
                   for q in (submitted / s).iterdir() if q.is_dir() and not q.is_symlink()}
        assignments = [a for a in course.assignments() if a in present] or course.assignments()[:1]

    run_seed, seed_source = run_seed_from_env()
    run_dir = Path(tempfile.mkdtemp(prefix="tc-grader-"))
    os.chmod(run_dir, 0o700)   # root only: the sandbox sees its parts through bind mounts, never this folder
    started, started_unix = time.monotonic(), time.time()
    try:
        plans = {}
        everything = course.assignments()
        for name in assignments:
            a = notebooks.load_assignment(course.source_dir, name, CASES, course.release_dir)
            earlier = [notebooks.load_assignment(course.source_dir, e, CASES) for e in everything if e < name]
            pplan = package.plan_for(a, course.lib_dir, earlier)
            pkg_dir = package.build_sandbox_package(course.lib_dir, run_dir / f"pkg-{name}", pplan, name)
            plans[name] = Plan(a, pkg_dir, pplan.blocked_names, pplan.unavailable,
                               tuple(exercise_rule.data_for(pplan.modules)))
        subs = discover(submitted, assignments, all_students)
        n_runnable = sum(1 for s in subs if s.status is None)
        held = sandbox_users.allocate_users(max(1, min(workers, n_runnable))) if not remote else None   # [dask hook]
        users = held.users if held else []
        venv = Path(sys.prefix)
        font_cache = supervisor.font_cache_file()
        slots: queue.Queue = queue.Queue()
        zygotes = []
        for slot, user in enumerate(users[:max(1, min(len(users), n_runnable))] if not remote else
                                    [None] * workers):   # [dask hook] no local zygote or user
            z = supervisor.Zygote(run_dir, slot, font_cache) if not remote else None
            zygotes.append(z)
            slots.put([user, z, slot])
        if not remote:                        # what each notebook's sandbox may import: read once, while zygotes start
            for plan in plans.values():
                supervisor.sandbox_site(venv, tuple(sorted(plan.data)))
        bar = Progress(len(subs), enabled=progress)
        records: dict[tuple[str, str], dict] = {}

        def work(sub: Submission) -> None:
            plan = plans[sub.assignment]
            if sub.status is not None:
                record = not_run_record(sub, plan.assignment)
            else:
                entry = slots.get()
                user, zygote, slot = entry
                try:
                    record = grade_submission(sub, plan, run_seed=run_seed, run_dir=run_dir, user=user,
                                              limits=limits, venv=venv, zygote=zygote,
                                              run=remote.run if remote else supervisor.run_in_sandbox)  # [dask hook]
                except Exception as exc:  # noqa: BLE001 -- one broken submission must not stop the class
                    record = not_run_record(sub, plan.assignment)
                    record["auto_status"] = SANDBOX_ERROR
                    record["details"].append(f"the grader failed on this submission: {type(exc).__name__}: {exc}")
                    if not remote:                                  # [dask hook] workers replace their own
                        zygote.close()                              # a zygote in doubt is replaced
                        entry[1] = supervisor.Zygote(run_dir, slot + 100 * len(zygotes), font_cache)
                        zygotes.append(entry[1])
                finally:
                    slots.put(entry)
            records[(sub.student, sub.assignment)] = record
            bar.step(f"{sub.student} {sub.assignment}: {record['auto_status'] or 'ran'}")

        runnable = [s for s in subs if s.status is None]
        # Longest first is unknowable; the order of the class is fine. Not-run rows cost nothing.
        try:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                list(pool.map(work, [s for s in subs if s.status is not None] + runnable))
        finally:
            for z in zygotes:
                if z is not None:
                    z.close()
            for _, uid, _ in users:
                sandbox_users.kill_user_processes(uid)
            if held:
                held.release()
            if remote:
                remote.close()   # [dask hook]
        elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)

    results_dir = grades / "results"
    for (student, name), record in records.items():
        out = results_dir / student / f"{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1), encoding="utf-8")
    n_run = sum(1 for s in subs if s.status is None)
    runs = sorted(r["run"]["seconds"] for r in records.values() if r.get("run"))
    summary = {
        "seed": run_seed, "seed_source": seed_source, "assignments": assignments,
        "students": all_students, "submissions_run": n_run, "rows": len(subs),
        "seconds": round(elapsed, 2), "seconds_per_submission": round(elapsed / max(1, n_run), 3),
        "median_sandbox_seconds": runs[len(runs) // 2] if runs else None,
        "workers": workers, "limits": asdict(limits), "sandbox_users": [name for name, _, _ in users],
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "interval_unix": [round(started_unix, 3), round(time.time(), 3)],
    }
    (grades / "run.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary
