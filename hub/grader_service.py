"""The course's sandboxed grader as a JupyterHub service, in the instructor's hands (hub/README.md).

Started by the hub (jupyterhub_config.py, `c.JupyterHub.services`), as root: the sandbox needs
root (namespaces, its own users). Only the hub's instructors reach it (the role
`course-grader` gives them `access:services!service=grader`; the handler checks the roster too).

    GET  /services/grader/                 a page: Grade and Similarity buttons per assignment
    POST /services/grader/api/grade        {"assignment": "01_attention", "student": optional}
    POST /services/grader/api/similarity   {"assignment": "01_attention"}: the similarity report of the
                                           collected solution cells into ~/grades/similarity/ (the
                                           instructor's shell cannot run the grader: the sources are root's)

A grade request, for the instructor who asked, in their own course folder ~/course:

1. ``python -m grader grade`` (the course's sandboxed grader) on ~/course/submitted -> ~/grades;
2. the feedback pages into nbgrader's feedback/ and ``nbgrader release_feedback`` as the
   instructor (hubctl.deliver_feedback): each student fetches their own page;
3. ``python -m grader formgrader``: the results into the instructor's gradebook and autograded/,
   so Formgrader shows them;
4. everything it wrote is chowned to the instructor (~/grades 0700): theirs, visible in their Lab.

nbgrader's own Autograde (Formgrader's button) is routed here by the instructor's server
(hub/roles/instructor/jupyter_server_config.py): it never runs a student's code outside the sandbox.
"""

from __future__ import annotations

import asyncio
import csv
import html
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hubctl  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ROSTER = json.loads(Path(os.environ["TC_HUB_ROSTER"]).read_text(encoding="utf-8"))
PYTHON = os.environ.get("TC_GRADER_PYTHON", sys.executable)
VENV = Path(os.environ.get("TC_HUB_VENV", "/opt/transformer-course-hub"))
PREFIX = os.environ["JUPYTERHUB_SERVICE_PREFIX"]
SEED = os.environ.get("COURSE_GRADING_SEED")            # tests fix it; unset: drawn at grading time
LOCK = asyncio.Lock()                                   # one grading run at a time on this machine


def grade(instructor: str, assignment: str, student: str | None = None) -> dict:
    """Steps 1-4 above, blocking; returns what the page and Formgrader show."""
    if assignment not in ROSTER["assignments"]:
        raise web.HTTPError(400, f"assignment: expected one of {ROSTER['assignments']}, got {assignment!r}")
    if student is not None and student not in ROSTER["students"]:
        raise web.HTTPError(400, f"student: expected a student of the class, got {student!r}")
    entry = pwd.getpwnam(instructor)
    course, grades = Path(entry.pw_dir) / "course", Path(entry.pw_dir) / "grades"
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"), OPENBLAS_NUM_THREADS="1")
    if SEED:
        env["COURSE_GRADING_SEED"] = SEED
    cmd = [PYTHON, "-m", "grader", "--course", str(ROOT), "grade", "--submitted", str(course / "submitted"),
           "--grades", str(grades), "--assignment", assignment, "--quiet",
           "--cell-timeout", os.environ.get("TC_GRADER_CELL_TIMEOUT", "30")]
    if student:
        cmd += ["--student", student]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    steps = {"grade": round(time.monotonic() - t0, 1)}
    log = done.stdout[-4000:] + done.stderr[-4000:]
    if done.returncode != 0:
        hubctl.give(grades, entry)
        return {"success": False, "error": f"the grader failed (exit {done.returncode})", "log": log}
    released = hubctl.deliver_feedback(course, grades, assignment, VENV, student=student)
    steps["feedback"] = round(time.monotonic() - t0 - sum(steps.values()), 1)
    pushed = subprocess.run([PYTHON, "-m", "grader", "--course", str(ROOT), "formgrader", "--grades", str(grades),
                             "--db-url", f"sqlite:///{course / 'gradebook.db'}", "--course-id", ROSTER["course_id"],
                             "--autograded", str(course / "autograded"), "--submitted", str(course / "submitted")]
                            + (["--student", student] if student else []),
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    steps["formgrader"] = round(time.monotonic() - t0 - sum(steps.values()), 1)
    hubctl.give(grades, entry)
    hubctl.give(course, entry)
    rows = [r for r in csv.DictReader(open(grades / "grades.csv", encoding="utf-8"))
            if not student or r.get("student") == student]
    return {"success": pushed.returncode == 0, "assignment": assignment,
            "seconds": round(time.monotonic() - t0, 1), "steps": steps,
            "grades": rows, "feedback_released_to": released,
            "log": log + (pushed.stdout[-2000:] + pushed.stderr[-2000:] if pushed.returncode else ""),
            **({} if pushed.returncode == 0 else {"error": "the Formgrader push failed"})}


def similarity(instructor: str, assignment: str) -> dict:
    """The grader's similarity report of one assignment's collected submissions, as the instructor's files."""
    if assignment not in ROSTER["assignments"]:
        raise web.HTTPError(400, f"assignment: expected one of {ROSTER['assignments']}, got {assignment!r}")
    entry = pwd.getpwnam(instructor)
    course, grades = Path(entry.pw_dir) / "course", Path(entry.pw_dir) / "grades"
    t0 = time.monotonic()
    done = subprocess.run([PYTHON, "-m", "grader", "--course", str(ROOT), "similarity", "--submitted",
                           str(course / "submitted"), "--grades", str(grades), "--assignment", assignment],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT / "lib"), OPENBLAS_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=1800)
    hubctl.give(grades, entry)
    report = grades / "similarity" / f"{assignment}.html"
    return {"success": done.returncode == 0 and report.is_file(), "assignment": assignment,
            "seconds": round(time.monotonic() - t0, 1), "report": str(report.relative_to(entry.pw_dir)),
            "log": done.stdout[-3000:] + done.stderr[-3000:]}


