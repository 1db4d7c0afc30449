"""Set up, start, stop and clean up the course's hub on one machine (hub/README.md). Runs as root.

    python hub/hubctl.py setup --classlist CSV --instructor NAME [--state /var/lib/tc-hub]
                         the instructor and one system user per class-list id (own password each,
                         written once to STATE/credentials.csv, 0600), the exchange, the
                         instructor's course folder with every assignment, the gradebook
    python hub/hubctl.py users --classlist CSV [--state DIR]    (`make students` on a hub host)
                         the class list's new students: users, passwords, gradebook, roster
    python hub/hubctl.py start [--state DIR] [--port 8800]       the hub in its own session (a
                         hang-up does not reach it); returns when /hub/health answers
                         [--bind-url https://0.0.0.0:443 --ssl-cert PEM --ssl-key PEM --public-url URL]
                         the class's address, over TLS; [--auth oidc [--oidc JSON]] the
                         university's OpenID Connect login instead of passwords (hub/auth/oauth.py)
    python hub/hubctl.py serve [--state DIR]                     the same in the foreground (systemd)
    python hub/hubctl.py stop [--state DIR] [--purge]            the hub, its services, every
                         server and every process of the class's users; the users, homes,
                         exchange and state stay (the next start finds them) unless --purge
    python hub/hubctl.py status [--state DIR]
    python hub/hubctl.py trial [--port 8800]                     `make hub`: an instructor and two
                         students with their own passwords (printed); Ctrl+C stops and purges
    python hub/hubctl.py feedback --course DIR --grades DIR --assignment A

Only the standard library: tests import it to build their own class. What a class is made of:

* system users (``useradd -m``, comment ``course hub user``), homes 0700: nobody reads
  another's work, nor the instructor's source/ (the solutions) and gradebook; their passwords
  are checked by PAM (the hub's authenticator);
* the exchange folder, 0777 as nbgrader's documentation asks (students write their
  submissions into inbound/, nbgrader keeps feedback/ unlistable);
* the instructor's course folder ~/course: nbgrader_config.py, source/ (notebooks/),
  release/ (the committed student release, exercises/, with theory.md in every assignment),
  the gradebook with the assignments and students;
* the state folder (0700, root): roster.json, the hub's database and cookie secret, its log
  and pid file, credentials.csv;
* the role folders (hub/roles/) copied root-owned next to the hub's venv, and the
  Formgrader MathJax template (hub/formgrader/) into the venv's nbconvert templates.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import ssl
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
DEFAULT_STATE = Path("/var/lib/tc-hub")
COURSE_ID = "transformer-first-principles"
HUB_USER_COMMENT = "course hub user"
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


def all_assignments() -> list[str]:
    """Every notebook of the course's student release (exercises/NN_name/NN_name.ipynb)."""
    return sorted(p.parent.name for p in (ROOT / "exercises").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb")
                  if p.stem == p.parent.name)


@dataclass
class Class:
    """Who is on the hub and where the course's exchange lives."""

    instructors: list[str]
    students: list[str]
    exchange: Path
    course_id: str = COURSE_ID
    assignments: list[str] = field(default_factory=all_assignments)

    @property
    def users(self) -> list[str]:
        return self.instructors + self.students

    def roster(self) -> dict:
        return {"course_id": self.course_id, "exchange": str(self.exchange), "assignments": self.assignments,
                "instructors": self.instructors, "students": self.students}

    @classmethod
    def load(cls, state: Path) -> "Class":
        r = json.loads((state / "roster.json").read_text(encoding="utf-8"))
        return cls(instructors=r["instructors"], students=r["students"], exchange=Path(r["exchange"]),
                   course_id=r["course_id"], assignments=r["assignments"])

    def save(self, state: Path) -> None:
        state.mkdir(parents=True, exist_ok=True)
        state.chmod(0o700)
        tmp = state / "roster.json.tmp"
        tmp.write_text(json.dumps(self.roster(), indent=1), encoding="utf-8")
        tmp.replace(state / "roster.json")


