"""The hub as a service for a class, without a browser (in `make test`; the browser loop is `make hub-test`).

A real JupyterHub (hub/jupyterhub_config.py) from a fixed state folder, with an instructor and
two students made from a class list (hub/hubctl.py add_users: system users, their own
passwords, PAM), limits per student (hub/limits.py) and the grader service. Tried over HTTP on
127.0.0.1, as the people would:

* a student logs in with their password; with it they cannot log in as the instructor, nor
  with a wrong one; the instructor reaches the grader service, a student gets 403;
* the student's server runs inside their cgroup with the limits; from the student's own kernel
  (Jupyter's kernel API, as the Lab does) allocating past the memory limit kills the kernel, and
  starting processes past the process limit fails; the kernel runs the course's Python, with
  nbgrader on PATH;
* as the student's uid: the checkout's notebooks/ and solutions/, the instructor's course folder
  (sources, gradebook) and the other student's home are refused;
* kernels and servers of one student cannot be read by another (issue 37, finding 2): B's
  kernel prints a secret in a loop while A, as A's uid, does what the real attacker did --
  finds B's listening ports in /proc/net/tcp and B's sockets, subscribes to each with zmq --
  and receives nothing: B's kernels (also Validate's) listen on no TCP port, their IPC sockets
  are in B's private /tmp; no server logs "Kernel is running over TCP without encryption";
* each server has its own /tmp and /dev/shm: what A writes there is not on the host's, not in
  B's, and gone when A's server stops (with every process A left behind); A's home is a
  filesystem of its own size (ENOSPC past it);
* a hang-up (SIGHUP to the hub's process group) does not stop the hub; `stop` leaves no process
  of the class and keeps users, homes, exchange, database and cookie secret: after `start` the
  student's session cookie is still valid and their work is there; `stop --purge` removes all.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hub"))

import hubctl  # noqa: E402
import limits  # noqa: E402

HUB_VENV = Path(os.environ.get("HUB_VENV", "/opt/transformer-course-hub"))
CHP = ROOT / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
MEMORY_MB, PROCESSES = 700, 150
HOME_MB = 200
SECRET = "classmate-secret-7f3a"

# What the attacker ran (issue 37): every listening TCP port of the victim's uid, every socket file
# the attacker can find of theirs, a zmq SUB on each, for a few seconds. Prints what arrived.
SNOOP = r"""
import glob, json, os, sys, time, zmq
victim = int(sys.argv[1]); seconds = float(sys.argv[2])

def endpoints():
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[7]) == victim:
                found.append("tcp://127.0.0.1:%d" % int(f[1].rsplit(":", 1)[1], 16))
    for pattern in ("/tmp/jupyter-runtime/*-ipc-*", "/tmp/*/kernel-*-ipc-*", "/home/*/.local/share/jupyter/runtime/*-ipc-*",
                    "/home/*/*/kernel-ipc-*", "/dev/shm/*"):
        found += ["ipc://" + p for p in glob.glob(pattern)]
    return found

ctx, poller, tried, got = zmq.Context(), zmq.Poller(), set(), []
end = time.monotonic() + seconds
while time.monotonic() < end:
    for e in set(endpoints()) - tried:          # the victim's kernels come and go: look again every round
        s = ctx.socket(zmq.SUB); s.setsockopt(zmq.SUBSCRIBE, b""); s.setsockopt(zmq.LINGER, 0)
        s.connect(e); poller.register(s, zmq.POLLIN); tried.add(e)
    for s, _ in poller.poll(500):
        got.append(b"".join(s.recv_multipart()).decode("utf-8", "replace"))
ports = sorted(int(e.rsplit(":", 1)[1]) for e in tried if e.startswith("tcp"))
print(json.dumps({"ports": ports, "paths": sorted(e for e in tried if e.startswith("ipc")), "messages": len(got),
                  "text": chr(10).join(got)[-3000:]}))
