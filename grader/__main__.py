"""Command line: python -m grader <command> (run from the course root; see grader/README.md).

    grade      autograde submitted/ into grades/ (sandboxed; progress bar; table; feedback)
    demo       grade the demo class of tests/fixtures/demo_class (every attack, with its outcome)
    table      rebuild grades.csv, cells.csv and the feedback pages (after hand grading)
    manual     record a hand grade for a written answer
    students   import a class list (students without a submission get a row)
    collect    copy an LMS download folder into submitted/
    formgrader push the results into nbgrader's gradebook (formgrader shows them)
    similarity similarity report of the solution cells (grades/similarity/<notebook>.html, .csv)
    export     Canvas and Moodle grade-import CSVs (grades/lms/), per notebook or per question
    questions  written answers question by question (pages; --serve to enter the points there)

The term's due dates and late policy are read from grading.toml in the course root (--config).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .trusted import collect as collect_mod
from .trusted import grading, late, report, store
from .trusted.supervisor import Limits

ROOT = Path(__file__).resolve().parent.parent


CONFIG = {"path": None}            # grading.toml of this run (main() sets it from --config / --course)


def _policy() -> late.Policy:
    try:
        return late.load(CONFIG["path"])
    except late.ConfigError as exc:
        raise SystemExit(f"cannot read the term's settings: {exc}") from None


def _write_table(grades: Path) -> list[dict]:
    """The table and feedback pages, with the hand grades entered in formgrader (if it was used)."""
    fg = {}
    if (Path(grades) / "formgrader.json").exists():
        from .trusted import formgrader

        fg = formgrader.hand_grades(grades)
    return report.write_table(grades, fg, _policy())


def _limits(args) -> Limits:
    limits = Limits()
    if args.cell_timeout is not None:
        limits.cell_timeout = args.cell_timeout
    if args.notebook_timeout is not None:
        limits.notebook_timeout = args.notebook_timeout
        limits.cpu_seconds = int(args.notebook_timeout)
    if args.memory_mb is not None:
        limits.memory_bytes = int(args.memory_mb) << 20
    return limits


def cmd_grade(args) -> int:
    course = grading.Course.at(args.course)
    grades = Path(args.grades)
    roster = [r["id"] for r in report.load_roster(grades)]
    if args.classlist:
        report.import_roster(grades, Path(args.classlist))
        roster = [r["id"] for r in report.load_roster(grades)]
    if args.manual:                        # hand grades to start from (the demo class ships some)
        entries = report.load_manual(Path(args.manual).parent) if Path(args.manual).name == "manual.csv" else {}
        entries.update(report.load_manual(grades))
        report.save_manual(grades, entries)
    summary = grading.grade_class(course=course, submitted=Path(args.submitted), grades=grades,
                                  assignments=args.assignment or None, students=args.student or None,
                                  roster=roster, workers=args.workers, limits=_limits(args),
                                  progress=not args.quiet,
                                  scheduler=args.scheduler)   # [dask hook]
    rows = _write_table(grades)
    if not args.quiet:
        report.print_table(rows, sys.stdout)
    print(f"graded {summary['submissions_run']} notebook submissions ({summary['rows']} rows) in "
          f"{summary['seconds']:.1f} s: {summary['seconds_per_submission']:.2f} s per submission with "
          f"{summary['workers']} workers; seed {summary['seed']} ({summary['seed_source']})")
    print(f"table: {grades / 'grades.csv'}   feedback: {grades / 'feedback'}/<student>/<notebook>.html")
    return 0


DEMO = ROOT / "tests" / "fixtures" / "demo_class"


def cmd_demo(args) -> int:
    """Grade the demo class (tests/fixtures/demo_class) into a fresh folder and print the table."""
    import shutil

    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(DEMO / "submitted", out / "submitted", symlinks=True)   # a linked folder stays a link
    grades = out / "grades"
    report.import_roster(grades, DEMO / "classlist.csv")
    report.save_manual(grades, report.load_manual(DEMO))
    _demo_collect(args, out, grades)
    limits = Limits(cell_timeout=args.cell_timeout, notebook_timeout=60, cpu_seconds=60)
    summary = grading.grade_class(course=grading.Course.at(args.course), submitted=out / "submitted",
                                  grades=grades, roster=[r["id"] for r in report.load_roster(grades)],
                                  workers=args.workers, limits=limits, progress=not args.quiet)
    CONFIG["path"] = DEMO / late.CONFIG_NAME                 # the demo class's term: due date, late rule
    rows = _write_table(grades)
    report.print_table(rows, sys.stdout)
    print(f"demo class: {summary['submissions_run']} notebook submissions run ({summary['rows']} rows) in "
          f"{summary['seconds']:.1f} s, {summary['seconds_per_submission']:.2f} s per submission with "
          f"{summary['workers']} workers")
    print(f"table: {grades / 'grades.csv'}   feedback: {grades / 'feedback'}/<student>/01_attention.html")
    _demo_term(args, out, grades, rows)
    return 0


def _demo_collect(args, out: Path, grades: Path) -> None:
    """Nine of the demo class arrive as Canvas's and Moodle's downloads: collected as `make collect` does."""
    lms_dir = DEMO / "lms"
    canvas, moodle = lms_dir / "canvas", lms_dir / "moodle"
    runs = [("Canvas", next(canvas.glob("*.zip")), ["--canvas-gradebook", str(next(canvas.glob("*Grades*.csv"))),
                                                    "--times", str(canvas / "submissions.json")]),
            ("Moodle", next(moodle.glob("*.zip")), ["--moodle-worksheet", str(next(moodle.glob("Grades-*.csv"))),
                                                    "--assignment", "01_attention"])]
    for name, download, flags in runs:
        shown = " ".join(f"{a.lstrip('-').upper().replace('-', '_')}={Path(b).relative_to(ROOT) if '/' in b else b}"
                         for a, b in zip(flags[::2], flags[1::2]))
        print(f"\n{name}: make collect LMS={download.relative_to(ROOT)} {shown}".replace("TIMES=", "LMS_TIMES="))
        main(["--course", str(args.course), "--config", str(DEMO / late.CONFIG_NAME), "collect", str(download),
              "--submitted", str(out / "submitted"), "--grades", str(grades), *flags])
    print()


def _demo_term(args, out: Path, grades: Path, rows: list[dict]) -> None:
    """The instructor's term on the demo class: late rule, similarity, LMS files, question pages."""
    from .trusted import lms, questions, similarity

    policy = _policy()
    print(f"\nlate policy ({DEMO / late.CONFIG_NAME}): due {policy.due and next(iter(policy.due.values()))}; "
          f"{policy.describe()}")
    for r in rows:
        if float(r["late_penalty"] or 0) or r["days_late"]:
            print(f"  {r['student']}: submitted {r['submitted']}, {r['days_late']} started days late: "
                  f"{r['raw_points']} - {r['late_penalty']} = {r['points']}")
    done = similarity.run(grading.Course.at(args.course), out / "submitted", grades)
    for d in done:
        flagged = [r for r in __import__("csv").DictReader(d["csv"].open(encoding="utf-8")) if r["flagged"]]
        pairs = sorted({(r["student_a"], r["student_b"]) for r in flagged})
        print(f"similarity: {d['flagged']} flagged exercise pairs in {d['notebook']}: "
              f"{', '.join(f'{a} + {b}' for a, b in pairs) or 'none'}  ({d['html']})")
    written, warnings = lms.export(grades, rows, per_question=True)
    print("LMS: " + ", ".join(str(p) for p in written) + (f" ({'; '.join(warnings)})" if warnings else ""))
    qs = questions.Questions(grading.Course.at(args.course), grades, lambda: _write_table(grades), policy)
    print(f"written answers question by question: {qs.write_static()} "
          f"(`python -m grader questions --grades {grades} --serve` to enter points there)")


