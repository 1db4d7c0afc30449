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
* the exchange folder, root's, 1777 (nbgrader wants it writable by all; the sticky bit keeps
  anyone from renaming or replacing what is not theirs), on its own filesystem
  (storage.py); the course folder in it, its outbound/ (0755), inbound/ (3733: students
  write and cannot list; sticky) and feedback/ (0711) belong to the instructor, made here
  before any student exists; collect refuses what a student could forge (tc_hub/exchange.py);
* each student's home its own filesystem of a fixed size (storage.py: this kernel has no
  quotas);
* the instructor's course folder ~/course: nbgrader_config.py, source/ (notebooks/),
  release/ (the committed student release, exercises/, with theory.md in every assignment),
  the gradebook with the assignments and students;
* the state folder (0700, root): roster.json, the hub's database and cookie secret, its log
  and pid file, credentials.csv;
* the role folders (hub/roles/) copied root-owned next to the hub's venv, the Formgrader
  MathJax template (hub/formgrader/) into the venv's nbconvert templates, and the package
  hub/tc_hub/ (with grader/trusted/inert.py) into the venv's site-packages.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import storage  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_VENV = Path("/opt/transformer-course-hub")
DEFAULT_STATE = Path("/var/lib/tc-hub")
COURSE_ID = "transformer-first-principles"
HUB_USER_COMMENT = "course hub user"
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
DEFAULT_HOME_MB = int(os.environ.get("TC_HUB_HOME_MB", "2048"))
DEFAULT_EXCHANGE_MB = int(os.environ.get("TC_HUB_EXCHANGE_MB", "4096"))


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
    home_mb: int = DEFAULT_HOME_MB          # each student's home: a filesystem of this size (0: a plain folder)
    exchange_mb: int = DEFAULT_EXCHANGE_MB  # the exchange: one filesystem of this size (0: a plain folder)

    @property
    def users(self) -> list[str]:
        return self.instructors + self.students

    def roster(self) -> dict:
        return {"course_id": self.course_id, "exchange": str(self.exchange), "assignments": self.assignments,
                "instructors": self.instructors, "students": self.students,
                "home_mb": self.home_mb, "exchange_mb": self.exchange_mb}

    @classmethod
    def load(cls, state: Path) -> "Class":
        r = json.loads((state / "roster.json").read_text(encoding="utf-8"))
        return cls(instructors=r["instructors"], students=r["students"], exchange=Path(r["exchange"]),
                   course_id=r["course_id"], assignments=r["assignments"],
                   home_mb=int(r.get("home_mb", 0)), exchange_mb=int(r.get("exchange_mb", 0)))

    def save(self, state: Path) -> None:
        state.mkdir(parents=True, exist_ok=True)
        state.chmod(0o700)
        tmp = state / "roster.json.tmp"
        tmp.write_text(json.dumps(self.roster(), indent=1), encoding="utf-8")
        tmp.replace(state / "roster.json")


PERSON_FIELDS = ("first_name", "last_name", "email")


def read_people(path: Path) -> dict[str, dict]:
    """id -> {first_name, last_name, email} of a class list (CSV with an `id` column, as `make students`).

    Each id must be a valid user name; the other columns are optional (empty when absent).
    """
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows or "id" not in rows[0]:
        raise SystemExit(f"classlist: expected a CSV with an 'id' column, got columns {list(rows[0]) if rows else []} in {path}")
    people = {r["id"].strip(): {k: (r.get(k) or "").strip() for k in PERSON_FIELDS} for r in rows if (r["id"] or "").strip()}
    bad = [i for i in people if not USER_NAME.match(i)]
    if bad:
        raise SystemExit(f"classlist: expected ids usable as user names ({USER_NAME.pattern}), got {bad[:5]} in {path}")
    return people


def read_classlist(path: Path) -> list[str]:
    """The ids of a class list (see read_people)."""
    return list(read_people(path))


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
def roles_dir(venv: Path, state: Path) -> Path:
    """This hub's copy of the role folders: one per state folder (hubs of other checkouts on the host keep theirs)."""
    import hashlib

    key = hashlib.sha256(str(Path(state).resolve()).encode()).hexdigest()[:12]
    return venv / "share" / "tc-hub" / "hubs" / key / "roles"


