"""JupyterHub 6.1.1 for the course on one machine (hub/README.md): `make hub`, the browser test.

Started by hub/hubctl.py as root (`jupyterhub -f hub/jupyterhub_config.py`, cwd = the hub's
state folder) with these settings in its environment:

    TC_HUB_ROSTER      JSON file: {"course_id", "exchange", "instructors": [...], "students": [...]}
    TC_HUB_VENV        the hub's venv (make hub-env; default /opt/transformer-course-hub)
    TC_HUB_ROLES       root-owned copy of hub/roles/ (hubctl.py install_roles)
    TC_HUB_CHP         configurable-http-proxy (make hub-proxy: hub/node_modules/.bin/...)
    TC_HUB_PORT        the public port on 127.0.0.1 (the hub's API, the proxy's and the grader
                       service use the next three)
    TC_GRADER_PYTHON   the Python that runs `python -m grader` (the project's .venv)
    TC_HUB_MEMORY_MB, TC_HUB_PROCESSES, TC_HUB_CPU_SHARE   limits per student (hub/limits.py)
    TC_HUB_CULL_TIMEOUT, TC_HUB_CULL_EVERY, TC_HUB_SPAWN_LIMIT   idle culling, concurrent spawns
    TC_HUB_BIND_URL, TC_HUB_SSL_CERT, TC_HUB_SSL_KEY, TC_HUB_PUBLIC_URL   the class's address over TLS
    TC_HUB_AUTH_CONFIG, TC_HUB_OIDC   the university's login instead of passwords (hub/auth/oauth.py)
    TC_HUB_TMP_MB      each server's private /tmp, /var/tmp, /dev/shm (tmpfs, MiB; hub/storage.py)

Every hub user is a system user (created by hubctl.py from the class list) who logs in with
their own password (PAM); the spawner starts `jupyterhub-singleuser` from the hub's venv as that
user in their home, inside their cgroup (memory, processes, CPU share: hub/limits.py). The spawner puts
the user's role folder on JUPYTER_CONFIG_PATH (students: Assignment List and Validate only;
the instructor: Formgrader and Create Assignment; hub/roles/), so nbgrader's course id and
exchange come from there. For production (The Littlest JupyterHub, Zero to JupyterHub on
Kubernetes) see hub/README.md and hub/values.yaml.
"""

import json
import os
import pwd
import shutil
import sys

from jupyterhub.auth import PAMAuthenticator
from jupyterhub.spawner import LocalProcessSpawner

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import limits  # noqa: E402
import storage  # noqa: E402

c = get_config()  # noqa: F821  (provided by traitlets)

ROSTER_FILE = os.environ["TC_HUB_ROSTER"]
ROSTER = json.loads(open(ROSTER_FILE, encoding="utf-8").read())
VENV = os.environ.get("TC_HUB_VENV", "/opt/transformer-course-hub")
ROLES = os.environ["TC_HUB_ROLES"]
PORT = int(os.environ.get("TC_HUB_PORT", "8000"))
INSTRUCTORS = set(ROSTER["instructors"])
STUDENTS = set(ROSTER["students"])

# ------------------------------------------------------------------ network: loopback only
c.JupyterHub.bind_url = f"http://127.0.0.1:{PORT}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{PORT + 1}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PORT + 2}"
c.ConfigurableHTTPProxy.command = [os.environ["TC_HUB_CHP"]]
c.ConfigurableHTTPProxy.pid_file = "jupyterhub-proxy.pid"
c.JupyterHub.db_url = "sqlite:///jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "jupyterhub_cookie_secret"
c.JupyterHub.cleanup_servers = True            # stopping the hub stops every user's server
c.JupyterHub.cleanup_proxy = True

