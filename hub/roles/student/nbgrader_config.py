"""nbgrader for a student on the course's hub (hub/README.md): which course, where its exchange is.

The hub's spawner puts this folder on JUPYTER_CONFIG_PATH (a root-owned copy under the hub's
venv) and TC_COURSE_ID, TC_EXCHANGE in the server's environment.
"""

import os

c = get_config()  # noqa: F821  (provided by traitlets)

c.CourseDirectory.course_id = os.environ["TC_COURSE_ID"]
c.Exchange.root = os.environ["TC_EXCHANGE"]
