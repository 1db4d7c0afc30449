"""JupyterHub 6.1.1 for the course on one machine (hub/README.md): `make hub`, the browser test.

Started by hub/hubctl.py as root (`jupyterhub -f hub/jupyterhub_config.py`, cwd = the hub's
state folder) with these settings in its environment:

    TC_HUB_ROSTER      JSON file: {"course_id", "exchange", "instructors": [...], "students": [...]}
    TC_HUB_VENV        the hub's venv (make hub-env; default /opt/transformer-course-hub)
    TC_HUB_ROLES       root-owned copy of hub/roles/ (hubctl.py install_roles)
    TC_HUB_CHP         configurable-http-proxy (make hub-proxy: hub/node_modules/.bin/...)
    TC_HUB_PORT        the public port on 127.0.0.1 (the hub's API and the proxy's use the next two)
    TC_HUB_PASSWORD    the shared password of the trial (>= 8 characters)

Every hub user is a system user (created by hubctl.py); the local process spawner starts
`jupyterhub-singleuser` from the hub's venv as that user in their home. The spawner puts
the user's role folder on JUPYTER_CONFIG_PATH (students: Assignment List and Validate only;
the instructor: Formgrader and Create Assignment; hub/roles/), so nbgrader's course id and
exchange come from there. For production (The Littlest JupyterHub, Zero to JupyterHub on
Kubernetes) see hub/README.md and hub/values.yaml.
"""

import json
import os
import pwd

c = get_config()  # noqa: F821  (provided by traitlets)

ROSTER = json.loads(open(os.environ["TC_HUB_ROSTER"], encoding="utf-8").read())
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

# ------------------------------------------------------------------ who may log in
# A trial on one machine: one shared password (JupyterHub's SharedPasswordAuthenticator).
# Production: the institution's login (OAuth / LTI / LDAP), see hub/README.md.
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ["TC_HUB_PASSWORD"]
c.Authenticator.allowed_users = INSTRUCTORS | STUDENTS
c.Authenticator.admin_users = set()            # nobody can open another user's server

# ------------------------------------------------------------------ each user's server
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [f"{VENV}/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120


def role_environment(spawner):
    """The server's environment: the role's configuration folder, the course and its exchange."""
    name = spawner.user.name
    role = "instructor" if name in INSTRUCTORS else "student"
    home = pwd.getpwnam(name).pw_dir
    spawner.environment = dict(
        spawner.environment,
        # Searched after ~/.jupyter and before the venv's etc/jupyter: the role's extensions and
        # nbgrader settings win over the venv's defaults. (nbgrader writes into JUPYTER_CONFIG_DIR,
        # so the role folder, root-owned, cannot be that.)
        JUPYTER_CONFIG_PATH=os.path.join(ROLES, role),
        TC_COURSE_ID=ROSTER["course_id"],
        TC_EXCHANGE=ROSTER["exchange"],
        PATH=f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
        OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
    )


c.Spawner.pre_spawn_hook = role_environment