# ------------------------------------------------------------------ network: the class's address, over TLS
# TC_HUB_BIND_URL (hubctl.py start --bind-url): where the proxy listens for the class, e.g.
# https://0.0.0.0:443, with TC_HUB_SSL_CERT/KEY: the proxy (root, a child of the hub) terminates TLS.
# The hub's API, the proxy's API, the services and every user's server stay on 127.0.0.1.
# TC_HUB_PUBLIC_URL: the address students type (secure cookies, the login's callback).
if os.environ.get("TC_HUB_BIND_URL"):
    c.JupyterHub.ssl_cert = os.environ.get("TC_HUB_SSL_CERT", "")
    c.JupyterHub.ssl_key = os.environ.get("TC_HUB_SSL_KEY", "")
    c.JupyterHub.bind_url = os.environ["TC_HUB_BIND_URL"]
if os.environ.get("TC_HUB_PUBLIC_URL"):
    c.JupyterHub.public_url = os.environ["TC_HUB_PUBLIC_URL"]
SERVER_CONFIG_FIRST, SERVER_CONFIG_LAST = [], []   # folders around the role's on the servers' JUPYTER_CONFIG_PATH
if os.environ.get("TC_HUB_SSL_CERT") or os.environ.get("TC_HUB_PUBLIC_URL", "").startswith("https:"):
    # every cookie TLS only: the hub's (its _xsrf too), the servers' login cookie (the spawner passes
    # these options on) and the servers' _xsrf (hub/roles/tls)
    c.JupyterHub.tornado_settings.update({"cookie_options": {"secure": True}})
    SERVER_CONFIG_FIRST, SERVER_CONFIG_LAST = [os.path.join(ROLES, "tls")], [os.path.join(ROLES, "tls", "base")]

# ------------------------------------------------------------------ who may log in
# One identity per person: each hub user is a system user with their own password, checked by
# PAM (the host's /etc/pam.d/login stack: pam_unix here; LDAP/Kerberos/SSSD where the host has
# them). The roster is read again at every login: `hubctl.py users` (make students) adds
# students to a running hub. For an LMS (LTI 1.3) or an IdP (OAuth/OIDC): hub/auth/.


class CourseAuthenticator(PAMAuthenticator):
    open_sessions = False          # no PAM session per server (no utmp/loginuid in a container)

    def check_allowed(self, username, authentication=None):
        roster = json.loads(open(ROSTER_FILE, encoding="utf-8").read())
        return username in set(roster["instructors"]) | set(roster["students"])


c.JupyterHub.authenticator_class = CourseAuthenticator
c.Authenticator.allowed_users = INSTRUCTORS | STUDENTS
c.Authenticator.admin_users = set()            # nobody can open another user's server
c.PAMAuthenticator.service = "login"

# ------------------------------------------------------------------ services: the grader, the idle culler
GRADER_PORT = PORT + 3
c.JupyterHub.services = [
    {   # the course's sandboxed grader, as root (hub/grader_service.py); instructors only
        "name": "grader",
        "url": f"http://127.0.0.1:{GRADER_PORT}",
        "command": [sys.executable, os.path.join(HERE, "grader_service.py")],
        "oauth_no_confirm": True,
        "environment": {k: os.environ[k] for k in (
            "TC_HUB_ROSTER", "TC_HUB_VENV", "TC_GRADER_PYTHON", "PATH", "LANG", "COURSE_GRADING_SEED",
            "TC_GRADER_CELL_TIMEOUT") if k in os.environ},
    },
    {   # stops servers idle for TC_HUB_CULL_TIMEOUT seconds (default an hour); homes stay
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                    f"--timeout={os.environ.get('TC_HUB_CULL_TIMEOUT', '3600')}",
                    f"--cull-every={os.environ.get('TC_HUB_CULL_EVERY', '300')}"],
    },
]
c.JupyterHub.load_roles = [
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    {"name": "course-grader", "users": sorted(INSTRUCTORS), "scopes": ["access:services!service=grader"]},
]

# ------------------------------------------------------------------ each user's server
LIMITS = limits.Limits.from_env()
LIMIT_MODE = limits.mode()
# Each server's own /tmp, /var/tmp, /dev/shm (a tmpfs in a mount namespace of its own): nothing
# there is seen by another user or outlives the server, and it counts in the student's memory.
TMP_MB = int(os.environ.get("TC_HUB_TMP_MB", "1024"))
PRIVATE_TMP = TMP_MB > 0 and storage.private_tmp_works()


