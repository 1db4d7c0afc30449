"""What Canvas and Moodle hand the instructor: their download names, their id maps, their times.

Read from each LMS's own code (the files named below); collect.py uses this to put every downloaded
notebook under the class-list student it belongs to, and refuses to guess: a name it cannot read or
an id it cannot map is reported with the reason.

Canvas (instructure/canvas-lms)
  * "Download Submissions" -- ``lib/content_zipper.rb`` (``ContentZipper#zip_assignment``,
    ``#get_filename``, ``#add_upload_submission``): one flat file per attachment of each student's
    latest submission, named
        ``<sortable name>[_LATE]_<user id>_<attachment id>_<file name>``
    where the sortable name ("Smith, Alice") is lower-cased with every non-word character dropped
    (``sanitize_user_name``, ``sanitize_file_name``: "smithalice"), ``LATE`` is there when Canvas
    counts the submission late (``Submission#late?``), the user id is Canvas's numeric id and the
    attachment id grows with every upload. Anonymous grading writes ``anon_<anonymous id>`` in place
    of the name and user id; text entries and URLs arrive as ``..._text.html`` / ``..._link.html``.
    A file uploaded under a name the student's files already hold is renamed ``<name>-<n>.<ext>``
    (``Attachment.make_unique_filename``): a resubmitted 01_attention.ipynb arrives as
    01_attention-1.ipynb.
  * the gradebook export (Grades > Export) -- ``lib/gradebook_exporter.rb``: header ``Student`` (or
    ``LastName, FirstName``), ``ID`` (the user id of the file names), ``SIS User ID``, ``SIS Login
    ID``, [``Integration ID``, ``Root Account``], ``Section``, assignments...; then an optional
    muted row and a ``Points Possible`` row; "," or ";" between fields, maybe a BOM.
  * submission times -- the Submissions API (``GET /api/v1/courses/:course_id/assignments/
    :assignment_id/submissions``): a JSON list of submissions with ``user_id`` and ``submitted_at``
    (ISO 8601, UTC; null when nothing was submitted), or a CSV with ``user_id`` and ``submitted_at``.
Moodle (moodle/moodle)
  * "Download all submissions" -- ``mod/assign/classes/downloader.php`` (``get_student_prefix``,
    ``load_submissionplugin_filelist``; its test ``mod/assign/tests/downloader_test.php``): prefix =
    ``clean_filename(<full name, "_" made " ">_<participant id>)``; with "Download submissions in
    folders" (the default, ``assign_downloadasfolders``)
        ``<prefix>_assignsubmission_file/<file path><file name>``     (Moodle 4.1 on: downloader.php)
        ``<prefix>_assignsubmission_file_/<file path><file name>``    (3.1 to 4.0: locallib.php download_submissions)
    and without it the flat ``<prefix>_assignsubmission_file_<file name>``; other plugins
    (``assignsubmission_onlinetext``) likewise. The participant id is ``get_uniqueid_for_user``: one
    per user *and assignment*. Blind marking writes "Participant" as the name. Only the latest attempt
    is in the archive. A file uploaded under a name the submission already holds is renamed
    ``<name> (1).<ext>`` (``file_storage::get_unused_filename``).
  * the grading worksheet ("Download grading worksheet") -- ``mod/assign/gradingtable.php``
    (read back by ``mod/assign/feedback/offline/importgradeslib.php``): ``Identifier`` =
    "Participant <participant id>" (``col_recordid``: the id of the download's names), ``Full name``,
    the site's identity fields (``Email address`` by default, ``ID number`` when the site shows it,
    often empty), ``Status``, ``Grade``, ..., ``Last modified (submission)`` (``col_timesubmitted``:
    ``userdate`` of the submission's time in the downloading user's time zone, e.g. "Saturday, 7
    February 2026, 9:00 AM"; "-" without a submission).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

UTC = dt.timezone.utc


class LMSFileError(ValueError):
    """A gradebook export, worksheet or times file that is not what it says (the message names it)."""


# --------------------------------------------------------------------------- names in the downloads
@dataclass
class LMSName:
    """What an LMS download's path says about one file."""
    lms: str                      # "canvas" | "moodle"
    lms_id: str | None            # Canvas user id / Moodle participant id (None: anonymous)
    name: str                     # the student's name as the LMS wrote it into the path
    filename: str                 # the student's own file name
    late: bool = False            # Canvas's LATE marker
    order: int = 0                # Canvas's attachment id (grows with each upload)
    skip: str = ""                # why this file is not a notebook submission (text entry, anonymous, ...)