"""

pytestmark = pytest.mark.slow


free_port_block = hubctl.free_port_block


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the hub needs root (system users, PAM, cgroups); CI runs as root")
    if not (HUB_VENV / "bin" / "jupyterhub").exists() or not CHP.exists():
        pytest.skip(f"the hub's venv ({HUB_VENV}) or proxy ({CHP}) is missing: `make hub-env hub-proxy`")
    pytest.importorskip("requests")
    base = f"tc-hs-{secrets.token_hex(2)}"
    state = tmp_path_factory.mktemp("hub-state")
    cls = hubctl.Class(instructors=[], students=[], exchange=Path(f"/srv/{base}/exchange"),
                       assignments=["01_attention"], home_mb=HOME_MB, exchange_mb=0)
    try:
        new = hubctl.add_users(cls, state, [f"{base}-i"], [f"{base}-a", f"{base}-b"])
        hubctl.setup_course(cls, HUB_VENV, state)
        yield {"cls": cls, "state": state, "passwords": {u: p for u, _, p in new}, "port": free_port_block()}
    finally:
        hubctl.stop_hub(state=state, cls=cls)
        hubctl.teardown(hubctl.Class.load(state) if (state / "roster.json").exists() else cls, state)
        shutil.rmtree(f"/srv/{base}", ignore_errors=True)


def start(k):
    return hubctl.start_hub(port=k["port"], venv=HUB_VENV, state=k["state"],
                            extra_env={"TC_HUB_MEMORY_MB": str(MEMORY_MB), "TC_HUB_PROCESSES": str(PROCESSES),
                                       "TC_HUB_CPU_SHARE": "50"})


def login(url, user, password):
    """A browser-like session: the login form with its XSRF token. Returns (session, response)."""
    import requests

    s = requests.Session()
    s.get(f"{url}/hub/login")
    r = s.post(f"{url}/hub/login", data={"username": user, "password": password, "_xsrf": s.cookies.get("_xsrf")},
               allow_redirects=False)
    return s, r


def run_in_kernel(session, url, user, code, timeout=120) -> dict:
    """Execute code in a new kernel of the user's server over Jupyter's kernel API (as the Lab does)."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    base = f"{url}/user/{user}"
    session.get(f"{base}/lab")                  # completes the server's OAuth: its cookie and XSRF token
    xsrf = session.cookies.get("_xsrf", path=f"/user/{user}/")
    r = session.post(f"{base}/api/kernels", json={"name": "python3"}, headers={"X-XSRFToken": xsrf})
    assert r.status_code == 201, (r.status_code, r.text[:300])
    kid = r.json()["id"]
    cookie = "; ".join(f"{c.name}={c.value}" for c in session.cookies if f"/user/{user}/".startswith(c.path))
    msg_id = uuid.uuid4().hex
    out = {"stdout": "", "error": None, "dead": False}

    async def talk():
        ws = await websocket_connect(HTTPRequest(f"ws{base[4:]}/api/kernels/{kid}/channels",
                                                 headers={"Cookie": cookie, "X-XSRFToken": xsrf}))
        await ws.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": user, "session": uuid.uuid4().hex,
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.read_message(), timeout=deadline - time.monotonic())
            if raw is None:
                out["dead"] = True
                return
            m = json.loads(raw)
            kind = m["msg_type"]
            if kind == "status" and m["content"]["execution_state"] in ("restarting", "dead"):
                out["dead"] = True
                return
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if kind == "stream":
                out["stdout"] += m["content"]["text"]
            elif kind == "error":
                out["error"] = m["content"]["ename"] + ": " + m["content"]["evalue"]
            elif kind == "status" and m["content"]["execution_state"] == "idle":
                return
        raise TimeoutError(f"kernel did not answer in {timeout} s: {out}")

    try:
        asyncio.run(talk())
    finally:
        session.delete(f"{base}/api/kernels/{kid}", headers={"X-XSRFToken": xsrf})
    return out


