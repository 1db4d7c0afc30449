"""The instructor's term without the sandbox: due dates and the late rule, submission times from the
exchange and from the LMS, the Canvas and Moodle exports read back by each importer's rules, and the
written answers graded question by question (the pages and their server).

The same four on the real demo class, graded in the sandbox: tests/test_grader_demo.py.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import lms_downloads as L  # noqa: E402
from grader.trusted import collect, grading, late, lms, lmsfiles, questions, report  # noqa: E402

NAME = "01_attention"
UTC = dt.timezone.utc


def _toml(tmp_path, text: str) -> Path:
    path = tmp_path / "grading.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- late policy
def test_per_day_rule_grace_cutoff_and_extension(tmp_path):
    (tmp_path / "ext.csv").write_text("student,assignment,due\nken,01_attention,2026-02-10T12:00\nzoe,*,2026-03-01\n")
    policy = late.load(_toml(tmp_path, '[due]\n"01_attention" = "2026-02-06T23:59"\n[late]\ntimezone = "Europe/Berlin"\n'
                             'policy = "per_day"\npercent_per_day = 10\ncutoff_days = 7\ngrace_minutes = 15\n'
                             'extensions = "ext.csv"\n'))
    due = dt.datetime(2026, 2, 6, 22, 59, tzinfo=UTC)                  # 23:59 in Berlin (UTC+1)
    assert policy.due[NAME] == due

    def at(delta, student="s", raw=10.0):
        return late.assess(policy, student, NAME, (due + delta).isoformat(), raw)

    assert at(dt.timedelta(minutes=14))["penalty"] == 0                  # grace
    one = at(dt.timedelta(minutes=16))
    assert (one["penalty"], one["final"], one["days_late"]) == (1.0, 9.0, "1")
    assert at(dt.timedelta(days=1, hours=9))["final"] == 8.0              # 2 started days
    assert at(dt.timedelta(days=7))["final"] == 3.0                       # 7 days: 70%, not yet past the cut-off
    assert at(dt.timedelta(days=7, hours=1))["final"] == 0.0              # past the cut-off
    assert at(dt.timedelta(days=3), student="ken")["penalty"] == 0        # extension
    assert "extension" in at(dt.timedelta(days=3), student="ken")["note"]
    assert at(dt.timedelta(days=20), student="zoe")["penalty"] == 0       # "*": every assignment, a date = end of day
    assert at(dt.timedelta(days=24), student="zoe")["penalty"] > 0
    unknown = late.assess(policy, "s", NAME, None, 10.0)
    assert unknown["penalty"] == 0 and "not checked" in unknown["note"]
    assert late.assess(policy, "s", NAME, None, 0.0, not_run=True)["note"] == ""


def test_cutoff_and_none_rules(tmp_path):
    policy = late.load(_toml(tmp_path, '[due]\n"01_attention" = "2026-02-06T23:59Z"\n[late]\npolicy = "cutoff"\n'))
    due = policy.due[NAME]
    assert late.assess(policy, "s", NAME, due.isoformat(), 7.0)["final"] == 7.0
    assert late.assess(policy, "s", NAME, (due + dt.timedelta(seconds=1)).isoformat(), 7.0)["final"] == 0.0
    none = late.load(_toml(tmp_path, '[due]\n"01_attention" = "2026-02-06"\n'))
    assert late.assess(none, "s", NAME, (due + dt.timedelta(days=30)).isoformat(), 7.0)["final"] == 7.0
    assert late.load(None).rule == "none" and late.load(ROOT / "grading.toml").rule == "none"


def test_points_round_half_up_in_decimal_the_same_in_the_table_and_the_lms_files(tmp_path):
    """8.325 is 8.33 (binary round() gives 8.32); the late rule's points are cents already, so what the
    table shows is what both LMS files carry (Canvas's exporter rounds the same: BigDecimal half up)."""
    assert [lms.points_text(x) for x in (8.325, 2.675, 1.005, 7.425, 3.0, 0.125)] == \
        ["8.33", "2.68", "1.01", "7.43", "3", "0.13"]
    assert round(8.325, 2) == 8.32                                   # what the export did before
    policy = late.load(_toml(tmp_path, '[due]\n"01_attention" = "2026-02-06T23:59Z"\n[late]\npolicy = "per_day"\n'
                                       'percent_per_day = 10\n'))
    one_day = (policy.due[NAME] + dt.timedelta(hours=5)).isoformat()
    got = late.assess(policy, "s", NAME, one_day, 8.25)              # 8.25 x 0.9 = 7.425
    assert (got["final"], got["penalty"]) == (7.43, 0.82)
    grades = tmp_path / "grades"
    (grades / "results" / "s").mkdir(parents=True)
    (grades / "results" / "s" / f"{NAME}.json").write_text(json.dumps(_record("s", 8.25, unchanged=True, submitted=one_day)))
    [row] = report.write_table(grades, policy=policy)
    assert (row["raw_points"], row["late_penalty"], row["points"]) == ("8.25", "0.82", "7.43")
    lms.export(grades, [row])
    assert lms.read_canvas((grades / "lms" / "canvas.csv").read_text())["students"][("SIS User ID", "s")][NAME] == 7.43
    assert lms.read_moodle((grades / "lms" / "moodle.csv").read_text(), "ID number")["s"][NAME] == 7.43


def test_grace_is_mentioned_and_a_zeroed_row_needs_no_hand_grade(tmp_path):
    policy = late.load(_toml(tmp_path, '[due]\n"01_attention" = "2026-02-06T23:59Z"\n[late]\npolicy = "per_day"\n'
                                       'percent_per_day = 10\ncutoff_days = 7\ngrace_minutes = 15\n'))
    due = policy.due[NAME]
    inside = late.assess(policy, "s", NAME, (due + dt.timedelta(minutes=9, seconds=30)).isoformat(), 10.0)
    assert inside["penalty"] == 0 and "10 minutes after the due date: within the 15 minutes' grace, no penalty" \
        in inside["note"]
    assert late.assess(policy, "s", NAME, (due - dt.timedelta(minutes=1)).isoformat(), 10.0)["note"] == ""
    grades = tmp_path / "grades"
    for student, days in (("late9", 9), ("late2", 2)):
        (grades / "results" / student).mkdir(parents=True)
        (grades / "results" / student / f"{NAME}.json").write_text(json.dumps(
            _record(student, 8.0, submitted=(due + dt.timedelta(days=days)).isoformat())))
    rows = {r["student"]: r for r in report.write_table(grades, policy=policy)}
    assert (rows["late9"]["points"], rows["late9"]["status"]) == ("0", "graded")       # past the cut-off
    assert "not graded by hand, the late rule gives 0 whatever it earns: written_values" in rows["late9"]["details"]
    assert rows["late2"]["status"] == "needs manual grading"                             # its answer still counts
    page = (grades / "feedback" / "late9" / f"{NAME}.html").read_text()
    assert "not graded: the late rule gives this notebook 0" in page and "waiting for a hand grade" not in page
    cells = {r["student"]: r["result"] for r in csv.DictReader((grades / "cells.csv").open()) if r["cell"] == "written_values"}
    assert cells == {"late9": "not graded (0 by the late rule)", "late2": "needs manual grading"}
    qs = questions.Questions(grading.Course.at(ROOT), grades, lambda: None, policy)
    (_, _, info, answers_), = qs.questions
    page = questions.page(NAME, "written_values", info, answers_, {})
    assert "1 still to grade" in page and "the late rule gives this notebook 0: no grade needed" in page


@pytest.mark.parametrize("text,message", [
    ('[late]\npolicy = "weekly"\n', "none, per_day, cutoff"),
    ('[late]\npolicy = "per_day"\n', "needs percent_per_day"),
    ('[late]\npolicy = "per_day"\npercent_per_day = -5\n', "number >= 0"),
    ('[late]\ntimezone = "Mars/Olympus"\n', "not a known time zone"),
    ('[due]\n"01_attention" = "next friday"\n', "not an ISO 8601"),
    ('[late]\nextensions = "missing.csv"\n', "does not exist"),
    ('[late\n', "not valid TOML"),
])
def test_bad_settings_say_what_is_wrong(tmp_path, text, message):
    with pytest.raises(late.ConfigError, match=message):
        late.load(_toml(tmp_path, text))


def test_timestamp_of_nbgrader_exchange_and_collect(tmp_path):
    from nbgrader.exchange.default.submit import ExchangeSubmit

    submit = ExchangeSubmit()                       # nbgrader's own stamp, in its default format and zone
    submit.set_timestamp()
    (tmp_path / "timestamp.txt").write_text(submit.timestamp)
    read = dt.datetime.fromisoformat(late.read_timestamp(tmp_path))
    assert abs(read - dt.datetime.now(UTC)) < dt.timedelta(minutes=5)
    late.write_timestamp(tmp_path, dt.datetime(2026, 2, 7, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))))
    assert late.read_timestamp(tmp_path) == "2026-02-06T23:30:00+00:00"
    (tmp_path / "timestamp.txt").write_text("not a time")
    assert late.read_timestamp(tmp_path) is None