MOODLE_FOLDER = re.compile(r"\A(?P<name>.*)_(?P<pid>\d+)_assignsubmission_(?P<plugin>[a-z0-9]+)_?\Z")
MOODLE_FLAT = re.compile(r"\A(?P<name>.*)_(?P<pid>\d+)_assignsubmission_(?P<plugin>[a-z0-9]+)_(?P<file>.+)\Z")
CANVAS_FILE = re.compile(r"\A(?P<name>.+?)_(?:(?P<late>LATE)_)?(?P<uid>\d+)_(?P<att>\d+)_(?P<file>.+)\Z")
CANVAS_ANONYMOUS = re.compile(r"\A(?:LATE_)?anon_(?P<anon>[A-Za-z0-9]+)_(?P<att>\d+)_(?P<file>.+)\Z")
CANVAS_TEXT = re.compile(r"\A(?P<name>.+?)_(?:LATE_)?(?P<uid>\d+)_(?P<kind>text|link)\.html\Z")


def parse_moodle(relpath: str) -> LMSName | None:
    """Moodle's names: a ``..._assignsubmission_<plugin>_`` folder, or the flat prefixed file name."""
    parts = relpath.split("/")
    for i, part in enumerate(parts[:-1]):
        m = MOODLE_FOLDER.match(part)
        if m:
            out = LMSName("moodle", m["pid"], m["name"], parts[-1])
            if m["plugin"] != "file":
                out.skip = f"Moodle's {m['plugin']} submission (assignsubmission_{m['plugin']}), not a file"
            return out
    m = MOODLE_FLAT.match(parts[-1])
    if m:
        out = LMSName("moodle", m["pid"], m["name"], m["file"])
        if m["plugin"] != "file":
            out.skip = f"Moodle's {m['plugin']} submission (assignsubmission_{m['plugin']}), not a file"
        return out
    return None


def parse_canvas(filename: str, is_notebook) -> LMSName | None:
    """Canvas's names; ``is_notebook(original name)`` says whether the student's file name is one of ours."""
    m = CANVAS_ANONYMOUS.match(filename)
    if m and is_notebook(m["file"]):
        return LMSName("canvas", None, f"anon_{m['anon']}", m["file"], late=filename.startswith("LATE_"),
                       order=int(m["att"]), skip=f"Canvas's anonymous grading (anon_{m['anon']}): Canvas does not say "
                       "who submitted it; collect after the assignment's grades are posted with anonymity off")
    m = CANVAS_TEXT.match(filename)
    if m:
        return LMSName("canvas", m["uid"], m["name"], filename,
                       skip=f"Canvas's online {'text entry' if m['kind'] == 'text' else 'URL'}, not a file")
    m = CANVAS_FILE.match(filename)
    if m and is_notebook(m["file"]):
        return LMSName("canvas", m["uid"], m["name"], m["file"], late=bool(m["late"]), order=int(m["att"]))
    return None


def resubmission(filename: str, stem: str) -> int | None:
    """0 for ``<stem>.ipynb``/``.zip``, n for the LMSs' renamed re-uploads (Canvas ``<stem>-n``, Moodle
    ``<stem> (n)``); None when the file is not ``stem``'s."""
    m = re.fullmatch(re.escape(stem) + r"(?:-(\d+)| \((\d+)\))?\.(?:ipynb|zip)", filename, re.I)
    if not m:
        return None
    return int(m[1] or m[2] or 0)


def _folded(text: str) -> str:
    """A name as both LMSs reduce it in file names: letters and digits only, case-folded."""
    return "".join(c for c in unicodedata.normalize("NFC", text).casefold() if c.isalnum())


def same_person(name_in_path: str, name_in_file: str) -> bool:
    """Does the name an LMS wrote into a download path agree with its own export's name for that id?"""
    a, b = _folded(name_in_path), _folded(name_in_file)
    return not a or not b or a == b or _folded("participant") in (a, b)


