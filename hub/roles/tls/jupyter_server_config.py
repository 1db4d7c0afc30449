"""Every user's server when the class reaches the hub over TLS (hub/jupyterhub_config.py puts this
folder before the role's on JUPYTER_CONFIG_PATH, and base/ after it).

The hub sends its own cookies, and through JUPYTERHUB_COOKIE_OPTIONS the server's login cookie,
with Secure; the server's _xsrf cookie follows jupyter_server's `xsrf_cookie_kwargs`, set here.
An update, not an assignment, so the role's tornado_settings (the instructor's CSP header) stay;
base/ gives it a dictionary to update where the role has none (jupyterhub-singleuser reads the
raw setting and fails on a bare update).
"""

import os

c = get_config()  # noqa: F821  (provided by traitlets)

c.ServerApp.tornado_settings.update(
    {"xsrf_cookie_kwargs": {"secure": True, "path": os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")}})