class Instructor(HubOAuthenticated, web.RequestHandler):
    def instructor(self) -> str:
        user = self.get_current_user()
        if not user:
            raise web.HTTPError(403)
        if user["name"] not in ROSTER["instructors"]:
            raise web.HTTPError(403, f"{user['name']} is not an instructor of this course")
        return user["name"]

    async def answer(self, job, *args) -> None:
        """Run a blocking job (one at a time on this machine) and answer with its JSON."""
        async with LOCK:
            result = await asyncio.get_running_loop().run_in_executor(None, job, *args)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(result))


class Page(Instructor):
    @web.authenticated
    def get(self):
        name = self.instructor()
        rows = "".join(
            f'<tr><td>{html.escape(a)}</td><td><button class="grade" data-assignment="{html.escape(a)}">'
            f'Grade (sandboxed) and release feedback</button></td><td><button class="similarity" '
            f'data-assignment="{html.escape(a)}">Similarity report</button></td></tr>' for a in ROSTER["assignments"])
        self.write(f"""<!doctype html><html><head><meta charset="utf-8"><title>Course grader</title></head>
<body><h1>Course grader</h1><p>Signed in as <b id="who">{html.escape(name)}</b>. Grades the collected
submissions in <code>~/course/submitted</code> in the course's sandbox, writes <code>~/grades</code>,
releases each student's feedback and fills Formgrader's gradebook. <i>Similarity report</i> compares
the collected solution cells into <code>~/grades/similarity/</code>.</p>
<table id="assignments">{rows}</table><pre id="result"></pre>
<script>
const xsrf = "{self.xsrf_token.decode()}";
for (const b of document.querySelectorAll("button.grade, button.similarity")) b.onclick = async () => {{
  const out = document.getElementById("result"); out.textContent = b.className + " " + b.dataset.assignment + " ...";
  out.className = "running";
  const api = b.className === "grade" ? "api/grade" : "api/similarity";
  const r = await fetch(api, {{method: "POST", headers: {{"Content-Type": "application/json",
    "X-XSRFToken": xsrf}}, body: JSON.stringify({{assignment: b.dataset.assignment}})}});
  out.textContent = JSON.stringify(await r.json(), null, 1); out.className = r.ok ? "done" : "failed";
}};
</script></body></html>""")


class Grade(Instructor):
    @web.authenticated
    async def post(self):
        body = json.loads(self.request.body or b"{}")
        await self.answer(grade, self.instructor(), body.get("assignment"), body.get("student"))

    def check_xsrf_cookie(self):
        # A token (the instructor's server routing Formgrader's Autograde) needs no XSRF cookie.
        if self.request.headers.get("Authorization", "").startswith("token "):
            return
        return super().check_xsrf_cookie()


class Similarity(Instructor):
    @web.authenticated
    async def post(self):
        body = json.loads(self.request.body or b"{}")
        await self.answer(similarity, self.instructor(), body.get("assignment"))


def main() -> None:
    app = web.Application([
        (PREFIX, Page),
        (url_path_join(PREFIX, "api/grade"), Grade),
        (url_path_join(PREFIX, "api/similarity"), Similarity),
        (url_path_join(PREFIX, "oauth_callback"), HubOAuthCallbackHandler),
    ], cookie_secret=os.urandom(32), xsrf_cookies=True,
       xsrf_cookie_kwargs={"path": PREFIX})
    url = os.environ["JUPYTERHUB_SERVICE_URL"].split("//", 1)[1]
    host, port = url.split("/", 1)[0].rsplit(":", 1)
    HTTPServer(app).listen(int(port), host)
    IOLoop.current().start()


if __name__ == "__main__":
    main()
