"""Due dates and the late policy: the term's settings (grading.toml) and the penalty of one row.

The course root's ``grading.toml`` (``--config FILE`` elsewhere) holds the term's settings:

    [due]                                  # one due date per assignment, ISO 8601
    "01_attention" = "2026-02-06T23:59"    # no offset: the time is in [late] timezone

    [late]
    timezone = "Europe/Berlin"             # for due dates and extensions written without an offset
    policy = "per_day"                     # none | per_day | cutoff
    percent_per_day = 10                   # per_day: this % of the earned points per started day late
    cutoff_days = 5                        # per_day: 0 points after this many days late (optional);
                                           # cutoff: 0 points when later than this (default 0)
    grace_minutes = 15                     # lateness below this is not lateness
    extensions = "extensions.csv"          # student,assignment,due  (assignment "*": every one)

The submission time is nbgrader's: ``submitted/<student>/<assignment>/timestamp.txt``, written by
nbgrader's exchange on ``nbgrader submit`` (and copied by ``nbgrader collect``), or by
``grader collect`` from the LMS's own time (Moodle's grading worksheet, Canvas's submitted_at, a times
file; a file's modification time only with ``--file-times``). It is read with nbgrader's own parser
(``nbgrader.utils.parse_utc``). A row without a time ("time unknown: not checked for lateness"),
without a due date, or under ``policy = "none"`` gets no penalty and says why; lateness within the
grace is mentioned, without a penalty.

The penalty is computed when the table is built (``make grade-table``), from the points earned
(hand grades included): changing the policy or granting an extension never needs a regrade.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .store import cents

POLICIES = ("none", "per_day", "cutoff")
CONFIG_NAME = "grading.toml"
TIMESTAMP_FILE = "timestamp.txt"          # nbgrader's name, in each submission folder
UTC = dt.timezone.utc


class ConfigError(ValueError):
    """grading.toml or the extensions file says something the grader cannot use."""


@dataclass
class Policy:
    rule: str = "none"
    percent_per_day: float = 0.0
    cutoff_days: float | None = None
    grace: dt.timedelta = dt.timedelta(0)
    timezone: str = "UTC"
    due: dict[str, dt.datetime] = field(default_factory=dict)            # assignment -> UTC
    extensions: dict[tuple[str, str], dt.datetime] = field(default_factory=dict)   # (student, a|*) -> UTC
    source: str = "no grading.toml"

    def describe(self) -> str:
        grace = f", {self.grace.total_seconds() / 60:g} minutes' grace" if self.grace else ""
        if self.rule == "per_day":
            cut = f", 0 points after {self.cutoff_days:g} days" if self.cutoff_days is not None else ""
            return f"{self.percent_per_day:g}% of the points off per started day late{cut}{grace}"
        if self.rule == "cutoff":
            days = self.cutoff_days or 0
            return (f"0 points when submitted after the due date{grace}" if not days else
                    f"0 points when submitted more than {days:g} days after the due date{grace}")
        return "no late penalty"

    def due_for(self, student: str, assignment: str) -> tuple[dt.datetime | None, bool]:
        """The due date that applies to this student (UTC) and whether it is an extension."""
        for key in ((student, assignment), (student, "*")):
            if key in self.extensions:
                return self.extensions[key], True
        return self.due.get(assignment), False


def _zone(name: str):
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"timezone {name!r} is not a known time zone (e.g. 'UTC', 'Europe/Berlin')") from None


def parse_time(text: str, zone, what: str) -> dt.datetime:
    """ISO 8601 date or date-time -> aware UTC; a date alone means the end of that day."""
    raw = str(text).strip()
    try:
        value = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise ConfigError(f"{what}: {raw!r} is not an ISO 8601 date-time such as 2026-02-06T23:59") from None
    if len(raw) == 10:                                   # a date: due at the end of that day
        value = value.replace(hour=23, minute=59, second=59)
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(UTC)


def load(path: Path | None) -> Policy:
    """The term's policy from grading.toml (a missing file: no due dates, no penalty)."""
    if path is None or not Path(path).exists():
        return Policy()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    late = data.get("late", {}) or {}
    rule = str(late.get("policy", "none"))
    if rule not in POLICIES:
        raise ConfigError(f"{path}: [late] policy is {rule!r}; expected one of {', '.join(POLICIES)}")
    zone_name = str(late.get("timezone", "UTC"))
    zone = _zone(zone_name)
    policy = Policy(rule=rule, timezone=zone_name, source=str(path))
    for key, attr in (("percent_per_day", "percent_per_day"), ("cutoff_days", "cutoff_days")):
        if key in late:
            value = late[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"{path}: [late] {key} must be a number >= 0, got {value!r}")
            setattr(policy, attr, float(value))
    if rule == "per_day" and "percent_per_day" not in late:
        raise ConfigError(f"{path}: [late] policy = \"per_day\" needs percent_per_day (e.g. 10)")
    grace = late.get("grace_minutes", 0)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
        raise ConfigError(f"{path}: [late] grace_minutes must be a number >= 0, got {grace!r}")
    policy.grace = dt.timedelta(minutes=float(grace))
    for assignment, when in (data.get("due", {}) or {}).items():
        policy.due[str(assignment)] = parse_time(when, zone, f"{path}: [due] {assignment}")
    if late.get("extensions"):
        ext = (path.parent / str(late["extensions"])).resolve()
        policy.extensions = load_extensions(ext, zone)
    return policy