def test_collect_writes_the_lms_times_and_never_the_files_time(tmp_path, capsys):
    """Plain names with a times file: a row matches by whichever id or e-mail column it has (a Moodle
    worksheet's empty ID number falls back to its e-mail); a student without a time gets no timestamp.txt
    (not the file's time) and collect says how many; the file's time only with --file-times."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    nb = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    for student in ("alice", "bob", "carol"):
        (downloads / f"{student}_{NAME}.ipynb").write_text(nb)
    when = dt.datetime(2026, 2, 5, 10, 0, tzinfo=UTC).timestamp()
    os.utime(downloads / f"alice_{NAME}.ipynb", (when, when))
    roster = [{"id": "bob", "email": "bob@example.org"}, {"id": "carol", "email": "carol@example.org"},
              {"id": "alice", "email": "alice@example.org"}]
    canvas = tmp_path / "canvas.csv"          # submitted_at in ISO 8601 with Z, students by login
    canvas.write_text("login_id,assignment,submitted_at\nbob@example.org,01_attention,2026-02-07T08:15:00Z\n"
                      "mallory@example.org,01_attention,2026-02-07T08:15:00Z\n")
    times, notes = late.load_lms_times(canvas, roster, None)
    assert len(notes) == 1 and "mallory@example.org" in notes[0]           # named, not fatal
    moodle = tmp_path / "worksheet.csv"       # Moodle's grading worksheet: ID number shown but empty
    moodle.write_text('Identifier,Full name,ID number,Email address,Status,Last modified (submission)\n'
                      'Participant 1,Carol C,,carol@example.org,Submitted,"Saturday, 7 February 2026, 9:00 AM"\n'
                      'Participant 2,Dan D,,,No submission,-\n')
    more, notes = late.load_lms_times(moodle, roster, NAME, "Europe/Berlin")
    assert notes == [] and more == {("carol", NAME): dt.datetime(2026, 2, 7, 8, 0, tzinfo=UTC)}
    times.update(more)
    copied, skipped = collect.collect(downloads, tmp_path / "submitted", [NAME], times=times)
    assert len(copied) == 3 and not skipped
    stamps = {s: late.read_timestamp(tmp_path / "submitted" / s / NAME) for s in ("alice", "bob", "carol")}
    assert stamps == {"alice": None, "bob": "2026-02-07T08:15:00+00:00", "carol": "2026-02-07T08:00:00+00:00"}
    lines = collect.summary(copied, skipped)
    assert "1 submission has no submission time: time unknown, not checked for lateness (alice)" in lines
    alice = next(m for m in copied if m.student == "alice")
    assert "time unknown: not checked for lateness" in collect.describe(alice)
    # only when asked: the file's own time
    again, _ = collect.collect(downloads, tmp_path / "submitted", [NAME], times=times, file_times=True)
    assert late.read_timestamp(tmp_path / "submitted" / "alice" / NAME) == "2026-02-05T10:00:00+00:00"
    assert any("--file-times" in line for line in collect.summary(again, []))
    # and a row without a time says so in the table
    policy = late.load(_toml(tmp_path, '[due]\n"01_attention" = "2026-02-06T23:59Z"\n[late]\npolicy = "cutoff"\n'))
    assert late.assess(policy, "alice", NAME, None, 5.0)["note"].startswith("time unknown: not checked for lateness")


def test_timestamp_is_metadata_not_a_student_file(tmp_path):
    folder = tmp_path / "submitted" / "s" / NAME
    folder.mkdir(parents=True)
    (folder / f"{NAME}.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                                       "nbformat_minor": 5}))
    (folder / "data.txt").write_text("mine")
    late.write_timestamp(folder, dt.datetime(2026, 2, 6, tzinfo=UTC))
    [sub] = grading.discover(tmp_path / "submitted", [NAME], ["s"])
    assert sub.submitted_at == "2026-02-06T00:00:00+00:00"
    assert [p.name for p in sub.extra_files] == ["data.txt"]


# --------------------------------------------------------------------------- the LMSs' own downloads
# A class of five (names with commas, accents and an apostrophe); eve submits nothing. Each LMS's download
# holds a punctual file (alice), a late one (bjorn), a resubmission (cara: the older file too), a student
# with no time in the LMS's times (dan), and what cannot be mapped (an id missing from the export, ...).
CLASS = ("id,first_name,last_name,email\nalice,Alice,Smith,alice@example.org\nbjorn,Björn,Ångström,bjorn@example.org\n"
         "cara,Cara,O'Brien,cara@example.org\ndan,Dan,Lee,dan@example.org\neve,Eve,Adams,eve@example.org\n")
DUE_UTC = dt.datetime(2026, 2, 6, 22, 59, tzinfo=UTC)          # 23:59 in Berlin
TERM = ('[due]\n"01_attention" = "2026-02-06T23:59"\n[late]\ntimezone = "Europe/Berlin"\npolicy = "per_day"\n'
        'percent_per_day = 10\ncutoff_days = 7\ngrace_minutes = 15\n')


def _nb(tag: str) -> bytes:
    return json.dumps({"cells": [], "metadata": {"tag": tag}, "nbformat": 4, "nbformat_minor": 5}).encode()


def _tag(path: Path) -> str:
    return json.loads(path.read_text())["metadata"]["tag"]


def _write(where: Path, name: str, members: dict, as_zip: bool) -> Path:
    return L.write_zip(where / name, members) if as_zip else L.write_folder(where / name.removesuffix(".zip"), members)


def canvas_term(tmp_path: Path, as_zip: bool = True):
    """Canvas's "Download Submissions", its gradebook export and its Submissions API times."""
    files = [L.CanvasFile("Smith, Alice", 1001, 5001, "01_attention.ipynb", _nb("alice")),
             L.CanvasFile("Ångström, Björn", 1002, 5002, "01_attention.ipynb", _nb("bjorn"), late=True),
             L.CanvasFile("O'Brien, Cara", 1003, 5003, "01_attention.ipynb", _nb("cara-first")),
             L.CanvasFile("O'Brien, Cara", 1003, 5107, "01_attention-1.ipynb", _nb("cara-resubmitted"), late=True),
             L.CanvasFile("Lee, Dan", 1004, 5004, "01_attention.ipynb", _nb("dan")),
             L.CanvasFile("Newcomer, Nia", 1099, 5099, "01_attention.ipynb", _nb("nia"))]
    members = {L.canvas_name(f): f.data for f in files}
    members["leedan_1004_text.html"] = b"<p>my notes</p>"                          # an online text entry
    members["anon_xK3zq_5120_01_attention.ipynb"] = _nb("anonymous")            # anonymous grading
    download = _write(tmp_path / "canvas", L.canvas_zip_name("tf101", "01_attention"), members, as_zip)
    gradebook = tmp_path / "canvas" / "2026-02-20T1012_Grades-TF101.csv"
    gradebook.write_text(L.canvas_gradebook([
        {"sortable_name": "Smith, Alice", "user_id": 1001, "sis_user_id": "alice", "login_id": "alice@example.org"},
        {"sortable_name": "Ångström, Björn", "user_id": 1002, "sis_user_id": "bjorn", "login_id": "bjorn@example.org"},
        {"sortable_name": "O'Brien, Cara", "user_id": 1003, "sis_user_id": "cara", "login_id": "cara@example.org"},
        {"sortable_name": "Lee, Dan", "user_id": 1004, "sis_user_id": "", "login_id": "dan@example.org"},
        {"sortable_name": "Adams, Eve", "user_id": 1005, "sis_user_id": "eve", "login_id": "eve@example.org"}],
        [("01_attention", 4711, 10.0)]), encoding="utf-8")
    times = tmp_path / "canvas" / "submissions.json"
    times.write_text(L.canvas_submissions_json([
        {"user_id": 1001, "submitted_at": DUE_UTC - dt.timedelta(hours=3)},
        {"user_id": 1002, "submitted_at": DUE_UTC + dt.timedelta(days=1, hours=10), "late": True},
        {"user_id": 1003, "submitted_at": DUE_UTC + dt.timedelta(minutes=10), "attempt": 2},   # within the grace
        {"user_id": 1005, "submitted_at": None}]), encoding="utf-8")                 # dan: not in the file
    return download, ["--canvas-gradebook", str(gradebook), "--times", str(times)]


