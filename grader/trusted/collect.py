"""Collect a learning-management system's download into submitted/<student>/<assignment>/.

The download is the LMS's archive (a zip) or the folder it was unzipped into, exactly as the LMS
produces it (lmsfiles.py reads each LMS's layout from its own code):

    Canvas  "Download Submissions"       <name>[_LATE]_<user id>_<attachment id>_01_attention.ipynb
    Moodle  "Download all submissions"   <Full name>_<participant id>_assignsubmission_file_/01_attention.ipynb
                                         (or flat: <Full name>_<participant id>_assignsubmission_file_01_attention.ipynb)
    other                                <student>_<assignment>.ipynb, <student>_<assignment>_<notebook>.ipynb,
                                         <student>_<assignment>.zip holding <assignment>.ipynb

An LMS names students by its own ids. They are mapped to the class list through the file the
instructor has from the same LMS: Canvas's gradebook export (its ID column is the user id of the
file names; SIS User ID or SIS Login ID is matched with the class list's id or e-mail) and Moodle's
grading worksheet of the assignment (its Identifier "Participant <id>" is the participant id of the
names; ID number or Email address is matched with the class list). Nothing is guessed: a file that
cannot be mapped (an id missing from the export, a name that disagrees with it, anonymous grading,
no export given) is listed with the reason and the rest of the class is collected.

Several files for one submission: the LMS's own order decides -- Canvas's attachment ids grow with
each upload; Canvas renames a re-uploaded 01_attention.ipynb to 01_attention-1.ipynb, Moodle to
"01_attention (1).ipynb", so the higher number is the later file -- and collect says which file
replaced which. Files it cannot order are listed, not guessed at.

The submission time (nbgrader's timestamp.txt beside the notebook, late.py) comes from the LMS:
Moodle's worksheet ("Last modified (submission)"), Canvas's Submissions API (submitted_at), or any
CSV with a class-list id or e-mail and a time. A submission without one gets no timestamp.txt (its
row says "time unknown: not checked for lateness"); a file's modification time is used only when
the instructor asks for it (--file-times).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from . import late, lmsfiles
from .store import safe_name

MAX_MEMBER = 256 << 20       # as grading.MAX_NOTEBOOK_FILE_BYTES: outputs make notebooks big
UTC = dt.timezone.utc
ZIP_ERRORS = (OSError, zipfile.BadZipFile, NotImplementedError, ValueError, EOFError, RuntimeError, zlib.error)


@dataclass
class Match:
    path: Path                    # the file on disk: the student's file, or the LMS archive that holds it
    student: str
    assignment: str
    notebook: str
    member: str | None = None     # the student's file inside the archive ``path``
    inner: str | None = None      # the notebook inside the student's own zip
    source: str = ""              # the file as the instructor sees it in the download
    lms: str = "names"            # canvas | moodle | names
    lms_id: str | None = None     # Canvas user id / Moodle participant id
    late_marker: bool = False     # Canvas's LATE
    order: tuple = ()             # the LMS's upload order (higher: later)
    mtime: dt.datetime | None = None
    replaces: list[str] = field(default_factory=list)     # older files of the same submission in the download
    when: dt.datetime | None = None                      # the submission time written to timestamp.txt
    when_from: str = ""
    no_time: str = ""             # why there is no time
    earlier: str = ""             # what happened to a notebook collected before into the same place


# --------------------------------------------------------------------------- plain names
SUFFIX = re.compile(r"(?:[ _\-]*(?:\(\d+\)|\d+|late))*", re.I)     # LMS resubmission marks


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
    for a in sorted(assignments, key=len, reverse=True):
        for m in re.finditer("_" + re.escape(a), stem):
            student, rest = stem[: m.start()], stem[m.end():]
            if rest.startswith("_" + a):
                rest = rest[len(a) + 1:]
            if student and SUFFIX.fullmatch(rest):
                return student, a, a
    return None


def _plain_order(name: str, assignment: str) -> int:
    """The resubmission number in a plain name's marks (``-1``, `` (2)``); 0 without one."""
    stem = name.rsplit(".", 1)[0]
    rest = stem[stem.rfind(assignment) + len(assignment):]
    numbers = re.findall(r"\d+", rest)
    return int(numbers[-1]) if numbers else 0