def cmd_table(args) -> int:
    rows = _write_table(Path(args.grades))
    report.print_table(rows, sys.stdout)
    return 0


def cmd_manual(args) -> int:
    grades = Path(args.grades)
    record_path = grades / "results" / args.student / f"{args.notebook}.json"
    if not record_path.exists():
        raise SystemExit(f"no result for {args.student} / {args.notebook} in {grades}: run `make grade` first")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    written = {w["grade_id"]: w for w in record["written"]}
    if args.cell not in written and record.get("auto_status") not in report.NOT_RUN:
        raise SystemExit(f"{args.notebook} has no written answer '{args.cell}'; "
                         f"written answers: {', '.join(written) or 'none'}")
    w = written.get(args.cell, {"max_points": 0})
    try:                                   # the question pages' rule (store.hand_points)
        points = store.hand_points(args.points, float(w["max_points"]), f"{args.student} / {args.notebook}", w,
                                   record.get("auto_status"))
    except ValueError as exc:
        raise SystemExit(f"not recorded: {exc}") from None
    entries = report.load_manual(grades)
    entries[(args.student, args.notebook, args.cell)] = store.hand_grade(args.student, args.notebook, args.cell,
                                                                         points, args.comment or "")
    report.save_manual(grades, entries)
    rows = _write_table(grades)
    row = next(r for r in rows if r["student"] == args.student and r["notebook"] == args.notebook)
    print(f"{args.student} {args.notebook}: {row['points']} / {row['max_points']}, {row['status']}")
    return 0