def load_extensions(path: Path, zone) -> dict[tuple[str, str], dt.datetime]:
    """student,assignment,due rows (assignment '*' for every assignment)."""
    if not path.exists():
        raise ConfigError(f"extensions file {path} does not exist")
    out = {}
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        missing = {"student", "assignment", "due"} - set(reader.fieldnames or [])
        if missing:
            raise ConfigError(f"{path}: needs the columns student, assignment, due; missing {', '.join(sorted(missing))}")
        for n, row in enumerate(reader, start=2):
            student, assignment = (row["student"] or "").strip(), (row["assignment"] or "").strip() or "*"
            if not student:
                continue
            out[(student, assignment)] = parse_time(row["due"], zone, f"{path} line {n}")
    return out


def read_timestamp(folder: Path) -> str | None:
    """The submission time in nbgrader's timestamp.txt of this folder, as ISO 8601 UTC (None: none or unreadable)."""
    path = Path(folder) / TIMESTAMP_FILE
    if path.is_symlink() or not path.is_file() or path.stat().st_size > 200:
        return None
    from nbgrader.utils import parse_utc

    try:
        when = parse_utc(path.read_text(encoding="utf-8", errors="replace").strip())
    except (ValueError, OverflowError, TypeError):
        return None
    return when.replace(tzinfo=UTC).isoformat(timespec="seconds")


def write_timestamp(folder: Path, when: dt.datetime) -> None:
    """timestamp.txt as nbgrader's exchange writes it (its default format, UTC)."""
    when = when.astimezone(UTC)
    (Path(folder) / TIMESTAMP_FILE).write_text(when.strftime("%Y-%m-%d %H:%M:%S.%f UTC"), encoding="utf-8")


def _fmt(when: dt.datetime | None, zone_name: str) -> str:
    if when is None:
        return ""
    return when.astimezone(_zone(zone_name)).strftime("%Y-%m-%d %H:%M %Z")


def assess(policy: Policy, student: str, assignment: str, submitted_at: str | None, raw: float,
           not_run: bool = False) -> dict:
    """penalty, final points and what to say about lateness for one (student, notebook) row.

    ``final`` is rounded to cents, half up, in decimal (store.cents: what the table shows is what the LMS
    files carry); ``zeroed``: the late rule takes every point, so no hand grade can change the row.
    """
    due, extended = policy.due_for(student, assignment)
    out = {"penalty": 0.0, "final": raw, "submitted": "", "due": _fmt(due, policy.timezone),
           "days_late": "", "note": "", "zeroed": False}
    if submitted_at:
        submitted = dt.datetime.fromisoformat(submitted_at)
        submitted = submitted if submitted.tzinfo else submitted.replace(tzinfo=UTC)
        out["submitted"] = _fmt(submitted, policy.timezone)
    else:
        submitted = None
    if not_run or policy.rule == "none" or due is None:
        return out
    if submitted is None:
        out["note"] = "time unknown: not checked for lateness (no submission time in timestamp.txt)"
        return out
    late_by = submitted - due
    if late_by <= policy.grace:
        if late_by > dt.timedelta(0):
            minutes = math.ceil(late_by.total_seconds() / 60)
            out["note"] = (f"submitted {_fmt(submitted, policy.timezone)}, {minutes} minute{'s' if minutes != 1 else ''} "
                           f"after the due date{' (extension)' if extended else ''}: within the "
                           f"{policy.grace.total_seconds() / 60:g} minutes' grace, no penalty")
        elif extended:
            out["note"] = f"on time (extension to {_fmt(due, policy.timezone)})"
        return out
    days = math.ceil(late_by / dt.timedelta(days=1))          # per started day
    out["days_late"] = str(days)
    exact = late_by / dt.timedelta(days=1)
    if policy.rule == "per_day":
        share = min(Decimal(1), Decimal(repr(policy.percent_per_day)) * days / 100)
        if policy.cutoff_days is not None and exact > policy.cutoff_days:
            share = Decimal(1)
        why = (f"0 points: more than {policy.cutoff_days:g} days late" if share == 1 and policy.cutoff_days is not None
               and exact > policy.cutoff_days else f"{days} started day{'s' if days != 1 else ''} late x "
               f"{policy.percent_per_day:g}% = {float(share) * 100:g}% of the points")
    else:                                                     # cutoff
        share = Decimal(1) if exact > (policy.cutoff_days or 0) else Decimal(0)
        why = "0 points: submitted after the cut-off" if share else "late, before the cut-off: no penalty"
    earned = Decimal(repr(float(raw)))
    final = cents(earned * (1 - share))
    out.update(penalty=float(earned - final), final=float(final), zeroed=share >= 1,
               note=f"submitted {_fmt(submitted, policy.timezone)}, due {_fmt(due, policy.timezone)}"
                    f"{' (extension)' if extended else ''}: {why}")
    return out


