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

# Formgrader renders students' markdown with nbconvert's markdown2html and no sanitiser: the
# course's filter shows it as text unless it is on the allowlist (hub/tc_hub/formgrader.py,
# grader/trusted/inert.py); sanitize_html also cleans HTML outputs and drops JavaScript ones.
c.HTMLExporter.filters = {"markdown2html": "tc_hub.formgrader.markdown2html"}
c.HTMLExporter.sanitize_html = True


# ------------------------------------------------------------------ Autograde -> the course's sandbox
# nbgrader's own Autograde (Formgrader's button, `NbGraderAPI.autograde`) would execute the
# student's notebook in this server, as the instructor, outside any sandbox. It is routed to the
# hub's grader service (hub/grader_service.py) instead, with this server's hub token: the service
# grades that submission in the course's sandbox, releases the feedback and fills the gradebook.
def _route_autograde():
    import json
    import urllib.request

    from nbgrader.apps.api import NbGraderAPI

    def autograde(self, assignment_id, student_id, force=True, create=True):
        url = os.environ.get("TC_GRADER_URL")
        if not url:
            return {"success": False, "error": "nbgrader's Autograde is disabled on this hub (it would run "
                                               "students' code unsandboxed): use the course grader service"}
        request = urllib.request.Request(
            url.rstrip("/") + "/api/grade", method="POST",
            data=json.dumps({"assignment": assignment_id, "student": student_id}).encode(),
            headers={"Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"],
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=3600) as r:
                result = json.load(r)
        except OSError as e:
            return {"success": False, "error": f"the course grader service failed: {e}"}
        return {"success": bool(result.get("success")), "log": result.get("log", ""),
                **({"error": result["error"]} if "error" in result else {})}

    NbGraderAPI.autograde = autograde


_route_autograde()
