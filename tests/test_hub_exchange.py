"""The hub's exchange under attack by a curious student (issue 37, findings 3 and 4), through nbgrader itself.

Real system users made by hubctl (an instructor, students A and B, each home on its own
filesystem), the exchange as ``hubctl.setup_course`` makes it, and nbgrader's own commands
run as each user with their role's configuration (what their Lab's Assignment List and
Formgrader run): release, fetch, submit, list, collect. What A tries, as A's uid:

* take the course over: rename or delete the course folder, replace it, write into outbound/,
  create a course folder of their own -- refused by ownership and the sticky bit; a classmate's
  assignment list never shows A's course;
* submit in B's name with a time of their choosing (a folder ``B+assignment+<time>+x`` with a
  stub and a forged timestamp.txt): collect *refuses* it and takes B's own submission;
* backdate their own submission (timestamp.txt, the folder's name, touch -d): the collected
  time is the file system's change time, which A cannot set; a change after submitting makes
  the submission later;
* smuggle a symbolic link into a submission (to the instructor's gradebook): refused;
* delete or rename B's submission in inbound/, or change files in it: the sticky bit and the
  submission folder's mode (0755 here; nbgrader's own submit leaves it 0777) refuse it.

A collected notebook is made inert (tc_hub/exchange.py -> inert.py), and a home filesystem
refuses writes past its size. On a clean clone of HEAD, offline (pip pointed at nothing),
``make students CLASSLIST=late.csv`` on this hub host adds the late student with their name in
the gradebook and leaves no .venv; ``make env`` offline fails and leaves no .venv either. Needs root and the hub's venv (`make hub-env`); about 100 s here under load (each nbgrader
command is a fresh Python).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hub"))
sys.path.insert(0, str(ROOT / "tests"))

import hubctl  # noqa: E402
import xss_payloads  # noqa: E402

HUB_VENV = Path(os.environ.get("HUB_VENV", "/opt/transformer-course-hub"))
A_NAME = "01_attention"
HOME_MB = 64

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exchange_class(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the exchange test needs root (system users); CI runs as root")
    if not (HUB_VENV / "bin" / "nbgrader").exists():
        pytest.skip(f"the hub's venv ({HUB_VENV}) is missing: `make hub-env`")
    base = f"tc-hx-{secrets.token_hex(2)}"
    state = tmp_path_factory.mktemp("hub-state")
    cls = hubctl.Class(instructors=[], students=[], exchange=Path(f"/srv/{base}/exchange"), assignments=[A_NAME],
                       home_mb=HOME_MB, exchange_mb=128)
    try:
        hubctl.add_users(cls, state, [f"{base}-i"], [f"{base}-a", f"{base}-b"])
        hubctl.setup_course(cls, HUB_VENV, state)
        roles = hubctl.install_roles(HUB_VENV, state)
        yield {"cls": cls, "state": state, "roles": roles}
    finally:
        hubctl.stop_hub(state=state, cls=cls)
        hubctl.teardown(hubctl.Class.load(state) if (state / "roster.json").exists() else cls, state)
        shutil.rmtree(f"/srv/{base}", ignore_errors=True)


def as_role(k, user: str, command: str, cwd: str | None = None):
    """A command as ``user`` with their role's Jupyter/nbgrader configuration, as their server has it."""
    cls = k["cls"]
    role = "instructor" if user in cls.instructors else "student"
    return hubctl.as_user(user, command, cwd=cwd, venv=HUB_VENV, env={
        "JUPYTER_CONFIG_PATH": str(k["roles"] / role), "TC_COURSE_ID": cls.course_id,
        "TC_EXCHANGE": str(cls.exchange)})


def ok(done, what):
    assert done.returncode == 0, f"{what}: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    return done.stdout + done.stderr


def refused(done, what):
    assert done.returncode != 0, f"{what} was allowed: {done.stdout[-500:]}"
    return done.stdout + done.stderr