# --------------------------------------------------------------------------- the class list
class Roster:
    """The class list (grades/students.csv): ids and e-mails, to map an LMS's own identities."""

    def __init__(self, rows: list[dict]):
        self.ids = {r["id"] for r in rows}
        self.by_email = {(r.get("email") or "").strip().casefold(): r["id"] for r in rows if (r.get("email") or "").strip()}

    def __bool__(self) -> bool:
        return bool(self.ids)

    def match(self, candidates: list[tuple[str, str]]) -> tuple[str | None, str]:
        """(student, reason) from (column, value) pairs: an id column matches a class-list id, an
        e-mail column a class-list e-mail. Two columns naming different students: refused."""
        found = {}
        tried = []
        for column, value in candidates:
            value = (value or "").strip()
            if not value:
                continue
            tried.append(f"{column} {value!r}")
            if "mail" in column.lower() or "login" in column.lower():
                student = self.by_email.get(value.casefold()) or (value if value in self.ids else None)
            else:
                student = value if value in self.ids else None
            if student is not None:
                found[column] = student
        if len(set(found.values())) > 1:
            return None, "the columns name different students: " + ", ".join(f"{c} -> {s}" for c, s in found.items())
        if found:
            return next(iter(found.values())), ""
        if not tried:
            return None, "no identity in the file (every id and e-mail column is empty)"
        return None, "matches no class-list student (" + ", ".join(tried) + ")"


# --------------------------------------------------------------------------- Canvas's files
@dataclass
class Person:
    """One row of an LMS's own export, mapped to the class list."""
    lms_id: str
    name: str
    student: str | None
    reason: str = ""
    when: dt.datetime | None = None       # the submission time in it (Moodle's worksheet)
    status: str = ""


def _read_csv(path: Path, what: str) -> list[list[str]]:
    """Rows of a UTF-8 CSV (a BOM dropped); ";"-separated when the header is (Canvas writes ";" for users whose
    locale has a decimal comma or who ask for it: CSVWithI18n.csv_i18n_settings)."""
    try:
        with Path(path).open(newline="", encoding="utf-8-sig") as fh:
            first = fh.readline()
            fh.seek(0)                                  # utf-8-sig drops the BOM again after a seek to 0
            return list(csv.reader(fh, delimiter=";" if first.count(";") > first.count(",") else ","))
    except FileNotFoundError:
        raise LMSFileError(f"{what} {path} does not exist") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise LMSFileError(f"{what} {path} is not a UTF-8 CSV file ({exc})") from None


def read_canvas_gradebook(path: Path, roster: Roster) -> dict[str, Person]:
    """Canvas user id -> the class-list student, through Canvas's gradebook export."""
    rows = _read_csv(path, "--canvas-gradebook")
    head = [h.strip() for h in rows[0]] if rows else []
    if "ID" not in head or not ({"Student"} <= set(head) or {"LastName", "FirstName"} <= set(head)):
        raise LMSFileError(f"--canvas-gradebook {path}: not Canvas's gradebook export (Grades > Export): its header "
                           f"has no 'Student' (or 'LastName', 'FirstName') and 'ID' columns; found {', '.join(head[:8])}")
    col = {h: i for i, h in enumerate(head)}
    out = {}
    for row in rows[1:]:
        row = row + [""] * (len(head) - len(row))
        uid = row[col["ID"]].strip()
        if not uid.isdigit():                       # the muted row and the "Points Possible" row
            continue
        name = row[col["Student"]] if "Student" in col else f"{row[col['LastName']]}, {row[col['FirstName']]}"
        ids = [(c, row[col[c]]) for c in ("SIS User ID", "SIS Login ID", "Integration ID") if c in col]
        student, reason = roster.match(ids) if roster else _no_roster(ids)
        out[uid] = Person(uid, name.lstrip("'").strip(), student,
                          f"Canvas user {uid} ({name.strip()}) in {Path(path).name}: {reason}" if reason else "")
    return out


def _no_roster(ids: list[tuple[str, str]]) -> tuple[str | None, str]:
    """Without a class list, the institution's id (SIS User ID / ID number) is the student's id."""
    for column, value in ids:
        if column in ("SIS User ID", "ID number") and value.strip():
            return value.strip(), ""
    return None, "no class list (make students CLASSLIST=...) and no SIS User ID / ID number to use as the id"