def moodle_term(tmp_path: Path, as_zip: bool = True, layout: str = "folders"):
    """Moodle's "Download all submissions" and the assignment's grading worksheet (ID number empty)."""
    zone = ZoneInfo("Europe/Berlin")
    files = [L.MoodleFile("Alice Smith", 8801, "01_attention.ipynb", _nb("alice")),
             L.MoodleFile("Björn Ångström", 8802, "01_attention.ipynb", _nb("bjorn")),
             L.MoodleFile("Cara O'Brien", 8803, "01_attention.ipynb", _nb("cara-first")),
             L.MoodleFile("Cara O'Brien", 8803, "01_attention (1).ipynb", _nb("cara-resubmitted")),
             L.MoodleFile("Dan Lee", 8804, "01_attention.ipynb", _nb("dan")),
             L.MoodleFile("Nia Newcomer", 8899, "01_attention.ipynb", _nb("nia"))]
    folders, old = layout != "flat", layout == "folders-3.x"
    members = {L.moodle_path(f, folders, old): f.data for f in files}
    text = "Alice Smith_8801_assignsubmission_onlinetext" + ("_/" if old else "/" if folders else "_")
    members[text + "onlinetext.html"] = b"<p>see the notebook</p>"
    download = _write(tmp_path / "moodle", L.moodle_zip_name("TF101", "01_attention", 42), members, as_zip)
    worksheet = tmp_path / "moodle" / "Grades-TF101-01_attention-42.csv"
    worksheet.write_text(L.moodle_worksheet([
        {"participant": 8801, "fullname": "Alice Smith", "email": "alice@example.org",
         "submitted": DUE_UTC - dt.timedelta(hours=3)},
        {"participant": 8802, "fullname": "Björn Ångström", "email": "bjorn@example.org",
         "submitted": DUE_UTC + dt.timedelta(days=1, hours=10)},
        {"participant": 8803, "fullname": "Cara O'Brien", "email": "cara@example.org",
         "submitted": DUE_UTC + dt.timedelta(minutes=10)},
        {"participant": 8804, "fullname": "Dan Lee", "email": "dan@example.org", "submitted": None},
        {"participant": 8805, "fullname": "Eve Adams", "email": "eve@example.org", "submitted": None}], zone),
        encoding="utf-8")
    return download, ["--moodle-worksheet", str(worksheet), "--assignment", NAME]