def cmd_students(args) -> int:
    added, total = report.import_roster(Path(args.grades), Path(args.classlist))
    print(f"class list: {added} new students, {total} in {Path(args.grades) / 'students.csv'}")
    return 0


def cmd_collect(args) -> int:
    """An LMS's download -> submitted/, each file mapped to a class-list student through the LMS's own export."""
    from .trusted import lmsfiles

    course = grading.Course.at(args.course)
    assignments = course.assignments()
    if args.assignment is not None and args.assignment not in assignments:
        raise SystemExit(f"--assignment {args.assignment!r} is not an assignment of the course "
                         f"(expected one of {', '.join(assignments)})")
    if args.moodle_worksheet and not args.assignment:
        raise SystemExit("--moodle-worksheet: a grading worksheet is one assignment's (its participant ids are per "
                         "assignment): say which with --assignment (make collect ... ASSIGNMENT=01_attention)")
    if not Path(args.lms_dir).exists():
        raise SystemExit(f"the LMS download {args.lms_dir} does not exist (make collect LMS=<the zip or its folder>)")
    rows = report.load_roster(Path(args.grades))
    roster = lmsfiles.Roster(rows)
    if not roster:
        print(f"note: no class list in {Path(args.grades) / 'students.csv'} (make students CLASSLIST=...): "
              "LMS ids are mapped by SIS User ID / ID number alone")
    zone = late._zone(_policy().timezone)
    canvas = moodle = canvas_times = times = None
    notes = []
    try:
        if args.canvas_gradebook:
            canvas = lmsfiles.read_canvas_gradebook(Path(args.canvas_gradebook), roster)
        if args.moodle_worksheet:
            moodle = lmsfiles.read_moodle_worksheet(Path(args.moodle_worksheet), roster, zone)
        if args.times:
            text = Path(args.times).read_text(encoding="utf-8-sig", errors="replace")
            head = text.lstrip()[:1] or " "
            first = text.splitlines()[0].split(",") if text.strip() else []
            if canvas is not None and (head in "[{" or "user_id" in first):
                canvas_times, notes = lmsfiles.read_canvas_times(Path(args.times), canvas)
            elif head in "[{":
                raise SystemExit(f"--times {args.times}: Canvas's submissions (JSON) name students by Canvas's user "
                                 "id: give the gradebook export too (--canvas-gradebook, CANVAS_GRADEBOOK=)")
            else:
                times, notes = late.load_lms_times(Path(args.times), rows, args.assignment, _policy().timezone)
    except (lmsfiles.LMSFileError, late.ConfigError, OSError) as exc:
        raise SystemExit(f"cannot read the LMS's files: {exc}") from None
    matches, skipped = collect_mod.collect(
        Path(args.lms_dir), Path(args.submitted), assignments, args.pattern, dry_run=args.dry_run, times=times,
        roster_ids=roster.ids, canvas=canvas, moodle=moodle, moodle_assignment=args.assignment,
        canvas_times=canvas_times, file_times=args.file_times)
    for m in matches:
        print(collect_mod.describe(m, args.dry_run))
    for s in skipped:
        print(f"skipped  {s}")
    for n in notes:
        print(f"note: {n}")
    for line in collect_mod.summary(matches, skipped):
        print(line)
    return 0