def install_roles(venv: Path, state: Path = DEFAULT_STATE) -> Path:
    """Root-owned, world-readable copies of hub/roles/ (for this hub), the Formgrader MathJax template,
    the hub's python3 kernelspec and the tc_hub package (with the grader's inert.py) in the venv."""
    roles = roles_dir(venv, state)
    if roles.exists():
        shutil.rmtree(roles)
    shutil.copytree(HERE / "roles", roles)
    for folder in (roles.parent, roles.parent.parent):
        folder.chmod(0o755)
    templates = venv / "share" / "jupyter" / "nbconvert" / "templates" / "formgrade"
    templates.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "formgrader" / "mathjax.html.j2", templates / "mathjax.html.j2")
    # tc_hub (collect, Formgrader's filter, Validate's kernels) with the grader's inert.py, importable in the venv
    # (file by file, each replaced atomically and only when it changed: servers of a running hub import it)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    package = site / "tc_hub"
    package.mkdir(exist_ok=True)
    sources = {p.name: p for p in (HERE / "tc_hub").glob("*.py")} | {"inert.py": ROOT / "grader" / "trusted" / "inert.py"}
    for name, source in sources.items():
        target = package / name
        if not target.exists() or target.read_bytes() != source.read_bytes():
            tmp = package / f".{name}.{os.getpid()}"
            shutil.copyfile(source, tmp)
            os.chmod(tmp, 0o644)
            tmp.replace(target)
    # the kernelspec "python3" the servers find first (their JUPYTER_PATH): tc_hub.kernel, no TCP socket
    kernels = venv / "share" / "tc-hub" / "kernels" / "python3"
    kernels.mkdir(parents=True, exist_ok=True)
    spec = json.dumps({"argv": [str(venv / "bin" / "python"), "-m", "tc_hub.kernel", "-f", "{connection_file}"],
                       "display_name": "Python 3 (ipykernel)", "language": "python",
                       "metadata": {"debugger": False}}, indent=1) + "\n"
    if not (kernels / "kernel.json").exists() or (kernels / "kernel.json").read_text() != spec:
        (kernels / "kernel.json.tmp").write_text(spec)
        (kernels / "kernel.json.tmp").replace(kernels / "kernel.json")
    for path in [roles, *roles.rglob("*"), templates, *templates.iterdir(), package, *package.glob("*.py"),
                 kernels.parent, kernels, kernels / "kernel.json"]:
        os.chown(path, 0, 0)
        path.chmod(0o755 if path.is_dir() else 0o644)
    return roles


COURSE_CONFIG = '''"""nbgrader for the instructor's course folder on the hub (written by hub/hubctl.py)."""

c = get_config()  # noqa: F821

c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.db_url = "sqlite:///" + {db!r}
c.Exchange.root = {exchange!r}
# Collect refuses a submission not owned by the student it names, takes its time from the file
# system, makes its notebooks inert (hub/tc_hub/exchange.py); kernels on IPC sockets (tc_hub/kernels.py).
c.ExchangeFactory.collect = "tc_hub.exchange.CourseExchangeCollect"
c.KernelManager.transport = "ipc"
c.NotebookClient.kernel_manager_class = "tc_hub.kernels.RuntimeDirKernelManager"
# The student release is the repository's exercises/ (tools/course.py release) with theory.md,
# which the notebooks link (../theory.md: the spawner also keeps a copy in each student's home).
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback"]
'''


def protect_sources() -> list[Path]:
    """The checkout's notebooks/ (sources with hidden tests), solutions/ and .git (which holds both): root only."""
    done = []
    for name in ("notebooks", "solutions", ".git"):
        path = ROOT / name
        if path.is_dir():
            path.chmod(0o700)
            done.append(path)
    return done


