"""Collect a learning-management system's download folder into submitted/.

An LMS (Moodle, Canvas, ...) hands out one file per student and notebook. The
files are matched by name -- the same idea as nbgrader's ``zip_collect`` with
its ``FileNameCollector``, without nbgrader's downloaded/<assignment>/archive
layout:

    <student>_<assignment>.ipynb                 alice_01_attention.ipynb
    <student>_<assignment>_<notebook>.ipynb      alice_01_attention_01_attention.ipynb
    <student>_<assignment>.zip                   a zip holding <assignment>.ipynb (any folder)

<student> may itself contain underscores: the assignment name (a folder of
notebooks/) anchors the match. Anything after the notebook name and before
``.ipynb`` that LMSs add for resubmissions (``-1``, `` (2)``, ``_late``) is
ignored, and the newest file wins. A custom regular expression with the named
groups ``student`` and ``assignment`` (and optionally ``notebook``) replaces the
rule (``--pattern``). Files that match nothing are listed, not guessed at.
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import late
from .store import safe_name

MAX_MEMBER = 256 << 20       # as grading.MAX_NOTEBOOK_FILE_BYTES: outputs make notebooks big


@dataclass
class Match:
    path: Path
    student: str
    assignment: str
    notebook: str
    member: str | None = None     # inside a zip


def _match(name: str, assignments: list[str], pattern: re.Pattern | None) -> tuple[str, str, str] | None:
    if pattern is not None:
        m = pattern.match(name)
        if not m:
            return None
        groups = m.groupdict()
        assignment = groups.get("assignment")
        if assignment not in assignments:
            return None
        return groups["student"], assignment, groups.get("notebook") or assignment
    stem, dot, ext = name.rpartition(".")
    if not dot or ext.lower() not in ("ipynb", "zip"):
        return None
    suffix = re.compile(r"(?:[ _\-]*(?:\(\d+\)|\d+|late))*", re.I)     # LMS resubmission marks
    for a in sorted(assignments, key=len, reverse=True):
        for m in re.finditer("_" + re.escape(a), stem):
            student, rest = stem[: m.start()], stem[m.end():]
            if rest.startswith("_" + a):
                rest = rest[len(a) + 1:]
            if student and suffix.fullmatch(rest):
                return student, a, a
    return None


def plan(lms_dir: Path, assignments: list[str], pattern: str | None = None) -> tuple[list[Match], list[str]]:
    regex = re.compile(pattern) if pattern else None
    matches: dict[tuple[str, str], Match] = {}
    skipped: list[str] = []
    for path in sorted(Path(lms_dir).rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        found = _match(path.name, assignments, regex)
        if found is None or not safe_name(found[0]):
            skipped.append(str(path.relative_to(lms_dir)))
            continue
        student, assignment, notebook = found
        member = None
        if path.suffix.lower() == ".zip":
            member = _zip_member(path, notebook)
            if member is None:
                skipped.append(f"{path.relative_to(lms_dir)} (no {notebook}.ipynb inside)")
                continue
        key = (student, assignment)
        if key not in matches or path.stat().st_mtime >= matches[key].path.stat().st_mtime:
            matches[key] = Match(path, student, assignment, notebook, member)
    return sorted(matches.values(), key=lambda m: (m.student, m.assignment)), skipped


def _zip_member(path: Path, notebook: str) -> str | None:
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                base = info.filename.rsplit("/", 1)[-1]
                if base == f"{notebook}.ipynb" and not info.is_dir() and info.file_size <= MAX_MEMBER \
                        and "__MACOSX" not in info.filename:
                    return info.filename
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, RuntimeError):
        return None
    return None


def collect(lms_dir: Path, submitted: Path, assignments: list[str], pattern: str | None = None,
            dry_run: bool = False, times: dict | None = None) -> tuple[list[Match], list[str]]:
    """Copy every matched file to submitted/<student>/<assignment>/<notebook>.ipynb.

    Each submission's time goes into timestamp.txt beside it (nbgrader's file, late.py): ``times``
    (the LMS's own, late.load_lms_times) where it has the student, else the downloaded file's time.
    """
    matches, skipped = plan(lms_dir, assignments, pattern)
    if dry_run:
        return matches, skipped
    copied = []
    for m in matches:
        where = f"{m.path.name}" + (f" [{m.member}]" if m.member else "")
        folder = Path(submitted) / m.student / m.assignment
        if any(p.is_symlink() for p in (Path(submitted) / m.student, folder)):
            skipped.append(f"{where} (submitted/{m.student}/{m.assignment} is a symbolic link: not written)")
            continue
        dest = folder / f"{m.notebook}.ipynb"
        tmp = folder / f".{m.notebook}.ipynb.collecting"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if m.member is None:
                shutil.copyfile(m.path, tmp)
            else:
                with zipfile.ZipFile(m.path) as zf, zf.open(m.member) as src, tmp.open("wb") as out:
                    shutil.copyfileobj(src, out, length=1 << 20)
            os.replace(tmp, dest)
            when = (times or {}).get((m.student, m.assignment))          # [late hook]
            late.write_timestamp(folder, when or datetime.fromtimestamp(m.path.stat().st_mtime, timezone.utc))
        except (OSError, zipfile.BadZipFile, NotImplementedError, ValueError, EOFError, RuntimeError,
                zlib.error) as exc:          # one unreadable file or member: the rest of the class is collected
            tmp.unlink(missing_ok=True)
            skipped.append(f"{where} (cannot be read: {type(exc).__name__}: {str(exc)[:120]})")
            continue
        copied.append(m)
    return copied, skipped