def read_classlist(path: Path) -> list[str]:
    """The ids of a class list (CSV with an `id` column, as `make students`); each a valid user name."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or "id" not in rows[0]:
        raise SystemExit(f"classlist: expected a CSV with an 'id' column, got columns {list(rows[0]) if rows else []} in {path}")
    ids = [r["id"].strip() for r in rows if r["id"].strip()]
    bad = [i for i in ids if not USER_NAME.match(i)]
    if bad:
        raise SystemExit(f"classlist: expected ids usable as user names ({USER_NAME.pattern}), got {bad[:5]} in {path}")
    return ids


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
def create_user(name: str, password: str | None = None, exist_ok: bool = False) -> bool:
    """A system user with a 0700 home and (if given) a password for PAM; False if it was there.

    An existing user is only accepted (``exist_ok``) when hubctl made it (its comment): a
    class-list id that names a system account (root, www-data) is refused.
    """
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        pass
    else:
        if exist_ok and entry.pw_gecos == HUB_USER_COMMENT:
            return False
        raise SystemExit(f"user {name} exists already and is not a course hub user: refusing to use it")
    run(["useradd", "--create-home", "--shell", "/bin/bash", "--comment", HUB_USER_COMMENT, name])
    os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
    if password is not None:
        set_password(name, password)
    return True


def set_password(name: str, password: str) -> None:
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", check=True, capture_output=True, text=True)


def give(path: Path, entry: pwd.struct_passwd, mode: int | None = 0o700) -> None:
    """``path`` (recursively) to the user; the top folder ``mode``."""
    if path.exists():
        run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(path)])
        if mode is not None:
            path.chmod(mode)


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
# The student release is the repository's exercises/ (tools/course.py release) with theory.md,
# which the notebooks link (../theory.md: the spawner also keeps a copy in each student's home).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]
'''


def protect_sources() -> list[Path]:
    """The checkout's notebooks/ (sources with hidden tests) and solutions/: root only (0700)."""
    done = []
    for name in ("notebooks", "solutions"):
        path = ROOT / name
        if path.is_dir():
            path.chmod(0o700)
            done.append(path)
    return done


def setup_course(cls: Class, venv: Path = DEFAULT_VENV) -> None:
    """Exchange, the instructor's course folder and gradebook (the users exist already).

    Idempotent: an existing course folder keeps its gradebook, submissions and grades; only
    missing assignments and students are added.
    """
    cls.exchange.mkdir(parents=True, exist_ok=True)
    cls.exchange.chmod(0o777)
    protect_sources()
    for instructor in cls.instructors:
        entry = pwd.getpwnam(instructor)
        course = Path(entry.pw_dir) / "course"
        for name in cls.assignments:
            if not (course / "source" / name).exists():
                shutil.copytree(ROOT / "notebooks" / name, course / "source" / name)
            if not (course / "release" / name).exists():
                shutil.copytree(ROOT / "exercises" / name, course / "release" / name)
                shutil.copyfile(ROOT / "exercises" / "theory.md", course / "release" / name / "theory.md")
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
        give(course, entry, mode=0o700)