# --------------------------------------------------------------------------- the download's files
@dataclass
class _Entry:
    path: Path
    member: str | None
    rel: str                      # the path inside the download ("/"-separated)
    mtime: dt.datetime

    @property
    def label(self) -> str:
        return f"{self.path.name} [{self.member}]" if self.member else self.rel


def _zip_time(info: zipfile.ZipInfo) -> dt.datetime:
    return dt.datetime(*info.date_time, tzinfo=UTC)      # a zip stores no zone: read as UTC (--file-times only)


def _archive(path: Path, rel: str, skipped: list[str]):
    try:
        with zipfile.ZipFile(path) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir() and "__MACOSX" not in i.filename
                     and not i.filename.rsplit("/", 1)[-1].startswith(".")]
    except ZIP_ERRORS as exc:
        skipped.append(f"{rel} (cannot be read: {type(exc).__name__}: {str(exc)[:120]})")
        return
    for info in infos:
        yield _Entry(path, info.filename, info.filename, _zip_time(info))


def _entries(lms: Path, skipped: list[str], is_file):
    """Every file of the download: an archive's members, or a folder's files (zips in it that are not a
    student's file are the LMS's archives: their members)."""
    lms = Path(lms)
    if lms.is_file():
        if zipfile.is_zipfile(lms) and not is_file(lms.name):
            yield from _archive(lms, lms.name, skipped)
        else:
            yield _Entry(lms, None, lms.name, dt.datetime.fromtimestamp(lms.stat().st_mtime, UTC))
        return
    if not lms.is_dir():
        raise FileNotFoundError(f"the LMS download {lms} is neither a zip nor a folder")
    for path in sorted(lms.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(lms).as_posix()
        if path.suffix.lower() == ".zip" and not is_file(rel) and zipfile.is_zipfile(path):
            yield from _archive(path, rel, skipped)
        else:
            yield _Entry(path, None, rel, dt.datetime.fromtimestamp(path.stat().st_mtime, UTC))


# --------------------------------------------------------------------------- one file: whose, which
class _Plan:
    def __init__(self, assignments, pattern, roster_ids, canvas, moodle, moodle_assignment):
        self.assignments = assignments
        self.regex = re.compile(pattern) if pattern else None
        self.roster_ids = roster_ids
        self.canvas, self.moodle, self.moodle_assignment = canvas, moodle, moodle_assignment

    def notebook_of(self, filename: str) -> tuple[str, int] | None:
        for a in self.assignments:
            n = lmsfiles.resubmission(filename, a)
            if n is not None:
                return a, n
        return None

    def is_students_file(self, rel: str) -> bool:
        """A name that is one student's file (not an LMS archive holding many)."""
        base = rel.rsplit("/", 1)[-1]
        return bool(lmsfiles.parse_moodle(rel) or lmsfiles.parse_canvas(base, self.notebook_of)
                    or _match(base, self.assignments, self.regex))

    def classify(self, e: _Entry) -> Match | str | None:
        """A Match (student known), a reason to skip it, or None (the name matches no rule)."""
        base = e.rel.rsplit("/", 1)[-1]
        if self.regex is None:
            lms = lmsfiles.parse_moodle(e.rel)
            if lms is None:
                lms = lmsfiles.parse_canvas(base, self.notebook_of)
                plain = _match(base, self.assignments, None)
                if lms is not None and self.canvas is None and plain and plain[0] in self.roster_ids:
                    lms = None                                      # a class-list id that only looks like Canvas's
            if lms is not None:
                return self._lms(e, lms)
        found = _match(base, self.assignments, self.regex)
        if found is None:
            return None
        student, assignment, notebook = found
        if not safe_name(student):
            return f"{e.label} (student id {student!r} cannot be a folder name)"
        return Match(e.path, student, assignment, notebook, e.member, source=e.label, mtime=e.mtime,
                     order=(0, _plain_order(base, notebook)))

    def _lms(self, e: _Entry, lms: lmsfiles.LMSName) -> Match | str:
        who = {"canvas": f"Canvas user {lms.lms_id}", "moodle": f"Moodle participant {lms.lms_id}"}[lms.lms]
        if lms.skip:
            return f"{e.label} ({lms.skip})"
        found = self.notebook_of(lms.filename)
        if found is None:
            return (f"{e.label} ({who}'s file {lms.filename!r} is not a course notebook: expected "
                    f"{' or '.join(a + '.ipynb' for a in self.assignments[:3])}{' ...' if len(self.assignments) > 3 else ''})")
        assignment, number = found
        if lms.lms == "canvas":
            export, what, flag = self.canvas, "Canvas's gradebook export", "--canvas-gradebook (make collect CANVAS_GRADEBOOK=)"
        else:
            export, what, flag = self.moodle, "this assignment's Moodle grading worksheet", \
                "--moodle-worksheet (make collect MOODLE_WORKSHEET=... ASSIGNMENT=...)"
            if export is not None and assignment != self.moodle_assignment:
                return (f"{e.label} (a {assignment} notebook, but the worksheet is {self.moodle_assignment}'s: Moodle's "
                        f"participant ids are per assignment; collect it with {assignment}'s worksheet)")
        if export is None:
            return f"{e.label} ({who}: give {what} to map it to the class list: {flag})"
        person = export.get(lms.lms_id)
        if person is None:
            return (f"{e.label} ({who} is not in {what}: export it again after the last change of the class, "
                    f"or add the student)")
        if person.student is None:
            return f"{e.label} ({person.reason})"
        if not lmsfiles.same_person(lms.name, person.name):
            return (f"{e.label} (the download names {who} {lms.name!r}, {what} {person.name!r}: is the export "
                    f"from another course or assignment? not collected)")
        if not safe_name(person.student):
            return f"{e.label} (student id {person.student!r} cannot be a folder name)"
        order = (1, lms.order) if lms.lms == "canvas" else (2, number)
        return Match(e.path, person.student, assignment, assignment, e.member, source=e.label, lms=lms.lms,
                     lms_id=lms.lms_id, late_marker=lms.late, order=order, mtime=e.mtime)


def _zip_member(zf: zipfile.ZipFile, notebook: str) -> str | None:
    for info in zf.infolist():
        base = info.filename.rsplit("/", 1)[-1]
        if base == f"{notebook}.ipynb" and not info.is_dir() and info.file_size <= MAX_MEMBER \
                and "__MACOSX" not in info.filename:
            return info.filename
    return None


def _students_zip(m: Match) -> str | None:
    """The notebook inside a student's own zip (None: not there, or unreadable)."""
    try:
        if m.member is None:
            with zipfile.ZipFile(m.path) as zf:
                return _zip_member(zf, m.notebook)
        with zipfile.ZipFile(m.path) as outer:
            if outer.getinfo(m.member).file_size > MAX_MEMBER:
                return None
            with zipfile.ZipFile(io.BytesIO(outer.read(m.member))) as zf:
                return _zip_member(zf, m.notebook)
    except ZIP_ERRORS:
        return None


def plan(lms_dir: Path, assignments: list[str], pattern: str | None = None, *, roster_ids=(), canvas=None,
         moodle=None, moodle_assignment: str | None = None) -> tuple[list[Match], list[str]]:
    """Which file of the download is whose submission (the latest of each), and what is skipped and why."""
    p = _Plan(assignments, pattern, set(roster_ids), canvas, moodle, moodle_assignment)
    skipped: list[str] = []
    groups: dict[tuple[str, str], list[Match]] = {}
    for e in _entries(Path(lms_dir), skipped, p.is_students_file):
        got = p.classify(e)
        if got is None:
            skipped.append(f"{e.label} (name does not match an LMS's download or <student>_<assignment>.ipynb)")
            continue
        if isinstance(got, str):
            skipped.append(got)
            continue
        if (got.member or got.path.name).lower().endswith(".zip"):
            got.inner = _students_zip(got)
            if got.inner is None:
                skipped.append(f"{got.source} (no readable {got.notebook}.ipynb inside)")
                continue
        groups.setdefault((got.student, got.assignment), []).append(got)
    out = []
    for (student, assignment), found in sorted(groups.items()):
        found.sort(key=lambda m: m.order)
        latest = found[-1]
        kinds = {m.lms for m in found}
        if len(found) > 1 and (len(kinds) > 1 or found[-2].order == latest.order):
            names = ", ".join(m.source for m in found)
            skipped.append(f"{names} (several files for {student}'s {assignment} and nothing in their names says "
                           f"which is the latest: none collected; remove the older ones)")
            continue
        latest.replaces = [m.source for m in found[:-1]]
        out.append(latest)
    return out, skipped


# --------------------------------------------------------------------------- copying
def _read(m: Match) -> bytes:
    """The notebook's bytes (bounded)."""
    def bounded(handle) -> bytes:
        data = handle.read(MAX_MEMBER + 1)
        if len(data) > MAX_MEMBER:
            raise ValueError(f"larger than {MAX_MEMBER >> 20} MB")
        return data

    if m.member is None and m.inner is None:
        with m.path.open("rb") as fh:
            return bounded(fh)
    with zipfile.ZipFile(m.path) as zf:
        if m.inner is None:
            with zf.open(m.member) as fh:
                return bounded(fh)
        data = zf.read(m.member) if m.member is not None else None
    with zipfile.ZipFile(io.BytesIO(data) if data is not None else m.path) as inner, inner.open(m.inner) as fh:
        return bounded(fh)


def _time(m: Match, times, canvas_times, moodle, file_times: bool) -> None:
    """The LMS's time of this submission, or why there is none."""
    if m.lms == "moodle" and moodle is not None:
        person = moodle[m.lms_id]
        m.when, m.when_from = person.when, "Moodle's grading worksheet"
        if m.when is None:
            m.no_time = f"the worksheet has no submission time for participant {m.lms_id}" + \
                (f" (status: {person.status})" if person.status else "")
    elif m.lms == "canvas" and canvas_times is not None:
        m.when, m.when_from = canvas_times.get(m.lms_id), "Canvas's submitted_at"
        if m.when is None:
            m.no_time = (f"Canvas user {m.lms_id} is not in the times file" if m.lms_id not in canvas_times
                         else f"the times file has no submitted_at for Canvas user {m.lms_id}")
    elif times is not None:
        m.when, m.when_from = times.get((m.student, m.assignment)), "the times file"
        if m.when is None:
            m.no_time = f"{m.student} has no {m.assignment} time in the times file"
    else:
        m.no_time = "no times file given (LMS_TIMES=, or the Moodle worksheet)"
    if m.when is None and file_times and m.mtime is not None:
        m.when, m.when_from = m.mtime, "the file's modification time (--file-times)"


def collect(lms_dir: Path, submitted: Path, assignments: list[str], pattern: str | None = None,
            dry_run: bool = False, times: dict | None = None, *, roster_ids=(), canvas=None, moodle=None,
            moodle_assignment: str | None = None, canvas_times: dict | None = None,
            file_times: bool = False) -> tuple[list[Match], list[str]]:
    """Copy each submission's latest file to submitted/<student>/<assignment>/<notebook>.ipynb.

    ``canvas``/``moodle``: the id maps (lmsfiles.read_canvas_gradebook / read_moodle_worksheet, whose times
    are used too); ``canvas_times``: Canvas user id -> submitted_at; ``times``: (student, assignment) ->
    time from any other times file. timestamp.txt holds the LMS's time; without one it is removed (a
    notebook collected before may have left one), unless ``file_times`` asks for the file's own time.
    """
    matches, skipped = plan(lms_dir, assignments, pattern, roster_ids=roster_ids, canvas=canvas, moodle=moodle,
                            moodle_assignment=moodle_assignment)
    for m in matches:
        _time(m, times, canvas_times, moodle, file_times)
    if dry_run:
        return matches, skipped
    copied = []
    for m in matches:
        folder = Path(submitted) / m.student / m.assignment
        if any(p.is_symlink() for p in (Path(submitted) / m.student, folder)):
            skipped.append(f"{m.source} (submitted/{m.student}/{m.assignment} is a symbolic link: not written)")
            continue
        dest = folder / f"{m.notebook}.ipynb"
        tmp = folder / f".{m.notebook}.ipynb.collecting"
        try:
            data = _read(m)
            folder.mkdir(parents=True, exist_ok=True)
            if dest.is_file() and not dest.is_symlink():
                old = dest.read_bytes()
                if hashlib.sha256(old).digest() != hashlib.sha256(data).digest():
                    was = late.read_timestamp(folder)
                    m.earlier = "replaces the notebook collected before" + (f" (submitted {was})" if was else "")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
            if m.when is not None:
                late.write_timestamp(folder, m.when)
            else:
                (folder / late.TIMESTAMP_FILE).unlink(missing_ok=True)
        except ZIP_ERRORS as exc:          # one unreadable file or member: the rest of the class is collected
            tmp.unlink(missing_ok=True)
            skipped.append(f"{m.source} (cannot be read: {type(exc).__name__}: {str(exc)[:120]})")
            continue
        copied.append(m)
    return copied, skipped


def summary(matches: list[Match], skipped: list[str]) -> list[str]:
    """The counts collect prints last."""
    by = {k: sum(1 for m in matches if m.lms == k) for k in ("canvas", "moodle", "names")}
    kinds = ", ".join(f"{n} {label}" for k, label in (("canvas", "from Canvas"), ("moodle", "from Moodle"),
                                                      ("names", "by file name")) if (n := by[k]))
    lines = [f"{len(matches)} submission{'s' if len(matches) != 1 else ''} collected" + (f" ({kinds})" if kinds else "")
             + f", {len(skipped)} file{'s' if len(skipped) != 1 else ''} skipped"]
    resubmitted = sum(1 for m in matches if m.replaces)
    if resubmitted:
        lines.append(f"{resubmitted} resubmission{'s' if resubmitted != 1 else ''} replaced an older file")
    late_marked = sum(1 for m in matches if m.late_marker)
    if late_marked:
        lines.append(f"{late_marked} marked LATE by Canvas")
    unknown = [m for m in matches if m.when is None]
    if unknown:
        lines.append(f"{len(unknown)} submission{'s have' if len(unknown) != 1 else ' has'} no submission time: "
                     "time unknown, not checked for lateness (" + ", ".join(m.student for m in unknown[:8])
                     + (" ..." if len(unknown) > 8 else "") + ")")
    from_files = sum(1 for m in matches if m.when is not None and "modification" in m.when_from)
    if from_files:
        lines.append(f"{from_files} time{'s' if from_files != 1 else ''} taken from the files' modification times "
                     "(--file-times)")
    return lines


def describe(m: Match, dry_run: bool = False) -> str:
    """One collected submission, as collect prints it."""
    where = {"canvas": f"Canvas user {m.lms_id}", "moodle": f"Moodle participant {m.lms_id}"}.get(m.lms, "")
    notes = [where] if where else []
    if m.late_marker:
        notes.append("Canvas marked it LATE")
    if m.when is not None:
        notes.append(f"submitted {m.when.astimezone(UTC).strftime('%Y-%m-%d %H:%M UTC')} ({m.when_from})")
    else:
        notes.append(f"time unknown: not checked for lateness ({m.no_time})")
    lines = [f"{'would copy' if dry_run else 'copied'}  {m.source}  ->  {m.student}/{m.assignment}/{m.notebook}.ipynb"
             f"  [{'; '.join(notes)}]"]
    for old in m.replaces:
        lines.append(f"          resubmission: {m.source} replaces the older {old}")
    if m.earlier:
        lines.append(f"          {m.earlier}")
    return "\n".join(lines)