def cmd_formgrader(args) -> int:
    from .trusted import formgrader

    n = formgrader.push(course=grading.Course.at(args.course), grades=Path(args.grades),
                        db_url=args.db_url, course_id=args.course_id,
                        autograded=Path(args.autograded) if args.autograded else None,
                        submitted=Path(args.submitted) if args.submitted else None, students=args.student or None)
    print(f"{n} submissions written to the gradebook; open formgrader to grade written answers, then "
          f"`python -m grader table` picks the hand grades up")
    return 0


def cmd_similarity(args) -> int:
    from .trusted import similarity

    threshold = similarity.THRESHOLD if args.threshold is None else args.threshold
    done = similarity.run(grading.Course.at(args.course), Path(args.submitted), Path(args.grades),
                          args.assignment or None, threshold=threshold, with_course=not args.no_course_solution)
    for d in done:
        print(f"{d['notebook']}: {d['students']} submissions, {d['flagged']} pairs of solution cells at or above "
              f"{threshold:g}: {d['html']}  ({d['csv'].name})")
    if not done:
        print(f"no submissions in {args.submitted}")
    return 0


def _settings() -> dict:
    import tomllib

    path = CONFIG["path"]
    if path is None or not Path(path).exists():
        return {}
    return tomllib.loads(Path(path).read_text(encoding="utf-8")).get("lms", {}) or {}


def cmd_export(args) -> int:
    from .trusted import lms

    grades = Path(args.grades)
    rows = _write_table(grades)
    settings = _settings()
    try:
        written, warnings = lms.export(grades, rows, per_question=args.per_question,
                                       canvas_ids=settings.get("canvas_ids"),
                                       gradepointmax=float(settings.get("moodle_gradepointmax", lms.MOODLE_GRADEPOINTMAX)))
    except lms.ExportError as exc:
        raise SystemExit(f"not exported: {exc}") from None
    for w in warnings:
        print(f"note: {w}")
    for path in written:
        print(f"wrote {path}")
    print("Canvas: Grades > Import, the file above (students by SIS User ID / SIS Login ID). Moodle: Grades > "
          "Import > CSV file, identify users by 'ID number' or 'Email address', map each notebook column.")
    return 0