def add_users(cls: Class, state: Path, instructors: list[str], students: list[str]) -> list[tuple[str, str, str]]:
    """Create the users that are not there yet, each with their own password; record them.

    Returns (user, role, password) of the new ones, appended to STATE/credentials.csv (0600,
    root): the instructor hands each person theirs (or the host's own login takes over: PAM
    checks whatever password the user sets with `passwd`).
    """
    new = []
    for role, names in (("instructor", instructors), ("student", students)):
        for name in names:
            password = secrets.token_urlsafe(12)
            if create_user(name, password, exist_ok=True):
                new.append((name, role, password))
            target = cls.instructors if role == "instructor" else cls.students
            if name not in target:
                target.append(name)
    overlap = set(cls.instructors) & set(cls.students)
    if overlap:
        raise SystemExit(f"classlist: {sorted(overlap)} are instructors: an instructor cannot also be a student")
    cls.save(state)
    creds = state / "credentials.csv"
    fresh = not creds.exists()
    with open(creds, "a", newline="", encoding="utf-8") as f:
        os.chmod(creds, 0o600)
        w = csv.writer(f)
        if fresh:
            w.writerow(["user", "role", "password"])
        w.writerows(new)
    return new


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
    pid: int
    url: str
    state: Path
    log: Path
    started_seconds: float
    proc: subprocess.Popen | None = None

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return _alive(self.pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (by parent links in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


# ------------------------------------------------------------------ how the class reaches the hub, and logs in
ACCESS_VARIABLES = ("TC_HUB_BIND_URL", "TC_HUB_SSL_CERT", "TC_HUB_SSL_KEY", "TC_HUB_PUBLIC_URL", "TC_HUB_OIDC")
AUTH_CONFIGS = {"password": None, "oidc": HERE / "auth" / "oauth.py"}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def access_env(state: Path, bind_url: str | None = None, ssl_cert: str | None = None, ssl_key: str | None = None,
               public_url: str | None = None, auth: str = "password", oidc: str | None = None) -> dict:
    """The hub's environment for its address and login (hub/README.md, "Students reach it").

    ``bind_url``: where the proxy listens for the class (default: 127.0.0.1 only). Any other
    address needs ``ssl_cert`` and ``ssl_key`` (the proxy terminates TLS): passwords never
    cross a network in clear. The key must be root's alone. ``public_url``: the address
    students type (default: the bind URL, when it names one address). ``auth``: "password"
    (PAM, each person's own) or "oidc" (hub/auth/oauth.py; settings in ``oidc``, default
    STATE/oidc.json).
    """
    from urllib.parse import urlsplit

    env: dict[str, str] = {}
    if bind_url:
        parts = urlsplit(bind_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
            raise SystemExit(f"--bind-url: expected http(s)://ADDRESS:PORT, got {bind_url!r}")
        if bool(ssl_cert) != bool(ssl_key):
            raise SystemExit(f"--ssl-cert/--ssl-key: expected both or neither, got cert {ssl_cert!r}, key {ssl_key!r}")
        if parts.hostname not in LOOPBACK and not ssl_cert:
            raise SystemExit(f"--bind-url {bind_url}: a class reaches the hub over TLS only: give --ssl-cert and "
                             "--ssl-key (or keep 127.0.0.1 behind a reverse proxy that terminates TLS)")
        if ssl_cert:
            for label, path in (("--ssl-cert", ssl_cert), ("--ssl-key", ssl_key)):
                if not Path(path).is_file():
                    raise SystemExit(f"{label}: expected a PEM file, got {path!r} (no such file)")
            st = Path(ssl_key).stat()
            if st.st_uid != 0 or st.st_mode & 0o077:
                raise SystemExit(f"--ssl-key {ssl_key}: expected a key only root can read (chown root; chmod 600), "
                                 f"got uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}")
            env.update(TC_HUB_SSL_CERT=str(Path(ssl_cert).resolve()), TC_HUB_SSL_KEY=str(Path(ssl_key).resolve()))
        scheme = "https" if ssl_cert else "http"
        env["TC_HUB_BIND_URL"] = f"{scheme}://{parts.netloc}"
        if not public_url and parts.hostname not in ("0.0.0.0", "::"):
            public_url = f"{scheme}://{parts.netloc}/"
    if public_url:
        env["TC_HUB_PUBLIC_URL"] = public_url
    if auth not in AUTH_CONFIGS:
        raise SystemExit(f"--auth: expected one of {sorted(AUTH_CONFIGS)}, got {auth!r}")
    if AUTH_CONFIGS[auth]:
        env["TC_HUB_AUTH_CONFIG"] = str(AUTH_CONFIGS[auth])
        env["TC_HUB_OIDC"] = str(Path(oidc).resolve() if oidc else Path(state) / "oidc.json")
    return env


def probe_url(env: dict, port: int) -> str:
    """Where the class's requests arrive (the proxy), for the health check from this machine."""
    from urllib.parse import urlsplit

    bind = env.get("TC_HUB_BIND_URL")
    if not bind:
        return f"http://127.0.0.1:{port}"
    parts = urlsplit(bind)
    host = "127.0.0.1" if parts.hostname in ("0.0.0.0", "::") else parts.netloc.rsplit(":", 1)[0]
    return f"{parts.scheme}://{host}:{parts.port}"


def hub_env(state: Path, port: int, venv: Path, roles: Path, chp: Path, extra: dict | None = None) -> dict:
    grader_python = os.environ.get("TC_GRADER_PYTHON") or (
        str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists()
        else str(venv / "bin" / "python"))
    env = {"PATH": f"{venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": str(state),
           "TC_HUB_ROSTER": str(state / "roster.json"), "TC_HUB_VENV": str(venv), "TC_HUB_ROLES": str(roles),
           "TC_HUB_CHP": str(chp), "TC_HUB_PORT": str(port), "TC_GRADER_PYTHON": grader_python}
    for name in ("TC_HUB_MEMORY_MB", "TC_HUB_PROCESSES", "TC_HUB_CPU_SHARE", "TC_HUB_CULL_TIMEOUT",
                 "TC_HUB_CULL_EVERY", "TC_HUB_SPAWN_LIMIT", "COURSE_GRADING_SEED", "TC_GRADER_CELL_TIMEOUT",
                 "TC_HUB_AUTH_CONFIG", *ACCESS_VARIABLES):
        if name in os.environ:
            env[name] = os.environ[name]
    return {**env, **(extra or {})}


def start_hub(cls: Class | None = None, *, port: int, venv: Path = DEFAULT_VENV, state: Path = DEFAULT_STATE,
              chp: Path = HERE / "node_modules" / ".bin" / "configurable-http-proxy", timeout: float = 90,
              extra_env: dict | None = None) -> Hub:
    """Start JupyterHub (root) in its own session, detached from any terminal; wait for /hub/health.

    The state folder holds the database, the cookie secret, the pid file and the log: a restart
    finds its users, their sessions and tokens. ``cls`` (if given) is saved as the roster.
    """
    if not chp.exists():
        raise SystemExit(f"{chp} is missing: run `make hub-proxy`")
    state = Path(state)
    if cls is not None:
        cls.save(state)
    pidfile = state / "hub.pid"
    if pidfile.exists() and _alive(int(pidfile.read_text())):
        raise SystemExit(f"a hub runs already from {state} (pid {pidfile.read_text().strip()}): hubctl.py stop first")
    roles = install_roles(venv)
    env = hub_env(state, port, venv, roles, chp, extra_env)
    log = state / "jupyterhub.log"
    t0 = time.monotonic()
    cmd = [str(venv / "bin" / "jupyterhub"), "-f", str(HERE / "jupyterhub_config.py")]
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=state, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True,    # no controlling terminal: a hang-up never reaches it
                                preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    pidfile.write_text(str(proc.pid))
    url = probe_url(env, port)
    # A liveness probe of our own child on our own address: it reads no secret and sends none, so
    # it does not check the certificate (a CA-issued one names the public host, not this address).
    probe = ssl._create_unverified_context() if url.startswith("https:") else None
    while True:
        try:
            with urllib.request.urlopen(f"{url}/hub/health", timeout=2, context=probe) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() - t0 > timeout:
            proc.kill()
            raise RuntimeError("the hub did not start: " + log.read_text(errors="replace")[-3000:])
        time.sleep(0.2)
    return Hub(proc.pid, url, state, log, time.monotonic() - t0, proc)


def stop_hub(hub: Hub | Path | None = None, cls: Class | None = None, timeout: float = 30,
             state: Path | None = None) -> dict:
    """Stop the hub of a state folder: SIGTERM (it stops every server and service), then make sure.

    Whatever survives -- a process below the hub, any process of the class's users -- is
    killed; the users' cgroups are removed. Works from the pid file, so from another shell
    after the one that started the hub hung up. Returns what was found and done.
    """
    import limits

    if isinstance(hub, Hub):
        state, pid = hub.state, hub.pid
    else:
        state = Path(hub or state or DEFAULT_STATE)
        pidfile = state / "hub.pid"
        pid = int(pidfile.read_text()) if pidfile.exists() else None
    cls = cls or (Class.load(state) if (state / "roster.json").exists() else None)
    report = {"hub_pid": pid, "was_running": bool(pid and _alive(pid)), "killed": []}
    if pid and _alive(pid):
        below = descendants(pid)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        for p in [pid, *below]:
            if _alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                    report["killed"].append(p)
                except ProcessLookupError:
                    pass
    if isinstance(hub, Hub) and hub.proc is not None:
        hub.proc.wait()
    for user in (cls.users if cls else []):
        try:
            uid = pwd.getpwnam(user).pw_uid
        except KeyError:
            continue
        left = processes_of(uid)
        if left:
            report["killed"] += left
            kill_user(uid)
        limits.remove(user)
    (state / "hub.pid").unlink(missing_ok=True)
    return report


def teardown(cls: Class, state: Path | None = None) -> None:
    """--purge: the users and their homes, the exchange, the state folder."""
    for user in cls.users:
        remove_user(user)
    if cls.exchange.exists():
        shutil.rmtree(cls.exchange)
    if state is not None:
        shutil.rmtree(state, ignore_errors=True)


def free_port_block(n: int = 4) -> int:
    """A port p with p .. p+n-1 free on 127.0.0.1 (the hub, its API, the proxy's API, the grader service)."""
    import socket

    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        socks = []
        try:
            for k in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no block of free ports")


# ------------------------------------------------------------------ commands
def _state(args) -> Path:
    return Path(args.state).resolve()


def _access(args, state: Path) -> dict:
    return access_env(state, bind_url=args.bind_url, ssl_cert=args.ssl_cert, ssl_key=args.ssl_key,
                      public_url=args.public_url, auth=args.auth, oidc=args.oidc)


def cmd_setup(args) -> int:
    state = _state(args)
    cls = Class.load(state) if (state / "roster.json").exists() else Class([], [], Path(args.exchange))
    new = add_users(cls, state, [args.instructor], read_classlist(Path(args.classlist)))
    setup_course(cls, Path(args.venv))
    print(f"class in {state}: instructors {cls.instructors}, {len(cls.students)} students, "
          f"{len(cls.assignments)} assignments; {len(new)} new users (passwords in {state / 'credentials.csv'})")
    return 0


def cmd_users(args) -> int:
    state = _state(args)
    if not (state / "roster.json").exists():
        raise SystemExit(f"no hub set up in {state}: hubctl.py setup first")
    cls = Class.load(state)
    new = add_users(cls, state, [], read_classlist(Path(args.classlist)))
    setup_course(cls, Path(args.venv))
    print(f"{len(new)} new hub users ({', '.join(u for u, _, _ in new) or 'none'}); "
          f"passwords in {state / 'credentials.csv'}; a running hub reads the roster at each login")
    return 0


def cmd_start(args) -> int:
    state = _state(args)
    Class.load(state)                 # a set-up class is required
    hub = start_hub(port=args.port, venv=Path(args.venv), state=state, extra_env=_access(args, state))
    print(f"hub up at {hub.url}/ in {hub.started_seconds:.1f} s (pid {hub.pid}, state {state}, log {hub.log})")
    return 0


def cmd_serve(args) -> int:
    """The foreground form for systemd: start, then wait; SIGTERM/SIGINT stop it cleanly."""
    state = _state(args)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(1))
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    hub = start_hub(port=args.port, venv=Path(args.venv), state=state, extra_env=_access(args, state))
    print(f"hub up at {hub.url}/ in {hub.started_seconds:.1f} s (pid {hub.pid})", flush=True)
    while hub.alive() and not stopping:
        time.sleep(0.5)
    stop_hub(hub)
    return 0 if stopping else 1


def cmd_stop(args) -> int:
    state = _state(args)
    report = stop_hub(state=state)
    print(f"hub stopped (was running: {report['was_running']}; killed afterwards: {len(report['killed'])} processes)")
    if args.purge and (state / "roster.json").exists():
        cls = Class.load(state)
        teardown(cls, state)
        print(f"purged: users {cls.users}, exchange {cls.exchange}, state {state}")
    return 0


def cmd_status(args) -> int:
    state = _state(args)
    pidfile = state / "hub.pid"
    pid = int(pidfile.read_text()) if pidfile.exists() else None
    print(json.dumps({"state": str(state), "running": bool(pid and _alive(pid)), "pid": pid,
                      **(Class.load(state).roster() if (state / "roster.json").exists() else {})}, indent=1))
    return 0


def cmd_trial(args) -> int:
    state = Path(tempfile.mkdtemp(prefix="tc-hub-trial-"))
    cls = Class(instructors=[], students=[], exchange=Path(args.exchange))
    new = add_users(cls, state, ["tc-hub-instructor"], ["tc-hub-student1", "tc-hub-student2"])
    hub = None
    try:
        setup_course(cls, Path(args.venv))
        hub = start_hub(cls, port=args.port, venv=Path(args.venv), state=state)
        print(f"The course hub is up at {hub.url}/ (started in {hub.started_seconds:.1f} s; log {hub.log})\n"
              + "".join(f"  {role:10s} {user:18s} password {pw}\n" for user, role, pw in new)
              + f"  exchange: {cls.exchange}   course id: {cls.course_id}   state: {state}\n"
              "Ctrl+C stops the hub and removes these users, the exchange and the state.", flush=True)
        try:
            while hub.alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    finally:
        if hub is not None:
            stop_hub(hub, cls)
        if not args.keep:
            teardown(cls, state)
            parent = cls.exchange.parent
            if parent != Path("/srv") and parent.exists() and not any(parent.iterdir()):
                parent.rmdir()
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

    def common(p, port=False):
        p.add_argument("--state", default=str(DEFAULT_STATE), help=f"the hub's state folder (default {DEFAULT_STATE})")
        p.add_argument("--venv", default=str(DEFAULT_VENV))
        if port:
            p.add_argument("--port", type=int, default=8800, help="127.0.0.1:PORT (and the next three)")
            p.add_argument("--bind-url", help="where the class reaches the hub, e.g. https://0.0.0.0:443 "
                           "(default 127.0.0.1:PORT); any address but loopback needs --ssl-cert and --ssl-key")
            p.add_argument("--ssl-cert", help="the TLS certificate (PEM, with its chain) of the public address")
            p.add_argument("--ssl-key", help="its private key (PEM; root's, mode 600)")
            p.add_argument("--public-url", help="the address students type, e.g. https://hub.uni.example/ "
                           "(default: the bind URL when it names one address)")
            p.add_argument("--auth", choices=sorted(AUTH_CONFIGS), default="password",
                           help="password: each person's own (PAM; default); oidc: the university's OpenID "
                           "Connect login (hub/auth/oauth.py)")
            p.add_argument("--oidc", help="the OpenID Connect settings (JSON, root's, mode 600; default STATE/oidc.json)")
        return p

    s = common(sub.add_parser("setup", help="users from a class list, the instructor, exchange, course folder"))
    s.add_argument("--classlist", required=True, help="CSV with an id column (as `make students`)")
    s.add_argument("--instructor", required=True)
    s.add_argument("--exchange", default="/srv/nbgrader/exchange")
    s.set_defaults(func=cmd_setup)
    u = common(sub.add_parser("users", help="add the class list's new students to a set-up hub"))
    u.add_argument("--classlist", required=True)
    u.set_defaults(func=cmd_users)
    common(sub.add_parser("start", help="start the hub detached (survives a hang-up)"), port=True).set_defaults(func=cmd_start)
    common(sub.add_parser("serve", help="start the hub and wait (systemd's ExecStart)"), port=True).set_defaults(func=cmd_serve)
    st = common(sub.add_parser("stop", help="stop the hub, its servers and the users' processes"))
    st.add_argument("--purge", action="store_true", help="also remove the users (and homes), the exchange, the state")
    st.set_defaults(func=cmd_stop)
    common(sub.add_parser("status", help="is the hub running; the roster")).set_defaults(func=cmd_status)
    t = sub.add_parser("trial", help="a trial hub on 127.0.0.1 (make hub)")
    t.add_argument("--port", type=int, default=8800)
    t.add_argument("--venv", default=str(DEFAULT_VENV))
    t.add_argument("--exchange", default="/srv/nbgrader/exchange")
    t.add_argument("--keep", action="store_true", help="keep the users, the exchange and the state after Ctrl+C")
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
