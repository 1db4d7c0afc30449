"""Sphinx extension of the course website (loaded through _config.yml).

Sphinx loads MathJax only on pages that contain equations. On this site maths
also appears in the navigation of *every* page (notebook titles such as
"02 · Scaling: why divide by $\\sqrt{d_k}$"), so pages without equations of
their own (search, index) would show raw TeX there. Load MathJax everywhere.
"""


def setup(app):
    app.set_html_assets_policy("always")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