def _collect(tmp_path, download, flags, capsys, term=TERM) -> str:
    from grader.__main__ import main

    grades = tmp_path / "grades"
    (tmp_path / "classlist.csv").write_text(CLASS, encoding="utf-8")
    report.import_roster(grades, tmp_path / "classlist.csv")
    assert main(["--config", str(_toml(tmp_path, term)), "collect", str(download), "--submitted",
                 str(tmp_path / "submitted"), "--grades", str(grades), *flags]) == 0
    return capsys.readouterr().out


def _check_collected(tmp_path, out: str, lms_name: str, skipped: int) -> None:
    sub = tmp_path / "submitted"
    assert sorted(p.name for p in sub.iterdir()) == ["alice", "bjorn", "cara", "dan"], out
    assert {s: _tag(sub / s / NAME / f"{NAME}.ipynb") for s in ("alice", "bjorn", "cara", "dan")} == \
        {"alice": "alice", "bjorn": "bjorn", "cara": "cara-resubmitted", "dan": "dan"}
    stamps = {s: late.read_timestamp(sub / s / NAME) for s in ("alice", "bjorn", "cara", "dan")}
    assert stamps == {"alice": (DUE_UTC - dt.timedelta(hours=3)).isoformat(),
                      "bjorn": (DUE_UTC + dt.timedelta(days=1, hours=10)).isoformat(),
                      "cara": (DUE_UTC + dt.timedelta(minutes=10)).isoformat(), "dan": None}, out
    assert f"4 submissions collected (4 from {lms_name}), {skipped} files skipped" in out
    assert "1 resubmission replaced an older file" in out
    assert "1 submission has no submission time: time unknown, not checked for lateness (dan)" in out
    assert "time unknown: not checked for lateness" in next(line for line in out.splitlines() if "->  dan/" in line)