def wait_server(session, url, user, timeout=300):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = session.get(f"{url}/hub/api/user", headers={"Referer": f"{url}/hub/"})
        if r.status_code == 200 and r.json().get("servers", {}).get("", {}).get("ready"):
            return time.monotonic() - t0
        time.sleep(0.5)
    raise TimeoutError(f"{user}'s server not ready in {timeout} s")


def test_hub_service(klass):
    cls, state, pw = klass["cls"], klass["state"], klass["passwords"]
    (instructor,), (a, b) = cls.instructors, cls.students
    t0 = time.monotonic()
    hub = start(klass)
    print(f"[hub service] hub up in {hub.started_seconds:.1f} s; limits: {limits.mode()}")

    # ---- one identity per person (PAM)
    _, r = login(hub.url, a, pw[a] + "x")
    assert r.status_code == 403, ("a wrong password", r.status_code)
    _, r = login(hub.url, instructor, pw[a])
    assert r.status_code == 403, ("a student's password for the instructor", r.status_code)
    sa, r = login(hub.url, a, pw[a])
    assert r.status_code == 302, ("the student's own password", r.status_code, r.text[:300])
    si, r = login(hub.url, instructor, pw[instructor])
    assert r.status_code == 302
    assert si.get(f"{hub.url}/services/grader/").status_code == 200
    assert "Grade (sandboxed)" in si.get(f"{hub.url}/services/grader/").text
    assert sa.get(f"{hub.url}/services/grader/").status_code == 403, "students do not reach the grader"
    creds = state / "credentials.csv"
    assert creds.stat().st_mode & 0o777 == 0o600 and (state.stat().st_mode & 0o077) == 0

    # ---- the student's server in their cgroup; limits tried from their own kernel
    sa.get(f"{hub.url}/hub/spawn/{a}")
    spawn = wait_server(sa, hub.url, a)
    uid = pwd.getpwnam(a).pw_uid
    servers = [p for p in hubctl.processes_of(uid) if b"jupyterhub-singleuser" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert servers, "no server process of the student"
    use = limits.usage(a)
    print(f"[hub service] {a}'s server ready in {spawn:.1f} s; cgroup {use}")
    if use["mode"] != "rlimit":
        assert set(limits.members(a)) >= set(servers)
        assert use["memory_limit"] == MEMORY_MB * 2**20 and use["pids_limit"] == str(PROCESSES)
    ran = run_in_kernel(sa, hub.url, a, "import sys, shutil; print(sys.executable); print(shutil.which('nbgrader'))")
    assert ran["error"] is None and ran["stdout"].split() == [f"{HUB_VENV}/bin/python", f"{HUB_VENV}/bin/nbgrader"], ran
    many = run_in_kernel(sa, hub.url, a, (
        "import subprocess\nps = []\ntry:\n"
        f"    for _ in range({PROCESSES + 50}): ps.append(subprocess.Popen(['sleep', '30']))\n"
        "except OSError as e: print('refused after', len(ps), type(e).__name__)\n"
        "else: print('started', len(ps))\nfor p in ps: p.kill()\n"))
    assert many["error"] is None and "refused after" in many["stdout"], many
    assert int(many["stdout"].split()[2]) < PROCESSES, many
    before = limits.usage(a).get("oom_kills", 0)
    big = run_in_kernel(sa, hub.url, a, f"b = b'x' * ({2 * MEMORY_MB} * 2**20); print('allocated', len(b))")
    assert "allocated" not in big["stdout"], big
    after = limits.usage(a)
    if after["mode"] != "rlimit":
        assert big["dead"] and after["oom_kills"] > before, (big, after)
        assert after["memory_peak"] <= MEMORY_MB * 2**20
    else:
        assert big["error"] and "MemoryError" in big["error"], big
    print(f"[hub service] limits tried: {many['stdout'].strip()}; {2 * MEMORY_MB} MiB -> "
          f"{'kernel killed' if big['dead'] else big['error']}; {time.monotonic() - t0:.1f} s so far")

    # ---- one student's kernels cannot be read by another (finding 2), also Validate's
    sb, r = login(hub.url, b, pw[b])
    assert r.status_code == 302
    sb.get(f"{hub.url}/hub/spawn/{b}")
    wait_server(sb, hub.url, b)
    buid = pwd.getpwnam(b).pw_uid
    snoop = subprocess.Popen(["setpriv", f"--reuid={a}", f"--regid={a}", "--init-groups",
                              str(HUB_VENV / "bin" / "python"), "-c", SNOOP, str(buid), "40"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    time.sleep(2)
    loud = run_in_kernel(sb, hub.url, b, (
        "import json, os, time\n"
        "from ipykernel.kernelapp import IPKernelApp\n"
        "app = IPKernelApp.instance()\n"
        "print(json.dumps({'transport': app.transport, 'ip': app.ip, 'cf': app.connection_file}), flush=True)\n"
        "for i in range(30):\n"
        f"    print('{SECRET}', i, flush=True); time.sleep(0.3)\n"), timeout=120)
    base_url = f"{hub.url}/user/{b}"
    xsrf = sb.cookies.get("_xsrf", path=f"/user/{b}/")
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": f"print('{SECRET}-validate')"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    hubctl.as_user(b, f"cat > v.ipynb <<'EOF'\n{json.dumps(nb)}\nEOF", venv=HUB_VENV)
    validate = sb.post(f"{base_url}/assignments/validate", data={"path": "v.ipynb"},
                       headers={"X-XSRFToken": xsrf})       # nbgrader's Validate runs it in a kernel of its own
    out, err = snoop.communicate(timeout=120)
    assert snoop.returncode == 0, err[-2000:]
    seen = json.loads(out.strip().splitlines()[-1])
    kernel = json.loads(loud["stdout"].splitlines()[0])
    print(f"[hub service] A snooping on B: {len(seen['ports'])} TCP ports of B's uid {seen['ports']}, "
          f"{len(seen['paths'])} socket paths visible, {seen['messages']} messages; B's kernel: {kernel}")
    assert SECRET not in seen["text"] and seen["messages"] == 0, seen
    assert kernel["transport"] == "ipc" and kernel["cf"].startswith("/tmp/jupyter-runtime/"), kernel
    assert len(seen["ports"]) <= 1, f"B's uid listened on {seen['ports']}: only the server's own HTTP port may be there"
    assert validate.status_code == 200 and validate.json()["success"], validate.text[:500]
    log = (state / "jupyterhub.log").read_text(errors="replace")
    assert "Kernel is running over TCP without encryption" not in log

    # ---- a server's own /tmp and /dev/shm; a home of its own size
    made = run_in_kernel(sa, hub.url, a, (
        "import os\n"
        "open('/dev/shm/tc-a-shm', 'wb').write(b'x' * (50 * 2**20))\n"
        "open('/tmp/tc-a-tmp', 'w').write('private')\n"
        "try:\n"
        f"    open(os.path.expanduser('~/fill'), 'wb').write(b'x' * ({HOME_MB + 50} * 2**20))\n"
        "except OSError as e: print('home full:', e.strerror)\n"
        "os.remove(os.path.expanduser('~/fill'))\n"
        "import subprocess; subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "print('made', os.getpid())\n"))
    assert made["error"] is None and "home full: No space left on device" in made["stdout"], made
    uid = pwd.getpwnam(a).pw_uid
    assert not Path("/dev/shm/tc-a-shm").exists() and not Path("/tmp/tc-a-tmp").exists(), "A's files are on the host's"
    assert [p for p in Path("/dev/shm").iterdir() if p.stat().st_uid == uid] == []
    peek = run_in_kernel(sb, hub.url, b, "import os; print(os.path.exists('/tmp/tc-a-tmp'), os.path.exists('/dev/shm/tc-a-shm'))")
    assert peek["stdout"].split() == ["False", "False"], peek
    shm_charged = limits.usage(a).get("memory", 0)
    hub_xsrf = next(c.value for c in sa.cookies if c.name == "_xsrf" and c.path.startswith("/hub"))
    r = sa.delete(f"{hub.url}/hub/api/users/{a}/server", headers={"Referer": f"{hub.url}/hub/", "X-XSRFToken": hub_xsrf})
    assert r.status_code in (202, 204), r.text[:300]
    deadline = time.monotonic() + 60
    while hubctl.processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert hubctl.processes_of(uid) == [], "a process A left behind (sleep 600, its own session) outlives the server"
    print(f"[hub service] A's /dev/shm file (50 MiB) charged to A's cgroup while the server ran "
          f"({shm_charged / 2**20:.0f} MiB); after the stop: no process of A, nothing of A in the host's /dev/shm")
    sa.get(f"{hub.url}/hub/spawn/{a}")
    wait_server(sa, hub.url, a)
    again = run_in_kernel(sa, hub.url, a, "import os; print(os.path.exists('/dev/shm/tc-a-shm'), os.path.exists('/tmp/tc-a-tmp'))")
    assert again["stdout"].split() == ["False", "False"], again

    # ---- what the student's uid cannot read
    assert (Path(pwd.getpwnam(a).pw_dir) / "theory.md").is_file()
    for target in (ROOT / "notebooks" / "01_attention" / "01_attention.ipynb",
                   ROOT / "solutions" / "01_attention" / "01_attention.ipynb",
                   Path(pwd.getpwnam(instructor).pw_dir) / "course" / "gradebook.db",
                   Path(pwd.getpwnam(instructor).pw_dir) / "course" / "source",
                   Path(pwd.getpwnam(b).pw_dir)):
        seen = hubctl.as_user(a, f"cat {target} 2>&1 || ls {target}", venv=HUB_VENV)
        assert seen.returncode != 0 and "Permission denied" in seen.stdout + seen.stderr, (target, seen.stdout[:200])

    # ---- a hang-up does not reach the hub; stop keeps the class; start finds it
    work = Path(pwd.getpwnam(a).pw_dir) / "my_work.txt"
    hubctl.as_user(a, f"echo mine > {work}", venv=HUB_VENV)
    os.killpg(os.getpgid(hub.pid), signal.SIGHUP)
    time.sleep(2)
    import requests

    assert hub.alive() and requests.get(f"{hub.url}/hub/health").status_code == 200
    secret = (state / "jupyterhub_cookie_secret").read_bytes()
    report = hubctl.stop_hub(hub)
    assert report["was_running"]
    for user in cls.users:
        assert hubctl.processes_of(pwd.getpwnam(user).pw_uid) == [], user
        assert limits.members(user) == []
    assert not hub.alive() and work.read_text() == "mine\n" and cls.exchange.is_dir()
    assert (state / "jupyterhub.sqlite").exists() and (state / "jupyterhub_cookie_secret").read_bytes() == secret
    hub = start(klass)
    r = sa.get(f"{hub.url}/hub/api/user", headers={"Referer": f"{hub.url}/hub/"})
    assert r.status_code == 200 and r.json()["name"] == a, "the session survives a restart (database, cookie secret)"
    assert work.read_text() == "mine\n"

    # ---- stop --purge through the command line, as an operator would
    done = subprocess.run([sys.executable, str(ROOT / "hub" / "hubctl.py"), "stop", "--state", str(state), "--purge"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not hub.alive()
    for user in cls.users:
        with pytest.raises(KeyError):
            pwd.getpwnam(user)
    assert not cls.exchange.exists() and not state.exists()
    print(f"[hub service] whole test {time.monotonic() - t0:.1f} s")
