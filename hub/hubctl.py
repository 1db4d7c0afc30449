"""Set up, start, stop and clean up the course's hub on one machine (hub/README.md). Runs as root.

    python hub/hubctl.py trial [--port 8000]     `make hub`: an instructor and two students, a
                                                 shared password; Ctrl+C stops the hub and
                                                 removes the trial's users and exchange
    python hub/hubctl.py feedback --course DIR --grades DIR --assignment A
                                                 the course grader's feedback pages into nbgrader's
                                                 feedback/ folder, then `nbgrader release_feedback`
                                                 as the course folder's owner: each student fetches
                                                 their own page from the Assignment List

Only the standard library: tests/test_hub_browser.py imports it to build its own class.
What a class is made of:

* system users (``useradd -m``), homes 0700: nobody reads another's work, nor the
  instructor's source/ (the solutions) and gradebook;
* the exchange folder, 0777 as nbgrader's documentation asks (students write their
  submissions into inbound/, nbgrader keeps feedback/ unlistable);
* the instructor's course folder ~/course: nbgrader_config.py, source/ (notebooks/),
  release/ (the committed student release, exercises/), the gradebook with the assignments;
* the role folders (hub/roles/) copied root-owned next to the hub's venv, and the
  Formgrader MathJax template (hub/formgrader/) into the venv's nbconvert templates.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_VENV = Path("/opt/transformer-course-hub")
COURSE_ID = "transformer-first-principles"


@dataclass
class Class:
    """Who is on the hub and where the course's exchange lives."""

    instructors: list[str]
    students: list[str]
    exchange: Path
    course_id: str = COURSE_ID
    assignments: list[str] = field(default_factory=lambda: ["01_attention"])

    @property
    def users(self) -> list[str]:
        return self.instructors + self.students

    def roster(self) -> dict:
        return {"course_id": self.course_id, "exchange": str(self.exchange),
                "instructors": self.instructors, "students": self.students}


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def as_user(user: str, command: str, cwd: str | None = None, venv: Path = DEFAULT_VENV,
            env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a shell command as ``user`` (a login-like environment with the hub's venv first)."""
    home = pwd.getpwnam(user).pw_dir
    base = {"HOME": home, "USER": user, "LOGNAME": user, "LANG": "C.UTF-8",
            "PATH": f"{venv}/bin:/usr/bin:/bin", **(env or {})}
    return subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                           "/bin/bash", "-c", command],
                          cwd=cwd or home, env=base, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ users
def create_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        pass
    else:
        raise SystemExit(f"user {name} exists already: hubctl creates its own users and removes them afterwards")
    run(["useradd", "--create-home", "--shell", "/bin/bash", "--comment", "course hub user", name])
    os.chmod(pwd.getpwnam(name).pw_dir, 0o700)


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def kill_user(uid: int, wait: float = 5.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes_of(uid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while processes_of(uid) and time.monotonic() < deadline:
            time.sleep(0.1)
    if processes_of(uid):
        raise RuntimeError(f"processes of uid {uid} survive SIGKILL: {processes_of(uid)}")


def remove_user(name: str) -> None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return
    kill_user(entry.pw_uid)
    subprocess.run(["userdel", "--remove", name], capture_output=True)   # mail spool warnings are fine


# ------------------------------------------------------------------ the course on the hub
def install_roles(venv: Path) -> Path:
    """Root-owned, world-readable copies of hub/roles/ and the Formgrader MathJax template."""
    roles = venv / "share" / "tc-hub" / "roles"
    if roles.exists():
        shutil.rmtree(roles)
    shutil.copytree(HERE / "roles", roles)
    templates = venv / "share" / "jupyter" / "nbconvert" / "templates" / "formgrade"
    templates.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "formgrader" / "mathjax.html.j2", templates / "mathjax.html.j2")
    for path in [roles, *roles.rglob("*"), templates, *templates.iterdir()]:
        os.chown(path, 0, 0)
        path.chmod(0o755 if path.is_dir() else 0o644)
    return roles


COURSE_CONFIG = '''"""nbgrader for the instructor's course folder on the hub (written by hub/hubctl.py)."""

c = get_config()  # noqa: F821

c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.db_url = "sqlite:///" + {db!r}
c.Exchange.root = {exchange!r}
# The student release is the repository's exercises/ (tools/course.py release); only notebooks.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.md"]
'''


def setup_course(cls: Class, venv: Path = DEFAULT_VENV) -> None:
    """Exchange, the instructor's course folder and gradebook (the users exist already)."""
    cls.exchange.mkdir(parents=True, exist_ok=True)
    cls.exchange.chmod(0o777)
    for instructor in cls.instructors:
        home = Path(pwd.getpwnam(instructor).pw_dir)
        course = home / "course"
        for name in cls.assignments:
            shutil.copytree(ROOT / "notebooks" / name, course / "source" / name)
            shutil.copytree(ROOT / "exercises" / name, course / "release" / name)
        (course / "nbgrader_config.py").write_text(COURSE_CONFIG.format(
            root=str(course), course_id=cls.course_id, db=str(course / "gradebook.db"),
            exchange=str(cls.exchange)), encoding="utf-8")
        # The assignments and students in the gradebook (release_assignment looks the assignment up),
        # with nbgrader's API in this process (root; the file is then the instructor's). Callers run
        # hubctl with a Python that has nbgrader: the hub's venv (make hub) or .venv (the tests).
        # (nbgrader runs `alembic` from PATH to create it: this Python's own comes first.)
        from nbgrader.api import Gradebook

        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
        with Gradebook("sqlite:///" + str(course / "gradebook.db"), cls.course_id) as gb:
            for name in cls.assignments:
                gb.update_or_create_assignment(name)
            for student in cls.students:
                gb.update_or_create_student(student)
        run(["chown", "-R", f"{instructor}:{instructor}", str(course)])


def deliver_feedback(course: Path, grades: Path, assignment: str, venv: Path = DEFAULT_VENV) -> list[str]:
    """The course grader's feedback pages -> nbgrader's feedback/ layout -> release_feedback.

    For every student with a collected submission (submitted/<student>/<assignment>/) and a
    feedback page from `python -m grader grade` (grades/feedback/<student>/<assignment>.html):
    copy the page to feedback/<student>/<assignment>/<assignment>.html with the submission's
    timestamp.txt and submission_secret.txt, which is what `nbgrader release_feedback` reads.
    It files each page in the exchange under a hash of the student's submission secret, so
    only that student's `fetch_feedback` (Assignment List: Fetch Feedback) finds it.
    Returns the students whose page was released.
    """
    owner = course.stat().st_uid
    owner_name = pwd.getpwuid(owner).pw_name
    released = []
    for sub in sorted((course / "submitted").glob(f"*/{assignment}")):
        student = sub.parent.name
        page = grades / "feedback" / student / f"{assignment}.html"
        if not page.is_file() or not (sub / "submission_secret.txt").is_file():
            continue
        dest = course / "feedback" / student / assignment
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, dest / f"{assignment}.html")
        for name in ("timestamp.txt", "submission_secret.txt"):
            shutil.copyfile(sub / name, dest / name)
        released.append(student)
    run(["chown", "-R", f"{owner}:{pwd.getpwuid(owner).pw_gid}", str(course / "feedback")])
    done = as_user(owner_name, f"nbgrader release_feedback {assignment}", cwd=str(course), venv=venv)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader release_feedback failed: {done.stdout}{done.stderr}")
    return released


# ------------------------------------------------------------------ the hub process
@dataclass
class Hub:
    proc: subprocess.Popen
    url: str
    state: Path
    log: Path
    started_seconds: float


def start_hub(cls: Class, *, port: int, password: str, venv: Path = DEFAULT_VENV, state: Path | None = None,
              chp: Path = HERE / "node_modules" / ".bin" / "configurable-http-proxy", timeout: float = 60) -> Hub:
    """Start JupyterHub (root, its own session) and wait for /hub/health."""
    if not chp.exists():
        raise SystemExit(f"{chp} is missing: run `make hub-proxy`")
    roles = install_roles(venv)
    state = Path(state or tempfile.mkdtemp(prefix="tc-hub-state-"))
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o700)
    (state / "roster.json").write_text(json.dumps(cls.roster()), encoding="utf-8")
    env = {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(state),
           "TC_HUB_ROSTER": str(state / "roster.json"), "TC_HUB_VENV": str(venv), "TC_HUB_ROLES": str(roles),
           "TC_HUB_CHP": str(chp), "TC_HUB_PORT": str(port), "TC_HUB_PASSWORD": password}
    log = state / "jupyterhub.log"
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(venv / "bin" / "jupyterhub"), "-f", str(HERE / "jupyterhub_config.py")],
                                cwd=state, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(f"{url}/hub/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() - t0 > timeout:
            proc.kill()
            raise RuntimeError("the hub did not start: " + log.read_text(errors="replace")[-3000:])
        time.sleep(0.2)
    return Hub(proc, url, state, log, time.monotonic() - t0)


def stop_hub(hub: Hub, cls: Class, timeout: float = 30) -> None:
    """SIGTERM the hub (it stops every user's server and the proxy), then make sure of it."""
    if hub.proc.poll() is None:
        hub.proc.send_signal(signal.SIGTERM)
        try:
            hub.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(hub.proc.pid, signal.SIGKILL)        # the proxy runs in the hub's session
    except ProcessLookupError:
        pass
    hub.proc.wait()
    for user in cls.users:
        try:
            kill_user(pwd.getpwnam(user).pw_uid)
        except KeyError:
            pass


def teardown(cls: Class) -> None:
    for user in cls.users:
        remove_user(user)
    if cls.exchange.exists():
        shutil.rmtree(cls.exchange)


# ------------------------------------------------------------------ commands
def cmd_trial(args) -> int:
    cls = Class(instructors=["tc-hub-instructor"], students=["tc-hub-student1", "tc-hub-student2"],
                exchange=Path(args.exchange))
    password = args.password or secrets.token_urlsafe(9)
    for user in cls.users:
        create_user(user)
    hub = None
    try:
        setup_course(cls, Path(args.venv))
        hub = start_hub(cls, port=args.port, password=password, venv=Path(args.venv))
        print(f"The course hub is up at {hub.url}/ (started in {hub.started_seconds:.1f} s; log {hub.log})\n"
              f"  instructor: {', '.join(cls.instructors)}   students: {', '.join(cls.students)}\n"
              f"  password (all of them): {password}\n"
              f"  exchange: {cls.exchange}   course id: {cls.course_id}\n"
              f"Ctrl+C stops the hub and removes these users and the exchange.", flush=True)
        try:
            hub.proc.wait()
        except KeyboardInterrupt:
            pass
    finally:
        if hub is not None:
            stop_hub(hub, cls)
            shutil.rmtree(hub.state, ignore_errors=True)
        if not args.keep:
            teardown(cls)
            if cls.exchange.parent != Path("/srv") and not any(cls.exchange.parent.iterdir()):
                cls.exchange.parent.rmdir()
    return 0


def cmd_feedback(args) -> int:
    released = deliver_feedback(Path(args.course).resolve(), Path(args.grades).resolve(), args.assignment,
                                Path(args.venv))
    print(f"feedback released for {len(released)} students: {', '.join(released)}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hub/hubctl.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("trial", help="a trial hub on 127.0.0.1 (make hub)")
    t.add_argument("--port", type=int, default=8800)
    t.add_argument("--venv", default=str(DEFAULT_VENV))
    t.add_argument("--exchange", default="/srv/nbgrader/exchange")
    t.add_argument("--password", default=None, help="the shared password (default: a random one, printed)")
    t.add_argument("--keep", action="store_true", help="keep the users and the exchange after Ctrl+C")
    t.set_defaults(func=cmd_trial)
    f = sub.add_parser("feedback", help="release the course grader's feedback pages through the exchange")
    f.add_argument("--course", required=True, help="the instructor's course folder (with submitted/)")
    f.add_argument("--grades", required=True, help="the grades folder of `python -m grader grade`")
    f.add_argument("--assignment", required=True)
    f.add_argument("--venv", default=str(DEFAULT_VENV))
    f.set_defaults(func=cmd_feedback)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("hubctl.py runs as root (it creates system users and starts their servers)")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
