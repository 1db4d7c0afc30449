"""The university's login: OpenID Connect with oauthenticator's GenericOAuthenticator (hub/README.md).

    sudo make hub-start HUB_AUTH=oidc HUB_BIND_URL=https://0.0.0.0:443 HUB_PUBLIC_URL=https://hub.uni.example/ \\
         HUB_SSL_CERT=/etc/ssl/hub.pem HUB_SSL_KEY=/etc/ssl/private/hub.key

`hubctl.py start --auth oidc` starts the hub with TC_HUB_AUTH_CONFIG=hub/auth/oauth.py (this file;
jupyterhub_config.py loads it after the course's settings, so it replaces the PAM login and keeps
everything else: the spawner, the limits, the roles, the grader service) and TC_HUB_OIDC, the
settings file (default: oidc.json in the hub's state folder). The settings hold the client
secret: the file must be root's and unreadable by others, or the hub refuses to start.

    {"issuer": "https://login.uni.example/realms/uni",    # the IdP's issuer (its discovery document
                                                          #  gives the endpoints)
     "client_id": "course-hub", "client_secret": "...",   # from registering the hub with the IdP
     "username_claim": "preferred_username",              # the claim that equals the class list's ids
     "login_service": "University login",                 # the login page's button
     "ca_file": "/etc/ssl/certs/uni-ca.pem"}              # optional: the CA of the IdP's certificate
                                                          #  (default: the system's)

Register the hub with the IdP as a confidential web client (authorization code flow, client
secret sent with HTTP Basic, PKCE S256) with the redirect URI PUBLIC_URL/hub/oauth_callback.
`authorize_url`, `token_url`, `userdata_url` and `callback_url` may be given to skip discovery.

Who gets in is the roster, as with passwords: an identity whose claim is not one of the class
list's ids (or the instructor's) is refused (403), whatever the IdP says, and the roster is read
again at every login (`make students` adds students to a running hub). Instructor or student is
the roster's decision too. The spawner runs each server as the system user of that name: the
class list's ids must be the IdP's values of `username_claim` (hubctl.py setup creates the users;
their passwords then serve nothing on the hub). Choose a claim the university controls (a login
id), never one a user can edit at the IdP (a display name, an unverified e-mail).

Tested by tests/test_hub_reach.py against node-oidc-provider (hub/auth/test-idp/), in Chromium.
"""

import json
import os
import ssl
import stat
import urllib.request

from oauthenticator.generic import GenericOAuthenticator

c = get_config()  # noqa: F821

SETTINGS_FILE = os.path.abspath(os.environ.get("TC_HUB_OIDC", "oidc.json"))
ROSTER_FILE = os.environ["TC_HUB_ROSTER"]


def _settings(path: str) -> dict:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SystemExit(f"TC_HUB_OIDC: expected the OpenID Connect settings in {path} (hub/auth/oauth.py), "
                         "got no such file") from None
    if st.st_uid != 0 or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SystemExit(f"TC_HUB_OIDC: expected {path} owned by root and closed to others (it holds the client "
                         f"secret: chown root {path}; chmod 600 {path}), got uid {st.st_uid}, mode {oct(st.st_mode & 0o777)}")
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    missing = [k for k in ("issuer", "client_id", "client_secret") if not settings.get(k)]
    if missing:
        raise SystemExit(f"TC_HUB_OIDC: expected {missing} in {path}, got keys {sorted(settings)}")
    return settings


def _discover(issuer: str, context: ssl.SSLContext) -> dict:
    """The issuer's OpenID Connect discovery document (its issuer must be the configured one)."""
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    with urllib.request.urlopen(url, timeout=30, context=context) as r:
        doc = json.load(r)
    if doc.get("issuer") != issuer:
        raise SystemExit(f"TC_HUB_OIDC: {url} names issuer {doc.get('issuer')!r}, expected {issuer!r}")
    return doc


SETTINGS = _settings(SETTINGS_FILE)
CA_FILE = SETTINGS.get("ca_file")
if not all(SETTINGS.get(k) for k in ("authorize_url", "token_url", "userdata_url")):
    SETTINGS = {**_discover(SETTINGS["issuer"], ssl.create_default_context(cafile=CA_FILE)), **SETTINGS}
PUBLIC_URL = os.environ.get("TC_HUB_PUBLIC_URL", "")
CALLBACK = SETTINGS.get("callback_url") or (PUBLIC_URL.rstrip("/") + "/hub/oauth_callback" if PUBLIC_URL else "")


class CourseOIDCAuthenticator(GenericOAuthenticator):
    """GenericOAuthenticator that lets in the roster's people only (read at each login)."""

    async def check_allowed(self, username, auth_model=None):
        with open(ROSTER_FILE, encoding="utf-8") as f:
            roster = json.load(f)
        return username in set(roster["instructors"]) | set(roster["students"])


c.JupyterHub.authenticator_class = CourseOIDCAuthenticator
c.GenericOAuthenticator.login_service = SETTINGS.get("login_service", "University login")
c.GenericOAuthenticator.client_id = SETTINGS["client_id"]
c.GenericOAuthenticator.client_secret = SETTINGS["client_secret"]
c.GenericOAuthenticator.authorize_url = SETTINGS.get("authorize_url") or SETTINGS["authorization_endpoint"]
c.GenericOAuthenticator.token_url = SETTINGS.get("token_url") or SETTINGS["token_endpoint"]
c.GenericOAuthenticator.userdata_url = SETTINGS.get("userdata_url") or SETTINGS["userinfo_endpoint"]
c.GenericOAuthenticator.scope = ["openid", "profile", "email"]
c.GenericOAuthenticator.username_claim = SETTINGS.get("username_claim", "preferred_username")
c.GenericOAuthenticator.basic_auth = True               # client_secret_basic, the IdPs' default
c.GenericOAuthenticator.enable_pkce = True
c.GenericOAuthenticator.validate_server_cert = True
if CA_FILE:
    c.GenericOAuthenticator.http_request_kwargs = {"ca_certs": CA_FILE}
if CALLBACK:
    c.GenericOAuthenticator.oauth_callback_url = CALLBACK
c.GenericOAuthenticator.custom_403_message = (
    "Your university login is not on this course's class list. Ask your instructor to add you.")
c.GenericOAuthenticator.allow_all = False
c.GenericOAuthenticator.allow_existing_users = False