def setup_exchange(cls: Class, state: Path | None = None) -> None:
    """The exchange: root's, 1777, on its own filesystem; the course folder and its parts the instructor's.

    nbgrader asks for an exchange everyone can write (students create nothing else in it, but
    nbgrader checks); the sticky bit keeps anyone from renaming or deleting what is not
    theirs, so the course folder cannot be moved away or replaced. It is made here, before any
    student can log in, with outbound/ (0755: students read), inbound/ (3733: students write
    and cannot list; setgid as nbgrader makes it, sticky so nobody renames another's entry)
    and feedback/ (0711: reached by name only). A course folder someone else made is refused.
    """
    instructor = pwd.getpwnam(cls.instructors[0])
    if state is not None and cls.exchange_mb:
        storage.ensure_volume(Path(state) / "volumes" / "exchange.img", cls.exchange, cls.exchange_mb, 0, 0, 0o1777)
    cls.exchange.mkdir(parents=True, exist_ok=True)
    os.chown(cls.exchange, 0, 0)
    cls.exchange.chmod(0o1777)
    course = cls.exchange / cls.course_id
    for path, mode in ((course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o3733),
                       (course / "feedback", 0o711)):
        if path.is_symlink() or (path.exists() and path.stat().st_uid != instructor.pw_uid):
            owner = path.lstat().st_uid
            raise SystemExit(f"exchange: {path} exists and belongs to uid {owner}, not the instructor "
                             f"{instructor.pw_name}: move it away and run setup again")
        path.mkdir(exist_ok=True)
        os.chown(path, instructor.pw_uid, instructor.pw_gid)
        path.chmod(mode)


def mount_volumes(cls: Class, state: Path) -> None:
    """Every student's home and the exchange on their filesystems (again after a reboot)."""
    for student in cls.students:
        mount_home(cls, state, student)
    if cls.exchange_mb and cls.instructors:
        setup_exchange(cls, state)


def mount_home(cls: Class, state: Path, user: str) -> None:
    if cls.home_mb:
        entry = pwd.getpwnam(user)
        storage.ensure_volume(Path(state) / "volumes" / f"{user}.img", Path(entry.pw_dir), cls.home_mb,
                              entry.pw_uid, entry.pw_gid, 0o700)


def record_people(cls: Class, people: dict[str, dict]) -> None:
    """The class list's names and e-mails in each instructor's gradebook (Formgrader shows them) and in
    ~/grades/students.csv (the course grader's class list: feedback pages, exports, the push)."""
    from nbgrader.api import Gradebook

    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    for instructor in cls.instructors:
        entry = pwd.getpwnam(instructor)
        course = Path(entry.pw_dir) / "course"
        with Gradebook("sqlite:///" + str(course / "gradebook.db"), cls.course_id) as gb:
            for student, info in people.items():
                if student in cls.students:
                    gb.update_or_create_student(student, **{k: v for k, v in info.items() if v})
        grades = Path(entry.pw_dir) / "grades"
        grades.mkdir(exist_ok=True)
        roster = grades / "students.csv"
        rows = {}
        if roster.exists():
            with open(roster, newline="", encoding="utf-8") as f:
                rows = {r["id"]: r for r in csv.DictReader(f)}
        for student, info in people.items():
            if student in cls.students:
                rows[student] = {"id": student, **{k: info.get(k) or rows.get(student, {}).get(k, "")
                                                   for k in PERSON_FIELDS}}
        with open(roster, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=["id", *PERSON_FIELDS])
            w.writeheader()
            w.writerows(rows[k] for k in sorted(rows))
        give(grades, entry)
        give(course, entry)


def setup_course(cls: Class, venv: Path = DEFAULT_VENV, state: Path | None = None) -> None:
    """Exchange, the instructor's course folder and gradebook (the users exist already).

    Idempotent: an existing course folder keeps its gradebook, submissions and grades; only
    missing assignments and students are added. With ``state``, the exchange is on its own
    filesystem there (Class.exchange_mb).
    """
    setup_exchange(cls, state)
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
            if role == "student":
                mount_home(cls, state, name)
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