def test_exchange_attacks(exchange_class):
    k = exchange_class
    cls = k["cls"]
    (instructor,), (a, b) = cls.instructors, cls.students
    ihome = Path(pwd.getpwnam(instructor).pw_dir)
    course_dir = ihome / "course"
    ex = cls.exchange
    course = ex / cls.course_id
    iuid = pwd.getpwnam(instructor).pw_uid

    # ---- the layout hubctl makes before any student exists
    assert (ex.stat().st_uid, stat.S_IMODE(ex.stat().st_mode)) == (0, 0o1777)
    assert os.path.ismount(ex)
    for path, mode in ((course, 0o755), (course / "outbound", 0o755), (course / "inbound", 0o3733),
                       (course / "feedback", 0o711)):
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (iuid, mode), (path, oct(st.st_mode))

    ok(as_role(k, instructor, f"nbgrader release_assignment {A_NAME}", cwd=str(course_dir)), "release")
    for s in (a, b):
        ok(as_role(k, s, f"nbgrader fetch_assignment {A_NAME}"), f"{s} fetch")

    # ---- take-over: the course folder and outbound are the instructor's, the root is sticky
    refused(as_role(k, a, f"mv {course} {ex}/moved"), "renaming the course folder")
    refused(as_role(k, a, f"rm -rf {course}"), "deleting the course folder")
    refused(as_role(k, a, f"mkdir {course}/outbound/extra"), "writing into outbound")
    refused(as_role(k, a, f"mv {course}/outbound {course}/o2"), "renaming outbound")
    refused(as_role(k, a, f"chmod 777 {course}"), "chmod of the course folder")
    assert (course / "outbound" / A_NAME / f"{A_NAME}.ipynb").exists()
    # A's own course folder (nbgrader lets everyone create in the root): B's list shows the class's course only
    ok(as_role(k, a, f"mkdir -p {ex}/evil-course/outbound/{A_NAME} && echo x > {ex}/evil-course/outbound/{A_NAME}/x.ipynb"),
       "A's own folder in the root")
    listing = ok(as_role(k, b, "nbgrader list"), "B lists")
    assert cls.course_id in listing and "evil-course" not in listing, listing

    # ---- honest submissions
    for s in (a, b):
        home = Path(pwd.getpwnam(s).pw_dir)
        nb = json.loads((home / A_NAME / f"{A_NAME}.ipynb").read_text())
        nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": f"written by {s}"})
        ok(as_role(k, s, f"cat > {A_NAME}/{A_NAME}.ipynb <<'EOF'\n{json.dumps(nb)}\nEOF"), f"{s} works")
        ok(as_role(k, s, f"nbgrader submit {A_NAME}"), f"{s} submits")
    submitted_at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    inbound = course / "inbound"
    entries = {p.name.split("+")[0]: p for p in inbound.iterdir()}
    assert set(entries) == {a, b}

    # ---- A cannot list inbound, nor remove or rename B's entry though A knows its name (sticky)
    refused(as_role(k, a, f"ls {inbound}"), "listing inbound")
    refused(as_role(k, a, f"rm -rf '{entries[b]}'"), "deleting B's submission")
    refused(as_role(k, a, f"mv '{entries[b]}' '{inbound}/{a}+{A_NAME}+stolen'"), "renaming B's submission")
    assert entries[b].is_dir() and stat.S_IMODE(entries[b].stat().st_mode) == 0o755   # nbgrader's own: 0777

    # ---- forgery in B's name, backdated, a stub; A's own submission backdated; a symbolic link
    forged = f"{b}+{A_NAME}+2099-01-01 00:00:00.000000 UTC+forged"
    stub = (ROOT / "exercises" / A_NAME / f"{A_NAME}.ipynb").read_text()
    ok(as_role(k, a, f"mkdir '{inbound}/{forged}' && cat > '{inbound}/{forged}/{A_NAME}.ipynb' <<'EOF'\n{stub}\nEOF\n"
                     f"echo '2020-01-01 00:00:00.000000 UTC' > '{inbound}/{forged}/timestamp.txt'"), "A forges B's")
    ok(as_role(k, a, f"echo '2020-01-01 00:00:00.000000 UTC' > '{entries[a]}/timestamp.txt' && "
                     f"touch -d 2020-01-01 '{entries[a]}'/* '{entries[a]}'"), "A backdates their own")
    linked = f"{a}+{A_NAME}+2099-01-02 00:00:00.000000 UTC+linked"
    ok(as_role(k, a, f"mkdir '{inbound}/{linked}' && ln -s {course_dir}/gradebook.db '{inbound}/{linked}/{A_NAME}.ipynb'"),
       "A links the gradebook")
    ghost = f"nobody-here+{A_NAME}+2099-01-03 00:00:00.000000 UTC+x"
    ok(as_role(k, a, f"mkdir '{inbound}/{ghost}'"), "A submits for a non-user")

    log = ok(as_role(k, instructor, f"nbgrader collect {A_NAME}", cwd=str(course_dir)), "collect")
    assert f"Refused submission {forged}" in log and f"claims to be submitted by {b} but is owned by {a}" in log, log
    assert f"Refused submission {linked}" in log and "symbolic link" in log, log
    assert f"Refused submission {ghost}" in log, log
    for s in (a, b):
        got = json.loads((course_dir / "submitted" / s / A_NAME / f"{A_NAME}.ipynb").read_text())
        assert got["cells"][-1]["source"] == f"written by {s}", (s, "collected someone else's notebook")
        when = hubctl_time(course_dir / "submitted" / s / A_NAME / "timestamp.txt")
        # the file system's time: A's touch -d and timestamp.txt changed ctimes to the present
        assert submitted_at - dt.timedelta(seconds=30) <= when <= dt.datetime.now(dt.timezone.utc).replace(tzinfo=None), (s, when)
        assert when.year != 2020
    assert not (course_dir / "submitted" / "nobody-here").exists()

    # ---- a change after submitting makes the submission later, never earlier
    before = hubctl_time(course_dir / "submitted" / a / A_NAME / "timestamp.txt")
    time.sleep(1.1)
    ok(as_role(k, a, f"echo ' ' >> '{entries[a]}/{A_NAME}.ipynb'"), "A edits after submitting")
    ok(as_role(k, instructor, f"nbgrader collect --update {A_NAME}", cwd=str(course_dir)), "collect again")
    after = hubctl_time(course_dir / "submitted" / a / A_NAME / "timestamp.txt")
    assert after > before + dt.timedelta(seconds=1), (before, after)