@pytest.mark.parametrize("as_zip", [True, False], ids=["zip", "folder"])
def test_canvas_download_is_collected_as_canvas_writes_it(tmp_path, capsys, as_zip):
    download, flags = canvas_term(tmp_path, as_zip)
    out = _collect(tmp_path, download, flags, capsys)
    _check_collected(tmp_path, out, "Canvas", 3)
    assert "2 marked LATE by Canvas" in out
    assert "Canvas marked it LATE" in next(line for line in out.splitlines() if "->  bjorn/" in line)
    assert re.search(r"resubmission: .*obriencara_LATE_1003_5107_01_attention-1\.ipynb.* replaces the older "
                     r".*obriencara_1003_5003_01_attention\.ipynb", out), out
    skipped = [line for line in out.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 3
    assert any("newcomernia_1099_5099" in s and "Canvas user 1099 is not in Canvas's gradebook export" in s
               for s in skipped)
    assert any("anon_xK3zq" in s and "anonymous grading" in s for s in skipped)
    assert any("leedan_1004_text.html" in s and "online text entry" in s for s in skipped)


@pytest.mark.parametrize("layout", ["folders", "folders-3.x", "flat"])
@pytest.mark.parametrize("as_zip", [True, False], ids=["zip", "folder"])
def test_moodle_download_is_collected_as_moodle_writes_it(tmp_path, capsys, as_zip, layout):
    download, flags = moodle_term(tmp_path, as_zip, layout)
    out = _collect(tmp_path, download, flags, capsys)
    _check_collected(tmp_path, out, "Moodle", 2)
    assert re.search(r"resubmission: .*Cara OBrien_8803_assignsubmission_file[_/]+01_attention \(1\)\.ipynb.* replaces "
                     r"the older .*Cara OBrien_8803_assignsubmission_file[_/]+01_attention\.ipynb", out), out
    assert "the worksheet has no submission time for participant 8804 (status: No submission)" in out
    skipped = [line for line in out.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 2, out
    assert any("Nia Newcomer_8899" in s and "not in this assignment's Moodle grading worksheet" in s for s in skipped)
    assert any("assignsubmission_onlinetext" in s and "not a file" in s for s in skipped)


def test_an_lms_download_without_its_export_is_listed_not_guessed(tmp_path, capsys):
    download, _ = canvas_term(tmp_path)
    out = _collect(tmp_path, download, [], capsys)
    assert not (tmp_path / "submitted").exists() or not any((tmp_path / "submitted").iterdir())
    assert out.count("give Canvas's gradebook export to map it to the class list") == 6, out
    assert "0 submissions collected, 8 files skipped" in out
    download, flags = moodle_term(tmp_path)
    out = _collect(tmp_path, download, [], capsys)
    assert out.count("give this assignment's Moodle grading worksheet") == 6, out
    with pytest.raises(SystemExit, match="say which with --assignment"):
        _collect(tmp_path, download, flags[:2], capsys)


def test_canvas_gradebook_with_semicolons_and_a_bom(tmp_path, capsys):
    """Canvas writes ';' between fields for a user whose locale has a decimal comma, and may add a BOM."""
    download, flags = canvas_term(tmp_path)
    gradebook = Path(flags[1])
    rows = list(csv.reader(gradebook.read_text(encoding="utf-8").splitlines()))
    out = io.StringIO()
    csv.writer(out, delimiter=";", lineterminator="\n").writerows(rows)
    gradebook.write_text("\ufeff" + out.getvalue(), encoding="utf-8")
    _check_collected(tmp_path, _collect(tmp_path, download, flags, capsys), "Canvas", 3)


def test_an_export_of_another_course_or_assignment_is_refused(tmp_path, capsys):
    """The names an LMS writes into its download must agree with its export's names for those ids."""
    download, flags = moodle_term(tmp_path)
    worksheet = Path(flags[1])
    worksheet.write_text(worksheet.read_text(encoding="utf-8").replace("Alice Smith", "Zed Other"), encoding="utf-8")
    out = _collect(tmp_path, download, flags, capsys)
    assert "the download names Moodle participant 8801 'Alice Smith'" in out and "'Zed Other'" in out
    assert not (tmp_path / "submitted" / "alice").exists()
    assert "3 submissions collected (3 from Moodle), 3 files skipped" in out


def test_a_students_own_zip_and_an_archive_inside_a_folder(tmp_path, capsys):
    """A student who uploads a zip (inside the LMS's zip); the LMS's zip saved into a folder; a class-list
    id that only looks like Canvas's name (no gradebook given) stays a plain name."""
    import zipfile

    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("work/01_attention.ipynb", _nb("alice-zipped"))
    members = {L.moodle_path(L.MoodleFile("Alice Smith", 8801, "01_attention.zip", inner.getvalue())): inner.getvalue(),
               L.moodle_path(L.MoodleFile("Björn Ångström", 8802, "01_attention.ipynb", _nb("bjorn"))): _nb("bjorn")}
    L.write_zip(tmp_path / "downloads" / "TF101-01_attention-42.zip", members)
    (tmp_path / "downloads" / "bob_1_2_01_attention.ipynb").write_bytes(_nb("bob-plain"))
    worksheet = tmp_path / "ws.csv"
    worksheet.write_text(L.moodle_worksheet([
        {"participant": 8801, "fullname": "Alice Smith", "email": "alice@example.org", "submitted": DUE_UTC},
        {"participant": 8802, "fullname": "Björn Ångström", "email": "bjorn@example.org", "submitted": DUE_UTC}],
        ZoneInfo("UTC")), encoding="utf-8")
    (tmp_path / "classlist.csv").write_text(CLASS + "bob_1_2,Bob,Plain,bob@example.org\n", encoding="utf-8")
    report.import_roster(tmp_path / "grades", tmp_path / "classlist.csv")
    roster = lmsfiles.Roster(report.load_roster(tmp_path / "grades"))
    moodle = lmsfiles.read_moodle_worksheet(worksheet, roster, ZoneInfo("UTC"))
    copied, skipped = collect.collect(tmp_path / "downloads", tmp_path / "submitted", [NAME], roster_ids=roster.ids,
                                      moodle=moodle, moodle_assignment=NAME)
    assert not skipped and sorted(m.student for m in copied) == ["alice", "bjorn", "bob_1_2"]
    assert _tag(tmp_path / "submitted" / "alice" / NAME / f"{NAME}.ipynb") == "alice-zipped"
    assert _tag(tmp_path / "submitted" / "bob_1_2" / NAME / f"{NAME}.ipynb") == "bob-plain"


def test_collecting_again_says_what_it_replaced_and_leaves_no_stale_time(tmp_path, capsys):
    download, flags = canvas_term(tmp_path)
    _collect(tmp_path, download, flags, capsys)
    folder = tmp_path / "submitted" / "alice" / NAME
    assert late.read_timestamp(folder) is not None
    members = {L.canvas_name(L.CanvasFile("Smith, Alice", 1001, 5200, "01_attention-1.ipynb", _nb("alice-2"))): _nb("alice-2")}
    later = L.write_zip(tmp_path / "later" / "tf101-01_attention_submissions.zip", members)
    out = _collect(tmp_path, later, flags[:2], capsys)          # the gradebook, no times this time
    assert _tag(folder / f"{NAME}.ipynb") == "alice-2"
    assert "replaces the notebook collected before (submitted 2026-02-06T19:59:00+00:00)" in out
    assert late.read_timestamp(folder) is None                  # the old time belonged to the old file


def test_make_collect_passes_the_moodle_worksheet_and_assignment(tmp_path):
    download, flags = moodle_term(tmp_path)
    grades = tmp_path / "grades"
    (tmp_path / "classlist.csv").write_text(CLASS, encoding="utf-8")
    report.import_roster(grades, tmp_path / "classlist.csv")
    proc = subprocess.run(["make", "--no-print-directory", "collect", f"LMS={download}", f"MOODLE_WORKSHEET={flags[1]}",
                           f"ASSIGNMENT={NAME}", f"GRADE_SUBMITTED={tmp_path / 'submitted'}", f"GRADE_OUT={grades}",
                           f"GRADE_CONFIG={_toml(tmp_path, TERM)}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    _check_collected(tmp_path, proc.stdout, "Moodle", 2)


@pytest.mark.parametrize("lms_name", ["Canvas", "Moodle"])
def test_a_term_from_an_lms_download_to_lms_csvs(tmp_path, capsys, lms_name):
    """Download -> collect -> the table with the late rule -> Canvas's and Moodle's CSVs, read back as each
    importer reads them. (Points stand in for grading here; the demo class walks the same through the
    sandbox: tests/test_grader_demo.py.)"""
    download, flags = (canvas_term if lms_name == "Canvas" else moodle_term)(tmp_path)
    _collect(tmp_path, download, flags, capsys)
    grades = tmp_path / "grades"
    earned = {"alice": 8.0, "bjorn": 8.25, "cara": 7.0, "dan": 6.0}
    roster = [r["id"] for r in report.load_roster(grades)]
    for sub in grading.discover(tmp_path / "submitted", [NAME], roster):
        record = _record(sub.student, earned.get(sub.student, 0.0), submitted=sub.submitted_at,
                         status=sub.status)
        (grades / "results" / sub.student).mkdir(parents=True, exist_ok=True)
        (grades / "results" / sub.student / f"{NAME}.json").write_text(json.dumps(record))
    rows = {r["student"]: r for r in report.write_table(grades, policy=late.load(tmp_path / "grading.toml"))}
    assert rows["eve"]["status"] == grading.NO_SUBMISSION
    bjorn = rows["bjorn"]                       # 1 day 10 hours late: 2 started days x 10% of 8.25 = 6.60
    assert (bjorn["raw_points"], bjorn["late_penalty"], bjorn["points"], bjorn["days_late"]) == ("8.25", "1.65", "6.6", "2")
    assert "within the 15 minutes' grace, no penalty" in rows["cara"]["details"] and rows["cara"]["late_penalty"] == "0"
    assert rows["dan"]["details"].endswith("time unknown: not checked for lateness (no submission time in timestamp.txt)")
    assert rows["dan"]["points"] == "6" and rows["alice"]["points"] == "8"
    written, _ = lms.export(grades, list(rows.values()))
    canvas = lms.read_canvas((grades / "lms" / "canvas.csv").read_text(encoding="utf-8"))
    moodle = lms.read_moodle((grades / "lms" / "moodle.csv").read_text(encoding="utf-8"), "Email address")
    want = {"alice": 8.0, "bjorn": 6.6, "cara": 7.0, "dan": 6.0, "eve": None}
    assert {k[1]: v[NAME] for k, v in canvas["students"].items()} == want
    assert {u.split("@")[0]: g[NAME] for u, g in moodle.items()} == want


# --------------------------------------------------------------------------- a graded class on disk
def _record(student, auto, written_text="my answer", unchanged=False, status=None, submitted=None):
    return {"student": student, "notebook": NAME, "auto_status": status, "auto_points": auto, "max_points": 10.0,
            "tests": [{"grade_id": "test_softmax", "points": min(auto, 2.0), "max_points": 2.0,
                       "passed": auto >= 2, "cases": []},
                      {"grade_id": "test_sdpa", "points": max(auto - 2, 0.0), "max_points": 6.0,
                       "passed": auto >= 8, "cases": []}],
            "written": [{"grade_id": "written_values", "max_points": 2.0, "missing": False, "unchanged": unchanged}],
            "details": [], "run": None, "submitted_at": submitted,
            "cells": [{"index": 5, "cell_type": "markdown", "owner": "student", "kind": "written",
                       "grade_id": "written_values", "source": written_text, "note": "", "ran": False}]}


@pytest.fixture()
def graded_class(tmp_path):
    grades = tmp_path / "grades"
    records = [_record("alice", 8.0, "V = K ties what is found to what is delivered", submitted="2026-02-06T20:00:00+00:00"),
               _record("bob", 2.0, "<script>alert(1)</script> no idea", submitted="2026-02-08T09:00:00+00:00"),
               _record("carol", 0.0, "YOUR ANSWER HERE", unchanged=True),
               _record("dan", 0.0, status=grading.NO_SUBMISSION)]
    for r in records:
        (grades / "results" / r["student"]).mkdir(parents=True)
        (grades / "results" / r["student"] / f"{NAME}.json").write_text(json.dumps(r))
    (tmp_path / "classlist.csv").write_text(
        "id,first_name,last_name,email\nalice,Alice,Smith,alice@example.org\nbob,Bob,Jones,bob@example.org\n"
        "carol,Carol,=cmd,carol@example.org\ndan,Dan,Brown,dan@example.org\n")
    report.import_roster(grades, tmp_path / "classlist.csv")
    policy = late.load(_toml(tmp_path, '[due]\n"01_attention" = "2026-02-06T23:59Z"\n[late]\npolicy = "per_day"\n'
                                       'percent_per_day = 10\n'))
    return grades, policy


def test_table_and_feedback_show_raw_penalty_final(graded_class):
    grades, policy = graded_class
    report.save_manual(grades, {("bob", NAME, "written_values"): {
        "student": "bob", "notebook": NAME, "cell": "written_values", "points": "1", "comment": "", "graded_at": ""}})
    rows = {r["student"]: r for r in report.write_table(grades, policy=policy)}
    bob = rows["bob"]
    assert (bob["raw_points"], bob["late_penalty"], bob["points"], bob["days_late"]) == ("3", "0.6", "2.4", "2")
    assert rows["alice"]["late_penalty"] == "0" and rows["alice"]["submitted"] == "2026-02-06 20:00 UTC"
    on_disk = {r["student"]: r for r in csv.DictReader((grades / "grades.csv").open(encoding="utf-8"))}
    assert on_disk["bob"]["points"] == "2.4" and on_disk["bob"]["raw_points"] == "3"
    page = (grades / "feedback" / "bob" / f"{NAME}.html").read_text()
    assert "Late penalty" in page and "<td>0.6</td>" in page and "2 started days late" in page


def test_lms_exports_read_back_by_each_importers_rules(graded_class):
    grades, policy = graded_class
    rows = report.write_table(grades, policy=policy)
    written, warnings = lms.export(grades, rows, per_question=True, canvas_ids={NAME: 4711})
    assert [p.name for p in written] == ["canvas.csv", "moodle.csv", "canvas-questions.csv", "moodle-questions.csv"]
    assert any("manual grading" in w for w in warnings) and any("without any submission" in w for w in warnings)
    canvas = lms.read_canvas((grades / "lms" / "canvas.csv").read_text(encoding="utf-8"))
    assert canvas["assignments"] == [(NAME, "4711")] and canvas["points_possible"] == {NAME: 10.0}
    final = {r["student"]: (None if r["status"] == grading.NO_SUBMISSION else float(r["points"])) for r in rows}
    assert final["dan"] is None                                   # no submission: no grade, not 0
    assert {k[1]: v[NAME] for k, v in canvas["students"].items()} == final
    assert all(k[0] == "SIS User ID" for k in canvas["students"])
    text = (grades / "lms" / "canvas.csv").read_text(encoding="utf-8")
    assert text.splitlines()[0] == f"Student,ID,SIS User ID,SIS Login ID,Section,{NAME} (4711)"
    assert "'=cmd, Carol" in text                                 # a class-list name is not a formula
    moodle_text = (grades / "lms" / "moodle.csv").read_text(encoding="utf-8")
    for key, ident in (("ID number", lambda r: r["id"]), ("Email address", lambda r: r["email"])):
        moodle = lms.read_moodle(moodle_text, key)
        assert {u: g[NAME] for u, g in moodle.items()} == \
            {ident(r): final[r["id"]] for r in report.load_roster(grades)}
    questions_csv = lms.read_canvas((grades / "lms" / "canvas-questions.csv").read_text(encoding="utf-8"))
    assert [t for t, _ in questions_csv["assignments"]] == [f"{NAME} test_softmax", f"{NAME} test_sdpa",
                                                           f"{NAME} written_values"]
    assert questions_csv["students"][("SIS User ID", "alice")][f"{NAME} test_sdpa"] == 6.0
    assert set(questions_csv["students"][("SIS User ID", "dan")].values()) == {None}
    dan_line = next(line for line in moodle_text.splitlines() if ",dan," in line)
    assert dan_line.endswith(",-"), dan_line                       # Moodle's "no grade"
    dan_canvas = next(line for line in text.splitlines() if ",dan," in line)
    assert dan_canvas.endswith(","), dan_canvas                    # Canvas's blank


@pytest.mark.parametrize("text,reader,message", [
    ("Name,ID,SIS User ID,SIS Login ID,Section,a\n", lms.read_canvas, "must start with 'Student'"),
    ("Student,ID,SIS User ID,SIS Login ID,Group,a\n", lms.read_canvas, "'Section'"),
    ("Student,ID,SIS User ID,SIS Login ID,Section,a\nx,,s1,,\n", lms.read_canvas, "fields"),
    ("ID number,a\ns1,101\n", lms.read_moodle, "gradevaluetoobig"),
    ("ID number,a\ns1,1,2\n", lms.read_moodle, "csvweirdcolumns"),
    ("ID number,a\ns1,ten\n", lms.read_moodle, "badgrade"),
])
def test_importer_rules_refuse_what_the_lms_would_refuse(text, reader, message):
    with pytest.raises(lms.ExportError, match=message):
        reader(text, "ID number") if reader is lms.read_moodle else reader(text)


def test_canvas_numbers_as_canvas_reads_them():
    parsed = lms.read_canvas("Student,ID,SIS User ID,SIS Login ID,Section,a,b,Final Score\n"
                             "Points Possible,,,,,10,5,\nS,,s1,,,\"7,5\",EX,99\nT,,,t@x,,-,3.25,0\n")
    assert parsed["students"][("SIS User ID", "s1")] == {"a": 7.5, "b": None}
    assert parsed["students"][("SIS Login ID", "t@x")] == {"a": None, "b": 3.25}
    assert lms.points_text(7.456) == "7.46" and lms.points_text(3.0) == "3" and lms.points_text(-0.0) == "0"
    with pytest.raises(lms.ExportError, match="gradepointmax"):
        lms.moodle_csv(["a"], {"s": {"a": 150.0}}, [])


# --------------------------------------------------------------------------- question by question
def _questions(grades):
    def rebuild():
        report.write_table(grades)
    return questions.Questions(grading.Course.at(ROOT), grades, rebuild)


def test_question_page_has_mark_scheme_and_every_answer(graded_class):
    grades, _ = graded_class
    qs = _questions(grades)
    index = qs.write_static()
    page = (index.parent / NAME / "written_values.html").read_text(encoding="utf-8")
    assert "=== BEGIN MARK SCHEME" not in page and "Mark scheme" in page and "1 point:" in page
    assert "Model answer" in page and "V = K ties what is found" in page
    assert "&lt;script&gt;alert(1)" in page and "<script>alert" not in page
    assert "left as released: 0 points" in page and "no submission: nothing to grade" in page
    assert "written_values" in index.read_text()


def _post(url, data):
    req = urllib.request.Request(url, data=urllib.parse.urlencode(data).encode(), method="POST")
    return urllib.request.urlopen(req, timeout=30)


def test_points_entered_on_the_page_reach_the_table(graded_class):
    import threading

    grades, _ = graded_class
    server = questions.serve(_questions(grades), 0, announce=lambda *_: None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    page_url = f"{base}/{NAME}/written_values.html?token={server.token}"
    try:
        with pytest.raises(urllib.error.HTTPError, match="403"):
            urllib.request.urlopen(f"{base}/{NAME}/written_values.html?token=wrong", timeout=30)
        with urllib.request.urlopen(page_url, timeout=30) as resp:
            page = resp.read().decode()
        assert "name='points:alice'" in page and "name='points:carol'" not in page
        with pytest.raises(urllib.error.HTTPError, match="400"):
            _post(page_url, {"points:alice": "3", "comment:alice": ""})          # above the maximum (2)
        with pytest.raises(urllib.error.HTTPError, match="400"):
            _post(page_url, {"points:dan": "1"})                                  # no submission: nothing to grade
        with _post(page_url, {"points:alice": "1.5", "comment:alice": "clear", "points:bob": ""}) as resp:
            assert "saved: 1 hand grade changed" in resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    manual = report.load_manual(grades)
    assert manual[("alice", NAME, "written_values")]["points"] == "1.5"
    assert manual[("alice", NAME, "written_values")]["comment"] == "clear"
    rows = {r["student"]: r for r in csv.DictReader((grades / "grades.csv").open(encoding="utf-8"))}
    assert (rows["alice"]["points"], rows["alice"]["status"]) == ("9.5", "graded")
    assert rows["bob"]["status"] == "needs manual grading"


# --------------------------------------------------------------------------- the question pages in a browser
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--disable-quic"]


def test_question_page_saves_from_a_real_browser(graded_class):
    """Debian's Chromium (never `playwright install`) opens the printed address, follows the index to the
    question, types points and a comment, clicks Save: manual.csv, grades.csv, the feedback page and the
    read-only copy have them. A value the page's own rule refuses (0.3: quarter points) is refused by the
    browser, and, with the browser's check switched off, by the server, which shows the page again with
    what was typed."""
    import threading

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: `make browser-deps` (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make test-env)")
    grades, _ = graded_class
    server = questions.serve(_questions(grades), 0, announce=lambda *_: None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def drive():
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
            try:
                page = browser.new_page()
                page.set_default_timeout(120_000)
                page.goto(server.url)                                    # the address `make grade-questions` prints
                page.get_by_role("link", name="written_values").click()
                page.wait_for_url(f"**/{NAME}/written_values.html?token=*")
                page.fill("input[name='points:alice']", "1.25")
                page.fill("input[name='comment:alice']", "names both roles; no example")
                page.fill("input[name='points:bob']", "0.5")
                with page.expect_navigation():
                    page.get_by_role("button", name="Save the points and rebuild the table").click()
                assert page.locator("#message").inner_text() == "saved: 2 hand grades changed; the table is rebuilt"
                assert page.input_value("input[name='points:alice']") == "1.25"
                assert "/01_attention/written_values.html" in page.url and "/01_attention/01_attention/" not in page.url

                page.fill("input[name='points:bob']", "0.3")                # not a quarter point: the browser refuses
                page.get_by_role("button", name="Save the points and rebuild the table").click()
                assert page.eval_on_selector("input[name='points:bob']", "e => e.validity.stepMismatch")
                page.eval_on_selector("form", "f => { f.noValidate = true; }")
                with page.expect_navigation():
                    page.get_by_role("button", name="Save the points and rebuild the table").click()
                message = page.locator("#message").inner_text()
                assert message == "Not saved: bob: points go in steps of 0.25 (0, 0.25, 0.5, ...), got 0.3", message
                assert page.input_value("input[name='points:bob']") == "0.3"     # what was typed is kept
                assert page.input_value("input[name='comment:alice']") == "names both roles; no example"
            finally:
                browser.close()

    failure = []                  # a thread of its own: an xdist worker may hold another test's sync Playwright

    def run():
        try:
            drive()
        except BaseException as exc:  # noqa: BLE001 -- re-raised below, in the test's thread
            failure.append(exc)

    try:
        browsing = threading.Thread(target=run)
        browsing.start()
        browsing.join(timeout=600)
        assert not browsing.is_alive(), "the browser did not finish in 600 s"
        if failure:
            raise failure[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    manual = report.load_manual(grades)
    assert (manual[("alice", NAME, "written_values")]["points"], manual[("alice", NAME, "written_values")]["comment"]) \
        == ("1.25", "names both roles; no example")
    assert manual[("bob", NAME, "written_values")]["points"] == "0.5"      # the refused 0.3 saved nothing
    rows = {r["student"]: r for r in csv.DictReader((grades / "grades.csv").open(encoding="utf-8"))}
    assert (rows["alice"]["points"], rows["alice"]["status"]) == ("9.25", "graded")
    assert (rows["bob"]["points"], rows["bob"]["status"]) == ("2.5", "graded")
    feedback = (grades / "feedback" / "alice" / f"{NAME}.html").read_text(encoding="utf-8")
    assert "1.25 / 2" in feedback and "graded by hand: names both roles; no example" in feedback
    static = (grades / "questions" / NAME / "written_values.html").read_text(encoding="utf-8")
    assert "points: <b>1.25</b> / 2" in static and "<form" not in static       # the read-only copy, refreshed


def test_one_rule_for_hand_grades_on_the_page_and_in_grader_manual(graded_class, capsys):
    """The same step (quarter points) and the same refusals (an unanswered answer, a row where nothing
    ran, out of range) from `grader manual` as from the question page."""
    from grader.__main__ import main

    grades, _ = graded_class
    qs = _questions(grades)
    cases = [("alice", "1.25", None), ("alice", "1.3", "steps of 0.25"), ("alice", "2.5", "between 0 and 2"),
             ("alice", "nan", "not a number"), ("carol", "1", "left as released"), ("dan", "1", "no submission")]
    for student, points, refused in cases:
        try:
            qs.save(NAME, "written_values", {f"points:{student}": [points]})
            page_error = None
        except ValueError as exc:
            page_error = str(exc)
        with pytest.raises(SystemExit) if refused else contextlib.nullcontext() as cli:
            main(["manual", "--grades", str(grades), "--student", student, "--notebook", NAME,
                  "--cell", "written_values", "--points", points])
        if refused:
            assert refused in page_error and refused in str(cli.value), (student, points, page_error, cli.value)
        else:
            assert page_error is None
    assert report.load_manual(grades)[("alice", NAME, "written_values")]["points"] == "1.25"
    assert ("carol", NAME, "written_values") not in report.load_manual(grades)