class CourseSpawner(LocalProcessSpawner):
    """The local process spawner: the user's server enters their cgroup and gets its own /tmp before it drops root."""

    def make_preexec_fn(self, name):
        inner = super().make_preexec_fn(name)
        dirs = limits.create(name, LIMITS, LIMIT_MODE)

        def preexec():
            limits.enter(dirs, LIMITS)
            if PRIVATE_TMP:
                storage.private_tmp(TMP_MB)
            inner()

        return preexec


def stop_everything_left(spawner):
    """When a server stops, so does everything it started (a process left behind would keep its
    private /tmp and /dev/shm alive): every process still in the user's cgroup, or of their uid."""
    import signal

    name = spawner.user.name
    pids = limits.members(name) if LIMIT_MODE != "rlimit" else []
    if LIMIT_MODE == "rlimit":
        uid = pwd.getpwnam(name).pw_uid
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _owner(p) == uid]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _owner(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


c.Spawner.post_stop_hook = stop_everything_left


c.JupyterHub.spawner_class = CourseSpawner
c.Spawner.cmd = [f"{VENV}/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
# Sized from hub/scripts/spawn_load.py (hub/README.md): with 10 at once on 2 cores (load 13-18) the
# first servers were ready after 87 s and all 30 in 253 s; 300 s is over three times one spawn.
c.JupyterHub.concurrent_spawn_limit = int(os.environ.get("TC_HUB_SPAWN_LIMIT", "10"))
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 300
# The server's own hub token may reach the grader service (Formgrader's Autograde routed there);
# the hub gives a token only the scopes its owner holds: students' tokens never get it.
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", "access:services!service=grader"]


def role_environment(spawner):
    """The server's environment: the role's configuration folder, the course and its exchange."""
    name = spawner.user.name
    role = "instructor" if name in INSTRUCTORS else "student"
    entry = pwd.getpwnam(name)
    home = entry.pw_dir
    # theory.md beside the fetched assignments: the notebooks link ../theory.md
    theory = os.path.join(home, "theory.md")
    source = os.path.join(os.path.dirname(HERE), "exercises", "theory.md")
    if os.path.exists(source) and not os.path.lexists(theory):
        shutil.copyfile(source, theory)
        os.chown(theory, entry.pw_uid, entry.pw_gid)
    spawner.environment = dict(
        spawner.environment,
        # Searched after ~/.jupyter and before the venv's etc/jupyter: the role's extensions and
        # nbgrader settings win over the venv's defaults. (nbgrader writes into JUPYTER_CONFIG_DIR,
        # so the role folder, root-owned, cannot be that.)
        JUPYTER_CONFIG_PATH=os.pathsep.join([*SERVER_CONFIG_FIRST, os.path.join(ROLES, role), *SERVER_CONFIG_LAST]),
        # the kernelspec python3 found first: tc_hub.kernel, a kernel with no TCP socket (hubctl.install_roles)
        JUPYTER_PATH=os.path.join(VENV, "share", "tc-hub"),
        TC_COURSE_ID=ROSTER["course_id"],
        TC_EXCHANGE=ROSTER["exchange"],
        PATH=f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
        # kernels' IPC sockets and the server's runtime files: in the private /tmp (0700), with a short path
        **({"JUPYTER_RUNTIME_DIR": "/tmp/jupyter-runtime"} if PRIVATE_TMP else {}),
        OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
        **({"TC_GRADER_URL": f"http://127.0.0.1:{GRADER_PORT}/services/grader/"} if role == "instructor" else {}),
    )


c.Spawner.pre_spawn_hook = role_environment

# ------------------------------------------------------------------ another login (LMS, IdP)
# TC_HUB_AUTH_CONFIG=hub/auth/oauth.py: the university's OpenID Connect login (hubctl.py start
# --auth oidc; settings in TC_HUB_OIDC). hub/auth/lti13.py: an LTI 1.3 template (untested).
if os.environ.get("TC_HUB_AUTH_CONFIG"):
    load_subconfig(os.environ["TC_HUB_AUTH_CONFIG"])  # noqa: F821
