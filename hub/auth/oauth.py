"""Template: log in with the university's identity provider (OAuth 2 / OpenID Connect) instead of PAM.

Not installed by the course and not run here (no IdP, no network): `pip install
oauthenticator==17.4.0` into the hub's venv, register the hub with the IdP (Keycloak, Azure AD /
Entra ID, Google Workspace, Shibboleth's OIDC OP), fill in the values below and start the hub
with TC_HUB_AUTH_CONFIG=/path/to/this/file (jupyterhub_config.py loads it last).

As with LTI: the spawner runs each user's server as a system user of that name, so create the
users from the class list first (`hubctl.py setup`), with ids equal to `username_claim`.
"""

import json
import os

c = get_config()  # noqa: F821

c.JupyterHub.authenticator_class = "generic-oauth"
c.GenericOAuthenticator.client_id = "CLIENT-ID"
c.GenericOAuthenticator.client_secret = os.environ.get("TC_HUB_OAUTH_SECRET", "")
c.GenericOAuthenticator.oauth_callback_url = "https://HUB/hub/oauth_callback"
c.GenericOAuthenticator.authorize_url = "https://idp.example.edu/realms/uni/protocol/openid-connect/auth"
c.GenericOAuthenticator.token_url = "https://idp.example.edu/realms/uni/protocol/openid-connect/token"
c.GenericOAuthenticator.userdata_url = "https://idp.example.edu/realms/uni/protocol/openid-connect/userinfo"
c.GenericOAuthenticator.scope = ["openid", "profile", "email"]
c.GenericOAuthenticator.username_claim = "preferred_username"

# Only the class list may log in (the roster hubctl.py keeps), as with PAM.
ROSTER = json.loads(open(os.environ["TC_HUB_ROSTER"], encoding="utf-8").read())
c.GenericOAuthenticator.allowed_users = set(ROSTER["instructors"]) | set(ROSTER["students"])
c.GenericOAuthenticator.allow_all = False