def read_canvas_times(path: Path, gradebook: dict[str, Person] | None) -> tuple[dict[str, dt.datetime | None], list[str]]:
    """Canvas user id -> submitted_at (None: not submitted), from the Submissions API's JSON or a CSV."""
    text = Path(path).read_text(encoding="utf-8-sig")
    notes = []
    if text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LMSFileError(f"--times {path}: not valid JSON ({exc})") from None
        if isinstance(data, dict):
            data = data.get("submissions", [data])
        items = [x for page in data for x in (page if isinstance(page, list) else [page])]
        pairs = [(str(x.get("user_id", "")), x.get("submitted_at")) for x in items if isinstance(x, dict)]
    else:
        rows = list(csv.DictReader(text.splitlines()))
        fields = set(rows[0]) if rows else set()
        if not {"user_id", "submitted_at"} <= fields:
            raise LMSFileError(f"--times {path}: Canvas's times need the columns user_id and submitted_at")
        pairs = [((r["user_id"] or "").strip(), r["submitted_at"]) for r in rows]
    out = {}
    for uid, raw in pairs:
        if not uid:
            continue
        if raw in (None, "", "null"):
            out[uid] = None
            continue
        try:
            when = dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
        except ValueError:
            raise LMSFileError(f"--times {path}: user {uid}: submitted_at {raw!r} is not an ISO 8601 time") from None
        out[uid] = (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)
    if gradebook is not None:
        stray = sorted(set(out) - set(gradebook), key=int)
        if stray:
            notes.append(f"{Path(path).name}: {len(stray)} Canvas user{'s' if len(stray) != 1 else ''} not in the "
                         f"gradebook export: {', '.join(stray[:5])}")
    return out, notes


# --------------------------------------------------------------------------- Moodle's worksheet
MOODLE_IDENTITY = ("ID number", "Email address", "Username")
MOODLE_TIME = "Last modified (submission)"


def parse_moodle_time(raw: str, zone) -> dt.datetime | None:
    """userdate()'s default form ("Saturday, 7 February 2026, 9:00 AM"), in the given zone; "-": None."""
    from dateutil import parser as dateparser

    raw = (raw or "").strip()
    if raw in ("", "-"):
        return None
    try:
        value = dateparser.parse(raw)
    except (ValueError, OverflowError):
        raise LMSFileError(f"{raw!r} is not a date-time") from None
    return (value if value.tzinfo else value.replace(tzinfo=zone)).astimezone(UTC)


def read_moodle_worksheet(path: Path, roster: Roster, zone) -> dict[str, Person]:
    """Moodle participant id -> the class-list student and the submission time, from its grading worksheet."""
    rows = _read_csv(path, "--moodle-worksheet")
    head = [h.strip() for h in rows[0]] if rows else []
    if "Identifier" not in head:
        raise LMSFileError(f"--moodle-worksheet {path}: not Moodle's grading worksheet (Assignment > View all "
                           f"submissions > Download grading worksheet, in English): no 'Identifier' column; found "
                           f"{', '.join(head[:8])}")
    col = {h: i for i, h in enumerate(head)}
    out = {}
    for n, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        row = row + [""] * (len(head) - len(row))
        ident = row[col["Identifier"]].strip()
        m = re.fullmatch(r"\D*?(\d+)", ident)                 # "Participant 1234567" (any language's word)
        if not m:
            raise LMSFileError(f"--moodle-worksheet {path} line {n}: Identifier {ident!r} is not 'Participant <number>'")
        pid = m[1]
        name = row[col["Full name"]].strip() if "Full name" in col else ""
        ids = [(c, row[col[c]]) for c in MOODLE_IDENTITY if c in col]
        student, reason = roster.match(ids) if roster else _no_roster(ids)
        try:
            when = parse_moodle_time(row[col[MOODLE_TIME]], zone) if MOODLE_TIME in col else None
        except LMSFileError as exc:
            raise LMSFileError(f"--moodle-worksheet {path} line {n}: {MOODLE_TIME}: {exc}") from None
        out[pid] = Person(pid, name, student,
                          f"Moodle participant {pid} ({name}) in {Path(path).name}: {reason}" if reason else "",
                          when, row[col["Status"]].strip() if "Status" in col else "")
    return out