# --------------------------------------------------------------------------- the LMS's own times
ID_COLUMNS = ("student", "id", "ID number", "SIS User ID", "sis_user_id", "Username", "username")
EMAIL_COLUMNS = ("email", "Email address", "login_id", "SIS Login ID")
STUDENT_COLUMNS = ID_COLUMNS + EMAIL_COLUMNS
TIME_COLUMNS = ("submitted_at", "Last modified (submission)", "timestamp", "submitted", "Submitted")


def load_lms_times(path: Path, roster: list[dict], assignment: str | None, timezone: str = "UTC"
                   ) -> tuple[dict[tuple[str, str], dt.datetime], list[str]]:
    """(student id, assignment) -> submission time (UTC) from an LMS's own export, and notes on it.

    Moodle's grading worksheet (``Last modified (submission)``, e.g. "Tuesday, 4 February 2026, 11:15 PM",
    in the site's time zone: ``timezone``), or any CSV with a class-list id or e-mail column and one of the
    time columns (``submitted_at`` in ISO 8601); an ``assignment`` column, or ``assignment`` for the whole
    file. Each row is matched by whichever of its id and e-mail columns has a value (a worksheet's "ID
    number" is often empty while its "Email address" is not). A row without a time ("-", empty: not
    submitted) gives none; a row that matches no class-list student is named in the notes and left out.
    (Canvas's user ids: lmsfiles.read_canvas_times, through the gradebook export.)
    """
    from dateutil import parser as dateparser

    from .lmsfiles import Roster

    zone = _zone(timezone)
    people = Roster(roster)
    with Path(path).open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames or []
        who = [c for c in STUDENT_COLUMNS if c in fields]
        when = next((c for c in TIME_COLUMNS if c in fields), None)
        if not who or when is None:
            hint = (" (Canvas's user_id needs the gradebook export: --canvas-gradebook)"
                    if "user_id" in fields else "")
            raise ConfigError(f"{path}: needs a student column ({', '.join(STUDENT_COLUMNS)}) and a time column "
                              f"({', '.join(TIME_COLUMNS)}); found {', '.join(fields)}{hint}")
        if "assignment" not in fields and not assignment:
            raise ConfigError(f"{path}: no 'assignment' column: say which assignment it is for "
                              "(--assignment, make collect ASSIGNMENT=...)")
        out, unmatched = {}, []
        for n, row in enumerate(reader, start=2):
            raw = (row.get(when) or "").strip()
            ids = [(c, row.get(c) or "") for c in who]
            if not any(v.strip() for _, v in ids):
                continue
            if people:
                student, reason = people.match(ids)
            else:
                student = next((v.strip() for c, v in ids if c in ID_COLUMNS and v.strip()), None)
                reason = "no class list to match the e-mail with"
            if student is None:
                unmatched.append(f"line {n}: {reason}")
                continue
            if raw in ("", "-"):
                continue
            try:
                value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                try:
                    value = dateparser.parse(raw)
                except (ValueError, OverflowError):
                    raise ConfigError(f"{path} line {n}: {raw!r} is not a date-time") from None
            if value.tzinfo is None:
                value = value.replace(tzinfo=zone)
            out[(student, (row.get("assignment") or "").strip() or assignment)] = value.astimezone(UTC)
    notes = [f"{Path(path).name}: {len(unmatched)} row{'s' if len(unmatched) != 1 else ''} left out: "
             + "; ".join(unmatched[:5]) + (" ..." if len(unmatched) > 5 else "")] if unmatched else []
    return out, notes