def cmd_questions(args) -> int:
    from .trusted import questions

    grades = Path(args.grades)
    qs = questions.Questions(grading.Course.at(args.course), grades, lambda: _write_table(grades), _policy())
    print(f"{len(qs.questions)} written questions; pages: {qs.write_static()}")
    if args.serve:
        server = questions.serve(qs, args.port)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
            qs.write_static()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", default=str(ROOT), help="course root (default: this repository)")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("grade", help="autograde every submission")
    g.add_argument("--submitted", default="submitted")
    g.add_argument("--grades", default="grades")
    g.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    g.add_argument("--student", action="append", help="only this student (repeatable)")
    g.add_argument("--classlist", help="import this class list first")
    g.add_argument("--manual", help="a manual.csv of hand grades to merge in first")
    g.add_argument("--workers", type=int, default=2)
    g.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (default 30)")
    g.add_argument("--notebook-timeout", type=float, default=None, help="seconds per notebook (default 600)")
    g.add_argument("--memory-mb", type=int, default=None, help="address-space limit (default 2048)")
    g.add_argument("--quiet", action="store_true")
    g.add_argument("--scheduler", default=None, metavar="ADDRESS",   # [dask hook] grader/trusted/dask_backend.py
                   help="run the sandboxes on this Dask cluster (tcp://host:8786); grading stays here")
    g.set_defaults(func=cmd_grade)

    d = sub.add_parser("demo", help="grade the demo class shipped in tests/fixtures/demo_class")
    d.add_argument("--out", default=str(ROOT / ".artifacts" / "grade-demo"))
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--cell-timeout", type=float, default=5.0)
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=cmd_demo)

    t = sub.add_parser("table", help="rebuild the grade table and feedback from stored results")
    t.add_argument("--grades", default="grades")
    t.set_defaults(func=cmd_table)

    m = sub.add_parser("manual", help="record a hand grade for a written answer")
    m.add_argument("--grades", default="grades")
    m.add_argument("--student", required=True)
    m.add_argument("--notebook", required=True)
    m.add_argument("--cell", required=True, help="the written answer's grade id, e.g. written_values")
    m.add_argument("--points", required=True, help="0 to the answer's points, in steps of 0.25")
    m.add_argument("--comment", default="")
    m.set_defaults(func=cmd_manual)

    s = sub.add_parser("students", help="class list")
    s_sub = s.add_subparsers(dest="action", required=True)
    si = s_sub.add_parser("import", help="import a CSV with columns id, first_name, last_name, email")
    si.add_argument("classlist")
    si.add_argument("--grades", default="grades")
    si.set_defaults(func=cmd_students)

    c = sub.add_parser("collect", help="an LMS's download (zip or folder) -> submitted/")
    c.add_argument("lms_dir", help="Canvas's or Moodle's download: the zip, or the folder it was unzipped into")
    c.add_argument("--submitted", default="submitted")
    c.add_argument("--canvas-gradebook", help="Canvas's gradebook export (Grades > Export): maps Canvas's user ids "
                                              "(its ID column) to the class list by SIS User ID / SIS Login ID")
    c.add_argument("--moodle-worksheet", help="the assignment's Moodle grading worksheet: maps participant ids "
                                              "(Identifier) to the class list by ID number / Email address, and "
                                              "gives the submission times (needs --assignment)")
    c.add_argument("--assignment", "--times-assignment", dest="assignment",
                   help="the assignment a Moodle worksheet, or a times file without an 'assignment' column, is for")
    c.add_argument("--times", help="the LMS's own submission times: Canvas's Submissions API (JSON, or CSV with "
                                   "user_id, submitted_at; with --canvas-gradebook) or any CSV with a class-list id "
                                   "or e-mail and a time column (submitted_at, Last modified (submission))")
    c.add_argument("--file-times", action="store_true",
                   help="where the LMS gives no time, take the file's modification time (off by default: a "
                        "download's file times are when it was downloaded, not submitted)")
    c.add_argument("--pattern", help="regex with named groups student, assignment (and notebook): replaces the rules")
    c.add_argument("--dry-run", action="store_true")
    c.add_argument("--grades", default="grades", help="where the class list is (grades/students.csv)")
    c.set_defaults(func=cmd_collect)

    f = sub.add_parser("formgrader", help="write results into nbgrader's gradebook for formgrader")
    f.add_argument("--grades", default="grades")
    f.add_argument("--db-url", default=None, help="default: the course's nbgrader_config.py gradebook")
    f.add_argument("--course-id", default=None, help="default: nbgrader_config.py's course_id")
    f.add_argument("--autograded", default=None, help="default: <course>/autograded")
    f.add_argument("--submitted", default=None, help="the collected submissions (their timestamp.txt); default: "
                                                     "<course>/submitted")
    f.add_argument("--student", action="append", help="only this student (repeatable)")
    f.set_defaults(func=cmd_formgrader)

    y = sub.add_parser("similarity", help="similarity report of the solution cells (never changes a grade)")
    y.add_argument("--submitted", default="submitted")
    y.add_argument("--grades", default="grades")
    y.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    y.add_argument("--threshold", type=float, default=None, help="flag pairs with a score at least this (0.7)")
    y.add_argument("--no-course-solution", action="store_true", help="do not compare with the published solution")
    y.set_defaults(func=cmd_similarity)

    e = sub.add_parser("export", help="Canvas gradebook CSV and Moodle grade-import CSV into grades/lms/")
    e.add_argument("--grades", default="grades")
    e.add_argument("--per-question", action="store_true", help="also one column per test cell and written answer")
    e.set_defaults(func=cmd_export)

    q = sub.add_parser("questions", help="written answers question by question (pages; --serve to grade)")
    q.add_argument("--grades", default="grades")
    q.add_argument("--serve", action="store_true", help="serve the pages on 127.0.0.1 and record the points typed")
    q.add_argument("--port", type=int, default=0, help="port for --serve (default: a free one)")
    q.set_defaults(func=cmd_questions)

    parser.add_argument("--config", default=None, help="the term's settings (default: <course>/grading.toml)")
    args = parser.parse_args(argv)
    CONFIG["path"] = Path(args.config) if args.config else Path(args.course) / late.CONFIG_NAME
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
