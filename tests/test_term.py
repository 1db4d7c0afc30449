"""The instructor's term without the sandbox: due dates and the late rule, submission times from the
exchange and from the LMS, the Canvas and Moodle exports read back by each importer's rules, and the
written answers graded question by question (the pages and their server).

The same four on the real demo class, graded in the sandbox: tests/test_grader_demo.py.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.trusted import collect, grading, late, lms, questions, report  # noqa: E402

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