def hubctl_time(path: Path) -> dt.datetime:
    from nbgrader.utils import parse_utc

    return parse_utc(path.read_text().strip())


def test_collected_notebooks_are_inert(exchange_class):
    """B submits every payload (through nbgrader submit); what collect puts in submitted/ holds none of it active."""
    k = exchange_class
    cls = k["cls"]
    (instructor,), (a, b) = cls.instructors, cls.students
    course_dir = Path(pwd.getpwnam(instructor).pw_dir) / "course"
    home = Path(pwd.getpwnam(b).pw_dir)
    if not (home / A_NAME).exists():
        ok(as_role(k, instructor, f"nbgrader release_assignment --force {A_NAME}", cwd=str(course_dir)), "release")
        ok(as_role(k, b, f"nbgrader fetch_assignment {A_NAME}"), "fetch")
    nb = json.loads((home / A_NAME / f"{A_NAME}.ipynb").read_text())
    planted = xss_payloads.plant(nb, "http://127.0.0.1:9", instructor)
    ok(as_role(k, b, f"cat > {A_NAME}/{A_NAME}.ipynb <<'EOF'\n{json.dumps(planted)}\nEOF\nnbgrader submit {A_NAME}"), "submit")
    log = ok(as_role(k, instructor, f"nbgrader collect --update {A_NAME}", cwd=str(course_dir)), "collect")
    assert "made inert" in log, log

    sys.path.insert(0, str(ROOT))
    from grader.trusted import inert

    got = json.loads((course_dir / "submitted" / b / A_NAME / f"{A_NAME}.ipynb").read_text())
    for cell in got["cells"]:
        if cell["cell_type"] == "markdown":
            assert inert.markdown_problems("".join(cell["source"]), cell.get("attachments")) == []
        for o in cell.get("outputs", []):
            assert set(o.get("data", {})) <= {"text/plain", "application/json", "image/png", "image/jpeg", "image/gif"}
    assert "widgets" not in got["metadata"]
    again, changes = inert.inert_notebook(got)
    assert changes == []


def test_a_home_is_a_filesystem_of_its_own(exchange_class):
    """Writing without end fills the student's own home (ENOSPC at its size), not the host's disk."""
    k = exchange_class
    (a, _) = k["cls"].students
    home = Path(pwd.getpwnam(a).pw_dir)
    assert os.path.ismount(home) and stat.S_IMODE(home.stat().st_mode) == 0o700
    assert home.stat().st_uid == pwd.getpwnam(a).pw_uid
    done = as_role(k, a, f"dd if=/dev/zero of=big bs=1M count={2 * HOME_MB} 2>&1; echo rc=$?")
    assert "No space left on device" in done.stdout, done.stdout[-500:]
    size = (home / "big").stat().st_size
    assert size <= HOME_MB * 2**20, size
    (home / "big").unlink()


def test_make_students_on_a_hub_host_works_offline(exchange_class, tmp_path):
    k = exchange_class
    state, cls = k["state"], k["cls"]
    (instructor,) = cls.instructors
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", head.stdout.strip()], check=True)
    late = f"{cls.students[0].rsplit('-', 1)[0]}-late"
    classlist = tmp_path / "late.csv"
    classlist.write_text(f"id,first_name,last_name,email\n{late},Late,Comer,late@example.org\n")
    offline = dict(os.environ, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_EXTRA_INDEX_URL="", PIP_FIND_LINKS="",
                   PIP_CONFIG_FILE=os.devnull, PIP_CONSTRAINT="", PIP_RETRIES="0", PIP_TIMEOUT="2")
    offline.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["make", "-C", str(clone), "students", f"CLASSLIST={classlist}", f"HUB_STATE={state}",
                           f"HUB_VENV={HUB_VENV}"], env=offline, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert not (clone / ".venv").exists(), "make students built (or started) a .venv on a hub host"
    assert late in hubctl.Class.load(state).students and pwd.getpwnam(late)
    from nbgrader.api import Gradebook

    ihome = Path(pwd.getpwnam(instructor).pw_dir)
    with Gradebook(f"sqlite:///{ihome / 'course' / 'gradebook.db'}", cls.course_id) as gb:
        person = gb.find_student(late)
        assert (person.first_name, person.last_name, person.email) == ("Late", "Comer", "late@example.org")
    assert "Late,Comer" in (ihome / "grades" / "students.csv").read_text()
    assert os.path.ismount(Path(pwd.getpwnam(late).pw_dir))

    env = subprocess.run(["make", "-C", str(clone), "env", "PYTHON=/usr/bin/python3"], env=offline,
                         capture_output=True, text=True, timeout=600)
    assert env.returncode != 0 and not (clone / ".venv").exists(), env.stdout[-1500:] + env.stderr[-1500:]
    assert "removed the incomplete" in env.stderr
