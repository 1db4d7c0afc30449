"""The instructor's server on the course's hub: MathJax for Formgrader, served by the server itself.

nbgrader's Formgrader loads MathJax 2 from a CDN; the hub installs a template
(hub/formgrader/mathjax.html.j2) that loads MathJax 3 from this server's static files
instead: the MathJax of django-static-mathjax (requirements/lock.txt). Offline, no CDN.
"""

import os

import mathjax

c = get_config()  # noqa: F821  (provided by traitlets)

# served at <base_url>static/mathjax/es5/tex-chtml.js
c.ServerApp.extra_static_paths = [os.path.join(os.path.dirname(mathjax.__file__), "static")]
