"""Template: log in from the LMS with LTI 1.3 instead of PAM (hub/README.md, "Logins").

Not installed by the course and not run here (no LMS, no network): `pip install
jupyterhub-ltiauthenticator==1.6.3` into the hub's venv, fill in the values the LMS gives when
the tool is registered, and start the hub with TC_HUB_AUTH_CONFIG=/path/to/this/file.
jupyterhub_config.py loads it last, so it replaces the authenticator and keeps everything else
(the roster check below, the spawner, the limits, the grader service).

The local spawner needs a system user per hub user: create them from the class list first
(`hubctl.py setup` / `make students` on the hub host) with ids equal to the claim chosen as
`username_key` (the LMS login id, for example). Their PAM passwords are then unused.
"""

import json
import os

c = get_config()  # noqa: F821

c.JupyterHub.authenticator_class = "ltiauthenticator.lti13.auth.LTI13Authenticator"
# From the LMS's tool registration (Canvas: Developer Keys -> LTI key; Moodle: External tool):
c.LTI13Authenticator.issuer = "https://lms.example.edu"                       # the platform's issuer
c.LTI13Authenticator.client_id = ["CLIENT-ID-FROM-THE-LMS"]
c.LTI13Authenticator.authorize_url = "https://lms.example.edu/api/lti/authorize_redirect"
c.LTI13Authenticator.jwks_endpoint = "https://lms.example.edu/api/lti/security/jwks"
# Which claim of the LMS's id token is the hub (and system) user name.
c.LTI13Authenticator.username_key = "email"          # or "sub", "name", a custom claim; must match the ids
# In the LMS, register: login initiation URL https://HUB/hub/lti13/oauth_login,
# redirect URI https://HUB/hub/lti13/oauth_callback, target link URI https://HUB/.

ROSTER_FILE = os.environ["TC_HUB_ROSTER"]


def _on_roster(self, username, authentication=None):
    roster = json.loads(open(ROSTER_FILE, encoding="utf-8").read())
    return username in set(roster["instructors"]) | set(roster["students"])


def _use_roster():
    from ltiauthenticator.lti13.auth import LTI13Authenticator

    LTI13Authenticator.check_allowed = _on_roster     # only the class list, as with PAM


_use_roster()