def deliver_feedback(course: Path, grades: Path, assignment: str, venv: Path = DEFAULT_VENV,
                     student: str | None = None) -> list[str]:
    """The course grader's feedback pages -> nbgrader's feedback/ layout -> release_feedback.

    For every student with a collected submission (submitted/<student>/<assignment>/) and a
    feedback page from `python -m grader grade` (grades/feedback/<student>/<assignment>.html):
    copy the page to feedback/<student>/<assignment>/<assignment>.html with the submission's
    timestamp.txt and submission_secret.txt, which is what `nbgrader release_feedback` reads.
    It files each page in the exchange under a hash of the student's submission secret, so
    only that student's `fetch_feedback` (Assignment List: Fetch Feedback) finds it.
    With ``student``, only that student's page (Formgrader's Autograde of one submission).
    Returns the students whose page was released.
    """
    owner = course.stat().st_uid
    owner_name = pwd.getpwuid(owner).pw_name
    released = []
    for sub in sorted((course / "submitted").glob(f"{student or '*'}/{assignment}")):
        student_id = sub.parent.name
        page = grades / "feedback" / student_id / f"{assignment}.html"
        if not page.is_file() or not (sub / "submission_secret.txt").is_file():
            continue
        dest = course / "feedback" / student_id / assignment
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, dest / f"{assignment}.html")
        for name in ("timestamp.txt", "submission_secret.txt"):
            shutil.copyfile(sub / name, dest / name)
        released.append(student_id)
    if not released:
        return released
    run(["chown", "-R", f"{owner}:{pwd.getpwuid(owner).pw_gid}", str(course / "feedback")])
    only = f" --student {student}" if student else ""
    done = as_user(owner_name, f"nbgrader release_feedback {assignment}{only}", cwd=str(course), venv=venv)
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


def grader_python_default(venv: Path) -> str:
    """The project's .venv when `make env` completed it (its stamp), else the hub's venv (which has the locks too)."""
    if (ROOT / ".venv" / ".core-installed").exists() and (ROOT / ".venv" / "bin" / "python").exists():
        return str(ROOT / ".venv" / "bin" / "python")
    return str(venv / "bin" / "python")


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
    grader_python = os.environ.get("TC_GRADER_PYTHON") or grader_python_default(venv)
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
    mount_volumes(cls or Class.load(state), state)
    roles = install_roles(venv, state)
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
    """--purge: the users and their homes (their filesystems), the exchange, the state folder."""
    for user in cls.users:
        try:
            home = Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            home = None
        if home is not None:
            kill_user(pwd.getpwnam(user).pw_uid)
            storage.release_volume(home)
        remove_user(user)
    storage.release_volume(cls.exchange)
    if cls.exchange.exists():
        shutil.rmtree(cls.exchange)
    if state is not None:
        for venv in {DEFAULT_VENV, Path(os.environ.get("HUB_VENV", DEFAULT_VENV))}:   # (HUB_VENV: make, the tests)
            shutil.rmtree(roles_dir(venv, state).parent, ignore_errors=True)
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
    cls = Class.load(state) if (state / "roster.json").exists() else Class(
        [], [], Path(args.exchange), home_mb=args.home_mb, exchange_mb=args.exchange_mb)
    people = read_people(Path(args.classlist))
    new = add_users(cls, state, [args.instructor], list(people))
    setup_course(cls, Path(args.venv), state)
    record_people(cls, people)
    print(f"class in {state}: instructors {cls.instructors}, {len(cls.students)} students, "
          f"{len(cls.assignments)} assignments; {len(new)} new users (passwords in {state / 'credentials.csv'})")
    return 0


def cmd_users(args) -> int:
    state = _state(args)
    if not (state / "roster.json").exists():
        raise SystemExit(f"no hub set up in {state}: hubctl.py setup first")
    cls = Class.load(state)
    people = read_people(Path(args.classlist))
    new = add_users(cls, state, [], list(people))
    setup_course(cls, Path(args.venv), state)
    record_people(cls, people)
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
    cls = Class(instructors=[], students=[], exchange=Path(args.exchange), home_mb=args.home_mb,
                exchange_mb=args.exchange_mb)
    new = add_users(cls, state, ["tc-hub-instructor"], ["tc-hub-student1", "tc-hub-student2"])
    hub = None
    try:
        setup_course(cls, Path(args.venv), state)
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

    def sizes(p):
        p.add_argument("--home-mb", type=int, default=DEFAULT_HOME_MB,
                       help="each student's home: a filesystem of this many MiB (0: a plain folder; TC_HUB_HOME_MB)")
        p.add_argument("--exchange-mb", type=int, default=DEFAULT_EXCHANGE_MB,
                       help="the exchange: one filesystem of this many MiB (0: a plain folder; TC_HUB_EXCHANGE_MB)")

    s = common(sub.add_parser("setup", help="users from a class list, the instructor, exchange, course folder"))
    s.add_argument("--classlist", required=True, help="CSV with an id column (as `make students`)")
    s.add_argument("--instructor", required=True)
    s.add_argument("--exchange", default="/srv/nbgrader/exchange")
    sizes(s)
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
    sizes(t)
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
